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
WALL_MEMORY = "bench_attention.MemoryWall.track_peak_extra_bytes"
WALL_SECONDS = "bench_attention.MemoryWall.track_seconds"
SGEMM = "bench_machine.Machine.track_sgemm_gflops"
DGEMM = "bench_machine.Machine.track_dgemm_gflops"
BANDWIDTH = "bench_machine.Machine.track_memory_bandwidth"
THREAD_BUDGET = "bench_machine.Machine.track_thread_budget"
IMPORT_SECONDS = "bench_machine.Startup.track_import_seconds"
COMPILE_SECONDS = "bench_machine.Startup.track_numba_compile_seconds"
CACHED_CALL_SECONDS = "bench_machine.Startup.track_numba_cached_call_seconds"
BENCHMARKS = (SEQ_LEN_TIME, SEQ_LEN_MEMORY, MULTI_HEAD_TIME, THREADS_GFLOPS, WALL_MEMORY,
              WALL_SECONDS, SGEMM, DGEMM, BANDWIDTH, THREAD_BUDGET, IMPORT_SECONDS,
              COMPILE_SECONDS, CACHED_CALL_SECONDS)

# The configurations the benchmarks fix (see benchmarks/bench_attention.py).
DTYPES = ("float32", "float64")
ITEMSIZE = {"float32": 4, "float64": 8}
GEMM = {"float32": ("sgemm", SGEMM), "float64": ("dgemm", DGEMM)}
HEADS = 8                 # MultiHead and Threads
HEADLINE_SEQ_LEN = 4096   # MultiHead's and Threads' n
WALL_SEQ_LEN = 65536      # MemoryWall: float64, one head, causal
PEER = "torch_sdpa"
GOAL_SEQ_LEN = 8192       # the tiled-vs-numpy goal, one head (SeqLen)

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
    for table in (seq_len_table(run), multihead_table(run)):
        table.write_csv(out_dir)
    report = out_dir / "REPORT.md"
    report.write_text(render(run, fits, out_dir))
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
    return f"{value:.2f}×"


def fmt_percent(value):
    return f"{value:.0%}"


def fmt_count(value):
    return f"{value:,}"


def fmt_exponent(value):
    return f"{value:.2f}"


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


def multihead_seconds(run, kernel, dtype, causal=False, seq_len=HEADLINE_SEQ_LEN):
    return run.value(MULTI_HEAD_TIME, kernel=kernel, seq_len=seq_len, dtype=dtype, causal=causal)


def multihead_gflops(run, kernel, dtype, causal=False, seq_len=HEADLINE_SEQ_LEN):
    """GFLOP/s from MultiHead's time, so that a table's time and throughput agree."""
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
    """MultiHead at n = 4096, full: time, GFLOP/s, share of BLAS gemm, against numpy and the peer."""
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
    """Causal time ÷ full time per kernel (MultiHead, n = 4096): ideally 0.5."""
    rows = [[kernel] + [ratio(multihead_seconds(run, kernel, dtype, causal=True),
                              multihead_seconds(run, kernel, dtype)) for dtype in DTYPES]
            for kernel in kernels_in(run, MULTI_HEAD_TIME)]
    return Table("causal_vs_full", (Column("kernel", "kernel"),) + tuple(
        Column(f"{dtype}_causal_over_full", f"{dtype}: causal ÷ full time", fmt_ratio)
        for dtype in DTYPES), rows)


def precision_table(run):
    """float64 time ÷ float32 time per kernel (MultiHead, n = 4096): twice the bytes per value."""
    rows = [[kernel] + [ratio(multihead_seconds(run, kernel, "float64", causal),
                              multihead_seconds(run, kernel, "float32", causal))
                        for causal in (False, True)]
            for kernel in kernels_in(run, MULTI_HEAD_TIME)]
    return Table("float64_vs_float32", (
        Column("kernel", "kernel"), Column("full", "full: float64 ÷ float32 time", fmt_ratio),
        Column("causal", "causal: float64 ÷ float32 time", fmt_ratio)), rows)


def thread_counts(run):
    """(one thread, all threads) as the Threads benchmark ran them; NaN when it did not run."""
    counts = run.param_values(THREADS_GFLOPS, "threads")
    return (counts[0], counts[-1]) if counts else (math.nan, math.nan)


def thread_gflops(run, kernel, threads):
    return run.value(THREADS_GFLOPS, kernel=kernel, threads=threads)


def threads_table(run):
    """Threads (float32, 8 heads, n = 4096, full): GFLOP/s on one thread and on all."""
    one, every = thread_counts(run)
    rows = []
    for kernel in kernels_in(run, THREADS_GFLOPS):
        single, parallel = thread_gflops(run, kernel, one), thread_gflops(run, kernel, every)
        speedup = ratio(parallel, single)
        rows.append([kernel, single, parallel, speedup, ratio(speedup, every)])
    return Table("thread_scaling", (
        Column("kernel", "kernel"), Column("gflops_one_thread", "GFLOP/s, 1 thread", fmt_gflops),
        Column("gflops_all_threads", f"GFLOP/s, {fmt_count(every)} threads", fmt_gflops),
        Column("speedup", "speed-up", fmt_ratio),
        Column("efficiency", "per thread", fmt_percent)), rows)


def wall_need(kernel, ram_bytes):
    """For a materialising kernel: why it cannot run the memory wall, in words."""
    if not analysis.materialises(kernel):
        return ""
    need = KERNELS[kernel].workspace_bytes(1, WALL_SEQ_LEN, WALL_SEQ_LEN, HEAD_DIM, HEAD_DIM,
                                           ITEMSIZE["float64"], True)
    relation = ">" if need > ram_bytes else "≤"
    return f"would need {format_bytes(need)} {relation} RAM {format_bytes(ram_bytes)}"


def memory_wall_table(run):
    """MemoryWall (n = 65536, float64, one head, causal): peak extra memory and seconds."""
    rows = [[kernel, run.value(WALL_MEMORY, kernel=kernel), run.value(WALL_SECONDS, kernel=kernel),
             wall_need(kernel, run.ram_bytes)]
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
    at_least: bool      # the measured value should be ≥ target (else ≤)
    target: float
    fmt: Callable = fmt_ratio

    @property
    def met(self):
        if _missing(self.measured):
            return math.nan
        return "yes" if (self.measured >= self.target) == self.at_least else "no"


def goals_table(run):
    """The project's targets against what was measured; n/a where the data is missing."""
    one, every = thread_counts(run)
    f32 = "float32"
    numpy_time = run.value(SEQ_LEN_TIME, kernel="numpy", seq_len=GOAL_SEQ_LEN, dtype=f32)

    def peer_ratio(kernel, dtype):
        return ratio(multihead_gflops(run, kernel, dtype), multihead_gflops(run, PEER, dtype))

    def over_numpy(kernel):
        return ratio(numpy_time, run.value(SEQ_LEN_TIME, kernel=kernel, seq_len=GOAL_SEQ_LEN, dtype=f32))

    headline = f"GFLOP/s, {HEADS} heads, n = {HEADLINE_SEQ_LEN:,}"
    goals = [
        Goal(f"c_tiled ÷ {PEER}, {headline}, float32, all threads", peer_ratio("c_tiled", f32), True, 1.2),
        Goal(f"c_tiled ÷ {PEER}, {headline}, float32, one thread",
             ratio(thread_gflops(run, "c_tiled", one), thread_gflops(run, PEER, one)), True, 1.2),
        Goal(f"c_tiled ÷ {PEER}, {headline}, float64", peer_ratio("c_tiled", "float64"), True, 1.2),
        Goal(f"numba_tiled ÷ {PEER}, {headline}, float32", peer_ratio("numba_tiled", f32), True, 0.6),
        Goal(f"c_tiled ÷ sgemm, {headline}, float32",
             ratio(multihead_gflops(run, "c_tiled", f32), run.value(SGEMM)), True, 0.85),
        *(Goal(f"{kernel} speed-up over numpy, one head, n = {GOAL_SEQ_LEN:,}, float32",
               over_numpy(kernel), True, 3) for kernel in ("numba_tiled", "c_tiled")),
        Goal(f"c_tiled causal ÷ full time, n = {HEADLINE_SEQ_LEN:,}, float32",
             ratio(multihead_seconds(run, "c_tiled", f32, causal=True),
                   multihead_seconds(run, "c_tiled", f32)), False, 0.6),
        Goal("c_tiled all threads ÷ one thread, GFLOP/s",
             ratio(thread_gflops(run, "c_tiled", every), thread_gflops(run, "c_tiled", one)), True, 1.8),
        Goal("first Numba call, empty cache (compile)", run.value(COMPILE_SECONDS), False, 10, fmt_seconds),
        Goal("first Numba call, cached", run.value(CACHED_CALL_SECONDS), False, 1, fmt_seconds),
        Goal("import kernels", run.value(IMPORT_SECONDS), False, 1, fmt_seconds),
    ]
    rows = [[g.what, g.measured, ("≥ " if g.at_least else "≤ ") + g.fmt(g.target), g.met] for g in goals]
    formats = {id(row): goal.fmt for row, goal in zip(rows, goals)}
    return Table("goals", (
        Column("goal", "goal"), Column("measured", "measured", lambda v: v),
        Column("target", "target"), Column("met", "met")),
        [[what, _missing(v) and v or formats[id(row)](v), target, met]
         for row in rows for what, v, target, met in [row]])


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
    return {(kernel, dtype): (fit.solve(ram) if fit else math.nan,
                              analysis.largest_fitting_seq_len(kernel, ITEMSIZE[dtype], ram))
            for (quantity, dtype, kernel), fit in fits.items()
            if quantity == MEMORY and analysis.materialises(kernel) and not _missing(ram)}
