"""The model section (``ModelLayer``, ``ModelForward``): in a real transformer,
all-MiniLM-L6-v2, where attention's n² overtakes the projections' and feed-forward's n.

Per layer the four projections cost 8·n·d² flops and the feed-forward 16·n·d², attention
4·n²·d (d = 384): at equal throughput attention's share crosses one half at n = 6·d.
"""
import math

from .. import bench_spec as spec
from ..output import Column, Table, fmt_percent, fmt_seconds, missing, pyplot, save_png
from . import plots
from .document import Plot, Section

ESTIMATE = 6 * spec.MODEL_WIDTH  # n where 4·n²·d = 24·n·d²


def crossover(seq_lens, shares):
    """The n at which ``shares`` (ascending n) first reach one half, interpolated linearly in
    log n between the two measured points around it; NaN when no pair of points brackets it."""
    points = [(n, s) for n, s in zip(seq_lens, shares) if not missing(s)]
    for (n0, s0), (n1, s1) in zip(points, points[1:]):
        if s0 < 0.5 <= s1:
            return math.exp(math.log(n0) + (0.5 - s0) / (s1 - s0) * (math.log(n1) - math.log(n0)))
    return math.nan


def model(run):
    benchmark = spec.MODEL_ATTENTION_SHARE
    seq_lens = run.seq_lens(benchmark)
    rows = []
    for kernel in run.kernels(benchmark):
        shares = run.series(benchmark, kernel=kernel)[1]
        rows.append([kernel] + shares + [crossover(seq_lens, shares)])
    shares = Table("model_attention_share", (Column("kernel", "kernel"),) + tuple(
        Column(f"share_at_{n}", f"n = {n:,}", fmt_percent) for n in seq_lens) + (
        Column("crossover_seq_len", "share reaches 50% at n ≈", lambda n: f"{n:,.0f}"),), rows)
    forward_seq_lens = run.seq_lens(spec.MODEL_FORWARD_TIME)
    forward = Table("model_forward", (Column("kernel", "kernel"),) + tuple(
        Column(f"seconds_at_{n}", f"n = {n:,}", fmt_seconds) for n in forward_seq_lens), [
        [kernel] + run.series(spec.MODEL_FORWARD_TIME, kernel=kernel)[1]
        for kernel in run.kernels(spec.MODEL_FORWARD_TIME)])

    def draw(path):
        plot_shares(run, path)

    return Section("A real transformer: where attention starts to dominate", [
        "all-MiniLM-L6-v2 (6 layers, 12 heads, d = 384; `make model`). One layer's attention "
        "core, softmax(Q Kᵀ/√32) V over its 12 heads by each kernel, is timed beside the layer's "
        "four projections and its feed-forward (float32, calls in turn, medians), on random "
        "hidden states, which need no position table, so n may pass the model's 512 positions. "
        f"They cost 4·n²·d against 24·n·d² flops, so at equal throughput attention's share "
        f"crosses one half at n = 6·d = {ESTIMATE:,}: a slower attention kernel gets there "
        "sooner, a faster one later.",
        shares,
        Plot("model_attention_share.png", "Attention's share of a MiniLM layer against n", draw),
        "The whole forward pass of n random token ids (embeddings and 6 layers), up to the "
        "model's 512 positions:",
        forward,
    ])


def plot_shares(run, path):
    """model_attention_share.png: attention's share of a layer against n, one line per kernel,
    with one half and the 6·d estimate marked."""
    fig, ax = pyplot().subplots(figsize=(8, 5.5))
    fig.suptitle("Attention's share of one all-MiniLM-L6-v2 layer (d = 384, 12 heads, float32)", fontsize=10)
    styles = plots.kernel_styles(run)
    drawn = []
    for kernel in run.kernels(spec.MODEL_ATTENTION_SHARE):
        seq_lens, shares = run.series(spec.MODEL_ATTENTION_SHARE, kernel=kernel)
        if all(missing(s) for s in shares):
            continue
        ax.plot(seq_lens, shares, label=plots.kernel_label(kernel), **styles[kernel])
        plots.band(ax, seq_lens, shares, lambda n, s: s, styles[kernel]["color"])
        drawn += [n for n, s in zip(seq_lens, shares) if not missing(s)]
    if not drawn:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no data in these results", transform=ax.transAxes, ha="center")
    else:
        ax.axhline(0.5, color="black", linewidth=1, label="one half")
        ax.axvline(ESTIMATE, color="grey", linestyle=":", label=f"6·d = {ESTIMATE:,} (equal throughput)")
        plots.seq_len_axis(ax, min(drawn + [ESTIMATE]), max(drawn + [ESTIMATE]))
        ax.set_ylim(0, 1)
        ax.set_ylabel("attention core ÷ (attention + projections + feed-forward) time")
        ax.yaxis.set_major_formatter(pyplot().matplotlib.ticker.PercentFormatter(1.0))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    save_png(fig, path, caption=plots.machine_caption(run))
