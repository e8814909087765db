"""The machine's ceilings and the roofline: every kernel's attained GFLOP/s against its
arithmetic intensity, under the measured compute roof (the FMA peak) and memory roof (the
streaming-read bandwidth).

Intensity is flops per byte that must move between memory and the cores: Q, K, V read and
O written once (4·heads·n·d values) for a prefill call of 4·heads·n²·d flops (half when
causal), so n/4 flops per byte in float32; a cached decode step reads the cached K and V
(2·heads·n·d values) for 4·heads·n·d flops, ½ flop per byte at any n.  Prefill sits under
the compute roof, decode under the bandwidth roof: the argument of §11.2, that a decoder
is made faster by fewer bytes per cached token, not by faster arithmetic.

Every shape is shown in float32; prefill in bfloat16 too (n/2 flops per byte: half the
bytes), under bfloat16's compute roof: the faster of its dot-product peak (where the CPU has
AVX512-BF16) and float32's FMA peak (``ceilings.compute_roof``).
"""
import math
from dataclasses import dataclass

from .. import bench_spec as spec
from ..costs import attention_flops, gflops
from ..output import Column, Table, fmt_gflops, fmt_percent, missing, pyplot, ratio, save_png, text
from . import plots
from .ceilings import SIDE_BY_SIDE_PEAK, bf16_dot_is_roof, bf16_roof_text, compute_roof, peak_fraction
from .decode import cache_read_fraction
from .document import Plot, Section
from .multi_head import headline_seq_len, multihead_gflops
from .results import is_external

DTYPES = ("float32", "bfloat16")  # every shape in float32; prefill in bfloat16 too


@dataclass(frozen=True)
class Point:
    """One kernel on one shape in one dtype: its intensity (flop/B), attained GFLOP/s, and
    its fraction of the roof there timed side by side with the roof's own loop (NaN: not
    measured)."""

    kernel: str
    shape: str
    dtype: str
    intensity: float
    gflops: float
    fraction: float


def _prefill_intensity(seq_len, causal, dtype):
    flops = attention_flops(seq_len, seq_len, spec.HEAD_DIM, batch=spec.HEADS, causal=causal)
    moved = 4 * spec.HEADS * seq_len * spec.HEAD_DIM * spec.ITEMSIZE[dtype]
    return flops / moved


def points(run):
    """Every kernel's point on each shape and dtype the roofline shows.  Its fraction of the
    roof: prefill's of the compute roof (``peak_fraction``: at n/4 flop/B it is far right of
    the ridge), decode's of the streaming read (``cache_read_fraction``), both side by side
    with the roof's loop; the tiny call's is not measured (its bound is the call's fixed
    cost, not a roof: ``CallCost``)."""
    n = headline_seq_len(run)
    decode_n = spec.DECODE_PEER_SEQ_LEN if spec.DECODE_PEER_SEQ_LEN in run.seq_lens(spec.DECODE_CACHED) \
        else max(run.seq_lens(spec.DECODE_CACHED), default=math.nan)
    itemsize = spec.ITEMSIZE["float32"]
    shapes = []
    for dtype in DTYPES:
        for causal in (False, True):
            shapes.append((f"prefill {'causal' if causal else 'full'}, n = {text(n, lambda v: f'{v:,}')}", dtype,
                           math.nan if missing(n) else _prefill_intensity(n, causal, dtype),
                           lambda kernel, dtype=dtype, causal=causal: multihead_gflops(run, kernel, dtype, causal),
                           lambda kernel, dtype=dtype, causal=causal: peak_fraction(run, kernel, dtype,
                                                                                     causal=causal)))
    decode_flops = math.nan if missing(decode_n) else attention_flops(1, decode_n, spec.HEAD_DIM, batch=spec.HEADS)
    decode_bytes = math.nan if missing(decode_n) else 2 * spec.HEADS * decode_n * spec.HEAD_DIM * itemsize
    shapes.append((f"decode, n = {text(decode_n, lambda v: f'{v:,}')}", "float32", decode_flops / decode_bytes,
                   lambda kernel: ratio(decode_flops / 1e9, run.value(spec.DECODE_CACHED, kernel=kernel,
                                                                      seq_len=decode_n)),
                   lambda kernel: cache_read_fraction(run, kernel, decode_n)))
    tiny = spec.TINY_SEQ_LEN
    shapes.append((f"tiny call, n = {tiny}, one head", "float32",
                   attention_flops(tiny, tiny, spec.HEAD_DIM) / (4 * tiny * spec.HEAD_DIM * itemsize),
                   lambda kernel: gflops(run.value(spec.TINY_CALL, kernel=kernel), tiny, tiny, spec.HEAD_DIM),
                   lambda kernel: math.nan))
    kernels = run.kernels(spec.MULTI_HEAD_TIME, spec.DECODE_CACHED, spec.TINY_CALL)
    return [Point(kernel, shape, dtype, intensity, attained(kernel), fraction(kernel))
            for shape, dtype, intensity, attained, fraction in shapes for kernel in kernels]


def roof(run, intensity, dtype="float32"):
    """The attainable GFLOP/s at ``intensity`` in ``dtype``: the lower of the type's compute
    roof (``compute_roof``) and bandwidth × intensity."""
    peak, bandwidth = compute_roof(run, dtype), run.value(spec.READ_BANDWIDTH)
    if missing(peak) or missing(bandwidth) or missing(intensity):
        return math.nan
    return min(float(peak), float(bandwidth) * intensity)


def roofline(run):
    rows = [[p.kernel, p.shape, p.dtype, p.intensity, p.gflops, p.fraction]
            for p in points(run) if not missing(p.gflops)]
    table = Table("roofline", (
        Column("kernel", "kernel"), Column("shape", "shape"), Column("dtype", "dtype"),
        Column("flops_per_byte", "flop/B", lambda v: f"{v:,.0f}" if v >= 10 else f"{v:.2g}"), Column("gflops", "GFLOP/s", fmt_gflops),
        Column("fraction_of_roof", "of the roof there, side by side with its loop", fmt_percent)), rows)

    def draw(path):
        plot_roofline(run, path)

    return Section("The roofline", [
        "The ceilings of the report's opening, and every kernel (all threads) as a point: arithmetic intensity (flops per byte that must "
        "move: Q, K, V in and O out for a prefill call, the cached K and V for a decode step) against "
        "attained GFLOP/s, under the measured roofs. Prefill, at n/4 flop/B, is bound by arithmetic; a "
        "decode step, at ½ flop/B whatever n, by bandwidth: §11.2's argument that a decoder gets faster "
        "with fewer bytes per cached token, not with faster arithmetic.",
        "Every shape is in float32; prefill is in bfloat16 too (half the bytes: n/2 flop/B), under "
        f"bfloat16's compute roof: {bf16_roof_text(run)}.",
        Plot("roofline.png", "Roofline: attained GFLOP/s against arithmetic intensity, every kernel and shape",
             draw),
        "Each point's fraction of the roof there is measured, not divided: a prefill call's share of its "
        f"type's compute roof is {SIDE_BY_SIDE_PEAK}; a decode step's share of the streaming read is the "
        "step and the read's own loop (csrc/read_peak.c) over as many bytes alternating the same way "
        "(`CachedDecodeReadFraction`). The tiny "
        "call has none: its bound is the call's fixed cost (the decode section's `CallCost`), not a roof.",
        table,
    ])


SHAPE_MARKERS = ("o", "s", "D", "^", "v", "P")


def plot_roofline(run, path):
    """roofline.png: log-log, float32's roof (its FMA peak and the bandwidth), bfloat16's where
    it has one of its own, and a point per kernel (colour) and shape and dtype (marker)."""
    fig, ax = pyplot().subplots(figsize=(10, 6.5))
    fig.suptitle(f"Roofline, {' and '.join(DTYPES)}, all threads", fontsize=10)
    styles = plots.kernel_styles(run)
    drawn = [p for p in points(run) if not missing(p.gflops) and p.gflops > 0]
    shapes = list(dict.fromkeys((p.shape, p.dtype) for p in drawn))
    if not drawn:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no data in these results", transform=ax.transAxes, ha="center")
    else:
        low = min(p.intensity for p in drawn) / 4
        high = max(p.intensity for p in drawn) * 4
        xs = [low * (high / low) ** (i / 200) for i in range(201)]
        if not missing(roof(run, 1.0)):
            ax.plot(xs, [roof(run, x) for x in xs], color="black", linewidth=2,
                    label=f"roof, float32: FMA peak {float(compute_roof(run, 'float32')):.0f} GFLOP/s, "
                          f"read {float(run.value(spec.READ_BANDWIDTH)):.1f} GB/s")
        if bf16_dot_is_roof(run) and not missing(roof(run, 1.0, "bfloat16")):
            ax.plot(xs, [roof(run, x, "bfloat16") for x in xs], color="black", linewidth=1.5, linestyle="--",
                    label=f"roof, bfloat16: dot-product peak {float(compute_roof(run, 'bfloat16')):.0f} GFLOP/s")
        sgemm = run.value(spec.SGEMM)
        if not missing(sgemm):
            ax.axhline(float(sgemm), color="grey", linestyle=":", label=f"sgemm {float(sgemm):.0f} GFLOP/s")
        for p in drawn:
            style = styles[p.kernel]
            marker = SHAPE_MARKERS[shapes.index((p.shape, p.dtype)) % len(SHAPE_MARKERS)]
            ax.scatter(p.intensity, p.gflops, color=style["color"], marker=marker,
                       s=36, facecolors="none" if is_external(p.kernel) else style["color"], zorder=3)
            if hasattr(p.gflops, "low"):
                ax.plot([p.intensity] * 2, [p.gflops.low, p.gflops.high], color=style["color"], linewidth=1)
        for kernel in dict.fromkeys(p.kernel for p in drawn):
            ax.scatter([], [], color=styles[kernel]["color"], marker="o", label=plots.kernel_label(kernel))
        for i, (shape, dtype) in enumerate(shapes):
            ax.scatter([], [], color="black", facecolors="none", marker=SHAPE_MARKERS[i % len(SHAPE_MARKERS)],
                       label=f"{shape}, {dtype}")
        # limits first: one lone point would give the log scales an empty range
        highest = max([float(p.gflops) for p in drawn] + [roof(run, high, dtype) for dtype in DTYPES],
                      key=lambda v: -1 if missing(v) else v)
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
