"""The side-by-side section (``NumpySpeedup``): a tiled kernel's speed over the numpy rung,
the two calls alternating, so that a shared machine's load slows both alike.  (Against
the peers: the peers section.)"""
import math

from .. import bench_spec as spec
from ..output import Column, Table, fmt_count, fmt_ratio
from .document import Section


def numpy_speedup_seq_len(run):
    """The one n NumpySpeedup ran at (NaN if it did not run)."""
    return max(run.param_values(spec.NUMPY_SPEEDUP, "seq_len"), default=math.nan)


def numpy_speedup(run, kernel):
    """NumpySpeedup: the kernel's speed over numpy (one head, full, float32)."""
    return run.value(spec.NUMPY_SPEEDUP, kernel=kernel, seq_len=numpy_speedup_seq_len(run))


def side_by_side(run):
    rows = [[kernel, spec.NUMPY_SPEEDUP_DTYPE, 1, numpy_speedup_seq_len(run), run.value(spec.THREAD_BUDGET),
             numpy_speedup(run, kernel)]
            for kernel in run.kernels(spec.NUMPY_SPEEDUP)]
    table = Table("side_by_side", (
        Column("kernel", "kernel"), Column("dtype", "dtype"), Column("heads", "heads"),
        Column("seq_len", "n", fmt_count), Column("threads", "threads", lambda v: f"{v:.0f}"),
        Column("speedup", "speed-up over numpy", fmt_ratio)), rows)
    return Section("Side by side: tiling against the n × n scores", [
        "A tiled kernel's speed over the numpy rung, timed side by side: the two calls "
        "alternate (each going first in turn) and the figure is the median over the rounds "
        "of numpy's time ÷ the kernel's, so that load coming and going on a shared machine "
        "slows both alike. The speed goals below are such ratios.",
        table,
    ])
