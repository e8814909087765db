"""all-MiniLM-L6-v2's attention on one text, read head by head; with ``sentence_set``, its
heads measured over the 30 bundled sentences and held against four 2019 papers on
BERT's heads (``kernels.models.head_analysis``).

    check_text(text)                       ValueError for an empty or blank text
    write_heatmap(text, out_dir, kernel="c_tiled", sentence_set=False, progress=None)
                                           -> out_dir / "summary.md"
    python -m kernels heatmap --text "The cat sat on the mat" --out DIR [--sentence-set]

From the text alone (``TEXT_FIGURES``, seconds): its 72 maps, entropy and confidence per
head, the mass on [CLS]/[SEP]/punctuation per layer and each head's pattern class, the
interactive viewer of its weights (``viewer.html``), ``focus.csv`` (where every query
token looks most in every head) and ``summary.md``, which reads them with the numbers.
With ``sentence_set`` also (``SENTENCE_FIGURES``, about 5 minutes on 2 cores): the same
measures over the 30 sentences of ``head_analysis.sentences()`` (one forward pass each),
the head ablation over every third of them (72 × 10 passes), and the papers held against
them.  Every figure and section says which of the two it comes from.

A text longer than the model reads (256 tokens) is cut to its first 256, and every
output says so ("kept 256 of 412 tokens").  Titles quote the text's first words only; a
table with a column per token would be unreadable past a few dozen, so the summary lists
the first ``FOCUS_ROWS`` query tokens and ``focus.csv`` holds them all.
"""
import pathlib
import textwrap
import time
import warnings

import numpy as np

from ..output import write_text
from ..layers.analysis import ANOMALY_FACTOR, analyse_attention, attention_entropy
from ..models import head_analysis, minilm
from ..output import Column, Table
from . import model_figures

TEXT_FIGURES = {"maps": "head_maps.png", "entropy": "entropy_confidence.png", "mass": "special_mass.png",
                "classes": "pattern_classes.png"}
SENTENCE_FIGURES = {"entropy": "sentences_entropy_confidence.png", "mass": "sentences_special_mass.png",
                    "classes": "sentences_pattern_classes.png", "ablation": "ablation.png"}
VIEWER = "viewer.html"
FOCUS = "focus"          # focus.csv: every head's strongest key for every query token
FOCUS_ROWS = 40          # query tokens listed in summary.md's focus tables
EXCERPT_CHARS = 60       # the text quoted in titles and headings
QUOTE_CHARS = 2000       # the text quoted whole at the top of summary.md, up to this
LINE_CHARS = 100         # summary.md's prose lines
TOP_HEADS = 5            # heads listed as the most important
ANOMALY_KEYS = 8         # anomalous keys named per layer, those flagged by the most heads


def check_text(text):
    """Refuse what cannot be a text to read: not a str (TypeError), or nothing but white
    space (ValueError).  Loads nothing, so a command asks this first."""
    if not isinstance(text, str):
        raise TypeError(f"the text must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError("the text is empty (or only white space): give it some words, "
                         'e.g. --text "The cat sat on the mat"')
    return text


def excerpt(text, limit=EXCERPT_CHARS):
    """The text on one line, cut at a word to at most ``limit`` characters with "…"."""
    return textwrap.shorten(" ".join(text.split()), limit, placeholder=" …")


def write_heatmap(text, out_dir, *, kernel="c_tiled", sentence_set=False, progress=None):
    """Figures, viewer, focus.csv and summary.md of ``text`` (and with ``sentence_set`` of
    the bundled sentences) into ``out_dir``, every attention on ``kernel``; -> the path of
    summary.md.  ``progress(line)`` hears each step as it ends.  ValueError for a blank
    text and ModelNotInstalled without the model, both before anything is written."""
    from .viewer import write_viewer

    check_text(text)
    minilm.model_folder()
    say = progress or (lambda line: None)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    total = minilm.token_count(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", minilm.Truncated)   # said below, in every output
        tokens, weights = minilm.attentions(text, kernel=kernel)
    cut = (f"kept {len(tokens)} of {total} tokens: the model reads at most {minilm.MAX_SEQ_LENGTH}"
           if total > len(tokens) else "")
    say(f"attention of the text: {len(tokens)} tokens" + (f" ({cut})" if cut else "")
        + f", 6 layers × 12 heads on {kernel}, {time.perf_counter() - start:.1f} s")

    quoted = f'"{excerpt(text)}"'
    measures = head_analysis.head_measures([(tokens, weights)], (text,))
    model_figures.plot_head_maps(
        weights, tokens, out_dir / TEXT_FIGURES["maps"],
        title=f"all-MiniLM-L6-v2: every head's attention on {quoted} ({len(tokens)} tokens)",
        caption=f"Computed by minilm.attentions with the {kernel} kernel." + (f" The text was cut: {cut}." if cut else ""))
    _plot_measures(measures, TEXT_FIGURES, out_dir)
    write_viewer(tokens, weights, out_dir / VIEWER, title=f"all-MiniLM-L6-v2 attention: {quoted}",
                 meta={"model": "all-MiniLM-L6-v2", "kernel": kernel,
                       "tokens": f"{len(tokens)}" + (f" ({cut})" if cut else ""), "text": text})
    _focus_table(tokens, weights).write_csv(out_dir)
    say(f"figures and viewer of the text, {time.perf_counter() - start:.0f} s")

    sections = [_opening(text, tokens, cut, kernel, sentence_set),
                _focus_section(tokens, weights),
                _entropy_section(tokens, weights),
                _anomaly_section(tokens, weights),
                _classes_section(measures),
                _sat_cat_section(tokens, weights)]
    if sentence_set:
        say(f"measuring the heads over the {len(head_analysis.sentences())} bundled sentences …")
        set_measures = head_analysis.measure_heads(kernel=kernel)
        _plot_measures(set_measures, SENTENCE_FIGURES, out_dir)
        say(f"ablating each of the 72 heads over {len(head_analysis.sentences()[::head_analysis.ABLATION_STRIDE])} "
            f"sentences (72 × that many forward passes) …")
        ablation = head_analysis.ablate_heads(kernel=kernel, progress=say)
        model_figures.plot_ablation(ablation, out_dir / SENTENCE_FIGURES["ablation"])
        sections += [_sentence_set_section(set_measures), _ablation_section(ablation),
                     _papers_section(set_measures, ablation)]
    else:
        sections.append(_no_sentence_set_section())
    sections.append(f"Written in {time.perf_counter() - start:.0f} s.")
    return write_text(out_dir / "summary.md", "\n\n".join(filter(None, sections)) + "\n")


def _plot_measures(measures, names, out_dir):
    """The three figures of one ``HeadMeasures`` under the file ``names`` given."""
    model_figures.plot_entropy_confidence(measures, out_dir / names["entropy"])
    model_figures.plot_special_mass(measures, out_dir / names["mass"])
    model_figures.plot_pattern_classes(measures, out_dir / names["classes"])


def _count(number, noun):
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _head(layer, head):
    return f"{layer}.{head}"


def _opening(text, tokens, cut, kernel, sentence_set):
    shown = text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS].rsplit(" ", 1)[0] + " …"
    kept = (f"**The text was cut: {cut}**, so everything below reads its first {len(tokens)} tokens "
            f"(sentence-transformers cuts it the same way).\n\n" if cut else "")
    where = ("Every figure and table comes from this text alone, except in the last three parts (from "
             "\"Over the 30 bundled sentences\" on), which come from the sentences of `kernels/models/sentences.txt`."
             if sentence_set else "Every figure and table comes from this text alone.")
    return (f"# all-MiniLM-L6-v2's attention on \"{excerpt(text)}\"\n\n{_wrapped(shown, '> ')}\n\n{kept}"
            f"Tokens ({len(tokens)}):\n{_wrapped(' '.join(f'`{t}`' for t in tokens) + '.')}\n\n"
            f"Every weight was computed by `python -m kernels heatmap` with the `{kernel}` kernel. {where} "
            f"Layers, heads and tokens are numbered from 0, as `weights[layer, head]` and `head_mask` "
            f"index them; head L.H is layer L, head H. [Interactive viewer]({VIEWER}) of every head's "
            f"weights.\n\n![The 72 attention maps]({TEXT_FIGURES['maps']})")


def _wrapped(text, prefix=""):
    """``text`` on lines of at most LINE_CHARS, each starting with ``prefix``."""
    return "\n".join(prefix + line for line in textwrap.wrap(" ".join(text.split()), LINE_CHARS,
                                                              break_long_words=False, break_on_hyphens=False))


def _focus_table(tokens, weights):
    """Every head's largest weight for every query token, one row per (layer, query)."""
    layers, heads = weights.shape[:2]
    focus = weights.argmax(axis=-1)   # (layers, heads, n)
    columns = ((Column("layer", "layer"), Column("query", "query"), Column("token", "token"))
               + tuple(Column(f"head_{h}", f"head {h}") for h in range(heads)))
    rows = [[layer, i, tokens[i]] + [f"{tokens[focus[layer, h, i]]} {weights[layer, h, i, focus[layer, h, i]]:.2f}"
                                     for h in range(heads)]
            for layer in range(layers) for i in range(len(tokens))]
    return Table(FOCUS, columns, rows)


def _focus_section(tokens, weights):
    table = _focus_table(tokens, weights)
    shown = min(len(tokens), FOCUS_ROWS)
    columns = table.columns[1:]
    parts = []
    for layer in range(weights.shape[0]):
        rows = [row[1:] for row in table.rows if row[0] == layer and row[1] < shown]
        parts.append(f"### Layer {layer}\n\n" + Table(f"{FOCUS}_{layer}", columns, rows).markdown())
    listed = (f"All {len(tokens)} query tokens" if shown == len(tokens) else
              f"The first {shown} of the {len(tokens)} query tokens (all of them in [{FOCUS}.csv]({FOCUS}.csv))")
    return ("## Where each token looks most\n\nFor each query token (row) and head (column), the key "
            f"token it gives its largest weight, with that weight. {listed}.\n\n" + "\n\n".join(parts))


def _entropy_section(tokens, weights):
    entropy = attention_entropy(weights).mean(axis=-1)   # (layers, heads)
    columns = (Column("layer", "layer"),) + tuple(Column(f"h{h}", f"head {h}", "{:.2f}".format)
                                                  for h in range(entropy.shape[1]))
    rows = [[layer] + list(entropy[layer]) for layer in range(entropy.shape[0])]
    low, high = np.unravel_index(entropy.argmin(), entropy.shape), np.unravel_index(entropy.argmax(), entropy.shape)
    return (f"## Entropy per head\n\nMean entropy of the query rows of {len(tokens)} tokens, in nats "
            f"(0: all weight on one key; ln {len(tokens)} = {np.log(len(tokens)):.2f}: spread evenly). "
            f"Most focused: head {_head(*low)} ({entropy[low]:.2f}); broadest: head {_head(*high)} "
            f"({entropy[high]:.2f}).\n\n" + Table("entropy", columns, rows).markdown() +
            f"\n\nWith Voita et al.'s confidence (the mean largest weight):\n\n"
            f"![Entropy and confidence per head, on the text]({TEXT_FIGURES['entropy']})")


def _anomaly_section(tokens, weights):
    analysis = analyse_attention(weights)
    lines = []
    for layer in range(weights.shape[0]):
        flagged = analysis.anomalous[layer].sum(axis=0)   # (n,) heads flagging each key
        keys = sorted(np.flatnonzero(flagged), key=lambda j: (-flagged[j], j))   # most heads first
        named = [f"`{tokens[j]}` (position {j}) in {_count(flagged[j], 'head')}" for j in keys[:ANOMALY_KEYS]]
        if len(keys) > ANOMALY_KEYS:
            named.append(f"and {_count(len(keys) - ANOMALY_KEYS, 'more key')}, each in at most "
                         f"{_count(flagged[keys[ANOMALY_KEYS:]].max(), 'head')}")
        lines.append(f"- layer {layer}: {', '.join(named) or 'none'}")
    return (f"## Anomalous columns\n\nKeys that receive more than {ANOMALY_FACTOR:g}× their even share "
            f"of attention (the column mass if every query spread evenly: 1 per key here), by "
            f"`analyse_attention`'s rule, counted over each layer's 12 heads:\n\n" + "\n".join(lines) +
            f"\n\nThe mean weight each layer puts on [CLS], [SEP] and punctuation in the text:\n\n"
            f"![Mass on [CLS], [SEP] and punctuation per layer, on the text]({TEXT_FIGURES['mass']})")


def _classes_section(measures):
    classes = {name: int((measures.classes == name).sum()) for name in head_analysis.CLASSES}
    return (f"## Pattern of each head\n\nBy Kovaleva et al.'s five classes (thresholds of "
            f"`head_analysis.classify` on each head's mean weights over {measures.source}): "
            + ", ".join(f"{name} {count}" for name, count in classes.items()) + " of 72 heads."
            + (f" On a text this short the ±{head_analysis.BLOCK_WINDOW}-token block covers most keys, so "
               f"broad heads count as blocks." if min(measures.lengths) <= 4 * head_analysis.BLOCK_WINDOW else "")
            + f"\n\n![Pattern class of each head, on the text]({TEXT_FIGURES['classes']})")


def _sat_cat_section(tokens, weights):
    if "sat" not in tokens or "cat" not in tokens:
        return ""
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
    return ('## Does "sat" attend to "cat"?\n\nThe textbook section attnbench started from (README: '
            '"The source text") predicts that in "The cat sat on the mat" the verb\'s query finds its '
            f'subject. {found} The largest weights on "cat" in "sat"\'s row: {best}; the mean over all '
            f"heads is {on_cat.mean():.2f} (an even spread would give {1 / len(tokens):.2f})."
            + (' "cat" stands just before "sat", so a previous-token head gives it this weight whatever '
               "the words are; the verb-finds-its-subject reading needs a head that is not positional."
               if cat == sat - 1 else ""))


def _no_sentence_set_section():
    return ("## Over many sentences\n\nA single text says little about what a head does in general. "
            "`--sentence-set` adds the same measures over the 30 bundled sentences "
            "(`kernels/models/sentences.txt`), removes each head in turn to see how far the sentence "
            "embedding moves (Michel et al. 2019), and holds the heads against Clark et al., Kovaleva "
            "et al. and Voita et al. (2019): about 5 more minutes on 2 cores.")


def _sentence_set_section(measures):
    return (f"## Over the {len(measures.lengths)} bundled sentences\n\nThe figures of this part come from "
            f"the sentences of `kernels/models/sentences.txt`, not from the text above: {measures.source}, "
            f"each sentence's weights computed as the text's were.\n\n"
            f"![Entropy and confidence per head, over the sentences]({SENTENCE_FIGURES['entropy']})\n\n"
            f"![Mass on [CLS], [SEP] and punctuation per layer, over the sentences]({SENTENCE_FIGURES['mass']})")


def _ablation_section(ablation):
    ranked = ablation.ranked()
    top = ", ".join(f"{_head(l, h)} ({d:.3f})" for l, h, d in ranked[:TOP_HEADS])
    subset = ("" if len(ablation.texts) == ablation.of_total else
              f" (every {head_analysis.ABLATION_STRIDE}rd sentence of the {ablation.of_total})")
    small = np.mean(ablation.distance < 0.01)
    return (f"## Heads whose removal moves the embedding most\n\nEach head's output zeroed in turn "
            f"(Michel et al. 2019), over {len(ablation.texts)} sentences{subset}; the change is the mean "
            f"1 − cos between the embedding without the head and the full one ({ablation.seconds:.0f} s, "
            f"`{ablation.kernel}`). Largest: {top}. Smallest: head {_head(*ranked[-1][:2])} "
            f"({ranked[-1][2]:.4f}). {small:.0%} of the heads move it by less than 0.01.\n\n"
            f"![Head ablation]({SENTENCE_FIGURES['ablation']})")


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
    last = measures.cls.shape[0] - 1

    def listed(pairs):
        return ", ".join(f"{name} ({share:.2f})" for name, share in pairs) or "none"

    return f"""## Held against the published findings

Over the {len(measures.lengths)} bundled sentences. MiniLM has 6 layers where BERT-base has 12, so layers
compare by relative depth ((layer + 1) / layers, ours counted from 0): BERT-base's layers 6–10 (as the
papers count, from 1; depth 0.5–0.83) correspond to MiniLM's layers {', '.join(str(l) for l in np.flatnonzero(middle))}.

- **[SEP] vs [CLS] (Clark et al. 2019).** BERT-base sends over half the attention of layers 6–10 to
  [SEP]. MiniLM does not: its layers at that depth put {sep:.2f} on [SEP] but {cls:.2f} on [CLS]
  (and {punct:.2f} on punctuation). The "no-op" sink is there, on the other special token; per layer
  [CLS] gets {', '.join(f'{v:.2f}' for v in measures.by_layer('cls'))} (layers 0–{last}).
- **Broad heads low (Clark et al.).** Mean entropy per layer: {', '.join(f'{v:.2f}' for v in entropy)} nats;
  {'as in BERT-base, the first layer is the broadest' if entropy.argmax() == 0 else f'unlike BERT-base, the broadest layer is layer {entropy.argmax()}, not the first'}.
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
  {_head(*ranked[0][:2])}), and the heads that matter most are in layer(s)
  {', '.join(sorted({str(l) for l, _, _ in ranked[:TOP_HEADS]}))}, nearest the pooled output.

![Pattern class of each head, over the sentences]({SENTENCE_FIGURES['classes']})"""
