"""all-MiniLM-L6-v2's attention on one text, read head by head and held against four
2019 papers on BERT's heads (``kernels.models.head_analysis``).

    write_heatmap(text, out_dir, kernel="c_tiled") -> out_dir / "summary.md"
    python -m kernels heatmap --text "The cat sat on the mat" --out DIR [--kernel NAME]

Writes the five figures of ``model_figures`` (the text's 72 maps; entropy and confidence,
the mass on [CLS]/[SEP]/punctuation and the pattern classes over the 30 sentences of
``head_analysis.sentences()``, the head ablation over every third of them), the
interactive viewer of the text's weights (``viewer.html``) and ``summary.md``, which
reads them with the numbers.  Cost: one forward pass per sentence for the measures,
72 × 10 for the ablation (under a minute on 2 cores).
"""
import pathlib
import time

import numpy as np

from ..files import write_text
from ..layers.analysis import ANOMALY_FACTOR, analyse_attention, attention_entropy
from ..models import head_analysis, minilm
from ..report.tables import Column, Table
from . import model_figures

FIGURES = {"maps": "head_maps.png", "entropy": "entropy_confidence.png", "mass": "special_mass.png",
           "classes": "pattern_classes.png", "ablation": "ablation.png"}
VIEWER = "viewer.html"
TOP_HEADS = 5  # heads listed as the most important


def write_heatmap(text, out_dir, *, kernel="c_tiled"):
    """Figures, viewer and summary.md of ``text`` and of the sentence set into ``out_dir``,
    every attention on ``kernel``; -> the path of summary.md.  ModelNotInstalled without
    the model."""
    from .viewer import write_viewer

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    tokens, weights = minilm.attentions(text, kernel=kernel)
    measures = head_analysis.measure_heads(kernel=kernel)
    ablation = head_analysis.ablate_heads(kernel=kernel)
    quoted = f'"{text}"'
    model_figures.plot_head_maps(weights, tokens, out_dir / FIGURES["maps"],
                                 title=f"all-MiniLM-L6-v2: every head's attention on {quoted}",
                                 caption=f"Computed by minilm.attentions with the {kernel} kernel.")
    model_figures.plot_entropy_confidence(measures, out_dir / FIGURES["entropy"])
    model_figures.plot_special_mass(measures, out_dir / FIGURES["mass"])
    model_figures.plot_pattern_classes(measures, out_dir / FIGURES["classes"])
    model_figures.plot_ablation(ablation, out_dir / FIGURES["ablation"])
    write_viewer(tokens, weights, out_dir / VIEWER, title=f"all-MiniLM-L6-v2 attention: {quoted}",
                 meta={"model": "all-MiniLM-L6-v2", "kernel": kernel, "text": text})
    sections = [
        f"# all-MiniLM-L6-v2's attention on {quoted}\n\n"
        f"Tokens ({len(tokens)}): {' '.join(f'`{t}`' for t in tokens)}. Every weight was computed by "
        f"`python -m kernels heatmap` with the `{kernel}` kernel; the measures over heads use the "
        f"{len(measures.texts)} sentences of `kernels/models/sentences.txt` ({measures.tokens} query tokens). "
        f"Layers and heads are numbered from 1; head L.H is layer L, head H. "
        f"[Interactive viewer]({VIEWER}) of every head's weights.\n\n"
        f"![The 72 attention maps]({FIGURES['maps']})",
        _focus_section(tokens, weights),
        _entropy_section(tokens, weights, measures),
        _anomaly_section(tokens, weights),
        _ablation_section(ablation),
        _sat_cat_section(tokens, weights),
        _papers_section(measures, ablation),
        f"Written in {time.perf_counter() - start:.0f} s (ablation {ablation.seconds:.0f} s).",
    ]
    return write_text(out_dir / "summary.md", "\n\n".join(sections) + "\n")


def _head(layer, head):
    return f"{layer + 1}.{head + 1}"


def _focus_section(tokens, weights):
    layers, heads, n = weights.shape[:3]
    focus = weights.argmax(axis=-1)   # (layers, heads, n)
    columns = (Column("head", "head"),) + tuple(Column(f"q{i}", f"{i} {t}") for i, t in enumerate(tokens))
    tables = []
    for layer in range(layers):
        rows = [[_head(layer, head)] + [f"{tokens[j]} {weights[layer, head, i, j]:.2f}"
                                         for i, j in enumerate(focus[layer, head])] for head in range(heads)]
        tables.append(f"### Layer {layer + 1}\n\n" + Table(f"focus_{layer + 1}", columns, rows).markdown())
    return ("## Where each token looks most\n\n"
            "For each head (row) and query token (column), the key token it gives its largest "
            "weight, with that weight.\n\n" + "\n\n".join(tables))


def _entropy_section(tokens, weights, measures):
    entropy = attention_entropy(weights).mean(axis=-1)   # (layers, heads)
    columns = (Column("layer", "layer"),) + tuple(Column(f"h{h + 1}", f"head {h + 1}", "{:.2f}".format)
                                                  for h in range(entropy.shape[1]))
    rows = [[layer + 1] + list(entropy[layer]) for layer in range(entropy.shape[0])]
    low, high = np.unravel_index(entropy.argmin(), entropy.shape), np.unravel_index(entropy.argmax(), entropy.shape)
    return (f"## Entropy per head\n\nMean entropy of the query rows of {len(tokens)} tokens, in nats "
            f"(0: all weight on one key; ln {len(tokens)} = {np.log(len(tokens)):.2f}: spread evenly). "
            f"Most focused: head {_head(*low)} ({entropy[low]:.2f}); broadest: head {_head(*high)} "
            f"({entropy[high]:.2f}).\n\n" + Table("entropy", columns, rows).markdown() +
            f"\n\nOver the sentence set, with Voita et al.'s confidence (mean largest weight):\n\n"
            f"![Entropy and confidence per head]({FIGURES['entropy']})")


def _anomaly_section(tokens, weights):
    analysis = analyse_attention(weights)
    lines = []
    for layer in range(weights.shape[0]):
        flagged = analysis.anomalous[layer].sum(axis=0)   # (n,) heads flagging each key
        keys = [f"`{tokens[j]}` (position {j}) in {flagged[j]} head{'s' if flagged[j] > 1 else ''}" for j in np.flatnonzero(flagged)]
        lines.append(f"- layer {layer + 1}: {', '.join(keys) or 'none'}")
    return (f"## Anomalous columns\n\nKeys that receive more than {ANOMALY_FACTOR:g}× their even share "
            f"of attention (the column mass if every query spread evenly: 1 per key here), by "
            f"`analyse_attention`'s rule, counted over each layer's 12 heads:\n\n" + "\n".join(lines) +
            f"\n\nOver the sentence set, the mean weight each layer puts on [CLS], [SEP] and punctuation:\n\n"
            f"![Mass on [CLS], [SEP] and punctuation per layer]({FIGURES['mass']})")


def _ablation_section(ablation):
    ranked = ablation.ranked()
    top = ", ".join(f"{l}.{h} ({d:.3f})" for l, h, d in ranked[:TOP_HEADS])
    subset = ("" if len(ablation.texts) == ablation.of_total else
              f" (every {head_analysis.ABLATION_STRIDE}rd sentence of the {ablation.of_total})")
    small = np.mean(ablation.distance < 0.01)
    return (f"## Heads whose removal moves the embedding most\n\nEach head's output zeroed in turn "
            f"(Michel et al. 2019), over {len(ablation.texts)} sentences{subset}; the change is the mean "
            f"1 − cos between the embedding without the head and the full one ({ablation.seconds:.0f} s, "
            f"`{ablation.kernel}`). Largest: {top}. Smallest: head {ranked[-1][0]}.{ranked[-1][1]} "
            f"({ranked[-1][2]:.4f}). {small:.0%} of the heads move it by less than 0.01.\n\n"
            f"![Head ablation]({FIGURES['ablation']})")


def _sat_cat_section(tokens, weights):
    title = '## Does "sat" attend to "cat"?\n\n'
    if "sat" not in tokens or "cat" not in tokens:
        return title + 'The text has no "sat" and "cat" tokens: the seed\'s prediction cannot be read here.'
    sat, cat = tokens.index("sat"), tokens.index("cat")
    row = weights[..., sat, :]                                   # (layers, heads, n)
    on_cat = row[..., cat]
    winners = np.argwhere(row.argmax(axis=-1) == cat)
    strongest = np.argsort(-on_cat, axis=None)[:3]
    best = ", ".join(f"{_head(*np.unravel_index(i, on_cat.shape))} ({on_cat.flat[i]:.2f})" for i in strongest)
    if len(winners):
        found = (f'In {len(winners)} of the 72 heads "cat" is the key "sat" weighs most: '
                 + ", ".join(f"{_head(l, h)} ({on_cat[l, h]:.2f})" for l, h in winners) + ".")
    else:
        found = 'In no head is "cat" the key "sat" weighs most.'
    return (f"{title}The seed predicts that the verb's query finds its subject. {found} The largest "
            f'weights on "cat" in "sat"\'s row: {best}; the mean over all heads is {on_cat.mean():.2f} '
            f"(an even spread would give {1 / len(tokens):.2f})."
            + (' "cat" stands just before "sat", so a previous-token head gives it this weight whatever '
               "the words are; the verb-finds-its-subject reading needs a head that is not positional."
               if cat == sat - 1 else ""))


def _papers_section(measures, ablation):
    depth = np.arange(1, measures.cls.shape[0] + 1) / measures.cls.shape[0]
    middle = (depth >= 0.5) & (depth <= 0.84)      # BERT-base's layers 6-10 of 12
    cls, sep, punct = (measures.by_layer(name)[middle].mean() for name in ("cls", "sep", "punctuation"))
    entropy = measures.by_layer("entropy")
    previous = [(_head(l, h), measures.previous[l, h]) for l, h in np.argwhere(measures.previous > 0.5)]
    following = [(_head(l, h), measures.next[l, h]) for l, h in np.argwhere(measures.next > 0.5)]
    positional = [_head(l, h) for l, h in np.argwhere(measures.is_positional)]
    classes = {name: int((measures.classes == name).sum()) for name in head_analysis.CLASSES}
    ranked = ablation.ranked()
    small = np.mean(ablation.distance < 0.01)

    def listed(pairs):
        return ", ".join(f"{name} ({share:.2f})" for name, share in pairs) or "none"

    return f"""## Held against the published findings

MiniLM has 6 layers where BERT-base has 12, so layers compare by relative depth (layer / layers):
BERT-base's layers 6–10 (depth 0.5–0.83) correspond to MiniLM's layers {', '.join(str(l + 1) for l in np.flatnonzero(middle))}.

- **[SEP] vs [CLS] (Clark et al. 2019).** BERT-base sends over half the attention of layers 6–10 to
  [SEP]. MiniLM does not: its layers at that depth put {sep:.2f} on [SEP] but {cls:.2f} on [CLS]
  (and {punct:.2f} on punctuation). The "no-op" sink is there, on the other special token; per layer
  [CLS] gets {', '.join(f'{v:.2f}' for v in measures.by_layer('cls'))} (layers 1–6).
- **Broad heads low (Clark et al.).** Mean entropy per layer: {', '.join(f'{v:.2f}' for v in entropy)} nats;
  {'as in BERT-base, the first layer is the broadest' if entropy.argmax() == 0 else f'unlike BERT-base, the broadest layer is layer {entropy.argmax() + 1}, not the first'}.
- **Previous / next token (Clark et al.; Voita et al.).** Heads with > 50% on the previous token:
  {listed(previous)}; on the next token: {listed(following)}. Positional by Voita et al.'s rule
  (largest weight at ±1 for >= 90% of tokens): {', '.join(positional) or 'none'}.
- **Pattern classes (Kovaleva et al. 2019).** By the thresholds of `head_analysis.classify`:
  {', '.join(f'{name} {count}' for name, count in classes.items())} of 72 heads. Kovaleva et al.
  labelled 30% of 400 hand-annotated BERT-base maps vertical; here {classes['vertical'] / 72:.0%} of the heads
  are vertical ({(classes['vertical'] + classes['vertical + diagonal']) / 72:.0%} with vertical + diagonal), their
  vertical mass being [CLS], and {classes['heterogeneous'] / 72:.0%} heterogeneous. The thresholds are ours, not
  their CNN's, so the shares compare loosely.
- **Most heads can go (Michel et al. 2019).** Removing one head moves the embedding by less than
  0.01 (1 − cos) for {small:.0%} of the heads; the largest change is {ranked[0][2]:.3f} (head
  {ranked[0][0]}.{ranked[0][1]}), and the heads that matter most are in layer(s)
  {', '.join(sorted({str(l) for l, _, _ in ranked[:TOP_HEADS]}))}, nearest the pooled output.

![Pattern class of each head]({FIGURES['classes']})"""
