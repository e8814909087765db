"""A page that reads attention for someone new to it: figures and numbers, computed on
our kernels from hand-built and seeded examples (``examples.py``).  They follow the source
text (the textbook section attnbench started from, listed in the project README's "The
source text"): its visualisation suggestions (§11.1.6), its 4-token code example (§11.1.7)
and its exercises 2, 3, 4 and 6 (§11.1.8); the page itself says what each one is.

    write_explanation(out_dir, kernel="c_tiled", seed=0) -> out_dir / "README.md"
    python -m kernels explain --out DIR [--kernel NAME]

``examples.attention_calls()`` lists the shape of every ``kernels.attention`` call the page
makes, so that a kernel can be refused before anything is computed (the command line
does so, ``examples.refuse_unfit_kernel``).  Heads are numbered from 0, as
the arrays and ``head_mask`` index them.

The whole page takes about 10 s on a 2-core machine: half of it drawing, a third the
soft-vs-hard retrieval experiment and its timings (``kernels.layers.retrieval``).
"""
import math
import pathlib

import numpy as np

from ..output import write_text
from ..layers.analysis import ANOMALY_FACTOR, analyse_attention, analyse_queries_and_keys, attention_entropy
from ..layers.retrieval import AGREEMENT_LEVEL, retrieval_cost, soft_vs_hard
from ..layers.similarity import ROW_BLOCK_BYTES
from ..memory import format_bytes
from ..output import Column, Table
from . import figures
from .examples import (D_MODEL, FACT, FEATURES, LONG_PERIOD, LOOKS_FOR, RETRIEVAL_DIM, RETRIEVAL_QUERIES,
                       RETRIEVAL_SIZES, SENTENCE, WINDOW, WINDOW_N, WINDOW_SINKS, WINDOW_TEMPERATURE,
                       four_token_example, heads_example, long_example, sentence_example, sink_example,
                       window_example)
from .retrieval import accuracy_table, cost_table, load_text, plot_retrieval_cost, plot_soft_vs_hard

LONG_PIXELS = 512  # cells per axis of the long example's picture
def write_explanation(out_dir, *, kernel="c_tiled", seed=0):
    """Compute every example with ``kernel`` and ``seed``, draw its figures into ``out_dir``
    and write ``out_dir/README.md``, which walks through them; -> the README's path."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sections = [
        f"# Reading self-attention: figures and numbers\n\n"
        f"Every number and figure below was computed by `python -m kernels explain` with the "
        f"`{kernel}` kernel (random seed {seed}). Attention turns each query's scores against all keys, "
        f"q·k/√d, into weights with a softmax (each row of weights sums to 1) and returns the "
        f"weighted mean of the values. Figures put keys on the x axis and queries on the y axis, "
        f"so a row is where one token looks.\n\n"
        f"The examples and questions come from the textbook section attnbench started from, "
        f"\"The algorithmic essence of self-attention\" (in Chinese; the project README's "
        f"\"The source text\" lists it and its exercises): its 4-token code example, its sentence "
        f"\"The cat sat on the mat\", and its exercises on where a verb looks, what masking a head "
        f"changes, how to read an attention matrix and how to draw a large one. Each section "
        f"below says what it takes from there.",
        _four_tokens_section(out_dir, four_token_example(kernel)),
    ]
    sentence = sentence_example(kernel)
    heads = heads_example(kernel, seed)
    sections += [
        _sentence_section(out_dir, sentence),
        _heads_section(out_dir, heads),
        _qkv_section(out_dir, sentence),
        _entropy_section(out_dir, sentence, heads, sink_example(kernel)),
        _long_section(out_dir, *long_example(seed)),
        _retrieval_section(out_dir, kernel, seed),
        _window_section(window_example(kernel, seed)),
    ]
    return write_text(out_dir / "README.md", "\n\n".join(sections) + "\n")


def _four_tokens_section(out_dir, example):
    figures.plot_attention_heatmap(
        example.weights, example.tokens, out_dir / "four_tokens.png",
        title="Four 2-D tokens used as their own queries, keys and values: attention weights",
        caption="The textbook's code example: X = [[1, 0], [0, 1], [1, 1], [0.5, 0.5]] (The, cat, sat, mat), "
                "W_Q = W_K = W_V = I, weights softmax(X Xᵀ/√2) by kernels.attention_weights.")
    w, tokens = example.weights, example.tokens
    sat = tokens.index("sat")
    return f"""## 1. Four tokens, small enough to check by hand

The textbook's code example, a 4-token test of its short NumPy self-attention, gives four
tokens 2-D vectors, The = [1, 0], cat = [0, 1], sat = [1, 1], mat = [0.5, 0.5], and uses them
unchanged as queries, keys and values (W_Q = W_K = W_V = I). Scores are dot products divided
by √2. The attention matrix, one row per query:

{_matrix_table("weights", tokens, w, tokens, "query ↓ key →")}

![Heatmap of the 4-token attention weights](four_tokens.png)

"sat" has the longest key ([1, 1] overlaps with every vector), so in every row it receives as
much weight as any other key or more ({_join(f"{w[i, sat]:.4f} in row {t}" for i, t in enumerate(tokens))}). No row is sharp:
with scores this close, the softmax spreads the weight (the largest weight is {w.max():.4f}).
Each output is the weighted mean of the value vectors, Y = A X:

{_matrix_table("outputs", tokens, example.outputs, ("dim 0", "dim 1"), "token")}

"The" and "cat" come out as mirror images ({_vector(example.outputs[0])} and
{_vector(example.outputs[1])}), and every output is pulled towards sat's [1, 1]."""


def _sentence_section(out_dir, example):
    w, tokens = example.weights, example.tokens
    figures.plot_attention_heatmap(
        w, tokens, out_dir / "sentence.png", title='"The cat sat on the mat": who looks at whom',
        caption="Hand-built: 6 features per token (det, noun, verb, prep, early, late), W_Q chosen "
                "by hand, W_K = W_V = I; weights by kernels.attention_weights, scale 1/√6.")
    i = {t: tokens.index(t) for t in ("The", "cat", "sat", "mat")}
    rules = Table("looks_for", (Column("query", "a query of a …"), Column("key", "looks for a …"),
                                Column("strength", "strength", lambda s: f"{s:+g}")),
                  [[q, k, s] for (q, k), s in LOOKS_FOR.items()])
    return f"""## 2. "The cat sat on the mat": the verb finds its subject

The textbook's second exercise asks where the query of "sat" looks in this sentence, and
predicts that it weighs "cat", its subject, most and "mat" less, and that a heatmap shows a
bright cell in row "sat", column "cat". Random embeddings and projections would give meaningless
weights, so here both are **constructed by hand, not learned** (a trained model's heads on any
text: `python -m kernels heatmap`).
Each token is six 0/1 features: its word class (det, noun, verb, prep) and whether it stands
before the verb (early) or after it (late); "sat" itself is neither. The keys and values are
these features (W_K = W_V = I); W_Q says what each feature looks for in a key:

{rules.markdown()}

![Heatmap of the hand-built sentence's attention weights](sentence.png)

"sat" puts {w[i['sat'], i['cat']]:.2f} of its weight on "cat" (noun, before the verb: its
subject), {w[i['sat'], i['mat']]:.2f} on "mat" (a noun, but after the verb) and
{w[i['sat'], i['The']]:.2f} on "The": the bright cell in row "sat", column "cat" that the exercise
predicts. The determiners find their nouns ("The" → "cat" {w[i['The'], i['cat']]:.2f},
"the" → "mat" {w[4, i['mat']]:.2f}) and "mat" looks back at its determiner "the"
({w[i['mat'], 4]:.2f}) and at "sat" ({w[i['mat'], i['sat']]:.2f})."""


def _heads_section(out_dir, heads):
    n_heads = heads.weights.shape[0]
    figures.plot_heads(heads.weights, SENTENCE, out_dir / "heads.png",
                       title=f"{n_heads} heads of one seeded layer on the same 6 tokens",
                       caption=f"Random embeddings (6 × {D_MODEL}) and projections ~ N(0, 1/{D_MODEL}), "
                               f"{n_heads} heads of width {D_MODEL // n_heads}; weights from "
                               "kernels.multi_head_projections and kernels.attention_weights.")
    entropy = attention_entropy(heads.weights).mean(axis=-1)
    ablation = Table("ablation", (Column("head", "head"),
                                  Column("entropy", "mean entropy (nats)", lambda e: f"{e:.2f}"),
                                  Column("change", "output change when masked", lambda c: f"{c:.1%}")),
                     [[h, entropy[h], heads.change[h]] for h in range(n_heads)])
    most, least = int(heads.change.argmax()), int(heads.change.argmin())
    return f"""## 3. Eight heads side by side

One multi-head layer (d_model = {D_MODEL}, {n_heads} heads of width {D_MODEL // n_heads}) with
seeded random weights, on random embeddings of the six tokens. Each head projects the tokens into
its own small space, so each draws a different pattern. These heads are random: they show that
heads differ, not what trained heads learn (the textbook guesses that trained heads split the work,
pairs of them following syntax, synonyms, neighbouring tokens and the whole sentence; that needs
a trained model to test). Heads are numbered from 0 to {n_heads - 1} here and in the figures, as
the weights array (`weights[h]`) and `head_mask` index them.

![The attention weights of the eight heads](heads.png)

How much does a head matter? The textbook's third exercise proposes an experiment: mask one
head and see what changes. With `head_mask[h] = 0` (head h silenced, the others kept) the layer's
output changes by ‖Δout‖ / ‖out‖:

{ablation.markdown()}

Masking head {most} changes the output most ({heads.change[most]:.1%}), head {least} least
({heads.change[least]:.1%}). A head's weight pattern alone does not predict this: its value and
output projections decide how much of the output it carries."""


def _qkv_section(out_dir, example):
    scores = example.q @ example.k.T
    links = int((scores == scores.max()).sum())  # every pair tied for the largest q·k
    figures.plot_qkv_vectors(example.q, example.k, example.v, example.tokens, out_dir / "qkv.png",
                             links=links, features=FEATURES,
                             title='Query, key and value of each token of "The cat sat on the mat"',
                             caption="The hand-built example of section 2: q = x W_Q, k = v = x; the lines join "
                                     f"the {links} query-key pairs of largest q·k (before the 1/√6 scale).")
    cat, sat = SENTENCE.index("cat"), SENTENCE.index("sat")
    return f"""## 4. Query, key and value of each token

The textbook suggests drawing each token's query, key and value side by side, queries red, keys
blue and values green, and linking the pairs of high q·k. Here every bar is one feature. A key
(and value) is just the token's features; a query is what the token looks for: "sat"'s query is
+4 on noun, +1 on early and −1 on late, so it matches "cat"'s key (noun, early) with
q·k = {scores[sat, cat]:g}. The lines join the {links} pairs that share the largest q·k,
{scores.max():g}: the verb and its subject, and each noun and its determiner, both ways.

![Query, key and value vectors of the six tokens](qkv.png)"""


def _entropy_section(out_dir, sentence, heads, sink):
    figures.plot_entropy(attention_entropy(heads.weights), SENTENCE, out_dir / "entropy.png",
                         title="Entropy of each query's weights, eight seeded heads",
                         caption="The seeded layer of section 3: H = −Σ p ln p of each row of each head's "
                                 "weights, by kernels.attention_entropy.")
    figures.plot_attention_heatmap(sink.weights, sink.tokens, out_dir / "sink.png",
                                   title="An attention sink: every query looks at the first token",
                                   caption="Constructed: all queries u = (1, …, 1), the key of \"The\" 1.2 u, "
                                           "all other keys 0 (d = 6, scale 1/√6).")
    n = len(SENTENCE)
    head_entropy = attention_entropy(heads.weights)
    h, row = np.unravel_index(head_entropy.argmin(), head_entropy.shape)
    analysis = analyse_attention(sentence.weights)
    focus = Table("focus", (Column("query", "query"), Column("focus", "focus (its largest weight)"),
                            Column("weight", "weight", lambda w: f"{w:.2f}"),
                            Column("entropy", "entropy (nats)", lambda e: f"{e:.2f}")),
                  [[SENTENCE[i], SENTENCE[analysis.focus[i]], analysis.focus_weight[i], analysis.entropy[i]]
                   for i in range(n)])
    sink_analysis = analyse_attention(sink.weights)
    flagged = [SENTENCE[j] for j in np.flatnonzero(sink_analysis.anomalous)]
    return f"""## 5. Entropy, focus and anomalies

The textbook's fourth exercise reads an attention matrix three ways: how spread out each row is,
which key each query weighs most, and whether some key draws far more than its share.
The **entropy** of a row, H = −Σ p ln p, is 0
when a query puts all its weight on one key and ln {n} = {math.log(n):.2f} nats when it spreads
evenly over all {n}. For the eight seeded heads:

![Entropy per query and head](entropy.png)

The mean entropy per head runs from {head_entropy.mean(axis=-1).min():.2f} to
{head_entropy.mean(axis=-1).max():.2f} nats; the most focused row is "{SENTENCE[row]}" in head {h}
({head_entropy[h, row]:.2f} nats). The hand-built sentence of section 2 is sharper; each query's
**focus**, the key it weighs most (`analyse_attention`):

{focus.markdown()}

**Anomalies**: `analyse_attention` flags key j when the attention it receives in all, its column
mass Σ_i p_ij, exceeds {ANOMALY_FACTOR:g} times its even share (what it would receive if every query
spread its weight evenly over the keys it sees: 1 per key for full attention). In the sentence
{_anomaly_text(analysis)}. A constructed sink, where every query is drawn to the first token:

![Heatmap of an attention sink](sink.png)

Every query puts {sink.weights[0, 0]:.2f} of its weight on "The"; its column mass is
{sink_analysis.column_mass[0]:.2f} against an even share of {sink_analysis.even_mass[0]:.0f}, so the rule
flags {_join(f'"{t}"' for t in flagged)}."""


def _anomaly_text(analysis):
    flagged = [SENTENCE[j] for j in np.flatnonzero(analysis.anomalous)]
    top = int(analysis.column_mass.argmax())
    largest = f'the largest column mass is "{SENTENCE[top]}"\'s {analysis.column_mass[top]:.2f}'
    if not flagged:
        return f"no key is flagged: {largest}, below {ANOMALY_FACTOR:g}"
    return f"the rule flags {_join(flagged)} ({largest})"


def _long_section(out_dir, q, k):
    n = q.shape[0]
    figures.plot_large_attention(
        (q, k), out_dir / "long_sequence.png", causal=True, max_pixels=LONG_PIXELS,
        title=f"Local attention, and stripes every {LONG_PERIOD} tokens",
        caption=f"Seeded queries and keys (d = {q.shape[1]}): one positional code with periods 8 to {n} tokens "
                f"and {LONG_PERIOD}, plus noise.")
    analysis = analyse_queries_and_keys(q, k, causal=True)
    distance = np.arange(n) - analysis.focus  # how far back each query's focus lies
    rows_per_block = ROW_BLOCK_BYTES // (n * q.itemsize)
    block = math.ceil(n / LONG_PIXELS)
    return f"""## 6. {n:,} tokens without the {n:,} × {n:,} matrix

Does a picture of attention cope with 1000 × 1000 matrices, and does it save memory? The textbook's
sixth exercise, a review of attention-plotting code that an LLM wrote, asks both. This picture
draws a causal attention matrix of {n:,} tokens, each query seeing itself and the tokens before it.
Nothing can show {n * n:,} numbers, so each pixel is the mean weight of a {block} × {block} block of
query-key pairs, on a log colour scale so that small weights still show. The weights are made from the
queries and keys a block of {rows_per_block:,} query rows ({format_bytes(ROW_BLOCK_BYTES)}) at a time and
pooled at once; the whole matrix ({format_bytes(n * n * q.itemsize)} here, {format_bytes(65536**2 * 8)} at
n = 65,536) never exists.

![Block-averaged causal attention of a {n}-token sequence](long_sequence.png)

The bright diagonal is local attention: {np.mean(distance == 0):.0%} of the queries weigh
themselves most, {np.mean(distance <= 8):.0%} a key at most 8 tokens back. The parallel stripes are the periodic part of the code:
keys {LONG_PERIOD}, {2 * LONG_PERIOD}, … tokens back score high again. Mean entropy per query is
{analysis.entropy.mean():.2f} nats, against ln {n} = {math.log(n):.2f} for a query that spreads
evenly over all keys."""


def _retrieval_section(out_dir, kernel, seed):
    # weights by attention_weights; with one-hot values the output is the weights themselves,
    # so no kernel call is needed (a kernel would hold an N × N identity of values)
    result = soft_vs_hard(seed=seed)
    cost = retrieval_cost(sizes=RETRIEVAL_SIZES, dim=RETRIEVAL_DIM, n_queries=RETRIEVAL_QUERIES, seed=seed,
                          kernel=kernel)
    plot_soft_vs_hard(result, out_dir / "soft_vs_hard.png")
    plot_retrieval_cost(cost, out_dir / "retrieval_cost.png")
    return f"""## 7. Soft against hard retrieval

Attention is a soft lookup: every stored key gets a weight and the answer is a blend of all
values. A store of {result.n_items:,} random unit keys in {result.dim} dimensions, with one-hot values
(item ids), is queried {result.n_queries} times per noise level with noisy copies of stored keys, three
ways: an exact-match dict on the key's bytes, the nearest key (argmax q·k), and attention with
scores divided by a temperature T (weights by `kernels.attention_weights`; with one-hot values
the output is the weight vector itself).

{accuracy_table(result).markdown()}

The dict only answers a bit-identical query: any noise defeats it. The nearest key and attention
degrade gracefully: {_degradation_text(result)}. Attention blurs everything when T is large and
becomes the nearest-key lookup as T falls: {_agreement_text(result)}.

![Soft against hard retrieval against the temperature](soft_vs_hard.png)

The price is the other half of the story: a dict lookup costs the same at any N, attention
looks at every key.

{_timing_text(cost)}

{cost_table(cost).markdown()}

![Seconds per query against the number of stored items](retrieval_cost.png)"""


def _window_section(example):
    bands = tuple(example.recall)
    table = Table("window", (Column("band", "each query sees"),
                             Column("recall", f"weight on the fact at position {FACT}", lambda w: f"{w:.3f}"),
                             Column("mass", "attention token 0 receives", lambda m: f"{m:.1f}"),
                             Column("entropy", f"mean entropy past token {WINDOW} (nats)", lambda h: f"{h:.2f}")),
                  [[{"causal": "every earlier token",
                     "window": f"the last {WINDOW} tokens",
                     "window + sinks": f"the last {WINDOW} and the first {WINDOW_SINKS}"}[band],
                    example.recall[band], example.sink_mass[band], example.entropy[band]] for band in bands])
    return f"""## 8. Attending to less: a window, and its sinks

Attention's cost is quadratic because every query looks at every key; the way past it
that engines take (the source text's next section, on cost and caching, begins here) is to
let each query see only a window of the most recent tokens, a fixed number w, so that a
sequence of n tokens costs n·w scores instead of n² and a KV cache holds w tokens however
long the text. What that costs is retrieval: a key outside the window cannot be found,
however well the query matches it. Two experiments on {WINDOW_N} tokens, causal, values that
name their token (so an output is its weights):

- **a lookup**: random keys, and the last token's query is the key of the token at position
  {FACT}, at temperature {WINDOW_TEMPERATURE:g} (section 7's soft retrieval);
- **a sink**: every query is drawn to the first token, as trained models draw much of their
  attention to the first few tokens (section 5's anomaly).

{table.markdown()}

Seeing every earlier token, the lookup finds the fact ({example.recall["causal"]:.3f} of its weight).
With a window of the last {WINDOW} tokens the fact is {WINDOW_N - 1 - FACT} tokens back, out of
sight: its weight is {example.recall["window"]:.3f}, and no temperature brings it back. The sink
shows the other loss: every query past the window is cut off from token 0 and spreads its weight
over the window instead (entropy {example.entropy["window"]:.2f} nats, near ln {WINDOW} =
{math.log(WINDOW):.2f}, against {example.entropy["causal"]:.2f} with token 0 in view), so every one
of those outputs changes. **Attention sinks** (StreamingLLM) keep the first {WINDOW_SINKS} tokens
visible to every query besides the window: the sink receives its attention again
({example.sink_mass["window + sinks"]:.1f} of {WINDOW_N}) and the rows are as sharp as before,
and here the fact, one of the first tokens, is found again ({example.recall["window + sinks"]:.3f}).
`kernels.attention(q, k, v, window=({WINDOW - 1}, 0), sinks={WINDOW_SINKS})` computes these; the
tiled kernels skip the keys outside the band, and `KVCache(window={WINDOW}, sinks={WINDOW_SINKS})`
keeps exactly those tokens for decoding."""


def _timing_text(cost):
    """How the timings were taken, and whether they are the code's cost or the machine's load."""
    how = (f"Each figure is the median of {cost.repeats} timed batches of {cost.n_queries} queries, ± half "
           f"their interquartile range as a share of it; \"had a core\" is the share of the time they were "
           f"ready to run that the process's threads spent on a core while that row was timed.")
    if cost.under_load:   # (at any size measured, whether or not every size was)
        return (f"**Measured under load: these are not the costs of a lookup and of attention.** While they "
                f"were timed, {load_text(cost)}; the rest of that time other work held the cores. A call that "
                f"queues for a core, or waits for one of its threads that does, takes longer by a factor the "
                f"load sets and that changes from run to run. Run `python -m kernels explain` on an idle "
                f"machine for the cost of the code.\n\n{how}")
    if not cost.load_known:
        return f"{how} While they were timed, {load_text(cost)}: whether other work slowed them is not known."
    return (f"{how} While they were timed, {load_text(cost)}: the figures are the code's cost on this "
            f"machine, within their spread.")


def _degradation_text(result):
    """Accuracy of the nearest key and of attention (at its best T) over the noise levels > 0."""
    noisy = result.noise_levels > 0
    percent = lambda values: ", ".join(f"{value:.0%}" for value in values)
    return (f"at σ = {_join([f'{s:g}' for s in result.noise_levels[noisy]])} the nearest key names "
            f"{percent(result.nearest_accuracy[noisy])} of the items, and attention at its best "
            f"temperature {percent(result.soft_accuracy.max(axis=1)[noisy])}")


def _agreement_text(result):
    found = result.agreement_temperature[np.isfinite(result.agreement_temperature)]
    share = f"{AGREEMENT_LEVEL:.0%} of the queries"
    if not found.size:
        return f"at no temperature tried does its output name the nearest key's item for {share}"
    agreeing = [f"{t:.3g}" for t in np.unique(found)[::-1]]
    by_level = " at every noise level" if len(agreeing) == 1 else ", depending on the noise level"
    return f"its output names the nearest key's item for {share} from T = {_join(agreeing)} down{by_level}"


def _matrix_table(name, row_labels, matrix, column_labels, corner):
    """A Markdown table of ``matrix`` with 4 decimals, rows and columns labelled."""
    columns = (Column("row", corner),) + tuple(
        Column(str(label), str(label), lambda x: f"{x:.4f}") for label in column_labels)
    return Table(name, columns, [[label, *row] for label, row in zip(row_labels, matrix)]).markdown()


def _vector(values):
    return "[" + ", ".join(f"{x:.4f}" for x in values) + "]"


def _join(items):
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
