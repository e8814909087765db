"""The scaling report: asv results -> REPORT.md, PNG plots and CSV tables.

    python -m kernels report [--results .asv/results] [--out reports]
    kernels.report.write_report(results_dir, out_dir) -> path of REPORT.md

Reads the newest asv results file (``kernels.analysis``), draws time, peak extra
memory and throughput against the sequence length n on log-log axes with fitted
exponents, and tabulates the comparisons the design asks for (rungs, causal, dtypes,
threads, the memory wall, startup, goals).  A value that was skipped, failed or never
run is a gap in the plots, "n/a" in REPORT.md and an empty cell in the CSVs.
"""
import csv
import importlib.metadata
import math
import pathlib
from dataclasses import dataclass
from typing import Callable

from . import analysis
from .analysis import HEAD_DIM, gflops, is_external, kernel_order, ratio
from .memory import format_bytes
from .registry import KERNELS

# The benchmarks this report reads (names fixed with benchmarks/).
SEQ_LEN_TIME = "bench_attention.SeqLen.time_attention"
SEQ_LEN_MEMORY = "bench_attention.SeqLen.track_peak_extra_bytes"
MULTI_HEAD_TIME = "bench_attention.MultiHead.time_attention"
THREADS_GFLOPS = "bench_attention.Threads.track_gflops"
PEER_SPEEDUP = "bench_attention.PeerSpeedup.track_speedup"
NUMPY_SPEEDUP = "bench_attention.NumpySpeedup.track_speedup"
WALL_MEMORY = "bench_attention.MemoryWall.track_peak_extra_bytes"
WALL_SECONDS = "bench_attention.MemoryWall.track_seconds"
SGEMM = "bench_machine.Machine.track_sgemm_gflops"
DGEMM = "bench_machine.Machine.track_dgemm_gflops"
BANDWIDTH = "bench_machine.Machine.track_memory_bandwidth"
THREAD_BUDGET = "bench_machine.Machine.track_thread_budget"
IMPORT_SECONDS = "bench_machine.Startup.track_import_seconds"
COMPILE_SECONDS = "bench_machine.Startup.track_numba_compile_seconds"
CACHED_CALL_SECONDS = "bench_machine.Startup.track_numba_cached_call_seconds"
BENCHMARKS = (SEQ_LEN_TIME, SEQ_LEN_MEMORY, MULTI_HEAD_TIME, THREADS_GFLOPS, PEER_SPEEDUP,
              NUMPY_SPEEDUP, WALL_MEMORY, WALL_SECONDS, SGEMM, DGEMM, BANDWIDTH, THREAD_BUDGET,
              IMPORT_SECONDS, COMPILE_SECONDS, CACHED_CALL_SECONDS)

# The configurations the benchmarks fix (see benchmarks/bench_attention.py).
DTYPES = ("float32", "float64")
ITEMSIZE = {"float32": 4, "float64": 8}
GEMM = {"float32": ("sgemm", SGEMM), "float64": ("dgemm", DGEMM)}
HEADS = 8                 # MultiHead, Threads and PeerSpeedup
WALL_SEQ_LEN = 65536      # MemoryWall: float64, one head, causal
PEER = "torch_sdpa"

TIME, MEMORY = "time", "peak extra memory"
LIBRARIES = ("numpy", "numba", "cffi", "matplotlib", "asv", "torch")


def write_report(results_dir=".asv/results", out_dir="reports"):
    """Write REPORT.md, the PNG plots and the CSV tables into ``out_dir``; return REPORT.md's path.

    Raises FileNotFoundError naming ``results_dir`` when it holds no asv results.
    """
    run = analysis.load_latest_run(results_dir)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fits = fit_all(run)
    plot_time(run, fits, out_dir / "time_vs_n.png")
    plot_memory(run, fits, out_dir / "memory_vs_n.png")
    plot_throughput(run, out_dir / "throughput_vs_n.png")
    tables = build_tables(run, fits)
    for table in tables.values():
        table.write_csv(out_dir)
    report = out_dir / "REPORT.md"
    report.write_text(render(run, fits, tables))
    return report


# -- tables -----------------------------------------------------------------------------

def _missing(value):
    return value is None or (isinstance(value, float) and math.isnan(value))


@dataclass(frozen=True)
class Column:
    key: str                        # CSV header
    title: str                      # REPORT.md header
    fmt: Callable = str             # raw value -> REPORT.md cell


@dataclass(frozen=True)
class Table:
    """Rows of raw values; rendered as markdown ("n/a" for gaps) and CSV (empty for gaps)."""

    name: str
    columns: tuple
    rows: list

    def markdown(self):
        if not self.rows:
            return "n/a: the benchmarks behind this table are not in the results."
        header = [column.title for column in self.columns]
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for row in self.rows:
            cells = ["n/a" if _missing(v) else c.fmt(v) for c, v in zip(self.columns, row)]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def write_csv(self, out_dir):
        with open(out_dir / f"{self.name}.csv", "w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow([column.key for column in self.columns])
            writer.writerows(["" if _missing(v) else v for v in row] for row in self.rows)


def fmt_seconds(seconds):
    """Three significant digits in the unit that keeps them readable: 0.0123 -> '12.3 ms'."""
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def fmt_gflops(value):
    return f"{value:.1f}"


def fmt_ratio(value):
    return f"{value:,.0f}×" if value >= 100 else f"{value:.2f}×"


def fmt_percent(value):
    return f"{value:.0%}"


def fmt_count(value):
    return f"{value:,}"


def fmt_exponent(value):
    return f"{value:.2f}"


def fmt_number(value):
    return f"{value:.3g}"


def kernels_in(run, *benchmarks):
    """The kernels any of ``benchmarks`` ran with, in ladder order."""
    return kernel_order(v for b in benchmarks for v in run.param_values(b, "kernel"))


def seq_lens_in(run, *benchmarks):
    return sorted({v for b in benchmarks for v in run.param_values(b, "seq_len")})


def seq_len_table(run):
    """SeqLen: one head, full; every kernel × dtype × n with time, GFLOP/s and memory."""
    rows = []
    for kernel in kernels_in(run, SEQ_LEN_TIME, SEQ_LEN_MEMORY):
        for dtype in DTYPES:
            for seq_len in seq_lens_in(run, SEQ_LEN_TIME, SEQ_LEN_MEMORY):
                case = dict(kernel=kernel, seq_len=seq_len, dtype=dtype)
                seconds = run.value(SEQ_LEN_TIME, **case)
                rows.append([kernel, dtype, seq_len, seconds, gflops(seconds, seq_len),
                             run.value(SEQ_LEN_MEMORY, **case)])
    return Table("seq_len", (
        Column("kernel", "kernel"), Column("dtype", "dtype"), Column("seq_len", "n", fmt_count),
        Column("seconds", "time per call", fmt_seconds), Column("gflops", "GFLOP/s", fmt_gflops),
        Column("peak_extra_bytes", "peak extra memory", format_bytes)), rows)


def headline_seq_len(run):
    """The largest n MultiHead ran: 4096, or 1024 in a quick run (Threads uses the same n)."""
    return max(run.param_values(MULTI_HEAD_TIME, "seq_len"), default=4096)


def multihead_seconds(run, kernel, dtype, causal=False, seq_len=None):
    """MultiHead's time per call, at the headline n unless ``seq_len`` is given."""
    seq_len = seq_len or headline_seq_len(run)
    return run.value(MULTI_HEAD_TIME, kernel=kernel, seq_len=seq_len, dtype=dtype, causal=causal)


def multihead_gflops(run, kernel, dtype, causal=False, seq_len=None):
    """GFLOP/s from MultiHead's time, so that a table's time and throughput agree."""
    seq_len = seq_len or headline_seq_len(run)
    return gflops(multihead_seconds(run, kernel, dtype, causal, seq_len), seq_len, HEADS, causal)


def multihead_table(run):
    """MultiHead: 8 heads; every kernel × dtype × n × causal with time and GFLOP/s."""
    rows = []
    for kernel in kernels_in(run, MULTI_HEAD_TIME):
        for dtype in DTYPES:
            for seq_len in seq_lens_in(run, MULTI_HEAD_TIME):
                for causal in (False, True):
                    rows.append([kernel, dtype, seq_len, causal,
                                 multihead_seconds(run, kernel, dtype, causal, seq_len),
                                 multihead_gflops(run, kernel, dtype, causal, seq_len)])
    return Table("multihead", (
        Column("kernel", "kernel"), Column("dtype", "dtype"), Column("seq_len", "n", fmt_count),
        Column("causal", "causal"), Column("seconds", "time per call", fmt_seconds),
        Column("gflops", "GFLOP/s", fmt_gflops)), rows)


def headline_table(run):
    """MultiHead at the headline n, full: time, GFLOP/s, share of BLAS gemm, against numpy and the peer."""
    rows = []
    for dtype in DTYPES:
        ceiling = run.value(GEMM[dtype][1])
        numpy_seconds = multihead_seconds(run, "numpy", dtype)
        peer_gflops = multihead_gflops(run, PEER, dtype)
        for kernel in kernels_in(run, MULTI_HEAD_TIME):
            seconds = multihead_seconds(run, kernel, dtype)
            throughput = multihead_gflops(run, kernel, dtype)
            rows.append([kernel, dtype, seconds, throughput, ratio(throughput, ceiling),
                         ratio(numpy_seconds, seconds), ratio(throughput, peer_gflops)])
    return Table("headline", (
        Column("kernel", "kernel"), Column("dtype", "dtype"),
        Column("seconds", "time per call", fmt_seconds), Column("gflops", "GFLOP/s", fmt_gflops),
        Column("fraction_of_gemm", "of sgemm / dgemm", fmt_percent),
        Column("speedup_over_numpy", "speed-up over numpy", fmt_ratio),
        Column(f"gflops_ratio_to_{PEER}", f"GFLOP/s ÷ {PEER}", fmt_ratio)), rows)


def seq_len_series(run, benchmark, kernel, dtype):
    """(every n of the benchmark, its values for this kernel and dtype, NaN where missing)."""
    seq_lens = run.param_values(benchmark, "seq_len")
    return seq_lens, [run.value(benchmark, kernel=kernel, seq_len=n, dtype=dtype) for n in seq_lens]


def rung_speedup_table(run):
    """Time of each rung ÷ time of the next, at the largest n (SeqLen) where both ran."""
    rungs = [kernel for kernel in kernels_in(run, SEQ_LEN_TIME) if not is_external(kernel)]
    rows = []
    for slow, fast in zip(rungs, rungs[1:]):
        for dtype in DTYPES:
            seq_lens, slow_times = seq_len_series(run, SEQ_LEN_TIME, slow, dtype)
            _, fast_times = seq_len_series(run, SEQ_LEN_TIME, fast, dtype)
            both = [(n, ratio(s, f)) for n, s, f in zip(seq_lens, slow_times, fast_times)
                    if not _missing(ratio(s, f))]
            seq_len, speedup = both[-1] if both else (math.nan, math.nan)
            rows.append([slow, fast, dtype, seq_len, speedup])
    return Table("rung_speedups", (
        Column("from", "from"), Column("to", "to"), Column("dtype", "dtype"),
        Column("seq_len", "at n", fmt_count), Column("speedup", "speed-up", fmt_ratio)), rows)


def causal_table(run):
    """Causal time ÷ full time per kernel (MultiHead, headline n): ideally 0.5."""
    rows = [[kernel] + [ratio(multihead_seconds(run, kernel, dtype, causal=True),
                              multihead_seconds(run, kernel, dtype)) for dtype in DTYPES]
            for kernel in kernels_in(run, MULTI_HEAD_TIME)]
    return Table("causal_vs_full", (Column("kernel", "kernel"),) + tuple(
        Column(f"{dtype}_causal_over_full", f"{dtype}: causal ÷ full time", fmt_ratio)
        for dtype in DTYPES), rows)


def precision_table(run):
    """float64 time ÷ float32 time per kernel (MultiHead, headline n): twice the bytes per value."""
    rows = [[kernel] + [ratio(multihead_seconds(run, kernel, "float64", causal),
                              multihead_seconds(run, kernel, "float32", causal))
                        for causal in (False, True)]
            for kernel in kernels_in(run, MULTI_HEAD_TIME)]
    return Table("float64_vs_float32", (
        Column("kernel", "kernel"), Column("full", "full: float64 ÷ float32 time", fmt_ratio),
        Column("causal", "causal: float64 ÷ float32 time", fmt_ratio)), rows)


def thread_counts(run, benchmark=THREADS_GFLOPS):
    """(one thread, all threads) as ``benchmark`` ran them; NaN when it did not run."""
    counts = run.param_values(benchmark, "threads")
    return (counts[0], counts[-1]) if counts else (math.nan, math.nan)


def thread_gflops(run, kernel, threads):
    return run.value(THREADS_GFLOPS, kernel=kernel, threads=threads)


def threads_table(run):
    """Threads (float32, 8 heads, headline n, full): GFLOP/s on one thread and on all."""
    one, every = thread_counts(run)
    rows = []
    for kernel in kernels_in(run, THREADS_GFLOPS):
        single, parallel = thread_gflops(run, kernel, one), thread_gflops(run, kernel, every)
        speedup = ratio(parallel, single)
        rows.append([kernel, single, parallel, speedup, ratio(speedup, every)])
    return Table("thread_scaling", (
        Column("kernel", "kernel"), Column("gflops_one_thread", "GFLOP/s, 1 thread", fmt_gflops),
        Column("gflops_all_threads", f"GFLOP/s, {_text(every, fmt_count)} threads", fmt_gflops),
        Column("speedup", "speed-up", fmt_ratio),
        Column("efficiency", "per thread", fmt_percent)), rows)


def speedup_seq_len(run, benchmark):
    """The one n a side-by-side benchmark ran at (NaN if it did not run)."""
    return max(run.param_values(benchmark, "seq_len"), default=math.nan)


def peer_speedup(run, kernel, threads, dtype):
    """PeerSpeedup: the kernel's speed over the peer, timed side by side (8 heads, full)."""
    return run.value(PEER_SPEEDUP, kernel=kernel, seq_len=speedup_seq_len(run, PEER_SPEEDUP),
                     threads=threads, dtype=dtype)


def numpy_speedup(run, kernel):
    """NumpySpeedup: the kernel's speed over numpy, timed side by side (one head, float32)."""
    return run.value(NUMPY_SPEEDUP, kernel=kernel, seq_len=speedup_seq_len(run, NUMPY_SPEEDUP))


def side_by_side_table(run):
    """PeerSpeedup and NumpySpeedup: baseline time ÷ kernel time, the calls alternating."""
    peer_n = speedup_seq_len(run, PEER_SPEEDUP)
    rows = [[kernel, PEER, dtype, HEADS, peer_n, threads, peer_speedup(run, kernel, threads, dtype)]
            for kernel in kernels_in(run, PEER_SPEEDUP)
            for dtype in DTYPES
            for threads in run.param_values(PEER_SPEEDUP, "threads")]
    rows += [[kernel, "numpy", "float32", 1, speedup_seq_len(run, NUMPY_SPEEDUP),
              run.value(THREAD_BUDGET), numpy_speedup(run, kernel)]
             for kernel in kernels_in(run, NUMPY_SPEEDUP)]
    return Table("side_by_side", (
        Column("kernel", "kernel"), Column("baseline", "over"), Column("dtype", "dtype"),
        Column("heads", "heads"), Column("seq_len", "n", fmt_count),
        Column("threads", "threads", lambda v: f"{v:.0f}"), Column("speedup", "speed-up", fmt_ratio)), rows)


def wall_need(run, kernel):
    """For a materialising kernel: why it cannot run the memory wall, in words."""
    if not analysis.materialises(kernel):
        return ""
    need = KERNELS[kernel].workspace_bytes(1, WALL_SEQ_LEN, WALL_SEQ_LEN, HEAD_DIM, HEAD_DIM,
                                           ITEMSIZE["float64"], True)
    if _missing(run.ram_bytes):
        return f"would need {format_bytes(need)}"
    relation = ">" if need > run.ram_bytes else "≤"
    return f"would need {format_bytes(need)} {relation} RAM {ram_text(run)}"


def memory_wall_table(run):
    """MemoryWall (n = 65536, float64, one head, causal): peak extra memory and seconds."""
    rows = [[kernel, run.value(WALL_MEMORY, kernel=kernel), run.value(WALL_SECONDS, kernel=kernel),
             wall_need(run, kernel)]
            for kernel in kernels_in(run, WALL_MEMORY, WALL_SECONDS)]
    return Table("memory_wall", (
        Column("kernel", "kernel"), Column("peak_extra_bytes", "peak extra memory", format_bytes),
        Column("seconds", "time per call", fmt_seconds), Column("note", "note")), rows)


def startup_table(run):
    rows = [["import kernels", run.value(IMPORT_SECONDS)],
            ["first Numba call, empty cache (compile)", run.value(COMPILE_SECONDS)],
            ["first Numba call, cached", run.value(CACHED_CALL_SECONDS)]]
    return Table("startup", (Column("what", "what"), Column("seconds", "seconds", fmt_seconds)), rows)


def fits_table(fits):
    rows = [[kernel, quantity, dtype] + ([fit.b, fit.n_min, fit.n_max, fit.points] if fit
                                         else [math.nan] * 4)
            for (quantity, dtype, kernel), fit in fits.items()]
    return Table("fits", (
        Column("kernel", "kernel"), Column("quantity", "quantity"), Column("dtype", "dtype"),
        Column("exponent", "exponent b", fmt_exponent), Column("n_min", "fit from n", fmt_count),
        Column("n_max", "to n", fmt_count), Column("points", "points")), rows)


@dataclass(frozen=True)
class Goal:
    what: str
    measured: float
    at_least: bool      # met when measured ≥ target (else when measured ≤ target)
    target: float

    @property
    def met(self):
        if _missing(self.measured):
            return math.nan
        return "yes" if (self.measured >= self.target) == self.at_least else "no"


def goals_table(run):
    """The project's targets against what was measured; n/a where the data is missing.
    Speed against another kernel is the side-by-side ratio (PeerSpeedup, NumpySpeedup)."""
    one, every = thread_counts(run)
    peer_one, peer_every = thread_counts(run, PEER_SPEEDUP)
    f32 = "float32"
    config = f"{HEADS} heads, n = {headline_seq_len(run):,}"
    side_by_side = "timed side by side"
    goals = [
        Goal(f"c_tiled speed over {PEER}, float32, {config}, all threads, {side_by_side}",
             peer_speedup(run, "c_tiled", peer_every, f32), True, 1.2),
        Goal(f"c_tiled speed over {PEER}, float32, {config}, one thread, {side_by_side}",
             peer_speedup(run, "c_tiled", peer_one, f32), True, 1.2),
        Goal(f"c_tiled speed over {PEER}, float64, {config}, all threads, {side_by_side}",
             peer_speedup(run, "c_tiled", peer_every, "float64"), True, 1.2),
        Goal(f"numba_tiled speed over {PEER}, float32, {config}, all threads, {side_by_side}",
             peer_speedup(run, "numba_tiled", peer_every, f32), True, 0.6),
        Goal(f"c_tiled ÷ sgemm GFLOP/s, float32, {config}",
             ratio(multihead_gflops(run, "c_tiled", f32), run.value(SGEMM)), True, 0.85),
        *(Goal(f"{kernel} speed over numpy, float32, one head, "
               f"n = {_text(speedup_seq_len(run, NUMPY_SPEEDUP), fmt_count)}, {side_by_side}",
               numpy_speedup(run, kernel), True, 3) for kernel in ("numba_tiled", "c_tiled")),
        Goal(f"c_tiled causal ÷ full time, float32, {config}",
             ratio(multihead_seconds(run, "c_tiled", f32, causal=True),
                   multihead_seconds(run, "c_tiled", f32)), False, 0.6),
        Goal(f"c_tiled all threads ÷ one thread GFLOP/s, float32, {config}",
             ratio(thread_gflops(run, "c_tiled", every), thread_gflops(run, "c_tiled", one)), True, 1.8),
        Goal("first Numba call with an empty cache (compile), seconds", run.value(COMPILE_SECONDS), False, 10),
        Goal("first Numba call from the cache, seconds", run.value(CACHED_CALL_SECONDS), False, 1),
        Goal("import kernels, seconds", run.value(IMPORT_SECONDS), False, 1),
    ]
    rows = [[g.what, g.measured, ("≥ " if g.at_least else "≤ ") + fmt_number(g.target), g.met]
            for g in goals]
    return Table("goals", (Column("goal", "goal"), Column("measured", "measured", fmt_number),
                           Column("target", "target"), Column("met", "met")), rows)


# -- fits and plots -----------------------------------------------------------------------

def fit_all(run):
    """(quantity, dtype, kernel) -> PowerLaw or None, for SeqLen time and peak extra memory."""
    fits = {}
    for quantity, benchmark in ((TIME, SEQ_LEN_TIME), (MEMORY, SEQ_LEN_MEMORY)):
        for dtype in DTYPES:
            for kernel in kernels_in(run, benchmark):
                fits[quantity, dtype, kernel] = analysis.fit_power_law(
                    *seq_len_series(run, benchmark, kernel, dtype))
    return fits


def out_of_memory(run, fits):
    """For each materialising kernel and dtype: (fitted n at RAM or NaN, exact largest n)."""
    ram = run.ram_bytes
    return {(kernel, dtype): (fit.solve(ram) if fit and fit.b > 0 else math.nan,
                              analysis.largest_fitting_seq_len(kernel, ITEMSIZE[dtype], ram))
            for (quantity, dtype, kernel), fit in fits.items()
            if quantity == MEMORY and analysis.materialises(kernel) and not _missing(ram)}


def _pyplot():
    """pyplot on the Agg backend, imported on first use so that ``import kernels`` stays light."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot
    return pyplot


def ram_text(run):
    return "unknown" if _missing(run.ram_bytes) else format_bytes(run.ram_bytes)


def machine_caption(run):
    machine = run.machine
    return (f"{machine.get('machine', '?')}: {machine.get('cpu', '?')}, {machine.get('num_cpu', '?')} CPUs, "
            f"{ram_text(run)} RAM; commit {run.commit_hash[:8]}, {run.date:%Y-%m-%d}")


def kernel_styles(run):
    """name -> line style, the same in every plot; the external peer dashed."""
    names = kernel_order(list(KERNELS) + [v for b in BENCHMARKS for v in run.param_values(b, "kernel")])
    return {name: dict(color=f"C{i % 10}", linestyle="--" if is_external(name) else "-",
                       marker="o", markersize=4)
            for i, name in enumerate(names)}


def kernel_label(kernel):
    return f"{kernel} (external)" if is_external(kernel) else kernel


def fit_label(kernel, fit):
    if fit is None:
        return f"{kernel_label(kernel)}  (too few points to fit)"
    return f"{kernel_label(kernel)}  $n^{{{fit.b:.2f}}}$ (fit {fit.n_min:,}–{fit.n_max:,})"


def _figure(run, title):
    """One panel per dtype under a title that names the machine."""
    fig, axes = _pyplot().subplots(1, len(DTYPES), figsize=(13, 5.5), squeeze=False)
    fig.suptitle(f"{title}\n{machine_caption(run)}", fontsize=11)
    return fig, axes[0]


def _save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)


def _seq_len_axis(ax, low, high):
    """Log base-2 x axis from low to high with power-of-two ticks labelled 256, 1k, 64k."""
    ax.set_xscale("log", base=2)
    powers = [2 ** p for p in range(int(math.floor(math.log2(low))), int(math.ceil(math.log2(high))) + 1)]
    ticks = powers[::math.ceil(len(powers) / 10)]  # at most ten labels
    ax.set_xticks(ticks, [f"{n // 1024}k" if n >= 1024 else str(n) for n in ticks])
    ax.set_xlabel("sequence length n (tokens; log scale, k = 1024)")


def _draw_kernels(ax, run, benchmark, dtype, styles, label, to_y=lambda seq_len, value: value):
    """One line per kernel with data in this dtype (NaN leaves a gap); the n drawn."""
    drawn = []
    for kernel in kernels_in(run, benchmark):
        seq_lens, values = seq_len_series(run, benchmark, kernel, dtype)
        # every axis here is logarithmic: a zero is a gap, like a missing value
        y = [math.nan if _missing(v) or v <= 0 else to_y(n, v) for n, v in zip(seq_lens, values)]
        if all(_missing(v) for v in y):
            continue
        ax.plot(seq_lens, y, label=label(kernel), **styles[kernel])
        drawn += [n for n, v in zip(seq_lens, y) if not _missing(v)]
    return drawn


def _no_data(ax, dtype):
    ax.set_title(dtype)
    ax.set_axis_off()
    ax.text(0.5, 0.5, "no data in these results", transform=ax.transAxes, ha="center")


def _finish(ax, dtype, ylabel):
    ax.set_title(dtype)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")


def plot_time(run, fits, path):
    """time_vs_n.png: seconds per call against n, log-log, fitted exponents, an n² guide."""
    fig, axes = _figure(run, f"Attention time per call vs sequence length (one head, d = {HEAD_DIM}, full)")
    styles = kernel_styles(run)
    for dtype, ax in zip(DTYPES, axes):
        drawn = _draw_kernels(ax, run, SEQ_LEN_TIME, dtype, styles,
                              lambda kernel: fit_label(kernel, fits[TIME, dtype, kernel]))
        if not drawn:
            _no_data(ax, dtype)
            continue
        _draw_n_squared_guide(ax, run, dtype, min(drawn), max(drawn))
        _seq_len_axis(ax, min(drawn), max(drawn))
        ax.set_yscale("log")
        _finish(ax, dtype, "time per call (seconds, log scale)")
    _save(fig, path)


def _draw_n_squared_guide(ax, run, dtype, low, high):
    """A grey n² line through the median time at the largest n, for judging slopes by eye."""
    at_high = [run.value(SEQ_LEN_TIME, kernel=k, seq_len=high, dtype=dtype)
               for k in kernels_in(run, SEQ_LEN_TIME)]
    anchor = sorted(v for v in at_high if not _missing(v))
    if anchor:
        middle = anchor[len(anchor) // 2]
        ax.plot([low, high], [middle * (low / high) ** 2, middle], color="grey", linestyle=":",
                linewidth=1.5, label="∝ n² (guide)")


def _bytes_axis(ax):
    """Log y axis in bytes, ticks every factor 32 labelled 1 KiB, 32 KiB, 1 MiB, ..."""
    ticker = _pyplot().matplotlib.ticker
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_locator(ticker.LogLocator(base=32))
    ax.yaxis.set_minor_locator(ticker.LogLocator(base=2))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(
        lambda value, _: format_bytes(value).replace(".0 ", " ")))


def plot_memory(run, fits, path):
    """memory_vs_n.png: peak extra bytes per call against n, RAM, where n² meets RAM."""
    fig, axes = _figure(run, f"Peak extra memory of one call vs sequence length (one head, d = {HEAD_DIM}, full)")
    styles = kernel_styles(run)
    walls = out_of_memory(run, fits)
    for dtype, ax in zip(DTYPES, axes):
        drawn = _draw_kernels(ax, run, SEQ_LEN_MEMORY, dtype, styles,
                              lambda kernel: fit_label(kernel, fits[MEMORY, dtype, kernel]))
        if not drawn:
            _no_data(ax, dtype)
            continue
        _bytes_axis(ax)
        if not _missing(run.ram_bytes):
            ax.axhline(run.ram_bytes, color="black", linewidth=1, label=f"RAM {ram_text(run)}")
            ax.set_ylim(top=run.ram_bytes * 16)  # room above the RAM line for the labels
        for (kernel, wall_dtype), (fitted_n, _) in walls.items():
            if wall_dtype == dtype and not _missing(fitted_n):
                _draw_wall(ax, fits[MEMORY, dtype, kernel], fitted_n, run.ram_bytes, kernel, styles)
                drawn.append(fitted_n)
        _seq_len_axis(ax, min(drawn), max(drawn))
        _finish(ax, dtype, "peak extra memory per call (bytes, log scale)")
    _save(fig, path)


def _draw_wall(ax, fit, fitted_n, ram_bytes, kernel, styles):
    """The fit extrapolated (dotted) from the last measured n to RAM, and an X where they meet."""
    seq_lens = [fit.n_max * (fitted_n / fit.n_max) ** (i / 20) for i in range(21)]
    colour = styles[kernel]["color"]
    ax.plot(seq_lens, fit(seq_lens), color=colour, linestyle=":", linewidth=1)
    ax.plot([fitted_n], [ram_bytes], marker="X", markersize=10, color=colour, linestyle="none")
    ax.annotate(f"{kernel}: out of memory at n ≈ {fitted_n:,.0f}", (fitted_n, ram_bytes),
                textcoords="offset points", xytext=(-10, 6), ha="right", va="bottom", fontsize=8,
                color=colour)


def plot_throughput(run, path):
    """throughput_vs_n.png: GFLOP/s against n, with the measured BLAS gemm as ceiling."""
    fig, axes = _figure(run, f"Attention throughput vs sequence length (one head, d = {HEAD_DIM}, full)")
    styles = kernel_styles(run)
    for dtype, ax in zip(DTYPES, axes):
        drawn = _draw_kernels(ax, run, SEQ_LEN_TIME, dtype, styles, kernel_label,
                              to_y=lambda seq_len, seconds: gflops(seconds, seq_len))
        if not drawn:
            _no_data(ax, dtype)
            continue
        gemm, benchmark = GEMM[dtype]
        ceiling = run.value(benchmark)
        if not _missing(ceiling):
            ax.axhline(ceiling, color="black", linestyle="-.", linewidth=1,
                       label=f"{gemm} of the installed BLAS: {ceiling:.1f} GFLOP/s")
        _seq_len_axis(ax, min(drawn), max(drawn))
        ax.set_yscale("log")
        _finish(ax, dtype, "GFLOP/s (4·n²·d flops per call ÷ time; log scale)")
    _save(fig, path)


# -- REPORT.md --------------------------------------------------------------------------

def _text(value, fmt):
    return "n/a" if _missing(value) else fmt(value)


def library_versions():
    """'numpy 2.4.6, ..., torch not installed', from the current environment's metadata."""
    def version(name):
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            return f"{name} not installed"
    return ", ".join(version(name) for name in LIBRARIES)


def header(run):
    machine = run.machine
    budget = run.value(THREAD_BUDGET)
    ceiling = ", ".join(f"{gemm} {_text(run.value(benchmark), lambda v: f'{v:.1f} GFLOP/s')}"
                        for gemm, benchmark in GEMM.values())
    return "\n".join([
        f"- **Measured:** commit `{run.commit_hash}` (committed {run.date:%Y-%m-%d %H:%M} UTC), "
        f"last benchmark started {_text(run.measured_at, lambda t: f'{t:%Y-%m-%d %H:%M} UTC')}; asv environment "
        f"`{run.env_name}` (results file `{run.path.parent.name}/{run.path.name}`).",
        f"- **Machine:** {machine.get('machine', '?')}: {machine.get('cpu', '?')}, "
        f"{machine.get('num_cpu', '?')} CPUs, {ram_text(run)} RAM, {machine.get('os', '?')} "
        f"({machine.get('arch', '?')}).",
        f"- **Thread budget:** {_text(budget, lambda v: f'{v:.0f} threads')} for every kernel "
        "(BLAS, Numba and OpenMP alike).",
        f"- **Ceiling, measured in the same run:** {ceiling} (installed BLAS); memory bandwidth "
        f"{_text(run.value(BANDWIDTH), lambda v: f'{v:.1f} GB/s')}.",
        f"- **Versions:** {library_versions()} (read with importlib.metadata from the environment "
        f"that wrote this report); Python `{machine.get('python', '?')}` (from the results).",
    ])


def out_of_memory_text(run, fits):
    """One line per materialising kernel and dtype: where its memory meets RAM."""
    lines = []
    for (kernel, dtype), (fitted_n, exact_n) in out_of_memory(run, fits).items():
        if _missing(fitted_n):
            fitted = "no fit that grows with n"
        else:
            need = KERNELS[kernel].workspace_bytes(1, round(fitted_n), round(fitted_n), HEAD_DIM,
                                                   HEAD_DIM, ITEMSIZE[dtype], False)
            fitted = (f"the fit reaches RAM at n ≈ {fitted_n:,.0f} (its exact workspace there: "
                      f"{format_bytes(need)})")
        lines.append(f"- **{kernel}, {dtype}:** {fitted}; by the exact workspace formula the "
                     f"largest n that fits in {ram_text(run)} is {exact_n:,}.")
    return "\n".join(lines) or "No materialising kernel has memory measurements."


def _case(record):
    params = ", ".join(f"{name}={value!r}" for name, value in record.params.items())
    return f"`{record.benchmark}`" + (f" ({params})" if params else "")


def gaps_text(run):
    """What is missing and why: failed cases, skipped count, benchmarks absent from the run."""
    failed = [_case(r) for r in run.records if r.status == analysis.FAILED]
    skipped = sum(r.status == analysis.SKIPPED for r in run.records)
    absent = [f"`{b}`" for b in BENCHMARKS if not run.select(b)]
    return "\n".join([
        f"- Failed (the benchmark raised; see asv's log): {len(failed)}" + "".join(
            f"\n  - {case}" for case in failed),
        f"- Skipped by the benchmarks (a size or dtype a kernel does not take): {skipped} cases.",
        "- Not in the results file: " + (", ".join(absent) if absent else "none") + ".",
    ])


def build_tables(run, fits):
    tables = (headline_table(run), seq_len_table(run), multihead_table(run), fits_table(fits),
              rung_speedup_table(run), causal_table(run), precision_table(run), threads_table(run),
              side_by_side_table(run), memory_wall_table(run), startup_table(run), goals_table(run))
    return {table.name: table for table in tables}


def render(run, fits, tables):
    one, every = thread_counts(run)
    headline = f"{HEADS} heads, n = {headline_seq_len(run):,}"
    return "\n\n".join([
        "# Self-attention on the CPU: scaling report",
        header(run),
        f"## Headline: {headline}, d = {HEAD_DIM}, full attention",
        "GFLOP/s counts 4·n²·d flops per head (half that when causal) over asv's time per call; "
        f"speed-up over numpy is its time ÷ the kernel's. All cases in [multihead.csv](multihead.csv).",
        tables["headline"].markdown(),
        "## Time against sequence length",
        "![Time per call against n, log-log, one line per kernel](time_vs_n.png)",
        "Attention does 4·n²·d flops, so time grows as n² (the dotted guide) once n is large; the "
        "rungs differ by the vertical distance between lines. Exponents fitted for n ≥ "
        f"{analysis.FIT_MIN_N:,} are in the legend and below; every point is in [seq_len.csv](seq_len.csv).",
        "## Memory against sequence length",
        "![Peak extra memory per call against n, log-log, with the machine's RAM](memory_vs_n.png)",
        "Peak extra memory of one call beyond its inputs: ≈ n² for a kernel that materialises the "
        "n × n scores, ≈ n for the tiled ones. The O(n²) wall, extrapolated from the fit to this "
        f"machine's RAM (one head, d = {HEAD_DIM}, full):",
        out_of_memory_text(run, fits),
        "## Throughput against sequence length",
        "![GFLOP/s against n with the BLAS gemm ceiling](throughput_vs_n.png)",
        "GFLOP/s of one head against the sgemm (float32) and dgemm (float64) throughput of the "
        "installed BLAS, measured in the same run: the most a kernel built on matrix products can expect.",
        "## Fitted exponents",
        f"y ≈ a·n^b by least squares on log-log axes over the points with n ≥ {analysis.FIT_MIN_N:,} "
        f"(at least {analysis.FIT_MIN_POINTS}); also [fits.csv](fits.csv).",
        tables["fits"].markdown(),
        "## Speed-up between rungs",
        "Time of a rung ÷ time of the next, one head, at the largest n where both ran.",
        tables["rung_speedups"].markdown(),
        "## Causal against full",
        f"Causal time ÷ full time, {headline}: 0.5 when a kernel skips "
        "every masked tile, 1 when it computes them anyway.",
        tables["causal_vs_full"].markdown(),
        "## float64 against float32",
        f"float64 time ÷ float32 time, {headline}.",
        tables["float64_vs_float32"].markdown(),
        "## Thread scaling",
        f"GFLOP/s with {_text(one, fmt_count)} and with {_text(every, fmt_count)} threads "
        f"(float32, {headline}, full); per thread = speed-up ÷ threads.",
        tables["thread_scaling"].markdown(),
        "## Side by side",
        "A kernel's speed over a baseline, timed side by side: the two calls alternate (each "
        "going first in turn) and the figure is the median over the rounds of the baseline's "
        "time ÷ the kernel's, so that load coming and going on a shared machine slows both "
        "alike. The speed goals below are these ratios.",
        tables["side_by_side"].markdown(),
        f"## The memory wall: n = {WALL_SEQ_LEN:,}",
        f"float64, one head, causal: what the tiled kernels need where the n × n scores cannot exist.",
        tables["memory_wall"].markdown(),
        "## Startup",
        tables["startup"].markdown(),
        "## Goals",
        tables["goals"].markdown(),
        "## Gaps",
        gaps_text(run),
    ]) + "\n"
