"""The thread-scaling section (``Threads``): GFLOP/s on one thread and on the whole budget."""
import math

from .. import bench_spec as spec
from ..output import Column, Table, fmt_count, fmt_gflops, fmt_percent, fmt_ratio, ratio, text
from .ceilings import SIDE_BY_SIDE_PEAK, peak_fraction
from .document import Section
from .multi_head import headline_shape


def thread_counts(run, benchmark=spec.THREADS_GFLOPS):
    """(one thread, all threads) as ``benchmark`` ran them; NaN when it did not run."""
    counts = run.param_values(benchmark, "threads")
    return (counts[0], counts[-1]) if counts else (math.nan, math.nan)


def thread_gflops(run, kernel, threads):
    return run.value(spec.THREADS_GFLOPS, kernel=kernel, threads=threads)


def thread_scaling(run):
    one, every = thread_counts(run)
    rows = []
    for kernel in run.kernels(spec.THREADS_GFLOPS):
        single, parallel = thread_gflops(run, kernel, one), thread_gflops(run, kernel, every)
        speedup = ratio(parallel, single)
        rows.append([kernel, single, peak_fraction(run, kernel, spec.THREADS_DTYPE, one), parallel,
                     peak_fraction(run, kernel, spec.THREADS_DTYPE, every), speedup, ratio(speedup, every)])
    table = Table("thread_scaling", (
        Column("kernel", "kernel"), Column("gflops_one_thread", "GFLOP/s, 1 thread", fmt_gflops),
        Column("fraction_of_fma_peak_one_thread", "of its FMA peak", fmt_percent),
        Column("gflops_all_threads", f"GFLOP/s, {text(every, fmt_count)} threads", fmt_gflops),
        Column("fraction_of_fma_peak_all_threads", "of their FMA peak", fmt_percent),
        Column("speedup", "speed-up", fmt_ratio),
        Column("efficiency", "per thread", fmt_percent)), rows)
    return Section("Thread scaling", [
        f"GFLOP/s with {text(one, fmt_count)} and with {text(every, fmt_count)} threads "
        f"({spec.THREADS_DTYPE}, {headline_shape(run)}, full), each also as a share of the FMA peak "
        f"on as many threads, {SIDE_BY_SIDE_PEAK}; per thread = speed-up ÷ threads.",
        table,
    ])
