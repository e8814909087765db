"""What every plot of the report shares: one style per kernel, log axes of n and of bytes,
one panel per dtype, and the caption naming the machine and the run (``machine_caption``).

matplotlib comes from ``kernels.output.pyplot()`` on first draw, so that ``import
kernels.report`` stays light; every plot is saved by ``kernels.output.save_png``.
"""
import math

from .. import bench_spec
from ..memory import format_bytes
from ..output import has_spread, missing, pyplot, save_png
from ..registry import KERNELS
from .results import is_external, kernel_order


def ram_text(run):
    return "unknown" if missing(run.ram_bytes) else format_bytes(run.ram_bytes)


def machine_caption(run):
    """What every plot of the report was measured on: the machine and the run."""
    machine = run.machine
    return (f"{machine.get('machine', '?')}: {machine.get('cpu', '?')}, {machine.get('num_cpu', '?')} CPUs, "
            f"{ram_text(run)} RAM; commit {run.commit_hash[:8]}, {run.date:%Y-%m-%d}")


def kernel_styles(run):
    """name -> line style, the same in every plot; external peers dashed."""
    names = kernel_order(list(KERNELS) + [v for b in bench_spec.BENCHMARKS
                                          for v in run.param_values(b, "kernel")])
    return {name: dict(color=f"C{i % 10}", linestyle="--" if is_external(name) else "-",
                       marker="o", markersize=4)
            for i, name in enumerate(names)}


def kernel_label(kernel):
    return f"{kernel} (external)" if is_external(kernel) else kernel


def seq_len_axis(ax, low, high):
    """Log base-2 x axis from low to high with power-of-two ticks labelled 256, 1k, 64k."""
    ax.set_xscale("log", base=2)
    powers = [2 ** p for p in range(int(math.floor(math.log2(low))), int(math.ceil(math.log2(high))) + 1)]
    ticks = powers[::math.ceil(len(powers) / 10)]  # at most ten labels
    ax.set_xticks(ticks, [f"{n // 1024}k" if n >= 1024 else str(n) for n in ticks])
    ax.set_xlabel("sequence length n (tokens; log scale, k = 1024)")


def bytes_axis(ax):
    """Log y axis in bytes, ticks every factor 32 labelled 1 KiB, 32 KiB, 1 MiB, ..."""
    ticker = pyplot().matplotlib.ticker
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_locator(ticker.LogLocator(base=32))
    ax.yaxis.set_minor_locator(ticker.LogLocator(base=2))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(
        lambda value, _: format_bytes(value).replace(".0 ", " ")))


def draw_kernels(ax, run, benchmark, dtype, styles, label, to_y, kernels=lambda kernel: True):
    """One line per kernel (of those ``kernels(name)`` keeps) with data in this dtype (NaN
    leaves a gap); the n drawn."""
    drawn = []
    for kernel in filter(kernels, run.kernels(benchmark)):
        seq_lens, values = run.series(benchmark, kernel=kernel, dtype=dtype)
        # every axis here is logarithmic: a zero is a gap, like a missing value
        y = [math.nan if missing(v) or v <= 0 else to_y(n, v) for n, v in zip(seq_lens, values)]
        if all(missing(v) for v in y):
            continue
        ax.plot(seq_lens, y, label=label(kernel, dtype), **styles[kernel])
        band(ax, seq_lens, values, lambda n, v: to_y(n, v) if v > 0 else math.nan, styles[kernel]["color"])
        drawn += [n for n, v in zip(seq_lens, y) if not missing(v)]
    return drawn


def band(ax, xs, values, to_y, color):
    """The quartiles of the ``values`` that have them (``spread.Measured``), mapped by
    ``to_y(x, quartile)``, as a translucent band around their line."""
    spans = [(x, sorted((to_y(x, v.low), to_y(x, v.high)))) for x, v in zip(xs, values) if has_spread(v)]
    if spans:
        xs, ends = zip(*spans)
        ax.fill_between(xs, [low for low, _ in ends], [high for _, high in ends], color=color, alpha=0.2,
                        linewidth=0)


def plot_against_seq_len(run, path, benchmark, title, ylabel, label,
                         to_y=lambda seq_len, value: value, decorate=None, kernels=lambda kernel: True):
    """One log-log panel per dtype of ``benchmark``'s values against n, a line per kernel
    (of those ``kernels(name)`` keeps).

    ``label(kernel, dtype)`` names a line; ``to_y(n, value)`` maps a value to the plotted y;
    ``decorate(ax, dtype, drawn)`` adds guides, may set a y axis of its own (else it is
    log base 10) and returns any more n to show on the x axis.  A panel without
    data says so.
    """
    fig, axes = pyplot().subplots(1, len(bench_spec.DTYPES), figsize=(13, 5.5), squeeze=False)
    fig.suptitle(title, fontsize=11)
    styles = kernel_styles(run)
    for dtype, ax in zip(bench_spec.DTYPES, axes[0]):
        ax.set_title(dtype)
        drawn = draw_kernels(ax, run, benchmark, dtype, styles, label, to_y, kernels)
        if not drawn:
            ax.set_axis_off()
            ax.text(0.5, 0.5, "no data in these results", transform=ax.transAxes, ha="center")
            continue
        if decorate:
            drawn += decorate(ax, dtype, drawn)
        seq_len_axis(ax, min(drawn), max(drawn))
        if ax.get_yscale() == "linear":
            ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    save_png(fig, path, caption=machine_caption(run))
