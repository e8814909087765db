"""The examples the explain page (``explain.py``) reads, each a function returning its
data, so that tests can hold them to numbers worked out by hand.  They follow the source
text (the textbook section attnbench started from, listed in the project README's "The
source text"): its 4-token code example (§11.1.7) and the sentence of its exercises
(§11.1.8).

    four_token_example  the source text's 4-token test: X 4×2, W_Q = W_K = W_V = I,
                        scale 1/√2
    sentence_example    "The cat sat on the mat" in 6 hand-made features, W_Q built so that
                        the verb's query finds the subject's key (constructed, not learned)
    heads_example       a seeded 8-head layer (d_model 64) on the sentence, and what
                        masking each head changes
    sink_example        every query drawn to the first token: the anomaly rule fires
    long_example        2048 tokens with local and periodic structure, causal
    window_example      attending to less (§11.2): a fact beyond a sliding window that
                        can no longer be retrieved, and a sink a window hides

Heads are numbered from 0, as the arrays and ``head_mask`` index them.
"""
import math
from dataclasses import dataclass

import numpy as np

from ..api import attention, planned, unable_calls
from ..layers.multi_head import multi_head_attention, multi_head_projections
from ..layers.similarity import attention_weights
from ..registry import KERNELS

FOUR_TOKENS = ("The", "cat", "sat", "mat")
FOUR_X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, 0.5]])  # the source text's X, one row a token

SENTENCE = ("The", "cat", "sat", "on", "the", "mat")
FEATURES = ("det", "noun", "verb", "prep", "early", "late")
# each token's features: its word class, and which side of the verb it stands on
TOKEN_FEATURES = (("det", "early"), ("noun", "early"), ("verb",), ("prep", "late"), ("det", "late"),
                  ("noun", "late"))
# W_Q by hand: (feature of the query's token, feature it looks for in the keys) -> strength.
# A verb looks for a noun, and prefers the one before it (its subject); a determiner for
# its noun, a noun for its determiner and its verb, a preposition for its object and the
# verb it attaches to; early and late tokens for tokens on their own side.
LOOKS_FOR = {
    ("verb", "noun"): 4.0, ("verb", "early"): 1.0, ("verb", "late"): -1.0,
    ("det", "noun"): 3.0,
    ("noun", "det"): 3.0, ("noun", "verb"): 2.0,
    ("prep", "noun"): 2.0, ("prep", "verb"): 2.0,
    ("early", "early"): 2.0, ("early", "late"): -2.0, ("late", "late"): 2.0, ("late", "early"): -2.0,
}

D_MODEL, HEADS = 64, 8
LONG_N = 2048
LONG_PERIOD = 256  # tokens between the stripes of the long example
WINDOW_N = 64      # tokens of the window example
WINDOW = 16        # each of its queries sees itself and the 15 tokens before it
WINDOW_SINKS = 4   # the first tokens kept visible besides
FACT = 2           # the position of the fact its last token looks up: among the sinks
WINDOW_DIM = 32
WINDOW_TEMPERATURE = 0.1  # the lookup's scale is 1 / T: sharp, as in section 7's low T


@dataclass(frozen=True)
class Example:
    """One attention call spelled out: tokens (n,), queries, keys, values (n, d), the
    weights (n, n) and the outputs (n, d_v) = weights · values."""

    tokens: tuple
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    weights: np.ndarray
    outputs: np.ndarray


def four_token_example(kernel="c_tiled"):
    """The source text's code example (its §11.1.7 test): four 2-D tokens, W_Q = W_K =
    W_V = I, so the queries, keys and values are the tokens' vectors themselves; scale
    1/√d = 1/√2.  Weights by ``kernels.attention_weights``, outputs by
    ``kernels.attention`` with ``kernel``."""
    q = k = v = FOUR_X
    return Example(FOUR_TOKENS, q, k, v, attention_weights(q, k), attention(q, k, v, kernel=kernel))


def sentence_example(kernel="c_tiled"):
    """"The cat sat on the mat" with hand-built features and W_Q (``LOOKS_FOR``):
    x (6, 6) one row of 0/1 features per token, q = x W_Q, k = v = x (W_K = W_V = I),
    scale 1/√6.  Nothing here was learned."""
    x = sentence_features()
    q, k, v = x @ looks_for_matrix(), x, x
    return Example(SENTENCE, q, k, v, attention_weights(q, k), attention(q, k, v, kernel=kernel))


def sentence_features():
    """x (6, 6): one row of 0/1 ``FEATURES`` per token of ``SENTENCE``."""
    return np.array([[float(f in features) for f in FEATURES] for features in TOKEN_FEATURES])


def looks_for_matrix():
    """W_Q (6, 6) from ``LOOKS_FOR``: row = the query token's feature, column = the key feature."""
    w_q = np.zeros((len(FEATURES), len(FEATURES)))
    for (query_feature, key_feature), strength in LOOKS_FOR.items():
        w_q[FEATURES.index(query_feature), FEATURES.index(key_feature)] = strength
    return w_q


@dataclass(frozen=True)
class HeadsExample:
    weights: np.ndarray         # (heads, n, n) each head's attention weights
    change: np.ndarray          # (heads,) |out with head h masked − out| / |out| (Frobenius)


def heads_example(kernel="c_tiled", seed=0):
    """A seeded multi-head layer on the sentence: x (6, 64) ~ N(0, 1) (one random
    embedding per token), W_Q, W_K, W_V, W_O ~ N(0, 1/64) so that projections keep unit
    scale, 8 heads of width 8.  Each head's weights, and the relative change of the
    layer's output when that head alone is masked (``head_mask``; the source text's
    exercise 3 proposes it).  Heads are indexed from 0, as ``head_mask`` is."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((len(SENTENCE), D_MODEL))
    w_q, w_k, w_v, w_o = rng.standard_normal((4, D_MODEL, D_MODEL)) / math.sqrt(D_MODEL)
    q, k, _ = multi_head_projections(x, w_q, w_k, w_v, heads=HEADS)
    out = multi_head_attention(x, w_q, w_k, w_v, w_o, heads=HEADS, kernel=kernel)
    change = np.empty(HEADS)
    for h in range(HEADS):
        mask = np.ones(HEADS)
        mask[h] = 0
        masked = multi_head_attention(x, w_q, w_k, w_v, w_o, heads=HEADS, kernel=kernel, head_mask=mask)
        change[h] = np.linalg.norm(masked - out) / np.linalg.norm(out)
    return HeadsExample(attention_weights(q, k), change)


def sink_example(kernel="c_tiled"):
    """An attention sink by construction: every query is the same vector u = (1, …, 1)
    (d = 6), the first token's key is 1.2 u and every other key is 0, so each query
    scores 1.2·6/√6 ≈ 2.94 on "The" and 0 elsewhere.  Values: the sentence's features."""
    n, d = len(SENTENCE), len(FEATURES)
    q = np.ones((n, d))
    k = np.zeros((n, d))
    k[0] = 1.2
    v = sentence_features()
    return Example(SENTENCE, q, k, v, attention_weights(q, k), attention(q, k, v, kernel=kernel))


def long_example(seed=0, n=LONG_N, d=D_MODEL):
    """Queries and keys (n, d) of a long sequence with structure a picture can show: the
    same positional code for both, 24 cosine/sine pairs with periods from 8 to n tokens
    (their sum peaks where query and key positions meet: local attention) and 8 pairs of
    period LONG_PERIOD (stripes every LONG_PERIOD tokens), plus N(0, 0.3²) noise each."""
    rng = np.random.default_rng(seed)
    position = np.arange(n)[:, None]
    local, periodic = 3 * d // 8, d // 8
    frequency = 2 * np.pi / np.concatenate([np.geomspace(8, n, local), np.full(periodic, LONG_PERIOD)])
    # q_i·k_j ≈ Σ a² cos(ω (i − j)): 2·24 = 48 at i = j from the local pairs, 3·8 = 24 from the stripes
    amplitude = np.sqrt(np.concatenate([np.full(local, 2.0), np.full(periodic, 3.0)]))
    code = np.concatenate([amplitude * np.cos(frequency * position), amplitude * np.sin(frequency * position)],
                          axis=1)
    return code + 0.3 * rng.standard_normal((n, d)), code + 0.3 * rng.standard_normal((n, d))


# the soft-against-hard timing (``retrieval_cost``): N stored items, queries per batch, d
RETRIEVAL_SIZES, RETRIEVAL_QUERIES, RETRIEVAL_DIM = (1_000, 4_000, 16_000, 64_000), 64, 64


@dataclass(frozen=True)
class WindowExample:
    """What a window takes and what sinks give back, each under three bands: "causal"
    (every earlier token), "window" (the last WINDOW tokens), "window + sinks" (and the
    first WINDOW_SINKS).  ``recall``: the weight the last token's lookup puts on the fact
    at position FACT.  ``sink_mass``: the attention token 0 receives in all (its column
    sum) when every query is drawn to it, and ``entropy``: the mean entropy (nats) of the
    rows of the queries past the window."""

    recall: dict
    sink_mass: dict
    entropy: dict


WINDOW_BANDS = {"causal": {}, "window": dict(window=(WINDOW - 1, 0)),
                "window + sinks": dict(window=(WINDOW - 1, 0), sinks=WINDOW_SINKS)}


def window_example(kernel="c_tiled", seed=0):
    """Soft retrieval through a sliding window, causal, WINDOW_N tokens, values one-hot
    positions (V = I, so an output row is its weights):

    - a lookup: keys random unit vectors (d = WINDOW_DIM), the last token's query the key
      of token FACT, at temperature WINDOW_TEMPERATURE: it finds the fact among all the
      tokens, loses it behind a window, and finds it again when the fact is a sink;
    - a sink (as ``sink_example``): every query u = (1, …, 1) / √d, token 0's key 3u, the
      others random and small: the queries a window cuts off from token 0 spread their
      weight over the window instead, and a sink gives them token 0 back.
    Six calls of WINDOW_N × WINDOW_N (``attention_calls``)."""
    rng = np.random.default_rng(seed)
    keys = rng.standard_normal((WINDOW_N, WINDOW_DIM))
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    values = np.eye(WINDOW_N)
    queries = keys.copy()
    queries[-1] = keys[FACT]
    u = np.ones((WINDOW_N, WINDOW_DIM)) / math.sqrt(WINDOW_DIM)
    sink_keys = 0.1 * rng.standard_normal((WINDOW_N, WINDOW_DIM))
    sink_keys[0] = 3 * u[0]
    recall, sink_mass, entropy = {}, {}, {}
    for name, band in WINDOW_BANDS.items():
        looked_up = attention(queries, keys, values, kernel=kernel, causal=True, scale=1 / WINDOW_TEMPERATURE, **band)
        recall[name] = float(looked_up[-1, FACT])
        weights = attention(u, sink_keys, values, kernel=kernel, causal=True, scale=math.sqrt(WINDOW_DIM), **band)
        sink_mass[name] = float(weights[:, 0].sum())
        past = weights[WINDOW:]
        entropy[name] = float(-(past * np.log(np.where(past > 0, past, 1))).sum(axis=1).mean())
    return WindowExample(recall, sink_mass, entropy)


def attention_calls():
    """(what, ``Problem``) of every ``kernels.attention`` call ``write_explanation`` makes,
    in the order it makes them (the sink example's is the sentence's shape): what a kernel
    must be able to run for the page (``kernels.api.check_resources``)."""
    float64 = np.float64
    four, width = FOUR_X.shape
    n, features, d_head = len(SENTENCE), len(FEATURES), D_MODEL // HEADS
    return (
        ("the 4-token example", planned((), four, four, width, width, float64)),
        ("the hand-built sentence", planned((), n, n, features, features, float64)),
        (f"the {HEADS}-head layer", planned((HEADS,), n, n, d_head, d_head, float64)),
        *((f"the soft-against-hard retrieval timing at N = {size:,} stored items",
           planned((1,), RETRIEVAL_QUERIES, size, RETRIEVAL_DIM, RETRIEVAL_DIM, float64))
          for size in RETRIEVAL_SIZES),
        *((f"the window example ({name}, {what})",
           planned((), WINDOW_N, WINDOW_N, WINDOW_DIM, WINDOW_N, float64, True, **band))
          for name, band in WINDOW_BANDS.items() for what in ("lookup", "sink")),
    )


def refuse_unfit_kernel(name):
    """ValueError, in one line, when kernel ``name`` cannot run every attention call of
    the page (``attention_calls``): which call, its size, why, and which kernels can;
    asked before any folder is made or anything computed."""
    calls = attention_calls()
    unable = unable_calls([name], calls)
    if not unable:
        return
    (label, _), reason = next(iter(unable.items()))
    problem, kernel = dict(calls)[label], KERNELS[name]
    size = f"{problem.batch}·{problem.n_q}·{problem.n_k} = {problem.batch * problem.n_q * problem.n_k:,} scores"
    if kernel.refusal(problem.dtype):
        why = f"({size}) is in {problem.dtype}, and {kernel.refusal(problem.dtype)}"
    elif not kernel.fits(problem.batch, problem.n_q, problem.n_k):
        why = f"({size}) is above its size cap, {kernel.cap}"
    else:
        why = f"({size}): {reason}"
    able = [other for other in KERNELS if other != name and not unable_calls([other], calls)]
    raise ValueError(f"kernel {name!r} cannot compute every example of the page: {label} {why}; "
                     f"kernels that can: {', '.join(able) or 'none'}")
