"""Figures of a trained model's heads (all-MiniLM-L6-v2, ``kernels.models.head_analysis``).
Each function takes data and a path, writes one PNG through ``figures.save_figure`` and
returns the path.

    plot_head_maps(weights, tokens, path)       (layers, heads, n, n): every head's map,
                                                tokens on the edge panels only
    plot_entropy_confidence(measures, path)     two layers × heads grids: entropy, confidence
    plot_special_mass(measures, path)           per layer, the mass on [CLS], [SEP], punctuation
    plot_pattern_classes(measures, path)        layers × heads grid of Kovaleva et al.'s classes
    plot_ablation(ablation, path)               layers × heads grid of 1 − cos when a head goes
"""
import numpy as np

from ..models import head_analysis
from ..report.plots import pyplot
from .figures import WEIGHT_CMAP, positive_max, save_figure

CLASS_COLOURS = {"vertical": "tab:blue", "diagonal": "tab:orange", "vertical + diagonal": "tab:purple",
                 "block": "tab:green", "heterogeneous": "0.8"}
MASS_COLOURS = {"[CLS]": "tab:red", "[SEP]": "tab:blue", "punctuation": "tab:orange"}


def plot_head_maps(weights, tokens, path, *, title="Attention maps of every head", caption=""):
    """weights (layers, heads, n, n), ``tokens`` n labels -> path (PNG): one panel per head,
    layers as rows, one colour scale; key tokens under the bottom row, query tokens left
    of the first column."""
    weights = np.asarray(weights)
    layers, heads, n = weights.shape[0], weights.shape[1], len(tokens)
    if weights.shape != (layers, heads, n, n):
        raise ValueError(f"weights must be (layers, heads, n, n) with n = {n} tokens, got {weights.shape}")
    plt = pyplot()
    fig, axes = plt.subplots(layers, heads, figsize=(1.45 * heads + 2.5, 1.5 * layers + 1.6),
                             sharex=True, sharey=True, squeeze=False, layout="constrained")
    vmax = positive_max(weights)
    for (layer, head), ax in np.ndenumerate(axes):
        image = ax.imshow(weights[layer, head], cmap=WEIGHT_CMAP, vmin=0, vmax=vmax)
        ax.set_title(f"{layer + 1}.{head + 1}", fontsize=8, pad=2)
        ax.set_xticks(np.arange(n), tokens, rotation=90, fontsize=7)
        ax.set_yticks(np.arange(n), tokens, fontsize=7)
        ax.tick_params(length=1.5, pad=1)
    for head in range(heads):
        axes[-1, head].set_xlabel("key", fontsize=8)
    for layer in range(layers):
        axes[layer, 0].set_ylabel(f"layer {layer + 1}\nquery", fontsize=8)
    fig.suptitle(title)
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight (one scale for all heads)")
    return save_figure(fig, path, (f"Panel L.H is layer L, head H (from 1); rows are queries, columns "
                                   f"keys, each row sums to 1; {n} tokens. {caption}").strip())


def plot_entropy_confidence(measures, path, *, caption=""):
    """Two layers × heads grids from ``HeadMeasures``: mean row entropy (nats) and Voita
    et al.'s confidence (mean largest weight), each value written in its cell -> path."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(16, 4.6), layout="constrained")
    _grid(fig, left, measures.entropy, "viridis", "mean entropy of a query's weights (nats)", "{:.2f}")
    left.set_title("Entropy per head: high = broad, low = focused")
    _grid(fig, right, measures.confidence, "magma", "confidence: mean largest weight", "{:.2f}", vmin=0, vmax=1)
    right.set_title("Confidence per head (Voita et al. 2019)")
    positional = np.argwhere(measures.is_positional)
    for layer, head in positional:
        right.add_patch(pyplot().matplotlib.patches.Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False,
                                                              edgecolor="tab:cyan", linewidth=2.5))
    named = ", ".join(f"{l + 1}.{h + 1}" for l, h in positional) or "none"
    return save_figure(fig, path, (
        f"Means over {measures.tokens} query tokens of {len(measures.texts)} sentences. Cyan boxes: positional "
        f"heads by Voita et al.'s rule (largest weight at offset ±1 for >= "
        f"{head_analysis.POSITIONAL_SHARE:.0%} of tokens): {named}. {caption}").strip())


def plot_special_mass(measures, path, *, caption=""):
    """Stacked bars, one per layer: the mean weight a query puts on [CLS], on [SEP] and on
    punctuation (Clark et al.), from ``HeadMeasures`` -> path (PNG)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 4.8), layout="constrained")
    layers = np.arange(1, measures.cls.shape[0] + 1)
    bottom = np.zeros(len(layers))
    for label, name in (("[CLS]", "cls"), ("[SEP]", "sep"), ("punctuation", "punctuation")):
        share = measures.by_layer(name)
        ax.bar(layers, share, bottom=bottom, color=MASS_COLOURS[label], label=label, width=0.7)
        for x, y, s in zip(layers, bottom, share):
            if s >= 0.04:  # thinner segments have no room for a number
                ax.text(x, y + s / 2, f"{s:.2f}", ha="center", va="center", fontsize=8, color="white")
        bottom += share
    ax.set_ylim(0, 1)
    ax.set_xticks(layers, [f"{l}\n(depth {l / len(layers):.2f})" for l in layers])
    ax.set_xlabel("layer (relative depth)")
    ax.set_ylabel("mean attention weight per query")
    ax.set_title("Where each layer's attention goes: [CLS], [SEP], punctuation")
    ax.legend(loc="upper right")
    return save_figure(fig, path, (
        f"Mean over the 12 heads of a layer and over {measures.tokens} query tokens of "
        f"{len(measures.texts)} sentences; the rest of the bar (white) goes to the other tokens. "
        f"Clark et al. 2019 found over half of BERT-base's attention on [SEP] in layers 6-10 of 12 "
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
    ax.set_title("Attention pattern of each head (classes of Kovaleva et al. 2019)")
    h = head_analysis
    return save_figure(fig, path, (
        f"Classified by thresholds on each head's mean weights over {measures.tokens} query tokens of "
        f"{len(measures.texts)} sentences (Kovaleva et al. used a CNN on the images): vertical + diagonal "
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
    return save_figure(fig, path, (
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
    ax.set_xticks(np.arange(heads), np.arange(1, heads + 1))
    ax.set_yticks(np.arange(layers), np.arange(1, layers + 1))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
