"""The goals section: the project's targets, each with where it comes from, against what
the run measured.

Speed against another kernel is always a side-by-side ratio (``PeerSpeedup``,
``NumpySpeedup``), never a ratio of two separately timed benchmarks.  The targets were
set by the performance issue (#4) and the decode issue (#11), measured on this
project's 2-core machine against PyTorch's CPU attention and the installed BLAS;
``source`` says why each number is what it is.
"""
import math
from dataclasses import dataclass
from typing import Callable

from .. import bench_spec as spec
from .decode import cache_read_fraction
from .document import Section
from .multi_head import headline_shape, multihead_gflops, multihead_seconds
from .side_by_side import numpy_speedup, peer_speedup, speedup_seq_len
from .tables import Column, Table, fmt_count, fmt_number, missing, ratio, text
from .thread_scaling import thread_counts, thread_gflops


@dataclass(frozen=True)
class Goal:
    """``what`` may name {shape} (the headline's heads and n), {peer}, {numpy_n} and
    {decode_n} (the largest prefix the cached decode ran)."""

    what: str
    measure: Callable     # run -> the measured value, NaN when missing
    target: float
    at_least: bool        # met when measured ≥ target (else when measured ≤ target)
    source: str

    def met(self, measured):
        if missing(measured):
            return math.nan
        return "yes" if (measured >= self.target) == self.at_least else "no"


def _peer(kernel, dtype, all_threads):
    def measure(run):
        one, every = thread_counts(run, spec.PEER_SPEEDUP)
        return peer_speedup(run, kernel, every if all_threads else one, dtype)
    return measure


def _decode_over_numpy(kernel):
    """The worst, over every n, of the kernel's cached per-token time ÷ numpy's."""
    def measure(run):
        ratios = [ratio(run.value(spec.DECODE_CACHED, kernel=kernel, seq_len=n),
                        run.value(spec.DECODE_CACHED, kernel="numpy", seq_len=n))
                  for n in run.seq_lens(spec.DECODE_CACHED)]
        ratios = [r for r in ratios if not missing(r)]
        return max(ratios) if ratios else math.nan
    return measure


def _largest_decode(run):
    return max(run.seq_lens(spec.DECODE_CACHED), default=math.nan)


def _c_tiled_thread_speedup(run):
    one, every = thread_counts(run)
    return ratio(thread_gflops(run, "c_tiled", every), thread_gflops(run, "c_tiled", one))


SIDE_BY_SIDE = "timed side by side"
LEAD = ("#4: a lead over PyTorch's flash-attention CPU kernel, the best CPU attention "
        "measured, larger than a shared machine's run-to-run noise")
GOALS = (
    Goal("c_tiled speed over {peer}, float32, {shape}, all threads, " + SIDE_BY_SIDE,
         _peer("c_tiled", "float32", True), 1.2, True, LEAD),
    Goal("c_tiled speed over {peer}, float32, {shape}, one thread, " + SIDE_BY_SIDE,
         _peer("c_tiled", "float32", False), 1.2, True, LEAD),
    Goal("c_tiled speed over {peer}, float64, {shape}, all threads, " + SIDE_BY_SIDE,
         _peer("c_tiled", "float64", True), 1.2, True, LEAD + "; float64 gets the same care"),
    Goal("numba_tiled speed over {peer}, float32, {shape}, all threads, " + SIDE_BY_SIDE,
         _peer("numba_tiled", "float32", True), 0.6, True,
         "#4: the compiled rung close behind, without SVML or intrinsics of its own choosing"),
    Goal("c_tiled ÷ sgemm GFLOP/s, float32, {shape}",
         lambda run: ratio(multihead_gflops(run, "c_tiled", "float32"), run.value(spec.SGEMM)),
         0.85, True,
         "#4: both products are gemm-shaped; the softmax's exp and rescaling cost about a tenth"),
    *(Goal(kernel + " speed over numpy, float32, one head, n = {numpy_n}, " + SIDE_BY_SIDE,
           lambda run, kernel=kernel: numpy_speedup(run, kernel), 3, True,
           "#4: tiling pays once numpy's n × n scores have left the caches")
      for kernel in spec.TILED),
    Goal("c_tiled causal ÷ full time, float32, {shape}",
         lambda run: ratio(multihead_seconds(run, "c_tiled", "float32", causal=True),
                           multihead_seconds(run, "c_tiled", "float32")),
         0.6, False, "#4: half the scores, plus the tiles crossing the diagonal"),
    Goal("c_tiled all threads ÷ one thread GFLOP/s, float32, {shape}", _c_tiled_thread_speedup,
         1.8, True, "#4: 90% parallel efficiency on this project's 2-core machines"),
    Goal("c_tiled cached decode, n = {decode_n}: cache read rate ÷ streaming-read bandwidth",
         lambda run: cache_read_fraction(run, "c_tiled"), 0.75, True,
         "#11: one query reads the cached K and V once, so a step is bound by bandwidth"),
    Goal("c_tiled cached decode speed over {peer}, n = " + f"{spec.DECODE_PEER_SEQ_LEN:,}, " + SIDE_BY_SIDE,
         lambda run: run.value(spec.DECODE_PEER_SPEEDUP, kernel="c_tiled"), 1.0, True,
         "#11: at least level with the fastest peer on single-query decode"),
    Goal("numba_tiled cached decode speed over {peer}, n = " + f"{spec.DECODE_PEER_SEQ_LEN:,}, " + SIDE_BY_SIDE,
         lambda run: run.value(spec.DECODE_PEER_SPEEDUP, kernel="numba_tiled"), 0.7, True,
         "#11: the compiled rung close behind on single-query decode"),
    *(Goal(kernel + " cached decode time ÷ numpy's, the worst n", _decode_over_numpy(kernel), 1.0, False,
           "#11: with one query the tiled rungs split the keys across threads, never slower than numpy")
      for kernel in spec.TILED),
    Goal("tiny call (one head, n = 64): {peer} time ÷ c_tiled time",
         lambda run: ratio(run.value(spec.TINY_CALL, kernel=spec.PEER), run.value(spec.TINY_CALL, kernel="c_tiled")),
         2.0, True, "#11: a call this small should not wake a thread pool: a fixed cost of microseconds"),
    Goal("first Numba call with an empty cache (compile), seconds",
         lambda run: run.value(spec.COMPILE_SECONDS), 10, False,
         "#4: a first run a user will wait for once"),
    Goal("first Numba call from the cache, seconds",
         lambda run: run.value(spec.CACHED_CALL_SECONDS), 1, False,
         "#4: every later process starts without noticeable delay"),
    Goal("import kernels, seconds", lambda run: run.value(spec.IMPORT_SECONDS), 1, False,
         "#4: importing the package stays light (rungs and peers load on first use)"),
)


def goals(run):
    fields = dict(shape=headline_shape(run), peer=spec.PEER,
                  numpy_n=text(speedup_seq_len(run, spec.NUMPY_SPEEDUP), fmt_count),
                  decode_n=text(_largest_decode(run), fmt_count))
    rows = []
    for goal in GOALS:
        measured = goal.measure(run)
        rows.append([goal.what.format(**fields), measured,
                     ("≥ " if goal.at_least else "≤ ") + fmt_number(goal.target),
                     goal.met(measured), goal.source])
    table = Table("goals", (Column("goal", "goal"), Column("measured", "measured", fmt_number),
                            Column("target", "target"), Column("met", "met"),
                            Column("source", "where the target comes from")), rows)
    return Section("Goals", [
        "Each target was set by the project's performance (#4) or decode (#11) issue on a "
        "2-core machine; "
        "speed against another kernel is the side-by-side ratio above.",
        table,
    ])
