"""Figures of attention (what the source text, the textbook section attnbench started
from, suggests drawing in its §11.1.6 and asks of a plot in its exercise 6).  Each
function takes data and a path, writes one PNG (matplotlib on Agg), closes its figure
and returns the path.

    plot_attention_heatmap(weights, tokens, path)   (n, n): tokens on both axes, each
                                                    weight written in its cell for n <= 32
    plot_large_attention(weights or (q, k), path)   n in the thousands, each cell the mean
                                                    of a block of weights; from (q, k) the
                                                    n × n weights never exist
    plot_heads(weights, tokens, path)               (heads, n, n) side by side
    plot_qkv_vectors(q, k, v, tokens, path)         every token's Q, K and V, the largest
                                                    q·k pairs linked
    plot_entropy(entropy, tokens, path)             (heads, n) entropy of each query row

Every figure has a title, labelled axes, a colour bar where colour carries a value, and a
caption under it saying what it was computed from (``kernels.output.save_png`` saves them
all).  Heads are numbered from 0, as the arrays and ``head_mask`` index them; entropy is
in nats, at most ln n over n keys.
"""
import math
from dataclasses import dataclass

import numpy as np

from ..api import validate
from ..layers.analysis import attention_entropy
from ..layers.similarity import ROW_BLOCK_BYTES, weight_blocks
from ..output import pyplot, save_png

ANNOTATE_LIMIT = 32   # tokens per axis beyond which numbers in the cells cannot be read
LABEL_LIMIT = 16      # tokens per axis beyond which tick labels are thinned
WEIGHT_CMAP = "Blues"                                        # the source text's choice
VECTOR_COLOURS = {"Q": "tab:red", "K": "tab:blue", "V": "tab:green"}  # the source text's coding


def plot_attention_heatmap(weights, tokens, path, *, title="Self-attention weights", caption=None,
                           annotate=None):
    """One attention matrix as a heatmap: weights (n, n), ``tokens`` n labels -> path (PNG).

    Keys on x, queries on y: row i is where query i puts its weight (rows sum to 1).
    ``annotate`` writes each weight in its cell to 2 decimals; by default it does for
    n <= ANNOTATE_LIMIT, and asking for it beyond the limit raises ValueError before
    anything is drawn.  Without numbers any n is drawn, its tick labels thinned (for n
    in the thousands ``plot_large_attention`` draws a smaller image).
    """
    weights = np.asarray(weights)
    n = len(tokens)
    if weights.shape != (n, n):
        raise ValueError(f"weights must have shape (n, n) = ({n}, {n}) for {n} tokens, got {weights.shape}")
    if annotate and n > ANNOTATE_LIMIT:
        raise ValueError(f"{n} tokens: {n * n} numbers in the cells would be unreadable (limit "
                         f"{ANNOTATE_LIMIT} per axis); draw without annotate, or use plot_large_attention")
    annotate = n <= ANNOTATE_LIMIT if annotate is None else annotate
    plt = pyplot()
    side = min(14.0, 2.5 + 0.5 * n) if annotate else 8.0
    fig, ax = plt.subplots(figsize=(side + 1.2, side), layout="constrained")
    vmax = positive_max(weights)
    image = ax.imshow(weights, cmap=WEIGHT_CMAP, vmin=0, vmax=vmax)
    _token_ticks(ax, tokens)
    ax.set_xlabel("key position (token)")
    ax.set_ylabel("query position (token)")
    ax.set_title(title)
    if annotate:
        size = 10 if n <= 8 else 8 if n <= 16 else 6
        for (i, j), weight in np.ndenumerate(weights):
            # dark cells get white numbers so that every number stays legible
            ax.text(j, i, f"{weight:.2f}", ha="center", va="center", fontsize=size,
                    color="white" if weight > 0.6 * vmax else "black")
    fig.colorbar(image, ax=ax, shrink=0.8, label="attention weight")
    return save_png(fig, path,
                    caption=caption or f"Softmax weights of {n} queries over {n} keys; each row sums to 1.")


def plot_large_attention(weights, path, *, causal=False, scale=None, max_pixels=512, tick_every=None,
                         log_scale=True, title="Attention weights, block-averaged", caption=""):
    """The attention weights of a long sequence as an image of at most ``max_pixels``
    cells per axis -> path (PNG).

    ``weights`` is either the (n_q, n_k) weights, or a pair (q, k) of one head's queries
    (n_q, d) and keys (n_k, d) whose weights softmax(scale · q kᵀ) (``causal``, ``scale``
    as in ``kernels.attention``) are made a block of query rows at a time
    (``weight_blocks``, about ROW_BLOCK_BYTES each), so that the n_q × n_k matrix never
    exists.  Each cell is the mean weight of a block of b_q × b_k query × key pairs,
    b = ceil(n / max_pixels).  Ticks every ``tick_every`` tokens (default: a power of two
    giving about 8).  ``log_scale`` colours by log weight, so that the small weights far
    from the peaks still show; cells of weight exactly 0 (masked) are grey.
    Memory beyond the inputs: one block of rows and the image.  Time O(n_q·n_k·d).
    """
    image = block_means(weights, causal=causal, scale=scale, max_pixels=max_pixels)
    means, (n_q, n_k), (b_q, b_k) = image.means, image.shape, image.block
    plt = pyplot()
    colors = plt.matplotlib.colors
    fig, ax = plt.subplots(figsize=(8.6, 7.2), layout="constrained")
    vmax = positive_max(means)
    if log_scale:
        positive = means[means > 0]
        # below a millionth of the peak a colour tells nothing more; such cells take the lowest
        vmin = max(positive.min() if positive.size else vmax, vmax * 1e-6)
        norm, shown = colors.LogNorm(vmin=vmin, vmax=vmax, clip=True), np.ma.masked_equal(means, 0)
    else:
        norm, shown = colors.Normalize(vmin=0, vmax=vmax), means
    cmap = plt.get_cmap("magma").with_extremes(bad="0.85")
    drawn = ax.imshow(shown, cmap=cmap, norm=norm, extent=(0, n_k, n_q, 0), interpolation="nearest",
                      aspect="auto")
    step_q = tick_every or _tick_step(n_q)
    step_k = tick_every or _tick_step(n_k)
    ax.set_xticks(np.arange(0, n_k + 1, step_k))
    ax.set_yticks(np.arange(0, n_q + 1, step_q))
    ax.set_xlabel("key position (token index)")
    ax.set_ylabel("query position (token index)")
    ax.set_title(f"{title}\n{n_q} queries × {n_k} keys{', causal' if causal else ''}")
    fig.colorbar(drawn, ax=ax, shrink=0.85,
                 label="mean attention weight of a cell" + (" (log scale)" if log_scale else ""))
    rows, cols = means.shape
    source = ("computed from q and k a block of query rows at a time; the full matrix was never held"
              if isinstance(weights, tuple) else "pooled from the full weight matrix")
    masked = "; grey: weight 0 (keys masked)" if log_scale and (means == 0).any() else ""
    text = (f"Each cell is the mean weight of a block of {b_q}×{b_k} query×key pairs "
            f"({n_q}×{n_k} weights pooled to {rows}×{cols} cells), {source}{masked}. {caption}")
    return save_png(fig, path, caption=text.strip())


@dataclass(frozen=True)
class BlockMeans:
    """Attention weights (n_q, n_k) averaged over blocks of b_q × b_k query × key pairs."""

    means: np.ndarray   # (ceil(n_q / b_q), ceil(n_k / b_k)) float64
    shape: tuple        # (n_q, n_k)
    block: tuple        # (b_q, b_k)


def block_means(weights, *, causal=False, scale=None, max_pixels=512):
    """The image ``plot_large_attention`` draws: the mean weight of each b_q × b_k block,
    b = ceil(n / max_pixels), of ``weights`` (as there: the weights, or (q, k)).  Memory
    beyond the inputs: one block of rows (about ROW_BLOCK_BYTES) and the image."""
    if isinstance(weights, tuple):
        q, k = weights
        problem = validate(q, k, k, causal, scale)
        if problem.batch_shape:
            raise ValueError(f"one head at a time: q {q.shape} and k {k.shape} must be (n, d)")
        n_q, n_k = problem.n_q, problem.n_k
        itemsize = problem.dtype.itemsize

        def row_blocks(block_rows):
            return weight_blocks(q, k, causal=problem.causal, scale=problem.scale, block_rows=block_rows)
    else:
        if causal or scale is not None:
            raise ValueError("causal and scale apply when the weights are made from (q, k); "
                             "these weights are given")
        weights = np.asarray(weights)
        if weights.ndim != 2 or 0 in weights.shape:
            raise ValueError(f"weights must be (n_q, n_k) with n_q, n_k >= 1, got shape {weights.shape}")
        n_q, n_k = weights.shape
        itemsize = weights.itemsize

        def row_blocks(block_rows):
            return ((row0, weights[row0 : row0 + block_rows]) for row0 in range(0, n_q, block_rows))
    b_q, b_k = math.ceil(n_q / max_pixels), math.ceil(n_k / max_pixels)
    # whole bands of b_q rows per block of about ROW_BLOCK_BYTES: no band straddles two blocks
    block_rows = b_q * max(1, ROW_BLOCK_BYTES // (b_q * n_k * itemsize))
    key_starts = np.arange(0, n_k, b_k)
    sums = np.zeros((math.ceil(n_q / b_q), key_starts.size))
    for row0, block in row_blocks(block_rows):
        band_sums = np.add.reduceat(np.add.reduceat(block, key_starts, axis=-1, dtype=np.float64),
                                    np.arange(0, block.shape[0], b_q), axis=0)
        sums[row0 // b_q : row0 // b_q + band_sums.shape[0]] = band_sums
    # the last band and column of blocks may be narrower than b
    counts = np.outer(np.diff(np.append(np.arange(0, n_q, b_q), n_q)), np.diff(np.append(key_starts, n_k)))
    return BlockMeans(sums / counts, (n_q, n_k), (b_q, b_k))


def plot_heads(weights, tokens, path, *, title="Attention weights of each head", caption=None):
    """Every head's weights side by side: weights (heads, n, n), ``tokens`` n labels ->
    path (PNG).  Rows of four panels, one colour scale shared by all; each panel is titled
    with the head's index (from 0, as ``weights[h]``) and the mean entropy of its rows in
    nats, whose maximum, ln n, the title gives."""
    weights = np.asarray(weights)
    heads, n = weights.shape[0], len(tokens)
    if weights.shape != (heads, n, n):
        raise ValueError(f"weights must have shape (heads, n, n) with n = {n} tokens, got {weights.shape}")
    entropy = attention_entropy(weights).mean(axis=-1)
    cols = min(4, heads)
    rows = math.ceil(heads / cols)
    plt = pyplot()
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols + 1.5, 3.1 * rows + 0.8), sharex=True,
                             sharey=True, squeeze=False, layout="constrained")
    vmax = positive_max(weights)
    for h, ax in enumerate(axes.flat):
        if h >= heads:
            ax.set_axis_off()
            continue
        image = ax.imshow(weights[h], cmap=WEIGHT_CMAP, vmin=0, vmax=vmax)
        ax.set_title(f"head {h}: mean entropy {entropy[h]:.2f} nats", fontsize=10)
        _token_ticks(ax, tokens)
    for ax in axes[-1]:
        ax.set_xlabel("key (token)")
    for ax in axes[:, 0]:
        ax.set_ylabel("query (token)")
    fig.suptitle(f"{title}\nheads numbered from 0; entropy of a row in nats, at most "
                 f"ln {n} = {math.log(n):.2f} (an even spread over {n} keys)")
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight (one scale for all heads)")
    return save_png(fig, path, caption=caption or (
        f"{heads} heads over the same {n} tokens; entropy in nats, ln {n} = {math.log(n):.2f} when a "
        "query spreads evenly."))


def plot_qkv_vectors(q, k, v, tokens, path, *, links=3, features=None,
                     title="Query, key and value vectors of each token", caption=None):
    """Each token's query (red), key (blue) and value (green) as bars, side by side, the
    ``links`` largest dot products q_i·k_j drawn as lines from query i to key j:
    q, k (n, d), v (n, d_v), ``tokens`` n labels, ``features`` d labels of the components
    (the same for q, k and v) or None -> path (PNG)."""
    q, k, v = (np.asarray(a) for a in (q, k, v))
    n = len(tokens)
    if q.ndim != 2 or q.shape[0] != n or k.shape != q.shape or v.ndim != 2 or v.shape[0] != n:
        raise ValueError(f"q, k must be (n, d) and v (n, d_v) with n = {n} tokens; "
                         f"got q {q.shape}, k {k.shape}, v {v.shape}")
    if features is not None and not len(features) == q.shape[1] == v.shape[1]:
        raise ValueError(f"{len(features)} feature labels for q, k of width {q.shape[1]} and v of "
                         f"width {v.shape[1]}: labels need all three the same width")
    scores = q @ k.T
    # largest first; equal scores in reading order (query, then key), not in argsort's whim
    top = np.argsort(-scores, axis=None, kind="stable")[:links]
    pairs = [(*np.unravel_index(flat, scores.shape), scores.flat[flat]) for flat in top]
    plt = pyplot()
    fig = plt.figure(figsize=(12.5, 0.9 * n + 2.4), layout="constrained")
    # columns Q | gap for the links | K | V
    grid = fig.add_gridspec(n, 4, width_ratios=[1, 0.7, 1, 1])
    panels = {name: [fig.add_subplot(grid[i, col]) for i in range(n)]
              for name, col in (("Q", 0), ("K", 2), ("V", 3))}
    for name, vectors in (("Q", q), ("K", k), ("V", v)):
        limit = positive_max(np.abs(vectors)) * 1.15
        for i, ax in enumerate(panels[name]):
            ax.bar(np.arange(vectors.shape[1]), vectors[i], color=VECTOR_COLOURS[name], width=0.8)
            ax.axhline(0, color="0.5", linewidth=0.6)
            ax.set_ylim(-limit, limit)
            ax.set_yticks([])  # the column's title gives the scale; the grey line is 0
            ax.tick_params(labelsize=7, length=2)
            if i < n - 1:
                ax.set_xticks([])
            elif features is not None:
                ax.set_xticks(np.arange(len(features)), features, rotation=90)
            else:
                ax.set_xticks(np.arange(0, vectors.shape[1], max(1, vectors.shape[1] // 8)))
            if name == "Q":
                ax.set_ylabel(tokens[i], rotation=0, ha="right", va="center", fontsize=10)
        panels[name][0].set_title(f"{name} ({dict(Q='query', K='key', V='value')[name]}); "
                                  f"longest bar {limit / 1.15:.2g}", color=VECTOR_COLOURS[name], fontsize=10)
        panels[name][-1].set_xlabel("component" if features is None else "feature")
    con = pyplot().matplotlib.patches.ConnectionPatch
    handles = []
    for rank, (i, j, score) in enumerate(pairs):
        colour = ("black", "tab:orange", "tab:purple", "tab:brown", "tab:gray")[rank % 5]
        fig.add_artist(con(xyA=(1, 0.5), coordsA=panels["Q"][i].transAxes, xyB=(0, 0.5),
                           coordsB=panels["K"][j].transAxes, color=colour, linewidth=2,
                           arrowstyle="-|>", mutation_scale=12))
        handles.append(plt.matplotlib.lines.Line2D([], [], color=colour, linewidth=2,
                                                   label=f"{tokens[i]} → {tokens[j]}: q·k = {score:.2f}"))
    fig.legend(handles=handles, loc="outside right upper", fontsize=9,
               title=f"the {len(pairs)} largest q·k\n(query's Q → key's K)", title_fontsize=9)
    fig.suptitle(title)
    return save_png(fig, path, caption=caption or (
        f"Bar heights are the components of each vector, one scale per column; {n} tokens, "
        f"d = {q.shape[1]}, d_v = {v.shape[1]}."))


def plot_entropy(entropy, tokens, path, *, title="Entropy of each query's attention", caption=None):
    """Entropy of each query row, one line per head (numbered from 0): entropy (n,) or
    (heads, n) in nats, ``tokens`` n labels or None (positions) -> path (PNG).  The maximum, ln n for a query
    that spreads evenly over n keys (self-attention, not causal), is drawn dashed; 0 is a
    query that puts all its weight on one key."""
    entropy = np.atleast_2d(np.asarray(entropy))
    heads, n = entropy.shape
    if tokens is not None and len(tokens) != n:
        raise ValueError(f"{len(tokens)} tokens for entropy of {n} query rows")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 4.8), layout="constrained")
    positions = np.arange(n)
    for h in range(heads):
        ax.plot(positions, entropy[h], marker="o", markersize=4, linewidth=1.3,
                label=f"head {h}" if heads > 1 else "entropy")
    ceiling = math.log(n)
    ax.axhline(ceiling, color="black", linestyle="--", linewidth=1,
               label=f"maximum ln {n} = {ceiling:.2f} (even spread)")
    ax.set_ylim(0, ceiling * 1.12)
    if tokens is not None and n <= ANNOTATE_LIMIT:
        ax.set_xticks(positions, [f"{i} {t}" for i, t in enumerate(tokens)], rotation=45, ha="right")
    ax.set_xlabel("query position (token)")
    ax.set_ylabel(f"entropy of the query's weights (nats; max ln {n} = {ceiling:.2f})")
    fig.suptitle(title)
    ax.set_title(f"in nats, from 0 (all weight on one key) to ln {n} = {ceiling:.2f} (even over {n} keys)",
                 fontsize=9)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=9, title_fontsize=9,
              title="heads (from 0)" if heads > 1 else None)
    return save_png(fig, path, caption=caption or (
        f"Entropy H = -Σ p ln p of each of {n} query rows; low entropy is focus."))


def _token_ticks(ax, tokens):
    """Tokens as "position token" on both axes, every one up to LABEL_LIMIT, thinned beyond."""
    n = len(tokens)
    step = 1 if n <= LABEL_LIMIT else math.ceil(n / LABEL_LIMIT)
    positions = np.arange(0, n, step)
    labels = [f"{i} {tokens[i]}" for i in positions]
    ax.set_xticks(positions, labels, rotation=45, ha="right", rotation_mode="anchor")
    ax.set_yticks(positions, labels)


def _tick_step(n):
    """A power of two that puts about eight ticks on an axis of n tokens."""
    return 2 ** max(0, math.ceil(math.log2(n / 8)))


def positive_max(values):
    """The largest value, or 1 when none is positive (a colour scale needs a top)."""
    top = float(np.nanmax(values)) if np.size(values) else 0.0
    return top if top > 0 else 1.0
