"""Figures of a trained model's heads (all-MiniLM-L6-v2, ``kernels.models.head_analysis``).
Each function takes data and a path, writes one PNG through ``kernels.output.save_png`` and
returns the path.

    plot_head_maps(weights, tokens, path)       (layers, heads, n, n): every head's map,
                                                tokens on the edge panels only, as many
                                                as can be read at any n
    plot_entropy_confidence(measures, path)     two layers × heads grids: entropy, confidence
    plot_special_mass(measures, path)           per layer, the mass on [CLS], [SEP], punctuation
    plot_pattern_classes(measures, path)        layers × heads grid of Kovaleva et al.'s classes
    plot_ablation(ablation, path)               layers × heads grid of 1 − cos when a head goes

Layers and heads are numbered from 0, as ``weights[layer, head]`` and ``head_mask`` index
them; panel L.H is layer L, head H.  Each figure says what its numbers are over
(``HeadMeasures.source``): one text, or the sentence set.
"""
import math

import numpy as np

from ..models import head_analysis
from ..output import pyplot, save_png
from .figures import WEIGHT_CMAP, positive_max

CLASS_COLOURS = {"vertical": "tab:blue", "diagonal": "tab:orange", "vertical + diagonal": "tab:purple",
                 "block": "tab:green", "heterogeneous": "0.8"}
MASS_COLOURS = {"[CLS]": "tab:red", "[SEP]": "tab:blue", "punctuation": "tab:orange"}
MAP_PANEL = 1.45        # inches a side of one head's map, whatever n: 72 panels on a page
TICK_FONT = 7           # points
LABEL_CHARS = 12        # a longer token is cut to this many characters (with …) on the axes
SQRT_SCALE_ABOVE = 32   # tokens beyond which the maps are coloured by the weight's square root


def plot_head_maps(weights, tokens, path, *, title="Attention maps of every head", caption=""):
    """weights (layers, heads, n, n), ``tokens`` n labels -> path (PNG): one panel per head,
    layers as rows, one colour scale; key tokens under the bottom row, query tokens left
    of the first column.  The figure's size does not grow with n: beyond the tokens a
    panel's side can label (about ten), every k-th is labelled ("position token")."""
    weights = np.asarray(weights)
    layers, heads, n = weights.shape[0], weights.shape[1], len(tokens)
    if weights.shape != (layers, heads, n, n):
        raise ValueError(f"weights must be (layers, heads, n, n) with n = {n} tokens, got {weights.shape}")
    plt = pyplot()
    # laid out by hand, in inches: constrained layout over 72 labelled axes takes most of a minute
    left, right, top, bottom, gap_x, gap_y = 1.7, 1.1, 0.6, 1.3, 0.1, 0.28
    width, height = left + heads * (MAP_PANEL + gap_x) - gap_x + right, top + layers * (MAP_PANEL + gap_y) - gap_y + bottom
    fig = plt.figure(figsize=(width, height))
    # past a few dozen tokens most weights are small beside a few sinks ([CLS], [SEP]): a
    # linear scale leaves them white, the square root shows where the rest goes (as the viewer)
    sqrt = n > SQRT_SCALE_ABOVE
    colors = plt.matplotlib.colors
    norm = (colors.PowerNorm(0.5, vmin=0, vmax=positive_max(weights)) if sqrt else
            colors.Normalize(vmin=0, vmax=positive_max(weights)))
    # a label needs about 1.4 times its font's height along the axis
    step = math.ceil(n / max(1, int(MAP_PANEL * 72 / (1.4 * TICK_FONT))))
    positions = np.arange(0, n, step)
    labels = [_short(tokens[i]) if step == 1 else f"{i} {_short(tokens[i])}" for i in positions]
    for layer in range(layers):
        for head in range(heads):
            x0, y0 = left + head * (MAP_PANEL + gap_x), height - top - (layer + 1) * MAP_PANEL - layer * gap_y
            ax = fig.add_axes((x0 / width, y0 / height, MAP_PANEL / width, MAP_PANEL / height))
            image = ax.imshow(weights[layer, head], cmap=WEIGHT_CMAP, norm=norm, aspect="auto")
            ax.set_title(f"{layer}.{head}", fontsize=8, pad=2)
            ax.set_xticks(positions, labels if layer == layers - 1 else [], rotation=90, fontsize=TICK_FONT)
            ax.set_yticks(positions, labels if head == 0 else [], fontsize=TICK_FONT)
            ax.tick_params(length=1.5, pad=1)
            if layer == layers - 1:
                ax.set_xlabel("key", fontsize=8)
            if head == 0:
                ax.set_ylabel(f"layer {layer}\nquery", fontsize=8)
    fig.suptitle(title, y=1 - 0.2 / height, va="top")
    bar = fig.add_axes(((width - right + 0.25) / width, 0.25, 0.15 / width, 0.5))
    fig.colorbar(image, cax=bar, label="attention weight (one scale for all heads" + (", square root)" if sqrt else ")"))
    thinned = "" if step == 1 else f" One token in {step} is labelled (position, token)."
    return save_png(fig, path, caption=(f"Panel L.H is layer L, head H (from 0, as weights[layer, head]); rows are "
                                   f"queries, columns keys, each row sums to 1; {n} tokens.{thinned} "
                                   f"{caption}").strip())


def _short(token):
    return token if len(token) <= LABEL_CHARS else token[:LABEL_CHARS - 1] + "…"


def plot_entropy_confidence(measures, path, *, caption=""):
    """Two layers × heads grids from ``HeadMeasures``: mean row entropy (nats) and Voita
    et al.'s confidence (mean largest weight), each value written in its cell -> path."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(16, 4.6), layout="constrained")
    low, high = measures.entropy_ceiling
    ceiling = f"ln {min(measures.lengths)} = {low:.2f}" if low == high else f"ln n = {low:.2f}–{high:.2f}"
    _grid(fig, left, measures.entropy, "viridis", "mean entropy of a query's weights (nats)", "{:.2f}")
    left.set_title(f"Entropy per head, nats: 0 = one key, {ceiling} = all keys evenly")
    _grid(fig, right, measures.confidence, "magma", "confidence: mean largest weight", "{:.2f}", vmin=0, vmax=1)
    right.set_title("Confidence per head (Voita et al. 2019)")
    positional = np.argwhere(measures.is_positional)
    for layer, head in positional:
        right.add_patch(pyplot().matplotlib.patches.Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False,
                                                              edgecolor="tab:cyan", linewidth=2.5))
    named = ", ".join(f"{l}.{h}" for l, h in positional) or "none"
    fig.suptitle(f"Over {measures.source}")
    return save_png(fig, path, caption=(
        f"Means over {measures.source}. Cyan boxes: positional "
        f"heads by Voita et al.'s rule (largest weight at offset ±1 for >= "
        f"{head_analysis.POSITIONAL_SHARE:.0%} of tokens): {named}. {caption}").strip())


def plot_special_mass(measures, path, *, caption=""):
    """Stacked bars, one per layer: the mean weight a query puts on [CLS], on [SEP] and on
    punctuation (Clark et al.), from ``HeadMeasures`` -> path (PNG)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 4.8), layout="constrained")
    layers = np.arange(measures.cls.shape[0])
    bottom = np.zeros(len(layers))
    for label, name in (("[CLS]", "cls"), ("[SEP]", "sep"), ("punctuation", "punctuation")):
        share = measures.by_layer(name)
        ax.bar(layers, share, bottom=bottom, color=MASS_COLOURS[label], label=label, width=0.7)
        for x, y, s in zip(layers, bottom, share):
            if s >= 0.04:  # thinner segments have no room for a number
                ax.text(x, y + s / 2, f"{s:.2f}", ha="center", va="center", fontsize=8, color="white")
        bottom += share
    ax.set_ylim(0, 1)
    ax.set_xticks(layers, [f"{l}\n(depth {(l + 1) / len(layers):.2f})" for l in layers])
    ax.set_xlabel("layer (relative depth)")
    ax.set_ylabel("mean attention weight per query")
    ax.set_title(f"Where each layer's attention goes: [CLS], [SEP], punctuation\n(over {measures.source})")
    ax.legend(loc="upper right")
    return save_png(fig, path, caption=(
        f"Mean over the 12 heads of a layer and over {measures.source}; the rest of the bar (white) "
        f"goes to the other tokens. Layers from 0; depth is (layer + 1) / layers. Clark et al. 2019 "
        f"found over half of BERT-base's attention on [SEP] in its layers 6-10 of 12, counted from 1 "
        f"(relative depth 0.5-0.83). {caption}").strip())


def plot_pattern_classes(measures, path, *, caption=""):
    """Each head's pattern class (Kovaleva et al. 2019, by ``head_analysis.classify``'s
    thresholds) as a coloured layers × heads grid with a legend -> path (PNG)."""
    plt = pyplot()
    names = list(CLASS_COLOURS)
    codes = np.vectorize(names.index)(measures.classes)
    cmap = plt.matplotlib.colors.ListedColormap(list(CLASS_COLOURS.values()))
    fig, ax = plt.subplots(figsize=(10.5, 4.6), layout="constrained")
    ax.imshow(codes, cmap=cmap, vmin=-0.5, vmax=len(names) - 0.5)
    _grid_axes(ax, codes.shape)
    counts = {name: int((measures.classes == name).sum()) for name in names}
    handles = [plt.matplotlib.patches.Patch(color=CLASS_COLOURS[name], label=f"{name} ({counts[name]})")
               for name in names]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), title="class (heads)")
    ax.set_title(f"Attention pattern of each head (classes of Kovaleva et al. 2019)\nover {measures.source}")
    h = head_analysis
    return save_png(fig, path, caption=(
        f"Classified by thresholds on each head's mean weights over {measures.source} (Kovaleva et al. "
        f"used a CNN on the images): vertical + diagonal "
        f"if >= {h.MIXED_SHARE} on [CLS]+[SEP] and >= {h.MIXED_SHARE} on content tokens at i-1, i, i+1; "
        f"else vertical / diagonal if >= {h.MAJORITY_SHARE} on one of them; else block if >= "
        f"{h.MAJORITY_SHARE} on content tokens within ±{h.BLOCK_WINDOW}; else heterogeneous. "
        f"{caption}").strip())


def plot_ablation(ablation, path, *, caption=""):
    """Michel et al.'s single-head ablation from ``HeadAblation``: 1 − cos between the
    embeddings without and with each head, as a layers × heads grid -> path (PNG)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10.5, 4.8), layout="constrained")
    _grid(fig, ax, ablation.distance, "Reds", "mean 1 − cos(without head, full)", "{:.3f}", vmin=0)
    ranked = ablation.ranked()
    (l1, h1, d1), (l0, h0, d0) = ranked[0], ranked[-1]
    ax.set_title(f"How far removing one head moves the sentence embedding (Michel et al. 2019)\n"
                 f"most: head {l1}.{h1} ({d1:.3f}); least: head {l0}.{h0} ({d0:.4f})")
    subset = "" if len(ablation.texts) == ablation.of_total else f" (an evenly spaced subset of {ablation.of_total}, to keep within the time budget)"
    return save_png(fig, path, caption=(
        f"Each cell: the mean over {len(ablation.texts)} sentences{subset} of 1 − cosine between the "
        f"all-MiniLM-L6-v2 embedding with that head's output zeroed and the full embedding; "
        f"{ablation.kernel} kernel, {ablation.seconds:.0f} s. {caption}").strip())


def _grid(fig, ax, values, cmap, label, fmt, vmin=None, vmax=None):
    """values (layers, heads) as a heatmap with each value in its cell and a colour bar."""
    image = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax)
    low, high = image.get_clim()
    for (layer, head), value in np.ndenumerate(values):
        # the colour maps run dark to light (Reds light to dark): pick the legible text colour
        dark = (value - low) / ((high - low) or 1) > 0.6
        ax.text(head, layer, fmt.format(value), ha="center", va="center", fontsize=7,
                color=("white" if dark else "black") if cmap == "Reds" else ("black" if dark else "white"))
    _grid_axes(ax, values.shape)
    fig.colorbar(image, ax=ax, shrink=0.9, label=label)


def _grid_axes(ax, shape):
    layers, heads = shape
    ax.set_xticks(np.arange(heads), np.arange(heads))
    ax.set_yticks(np.arange(layers), np.arange(layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
