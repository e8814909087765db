"""The side-by-side section (``PeerSpeedup``, ``NumpySpeedup``, ``DecodePeerSpeedup``): a kernel's speed over a
baseline, the two calls alternating, so that a shared machine's load slows both alike."""
import math

from .. import bench_spec as spec
from .document import Section
from .tables import Column, Table, fmt_count, fmt_ratio


def speedup_seq_len(run, benchmark):
    """The one n a side-by-side benchmark ran at (NaN if it did not run)."""
    return max(run.param_values(benchmark, "seq_len"), default=math.nan)


def peer_speedup(run, kernel, threads, dtype):
    """PeerSpeedup: the kernel's speed over the peer (8 heads, full, the headline n)."""
    return run.value(spec.PEER_SPEEDUP, kernel=kernel, seq_len=speedup_seq_len(run, spec.PEER_SPEEDUP),
                     threads=threads, dtype=dtype)


def numpy_speedup(run, kernel):
    """NumpySpeedup: the kernel's speed over numpy (one head, full, float32)."""
    return run.value(spec.NUMPY_SPEEDUP, kernel=kernel, seq_len=speedup_seq_len(run, spec.NUMPY_SPEEDUP))


def side_by_side(run):
    peer_n = speedup_seq_len(run, spec.PEER_SPEEDUP)
    rows = [[kernel, spec.PEER, dtype, spec.HEADS, peer_n, threads,
             peer_speedup(run, kernel, threads, dtype)]
            for kernel in run.kernels(spec.PEER_SPEEDUP)
            for dtype in spec.DTYPES
            for threads in run.param_values(spec.PEER_SPEEDUP, "threads")]
    rows += [[kernel, "numpy", spec.NUMPY_SPEEDUP_DTYPE, 1, speedup_seq_len(run, spec.NUMPY_SPEEDUP),
              run.value(spec.THREAD_BUDGET), numpy_speedup(run, kernel)]
             for kernel in run.kernels(spec.NUMPY_SPEEDUP)]
    rows += [[kernel, f"{spec.PEER}, one cached query", spec.DECODE_DTYPE, spec.HEADS,
              spec.DECODE_PEER_SEQ_LEN, run.value(spec.THREAD_BUDGET),
              run.value(spec.DECODE_PEER_SPEEDUP, kernel=kernel)]
             for kernel in run.kernels(spec.DECODE_PEER_SPEEDUP)]
    table = Table("side_by_side", (
        Column("kernel", "kernel"), Column("baseline", "over"), Column("dtype", "dtype"),
        Column("heads", "heads"), Column("seq_len", "n", fmt_count),
        Column("threads", "threads", lambda v: f"{v:.0f}"), Column("speedup", "speed-up", fmt_ratio)),
        rows)
    return Section("Side by side", [
        "A kernel's speed over a baseline, timed side by side: the two calls alternate (each "
        "going first in turn) and the figure is the median over the rounds of the baseline's "
        "time ÷ the kernel's, so that load coming and going on a shared machine slows both "
        "alike. The speed goals below are these ratios.",
        table,
    ])
