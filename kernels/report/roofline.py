"""The machine's ceilings and the roofline: every kernel's attained GFLOP/s against its
arithmetic intensity, under the measured compute roof (the FMA peak) and memory roof (the
streaming-read bandwidth).

Intensity is flops per byte that must move between memory and the cores: Q, K, V read and
O written once (4·heads·n·d values) for a prefill call of 4·heads·n²·d flops (half when
causal), so n/4 flops per byte in float32; a cached decode step reads the cached K and V
(2·heads·n·d values) for 4·heads·n·d flops, ½ flop per byte at any n.  Prefill sits under
the compute roof, decode under the bandwidth roof: the argument of §11.2, that a decoder
is made faster by fewer bytes per cached token, not by faster arithmetic.
"""
import math
from dataclasses import dataclass

from .. import bench_spec as spec
from ..costs import attention_flops, gflops
from ..output import Column, Table, fmt_gflops, fmt_percent, missing, pyplot, ratio, save_png, text
from . import plots
from .ceilings import fma_peak
from .document import Plot, Section
from .multi_head import headline_seq_len, multihead_gflops
from .results import is_external

DTYPE = "float32"  # the roofline's precision: the dtype of every shape below


@dataclass(frozen=True)
class Point:
    """One kernel on one shape: its intensity (flop/B) and attained GFLOP/s (NaN: not measured)."""

    kernel: str
    shape: str
    intensity: float
    gflops: float


def _prefill_intensity(seq_len, causal):
    flops = attention_flops(seq_len, seq_len, spec.HEAD_DIM, batch=spec.HEADS, causal=causal)
    moved = 4 * spec.HEADS * seq_len * spec.HEAD_DIM * spec.ITEMSIZE[DTYPE]
    return flops / moved


def points(run):
    """Every kernel's point on each shape the roofline shows."""
    n = headline_seq_len(run)
    decode_n = spec.DECODE_PEER_SEQ_LEN if spec.DECODE_PEER_SEQ_LEN in run.seq_lens(spec.DECODE_CACHED) \
        else max(run.seq_lens(spec.DECODE_CACHED), default=math.nan)
    itemsize = spec.ITEMSIZE[DTYPE]
    shapes = []
    for causal in (False, True):
        shapes.append((f"prefill {'causal' if causal else 'full'}, n = {text(n, lambda v: f'{v:,}')}",
                       math.nan if missing(n) else _prefill_intensity(n, causal),
                       lambda kernel, causal=causal: multihead_gflops(run, kernel, DTYPE, causal)))
    decode_flops = math.nan if missing(decode_n) else attention_flops(1, decode_n, spec.HEAD_DIM, batch=spec.HEADS)
    decode_bytes = math.nan if missing(decode_n) else 2 * spec.HEADS * decode_n * spec.HEAD_DIM * itemsize
    shapes.append((f"decode, n = {text(decode_n, lambda v: f'{v:,}')}", decode_flops / decode_bytes,
                   lambda kernel: ratio(decode_flops / 1e9, run.value(spec.DECODE_CACHED, kernel=kernel,
                                                                      seq_len=decode_n))))
    tiny = spec.TINY_SEQ_LEN
    shapes.append((f"tiny call, n = {tiny}, one head",
                   attention_flops(tiny, tiny, spec.HEAD_DIM) / (4 * tiny * spec.HEAD_DIM * itemsize),
                   lambda kernel: gflops(run.value(spec.TINY_CALL, kernel=kernel), tiny, tiny, spec.HEAD_DIM)))
    kernels = run.kernels(spec.MULTI_HEAD_TIME, spec.DECODE_CACHED, spec.TINY_CALL)
    return [Point(kernel, shape, intensity, attained(kernel))
            for shape, intensity, attained in shapes for kernel in kernels]


def roof(run, intensity):
    """The attainable GFLOP/s at ``intensity``: the lower of the FMA peak and bandwidth × intensity."""
    peak, bandwidth = fma_peak(run, DTYPE), run.value(spec.READ_BANDWIDTH)
    if missing(peak) or missing(bandwidth) or missing(intensity):
        return math.nan
    return min(float(peak), float(bandwidth) * intensity)


def roofline(run):
    peak = fma_peak(run, DTYPE)
    rows = [[p.kernel, p.shape, p.intensity, p.gflops, ratio(p.gflops, roof(run, p.intensity)),
             ratio(p.gflops, peak)] for p in points(run) if not missing(p.gflops)]
    table = Table("roofline", (
        Column("kernel", "kernel"), Column("shape", "shape"),
        Column("flops_per_byte", "flop/B", lambda v: f"{v:,.0f}" if v >= 10 else f"{v:.2g}"), Column("gflops", "GFLOP/s", fmt_gflops),
        Column("fraction_of_roof", "of the roof there", fmt_percent),
        Column("fraction_of_fma_peak", "of the FMA peak", fmt_percent)), rows)

    def draw(path):
        plot_roofline(run, path)

    return Section("The roofline", [
        f"The ceilings of the report's opening, and every kernel ({DTYPE}, all threads) as a point: arithmetic intensity (flops per byte that must "
        "move: Q, K, V in and O out for a prefill call, the cached K and V for a decode step) against "
        "attained GFLOP/s, under the measured roofs. Prefill, at n/4 flop/B, is bound by arithmetic; a "
        "decode step, at ½ flop/B whatever n, by bandwidth: §11.2's argument that a decoder gets faster "
        "with fewer bytes per cached token, not with faster arithmetic.",
        Plot("roofline.png", "Roofline: attained GFLOP/s against arithmetic intensity, every kernel and shape",
             draw),
        table,
    ])


SHAPE_MARKERS = ("o", "s", "D", "^")


def plot_roofline(run, path):
    """roofline.png: log-log, the two roofs, and a marker per kernel (colour) and shape (marker)."""
    fig, ax = pyplot().subplots(figsize=(10, 6.5))
    fig.suptitle(f"Roofline, {DTYPE}, all threads", fontsize=10)
    every = points(run)
    shapes = list(dict.fromkeys(p.shape for p in every))
    styles = plots.kernel_styles(run)
    drawn = [p for p in every if not missing(p.gflops) and p.gflops > 0]
    if not drawn:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no data in these results", transform=ax.transAxes, ha="center")
    else:
        low = min(p.intensity for p in drawn) / 4
        high = max(p.intensity for p in drawn) * 4
        xs = [low * (high / low) ** (i / 200) for i in range(201)]
        if not missing(roof(run, 1.0)):
            ax.plot(xs, [roof(run, x) for x in xs], color="black", linewidth=2,
                    label=f"roof: FMA peak {float(fma_peak(run, DTYPE)):.0f} GFLOP/s, "
                          f"read {float(run.value(spec.READ_BANDWIDTH)):.1f} GB/s")
        sgemm = run.value(spec.SGEMM)
        if not missing(sgemm):
            ax.axhline(float(sgemm), color="grey", linestyle=":", label=f"sgemm {float(sgemm):.0f} GFLOP/s")
        for p in drawn:
            style = styles[p.kernel]
            ax.scatter(p.intensity, p.gflops, color=style["color"], marker=SHAPE_MARKERS[shapes.index(p.shape) % 4],
                       s=36, facecolors="none" if is_external(p.kernel) else style["color"], zorder=3)
            if hasattr(p.gflops, "low"):
                ax.plot([p.intensity] * 2, [p.gflops.low, p.gflops.high], color=style["color"], linewidth=1)
        for kernel in dict.fromkeys(p.kernel for p in drawn):
            ax.scatter([], [], color=styles[kernel]["color"], marker="o", label=plots.kernel_label(kernel))
        for i, shape in enumerate(shapes):
            ax.scatter([], [], color="black", facecolors="none", marker=SHAPE_MARKERS[i % 4], label=shape)
        # limits first: one lone point would give the log scales an empty range
        highest = max([float(p.gflops) for p in drawn] + [roof(run, high)], key=lambda v: -1 if missing(v) else v)
        ax.set_xlim(low, high)
        ax.set_ylim(min(float(p.gflops) for p in drawn) / 4, highest * 2)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (flops per byte moved; log scale)")
        ax.set_ylabel("attained GFLOP/s (log scale)")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right", ncol=2)
    fig.tight_layout()
    save_png(fig, path, caption=plots.machine_caption(run))
