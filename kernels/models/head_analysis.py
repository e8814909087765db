"""What each of all-MiniLM-L6-v2's 72 heads does, by the measures of four 2019 papers,
over a fixed set of 30 English sentences (``sentences.txt`` beside this file).

    sentences()                              the 30 sentences, one per line of sentences.txt
    head_measures(samples)                   [(tokens, weights (6, 12, n, n)), ...] -> HeadMeasures
    measure_heads(texts, kernel=...)         the same from the model's attention of each text
    ablate_heads(texts, kernel=...)          HeadAblation: how far removing each head moves
                                             the sentence embeddings

Every measure is a (layers, heads) = (6, 12) array, averaged over all query tokens of all
sentences pooled (a sentence of n tokens counts n times), [CLS] and [SEP] included as
queries.  Cost: the measures are O(Σ n²) per head once the weights exist (one forward
pass per sentence); the ablation is 72 × len(texts) forward passes.

The papers, and what is taken from each:

* Clark, Khandelwal, Levy, Manning 2019, "What Does BERT Look At? An Analysis of BERT's
  Attention" (BlackboxNLP): mean attention on [CLS], on [SEP] and on punctuation, per
  head and per layer; mean entropy per head; the weight each head puts on the previous
  and on the next token.  In BERT-base (12 layers) over half the attention of layers
  6–10 goes to [SEP], some heads put over 50% on the previous or next token, and the
  lowest layers hold broad, high-entropy heads.  MiniLM has 6 layers, so layers compare
  by relative depth: BERT-base's layers 6–10 of 12 (counted from 1, depth 0.5–0.83) are
  MiniLM's layers 2–4 (counted from 0, as ``weights[layer]`` indexes them).
* Kovaleva, Romanov, Rogers, Rumshisky 2019, "Revealing the Dark Secrets of BERT"
  (EMNLP): five pattern classes, vertical, diagonal, vertical + diagonal, block and
  heterogeneous.  They classified images of the maps with a CNN; here each head is
  classified by the thresholds below on its mean masses (``classify``).
* Voita, Talbot, Moiseev, Sennrich, Titov 2019, "Analyzing Multi-Head Self-Attention:
  Specialized Heads Do the Heavy Lifting, the Rest Can Be Pruned" (ACL): a head is
  positional when its largest weight falls on the token at relative position −1 (or
  +1) for at least 90% of the tokens; its confidence is the mean of each token's largest
  weight.
* Michel, Levy, Neubig 2019, "Are Sixteen Heads Really Better than One?" (NeurIPS):
  remove one head (its output times 0) and measure the change; here the change is
  1 − cosine(embedding without the head, full embedding), averaged over the sentences.
  They found most single heads can go with little effect.
"""
import pathlib
import string
import time
from dataclasses import dataclass

import numpy as np

from ..layers.analysis import attention_entropy
from . import minilm

SENTENCES = pathlib.Path(__file__).with_name("sentences.txt")
SPECIAL_TOKENS = ("[CLS]", "[SEP]")

# Kovaleva et al.'s classes by thresholds on a head's mean masses (each a share of a
# query's weight, 0..1); checked in this order, the first that holds names the class.
MIXED_SHARE = 0.3     # vertical + diagonal: at least this much on [CLS]/[SEP] *and* on the diagonal
MAJORITY_SHARE = 0.5  # vertical / diagonal / block: at least half the weight on that pattern
BLOCK_WINDOW = 3      # block: the content tokens within ±3 positions of the query, a contiguous span
CLASSES = ("vertical", "diagonal", "vertical + diagonal", "block", "heterogeneous")

POSITIONAL_SHARE = 0.9  # Voita et al.: largest weight at offset −1 or +1 for >= 90% of tokens

# The ablation's sentences: every third of the set, 10 of 30, so that its 72 × 10 forward
# passes take well under a minute on 2 cores (at n ≈ 15 tokens a pass costs milliseconds).
ABLATION_STRIDE = 3


def sentences():
    """The fixed sentence set: 30 varied English sentences, one per line of sentences.txt."""
    return tuple(line.strip() for line in SENTENCES.read_text(encoding="utf-8").splitlines() if line.strip())


@dataclass(frozen=True)
class HeadMeasures:
    """Per-head means (layers, heads) over every query token of every sentence."""

    texts: tuple          # the sentences (or labels of the samples) measured
    tokens: int           # query tokens pooled
    lengths: tuple        # each sample's n (tokens, [CLS] and [SEP] included)
    cls: np.ndarray       # weight on [CLS]                          (Clark et al.)
    sep: np.ndarray       # weight on [SEP]                          (Clark et al.)
    punctuation: np.ndarray  # weight on tokens that are only punctuation (Clark et al.)
    previous: np.ndarray  # weight on the token at i − 1, over queries that have one (Clark et al.)
    next: np.ndarray      # weight on the token at i + 1, over queries that have one (Clark et al.)
    entropy: np.ndarray   # row entropy, nats                        (Clark et al.)
    vertical: np.ndarray  # cls + sep                                (Kovaleva et al.)
    diagonal: np.ndarray  # weight on content tokens at i − 1, i, i + 1 (Kovaleva et al.)
    local: np.ndarray     # weight on content tokens within ±BLOCK_WINDOW (Kovaleva et al.'s block)
    positional: np.ndarray   # share of tokens whose largest weight is at the head's offset (Voita et al.)
    offset: np.ndarray       # that offset, −1 or +1 (the one of the larger share)
    confidence: np.ndarray   # mean of each token's largest weight    (Voita et al.)
    classes: np.ndarray      # str (layers, heads): ``classify``'s class of each head

    @property
    def source(self):
        """What the means are over, in words: "the 14 tokens of one text" or "412 query
        tokens of 30 sentences"."""
        if len(self.lengths) == 1:
            return f"the {self.tokens} tokens of one text"
        return f"{self.tokens} query tokens of {len(self.lengths)} sentences"

    @property
    def entropy_ceiling(self):
        """(lowest, highest) ln n over the samples: the largest entropy a row can have, in
        nats (all n keys weighted evenly)."""
        return float(np.log(min(self.lengths))), float(np.log(max(self.lengths)))

    @property
    def is_positional(self):
        """bool (layers, heads): Voita et al.'s rule, positional share >= 90%."""
        return self.positional >= POSITIONAL_SHARE

    def by_layer(self, name):
        """The mean over a layer's heads of measure ``name`` -> (layers,)."""
        return getattr(self, name).mean(axis=1)


@dataclass(frozen=True)
class HeadAblation:
    """Michel et al.'s single-head ablation: ``distance`` (layers, heads) is the mean over
    ``texts`` of 1 − cos(embedding with the head removed, full embedding)."""

    texts: tuple          # the sentences ablated (by default every third of the set)
    of_total: int         # how many sentences the set held
    distance: np.ndarray  # (layers, heads)
    seconds: float        # wall time of all passes
    kernel: str

    def ranked(self):
        """[(layer, head, distance)], numbered from 0 as ``distance`` is indexed, the most
        important head first."""
        order = np.argsort(-self.distance, axis=None, kind="stable")
        return [(int(l), int(h), float(self.distance[l, h]))
                for l, h in zip(*np.unravel_index(order, self.distance.shape))]


def is_punctuation(token):
    """True for a token made only of punctuation (WordPiece's ## prefix ignored)."""
    body = token.removeprefix("##")
    return bool(body) and token not in SPECIAL_TOKENS and all(c in string.punctuation for c in body)


def head_measures(samples, texts=None):
    """``HeadMeasures`` of samples [(tokens (n,), weights (layers, heads, n, n)), ...],
    [CLS] first and [SEP] last in each.  Time O(layers·heads·Σ n²), memory one sample's
    weights."""
    sums, counts = {}, {}

    def add(name, values, count):
        sums[name] = sums.get(name, 0.0) + values
        counts[name] = counts.get(name, 0) + count

    lengths = []
    for tokens, weights in samples:
        n = len(tokens)
        lengths.append(n)
        weights = np.asarray(weights, np.float64)
        if weights.shape[-2:] != (n, n):
            raise ValueError(f"weights {weights.shape} for {n} tokens")
        if tokens[0] != "[CLS]" or tokens[-1] != "[SEP]":
            raise ValueError(f"tokens must start with [CLS] and end with [SEP], got {tokens[0]} … {tokens[-1]}")
        content = np.array([t not in SPECIAL_TOKENS for t in tokens])
        offsets = np.arange(n)[None, :] - np.arange(n)[:, None]        # (n, n): key j − query i
        punct = np.array([is_punctuation(t) for t in tokens])
        largest = weights.argmax(axis=-1) - np.arange(n)                # offset of each row's peak
        add("cls", weights[..., 0].sum(-1), n)
        add("sep", weights[..., n - 1].sum(-1), n)
        add("punctuation", weights[..., punct].sum((-2, -1)), n)
        add("previous", np.diagonal(weights, -1, -2, -1).sum(-1), n - 1)
        add("next", np.diagonal(weights, 1, -2, -1).sum(-1), n - 1)
        add("entropy", attention_entropy(weights).sum(-1), n)
        add("diagonal", (weights * ((np.abs(offsets) <= 1) & content)).sum((-2, -1)), n)
        add("local", (weights * ((np.abs(offsets) <= BLOCK_WINDOW) & content)).sum((-2, -1)), n)
        add("peak_previous", (largest == -1).sum(-1), n - 1)
        add("peak_next", (largest == 1).sum(-1), n - 1)
        add("confidence", weights.max(-1).sum(-1), n)
    if not sums:
        raise ValueError("no samples to measure")
    mean = {name: sums[name] / counts[name] for name in sums}
    prefer_next = mean["peak_next"] > mean["peak_previous"]
    vertical = mean["cls"] + mean["sep"]
    return HeadMeasures(
        texts=tuple(texts or ()), tokens=counts["cls"], lengths=tuple(lengths), cls=mean["cls"], sep=mean["sep"],
        punctuation=mean["punctuation"], previous=mean["previous"], next=mean["next"],
        entropy=mean["entropy"], vertical=vertical, diagonal=mean["diagonal"], local=mean["local"],
        positional=np.where(prefer_next, mean["peak_next"], mean["peak_previous"]),
        offset=np.where(prefer_next, 1, -1), confidence=mean["confidence"],
        classes=classify(vertical, mean["diagonal"], mean["local"]))


def classify(vertical, diagonal, local):
    """Kovaleva et al.'s pattern class of each head from its mean masses (arrays of one
    shape) -> str array.  In order, the first rule that holds:

        vertical + diagonal   vertical >= MIXED_SHARE and diagonal >= MIXED_SHARE
        vertical              vertical >= MAJORITY_SHARE ([CLS] + [SEP])
        diagonal              diagonal >= MAJORITY_SHARE (content tokens at i − 1, i, i + 1)
        block                 local >= MAJORITY_SHARE (content tokens within ±BLOCK_WINDOW:
                              for a single sentence the "segment" is a contiguous span)
        heterogeneous         none of these

    On short sentences the ±BLOCK_WINDOW span covers most keys, so a head that spreads
    its weight evenly over 8 tokens already counts as a block.
    """
    vertical, diagonal, local = np.broadcast_arrays(vertical, diagonal, local)
    return np.select(
        [(vertical >= MIXED_SHARE) & (diagonal >= MIXED_SHARE), vertical >= MAJORITY_SHARE,
         diagonal >= MAJORITY_SHARE, local >= MAJORITY_SHARE],
        [CLASSES[2], CLASSES[0], CLASSES[1], CLASSES[3]], CLASSES[4])


def measure_heads(texts=None, *, kernel="c_tiled"):
    """``HeadMeasures`` of the model's attention over ``texts`` (default: ``sentences()``),
    one forward pass each with ``kernel``."""
    texts = tuple(texts or sentences())
    return head_measures((minilm.attentions(text, kernel=kernel) for text in texts), texts)


def ablate_heads(texts=None, *, kernel="c_tiled", progress=None):
    """Michel et al.'s ablation: for each of the 72 heads, the mean over ``texts`` of
    1 − cos(embedding with that head's output zeroed, full embedding) -> ``HeadAblation``.

    ``texts`` default: every ABLATION_STRIDE-th sentence of ``sentences()``, always the
    same ones.  One ``minilm.encode`` of all of them per head: 72 × len(texts) + 1
    forward passes.  ``progress(line)``, if given, hears after each layer how far it got.
    """
    texts = tuple(texts or sentences()[::ABLATION_STRIDE])
    layers, heads = minilm.LAYERS, minilm.HEADS
    start = time.perf_counter()
    used = list(texts)
    full = minilm.encode(used, kernel=kernel)
    distance = np.empty((layers, heads))
    for layer in range(layers):
        for head in range(heads):
            mask = np.ones((layers, heads))
            mask[layer, head] = 0
            ablated = minilm.encode(used, kernel=kernel, head_mask=mask)
            # both are unit vectors: the dot product is the cosine
            distance[layer, head] = np.mean(1.0 - np.einsum("sd,sd->s", ablated, full, dtype=np.float64))
        if progress:
            progress(f"ablation: {(layer + 1) * heads} of {layers * heads} heads, "
                     f"{time.perf_counter() - start:.0f} s")
    return HeadAblation(texts, len(sentences()), distance, time.perf_counter() - start, kernel)
