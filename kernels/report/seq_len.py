"""Sections on one head against sequence length (``SeqLen``): time, memory and throughput
plots with fitted exponents, where n² memory meets RAM, and the speed-up between rungs."""
import math

from .. import bench_spec as spec
from ..costs import gflops, largest_fitting_seq_len
from ..fits import FIT_MIN_N, FIT_MIN_POINTS, fit_power_law
from ..memory import format_bytes
from ..output import (Column, Table, fmt_count, fmt_exponent, fmt_gflops, fmt_ratio, fmt_seconds,
                      missing, ratio)
from ..registry import KERNELS
from . import plots
from .ceilings import fma_peak
from .document import Plot, Section
from .results import is_external, materialises

TIME, MEMORY = "time", "peak extra memory"
SHAPE = f"one head, d = {spec.HEAD_DIM}, full"


def one_head_gflops(seconds, seq_len):
    return gflops(seconds, seq_len, seq_len, spec.HEAD_DIM)


def fit_all(run):
    """(quantity, dtype, kernel) -> PowerLaw or None, for SeqLen time and peak extra memory."""
    fits = {}
    for quantity, benchmark in ((TIME, spec.SEQ_LEN_TIME), (MEMORY, spec.SEQ_LEN_MEMORY)):
        for dtype in spec.DTYPES:
            for kernel in run.kernels(benchmark):
                fits[quantity, dtype, kernel] = fit_power_law(
                    *run.series(benchmark, kernel=kernel, dtype=dtype))
    return fits


def fit_label(kernel, fit):
    if fit is None:
        return f"{plots.kernel_label(kernel)}  (too few points to fit)"
    return f"{plots.kernel_label(kernel)}  $n^{{{fit.b:.2f}}}$ (fit {fit.n_min:,}–{fit.n_max:,})"


def seq_len_table(run):
    """SeqLen: one head, full; every kernel × dtype × n with time, GFLOP/s and memory."""
    rows = []
    for kernel in run.kernels(spec.SEQ_LEN_TIME, spec.SEQ_LEN_MEMORY):
        for dtype in spec.DTYPES:
            for seq_len in run.seq_lens(spec.SEQ_LEN_TIME, spec.SEQ_LEN_MEMORY):
                case = dict(kernel=kernel, seq_len=seq_len, dtype=dtype)
                seconds = run.value(spec.SEQ_LEN_TIME, **case)
                rows.append([kernel, dtype, seq_len, seconds, one_head_gflops(seconds, seq_len),
                             run.value(spec.SEQ_LEN_MEMORY, **case)])
    return Table("seq_len", (
        Column("kernel", "kernel"), Column("dtype", "dtype"), Column("seq_len", "n", fmt_count),
        Column("seconds", "time per call", fmt_seconds), Column("gflops", "GFLOP/s", fmt_gflops),
        Column("peak_extra_bytes", "peak extra memory", format_bytes)), rows)


# -- time -------------------------------------------------------------------------------

def time(run):
    fits = fit_all(run)

    def n_squared_guide(ax, dtype, drawn):
        """A grey n² line through the median time at the largest n, for judging slopes by eye."""
        low, high = min(drawn), max(drawn)
        at_high = sorted(v for v in (run.value(spec.SEQ_LEN_TIME, kernel=k, seq_len=high, dtype=dtype)
                                     for k in run.kernels(spec.SEQ_LEN_TIME)) if not missing(v))
        if at_high:
            middle = at_high[len(at_high) // 2]
            ax.plot([low, high], [middle * (low / high) ** 2, middle], color="grey", linestyle=":",
                    linewidth=1.5, label="∝ n² (guide)")
        return []

    def draw(path):
        plots.plot_against_seq_len(
            run, path, spec.SEQ_LEN_TIME, f"Attention time per call vs sequence length ({SHAPE})",
            "time per call (seconds, log scale)",
            label=lambda kernel, dtype: fit_label(kernel, fits[TIME, dtype, kernel]),
            decorate=n_squared_guide)

    return Section("Time against sequence length", [
        Plot("time_vs_n.png", "Time per call against n, log-log, one line per kernel", draw),
        "Attention does 4·n²·d flops, so time grows as n² (the dotted guide) once n is large; the "
        "rungs differ by the vertical distance between lines. Exponents fitted for n ≥ "
        f"{FIT_MIN_N:,} are in the legend and below; every point is in [seq_len.csv](seq_len.csv).",
    ], data=[seq_len_table(run)])


# -- memory -----------------------------------------------------------------------------

def out_of_memory(run, fits):
    """For each materialising kernel and dtype: (fitted n at RAM or NaN, exact largest n)."""
    ram = run.ram_bytes
    return {(kernel, dtype): (fit.solve(ram) if fit and fit.b > 0 else math.nan,
                              largest_fitting_seq_len(kernel, spec.ITEMSIZE[dtype], ram, spec.HEAD_DIM))
            for (quantity, dtype, kernel), fit in fits.items()
            if quantity == MEMORY and materialises(kernel) and not missing(ram)}


def out_of_memory_text(run, fits):
    """One line per materialising kernel and dtype: where its memory meets RAM."""
    lines = []
    for (kernel, dtype), (fitted_n, exact_n) in out_of_memory(run, fits).items():
        if missing(fitted_n):
            fitted = "no fit that grows with n"
        else:
            need = KERNELS[kernel].workspace_bytes(1, round(fitted_n), round(fitted_n), spec.HEAD_DIM,
                                                   spec.HEAD_DIM, spec.ITEMSIZE[dtype], False)
            fitted = (f"the fit reaches RAM at n ≈ {fitted_n:,.0f} (its exact workspace there: "
                      f"{format_bytes(need)})")
        lines.append(f"- **{kernel}, {dtype}:** {fitted}; by the exact workspace formula the "
                     f"largest n that fits in {plots.ram_text(run)} is {exact_n:,}.")
    return "\n".join(lines) or "No materialising kernel has memory measurements."


def memory(run):
    fits = fit_all(run)
    walls = out_of_memory(run, fits)
    styles = plots.kernel_styles(run)

    def ram_and_walls(ax, dtype, drawn):
        """RAM as a line, and each materialising kernel's fit extrapolated (dotted) from
        its last measured n to RAM, with an X where they meet, on a bytes axis; the n of
        the Xs."""
        plots.bytes_axis(ax)
        if missing(run.ram_bytes):
            return []
        ax.axhline(run.ram_bytes, color="black", linewidth=1, label=f"RAM {plots.ram_text(run)}")
        ax.set_ylim(top=run.ram_bytes * 16)  # room above the RAM line for the labels
        wall_seq_lens = []
        for (kernel, wall_dtype), (fitted_n, _) in walls.items():
            if wall_dtype != dtype or missing(fitted_n):
                continue
            fit, colour = fits[MEMORY, dtype, kernel], styles[kernel]["color"]
            seq_lens = [fit.n_max * (fitted_n / fit.n_max) ** (i / 20) for i in range(21)]
            ax.plot(seq_lens, fit(seq_lens), color=colour, linestyle=":", linewidth=1)
            ax.plot([fitted_n], [run.ram_bytes], marker="X", markersize=10, color=colour,
                    linestyle="none")
            ax.annotate(f"{kernel}: out of memory at n ≈ {fitted_n:,.0f}", (fitted_n, run.ram_bytes),
                        textcoords="offset points", xytext=(-10, 6), ha="right", va="bottom",
                        fontsize=8, color=colour)
            wall_seq_lens.append(fitted_n)
        return wall_seq_lens

    def draw(path):
        plots.plot_against_seq_len(
            run, path, spec.SEQ_LEN_MEMORY,
            f"Peak extra memory of one call vs sequence length ({SHAPE})",
            "peak extra memory per call (bytes, log scale)",
            label=lambda kernel, dtype: fit_label(kernel, fits[MEMORY, dtype, kernel]),
            decorate=ram_and_walls)

    return Section("Memory against sequence length", [
        Plot("memory_vs_n.png", "Peak extra memory per call against n, log-log, with the machine's RAM",
             draw),
        "Peak extra memory of one call beyond its inputs: ≈ n² for a kernel that materialises the "
        "n × n scores, ≈ n for the tiled ones. The O(n²) wall, extrapolated from the fit to this "
        f"machine's RAM ({SHAPE}):",
        out_of_memory_text(run, fits),
    ])


# -- throughput -------------------------------------------------------------------------

def throughput(run):
    def ceilings(ax, dtype, drawn):
        peak = fma_peak(run, dtype)
        if not missing(peak):
            ax.axhline(peak, color="black", linestyle="-", linewidth=1.5,
                       label=f"FMA peak, every thread: {peak:.1f} GFLOP/s")
        gemm, benchmark = spec.GEMM[dtype]
        ceiling = run.value(benchmark)
        if not missing(ceiling):
            ax.axhline(ceiling, color="black", linestyle="-.", linewidth=1,
                       label=f"{gemm} of the installed BLAS: {ceiling:.1f} GFLOP/s")
        return []

    def draw(path):
        plots.plot_against_seq_len(
            run, path, spec.SEQ_LEN_TIME, f"Attention throughput vs sequence length ({SHAPE})",
            "GFLOP/s (4·n²·d flops per call ÷ time; log scale)",
            label=lambda kernel, dtype: plots.kernel_label(kernel),
            to_y=lambda seq_len, seconds: one_head_gflops(seconds, seq_len), decorate=ceilings)

    return Section("Throughput against sequence length", [
        Plot("throughput_vs_n.png", "GFLOP/s against n under the FMA peak and the BLAS gemm", draw),
        "GFLOP/s of one head under the machine's FMA peak in that precision (the most any kernel can "
        "reach) and the sgemm (float32) and dgemm (float64) throughput of the installed BLAS (what its "
        "matrix products reach), both measured in the same run.",
    ])


# -- fitted exponents and rungs -----------------------------------------------------------

def exponents(run):
    rows = [[kernel, quantity, dtype] + ([fit.b, fit.n_min, fit.n_max, fit.points] if fit
                                         else [math.nan] * 4)
            for (quantity, dtype, kernel), fit in fit_all(run).items()]
    table = Table("fits", (
        Column("kernel", "kernel"), Column("quantity", "quantity"), Column("dtype", "dtype"),
        Column("exponent", "exponent b", fmt_exponent), Column("n_min", "fit from n", fmt_count),
        Column("n_max", "to n", fmt_count), Column("points", "points")), rows)
    return Section("Fitted exponents", [
        f"y ≈ a·n^b by least squares on log-log axes over the points with n ≥ {FIT_MIN_N:,} "
        f"(at least {FIT_MIN_POINTS}); also [fits.csv](fits.csv).",
        table,
    ])


def rung_speedups(run):
    """Time of each rung ÷ time of the next, at the largest n (SeqLen) where both ran."""
    rungs = [kernel for kernel in run.kernels(spec.SEQ_LEN_TIME) if not is_external(kernel)]
    rows = []
    for slow, fast in zip(rungs, rungs[1:]):
        for dtype in spec.DTYPES:
            seq_lens, slow_times = run.series(spec.SEQ_LEN_TIME, kernel=slow, dtype=dtype)
            _, fast_times = run.series(spec.SEQ_LEN_TIME, kernel=fast, dtype=dtype)
            both = [(n, ratio(s, f)) for n, s, f in zip(seq_lens, slow_times, fast_times)
                    if not missing(ratio(s, f))]
            seq_len, speedup = both[-1] if both else (math.nan, math.nan)
            rows.append([slow, fast, dtype, seq_len, speedup])
    table = Table("rung_speedups", (
        Column("from", "from"), Column("to", "to"), Column("dtype", "dtype"),
        Column("seq_len", "at n", fmt_count), Column("speedup", "speed-up", fmt_ratio)), rows)
    return Section("Speed-up between rungs", [
        "Time of a rung ÷ time of the next, one head, at the largest n where both ran.",
        table,
    ])
