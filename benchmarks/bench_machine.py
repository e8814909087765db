"""The machine's ceilings and the suite's fixed costs, measured in the same run.

The FMA peak per precision (the compute roof no kernel passes; bfloat16's is the peak of its
dot products, where the CPU has AVX512-BF16), the rungs' GFLOP/s as a fraction of it timed
side by side with its loop, sgemm/dgemm throughput of the installed BLAS, named, and its
fraction of the same peak timed the same way (what a kernel doing 4·n²·d flops in matrix
products could hope for), c_tiled's tile operations alone timed the same way (the roof of
its own design) and its whole call timed beside them, copy bandwidth and streaming-read
bandwidth (what a decoding step, which reads the KV cache once, could hope for), the thread
budget every kernel ran with, and the start-up costs: ``import kernels``, Numba's first
compile, a cached first call.
"""
import functools
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

import kernels
from kernels import bench_spec as spec
from kernels import ceilings
from kernels.costs import attention_flops
from kernels.spread import asv_samples

from .common import THREAD_COUNTS, ThreadBudget, prepare, rate_samples, side_by_side


class Ceilings(ThreadBudget):
    """The compute roof: the peak (``kernels.ceilings``, csrc/fma_peak.c) of the best ISA this
    CPU runs, per precision, on one thread and on the whole budget: FMAs on float32 and
    float64, ``vdpbf16ps`` dot products on bfloat16 (skipped, naming the unit, on a CPU
    without AVX512-BF16)."""

    params = [list(spec.PEAK_DTYPES), THREAD_COUNTS]
    param_names = ["dtype", "threads"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 300

    def setup(self, dtype, threads):
        _require_peak(dtype)
        self.use_threads(threads)

    def track_fma_peak_gflops(self, dtype, threads):
        return asv_samples(ceilings.fma_peak_gflops(dtype, threads, repeats=7))

    track_fma_peak_gflops.unit = "GFLOP/s"


class PeakFraction(ThreadBudget):
    """A kernel's GFLOP/s as a fraction of its type's roof, timed side by side: each round
    one call of the kernel (8 heads at the headline n, full or causal, on ``threads``) and
    one call of the roof's peak loop (``Ceilings``', ``ceilings.roof_type``: float16, and
    bfloat16 where its dot products are not the faster unit, against float32's FMAs) doing as many flops on as many
    threads, each going first in turn; the fraction is the loop's time ÷ the kernel's, times
    the kernel's flops ÷ the loop's.  Both see the same load, as a peer ratio's calls do.
    The cases are the ones the report reads (``spec.peak_fraction_case``)."""

    params = [list(spec.PEAK_FRACTION_KERNELS), list(spec.PEAK_FRACTION_DTYPES), THREAD_COUNTS,
              list(spec.PEAK_FRACTION_CAUSAL)]
    param_names = ["kernel", "dtype", "threads", "causal"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 600

    def setup(self, kernel, dtype, threads, causal):
        why_not = spec.peak_fraction_case(kernel, dtype, threads == THREAD_COUNTS[-1], causal)
        if why_not:
            raise NotImplementedError(why_not)
        self.use_threads(threads)
        q, k, v = prepare(kernel, spec.HEADS, spec.HEADLINE_SEQ_LEN, dtype, causal)
        self.call = functools.partial(kernels.attention, q, k, v, kernel=kernel, causal=causal)
        self.flops = attention_flops(spec.HEADLINE_SEQ_LEN, spec.HEADLINE_SEQ_LEN, spec.HEAD_DIM,
                                     batch=spec.HEADS, causal=causal)
        self.peak, self.peak_flops = ceilings.peak_loop(ceilings.roof_type(dtype), self.flops, threads)
        self.peak()  # warm-up: the pool's helpers awake

    def track_fraction(self, kernel, dtype, threads, causal):
        return side_by_side(self.peak, self.call, spec.PEAK_FRACTION_ROUNDS, self.flops / self.peak_flops)

    track_fraction.unit = "fraction"


class GemmFraction(ThreadBudget):
    """NumPy's gemm (``Machine``'s 2048² product, ``ceilings.gemm_call``) as a fraction of
    its type's FMA peak, timed side by side with the peak's loop doing as many flops on as
    many threads, as ``PeakFraction`` times a kernel: the practical roof of a kernel made of
    matrix products, in the same units as the kernels' fractions.  Each side is first called
    untimed for ``spec.GEMM_FRACTION_SETTLE`` seconds every round: the BLAS's workers spin
    on after a product, and would take a core from the peak's loop."""

    params = [list(spec.DTYPES), THREAD_COUNTS]
    param_names = ["dtype", "threads"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 300

    def setup(self, dtype, threads):
        self.use_threads(threads)
        self.gemm, self.flops = ceilings.gemm_call(dtype)
        self.peak, self.peak_flops = ceilings.peak_loop(dtype, self.flops, threads)
        self.gemm()  # warm-up: the BLAS's threads and buffers, the pool's helpers
        self.peak()

    def track_fraction(self, dtype, threads):
        return side_by_side(self.peak, self.gemm, spec.GEMM_FRACTION_ROUNDS, self.flops / self.peak_flops,
                            settle=spec.GEMM_FRACTION_SETTLE)

    track_fraction.unit = "fraction"


class TileFraction(ThreadBudget):
    """c_tiled's tile operations alone (``ceilings.tile_loop``: its products and softmax on
    tiles packed once, as a large call walks each key tile) as a fraction of its type's FMA
    peak, timed side by side with the peak's loop doing as many flops on as many threads,
    as ``PeakFraction`` times c_tiled: the roof of c_tiled's design on this CPU, which its
    whole call falls short of by its packing, writing out and walk over the tiles."""

    params = [list(spec.DTYPES), THREAD_COUNTS]
    param_names = ["dtype", "threads"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 300

    def setup(self, dtype, threads):
        self.use_threads(threads)
        flops = attention_flops(spec.HEADLINE_SEQ_LEN, spec.HEADLINE_SEQ_LEN, spec.HEAD_DIM, batch=spec.HEADS)
        self.tiles, self.flops = ceilings.tile_loop(dtype, flops, threads, d=spec.HEAD_DIM)
        self.peak, self.peak_flops = ceilings.peak_loop(dtype, self.flops, threads)
        self.tiles()  # warm-up: scratch, the pool's helpers awake
        self.peak()

    def track_fraction(self, dtype, threads):
        return side_by_side(self.peak, self.tiles, spec.PEAK_FRACTION_ROUNDS, self.flops / self.peak_flops)

    track_fraction.unit = "fraction"


class CallOverTiles(ThreadBudget):
    """c_tiled's whole call (8 heads at the headline n, full, through ``kernels.attention``)
    ÷ its tile operations alone (``ceilings.tile_loop``, ``TileFraction``'s loop): per round
    one call of each, each going first in turn, the call's GFLOP/s ÷ the loop's.  What
    packing, writing out and walking the tiles cost the call, measured against the roof of
    its own design at the same moment.  Both fractions of the FMA peak move with the load
    on a shared machine (the tile operations' between 0.76 and 0.86 of it from one day to
    another on one 2-core Xeon), this ratio less (0.92-0.95 there, float32 and float64, one
    thread and two)."""

    params = [list(spec.DTYPES), THREAD_COUNTS]
    param_names = ["dtype", "threads"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 300

    def setup(self, dtype, threads):
        self.use_threads(threads)
        q, k, v = prepare("c_tiled", spec.HEADS, spec.HEADLINE_SEQ_LEN, dtype)
        self.call = functools.partial(kernels.attention, q, k, v, kernel="c_tiled")
        self.flops = attention_flops(spec.HEADLINE_SEQ_LEN, spec.HEADLINE_SEQ_LEN, spec.HEAD_DIM, batch=spec.HEADS)
        self.tiles, self.tile_flops = ceilings.tile_loop(dtype, self.flops, threads, d=spec.HEAD_DIM)
        self.tiles()  # warm-up: scratch, the pool's helpers awake

    def track_fraction(self, dtype, threads):
        return side_by_side(self.tiles, self.call, spec.PEAK_FRACTION_ROUNDS, self.flops / self.tile_flops)

    track_fraction.unit = "fraction"


def _require_peak(dtype):
    """NotImplementedError (asv: skip) naming the unit this CPU lacks for ``dtype``'s peak."""
    reason = ceilings.missing_unit(dtype)
    if reason:
        raise NotImplementedError(reason)


class Blas:
    """Which BLAS NumPy runs: its one parameter names it (library, version, threading, the
    core kernels it runs and any variable forcing them), so that the results say which BLAS
    the gemm figures are of.  ``track_sgemm_gflops_unforced``: sgemm in a child whose
    environment drops the forcing variables, the BLAS's own choice (NaN, at no cost, when
    nothing forces it: then ``Machine.track_sgemm_gflops`` is that figure)."""

    params = [[ceilings.blas_summary()]]
    param_names = ["blas"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 300

    def track_threads(self, blas):
        return ceilings.blas()["num_threads"]

    track_threads.unit = "threads"

    def track_sgemm_gflops_unforced(self, blas):
        unforced = ceilings.gemm_gflops_unforced("float32")
        return math.nan if unforced is None else asv_samples(unforced[0])

    track_sgemm_gflops_unforced.unit = "GFLOP/s"


class Machine:
    """sgemm and dgemm of NumPy's BLAS on a 2048² product (``Blas`` names it), copy and
    streaming-read bandwidth, the thread budget."""

    rounds = 1
    timeout = 300

    def setup(self):
        self.src = np.ones(2**26)  # 512 MiB, far beyond the caches
        self.dst = np.empty_like(self.src)

    def track_sgemm_gflops(self):
        return asv_samples(ceilings.gemm_gflops("float32"))

    track_sgemm_gflops.unit = "GFLOP/s"

    def track_dgemm_gflops(self):
        return asv_samples(ceilings.gemm_gflops("float64"))

    track_dgemm_gflops.unit = "GFLOP/s"

    def track_memory_bandwidth(self):
        """Copy bandwidth, one thread: bytes read plus bytes written per second."""
        np.copyto(self.dst, self.src)
        return rate_samples(2.0 * self.src.nbytes, lambda: np.copyto(self.dst, self.src))

    track_memory_bandwidth.unit = "GB/s"

    def track_read_bandwidth(self):
        """Streaming read over every thread of the budget: bytes read per second
        (``ceilings.read_loop``: a sum of 2 GiB, in parts claimed by the threads)."""
        read, nbytes = ceilings.read_loop()
        return rate_samples(nbytes, read)

    track_read_bandwidth.unit = "GB/s"

    def track_thread_budget(self):
        return kernels.threads.budget()

    track_thread_budget.unit = "threads"


# Each start-up cost is measured in a fresh interpreter, the only place it exists.
_FIRST_CALL = """
import json, time
start = time.perf_counter()
import kernels
imported = time.perf_counter()
import numpy as np
q = np.ones((1, 128, 64), np.float32)
called = time.perf_counter()
kernels.attention(q, q, q, kernel="numba_tiled")
done = time.perf_counter()
print(json.dumps({"import": imported - start, "first_call": done - called}))
"""


def _fresh_process(cache_dir):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    result = subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env, check=True,
                            capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


class Startup:
    """Seconds of ``import kernels``, Numba's first compile, and a cached first call."""

    rounds = 1
    timeout = 300

    def setup_cache(self):
        # once for the class: one fresh interpreter compiles into an empty Numba
        # cache, a second one starts from that cache
        with tempfile.TemporaryDirectory(prefix="attnbench-numba-cache-") as cache:
            return {"cold": _fresh_process(cache), "warm": _fresh_process(cache)}

    def track_import_seconds(self, runs):
        return runs["warm"]["import"]

    track_import_seconds.unit = "seconds"

    def track_numba_compile_seconds(self, runs):
        return runs["cold"]["first_call"]

    track_numba_compile_seconds.unit = "seconds"

    def track_numba_cached_call_seconds(self, runs):
        return runs["warm"]["first_call"]

    track_numba_cached_call_seconds.unit = "seconds"
