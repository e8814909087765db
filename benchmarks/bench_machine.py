"""The machine's ceiling and the suite's fixed costs, measured in the same run.

sgemm/dgemm throughput of the installed BLAS (what a kernel doing 4·n²·d flops
could hope for), copy bandwidth and streaming-read bandwidth (what a decoding step,
which reads the KV cache once, could hope for), the thread budget every kernel ran
with, and the start-up costs: ``import kernels``, Numba's first compile, a cached first
call.
"""
import json
import os
import subprocess
import sys
import tempfile

import numba
import numpy as np

import kernels

from .common import median_seconds


class Machine:
    rounds = 1
    timeout = 300

    def setup(self):
        rng = np.random.default_rng(0)
        self.gemm_n = 2048
        self.a32 = rng.standard_normal((self.gemm_n, self.gemm_n), dtype=np.float32)
        self.a64 = self.a32.astype(np.float64)
        self.src = np.ones(2**26)  # 512 MiB, far beyond the caches
        self.dst = np.empty_like(self.src)

    def _gemm_gflops(self, a):
        np.dot(a, a)  # warm-up: threads, pages
        return 2.0 * self.gemm_n**3 / median_seconds(lambda: np.dot(a, a), repeats=5) / 1e9

    def track_sgemm_gflops(self):
        return self._gemm_gflops(self.a32)

    track_sgemm_gflops.unit = "GFLOP/s"

    def track_dgemm_gflops(self):
        return self._gemm_gflops(self.a64)

    track_dgemm_gflops.unit = "GFLOP/s"

    def track_memory_bandwidth(self):
        """Copy bandwidth, one thread: bytes read plus bytes written per second."""
        np.copyto(self.dst, self.src)
        return 2.0 * self.src.nbytes / median_seconds(lambda: np.copyto(self.dst, self.src), repeats=5) / 1e9

    track_memory_bandwidth.unit = "GB/s"

    def track_read_bandwidth(self):
        """Streaming read over every thread of the budget: bytes read per second (a sum of
        512 MiB, each thread its own contiguous part)."""
        numba.set_num_threads(min(kernels.threads.budget(), numba.config.NUMBA_NUM_THREADS))
        parts = kernels.threads.budget()
        _parallel_sum(self.src, parts)  # warm-up: compile, pages
        return self.src.nbytes / median_seconds(lambda: _parallel_sum(self.src, parts), repeats=5) / 1e9

    track_read_bandwidth.unit = "GB/s"

    def track_thread_budget(self):
        return kernels.threads.budget()

    track_thread_budget.unit = "threads"


# Each part summed as a slice, reassociated into SIMD lanes, so that memory, not the add
# latency, bounds it (an explicit scalar loop read at a third of the rate)
@numba.njit(parallel=True, fastmath={"reassoc"}, cache=True)
def _parallel_sum(array, parts):
    """Σ array over ``parts`` contiguous parts, one per parallel task."""
    size = array.size // parts
    partial = np.zeros(parts)
    for part in numba.prange(parts):
        stop = array.size if part == parts - 1 else (part + 1) * size
        partial[part] = array[part * size:stop].sum()
    return partial.sum()


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
