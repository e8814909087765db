"""Time, memory and throughput of every registered kernel against sequence length.

Every class iterates over ``kernels.KERNELS``; inputs and warm-up live in ``setup``;
the timed body is one call, ``kernels.attention``'s path with a peer not held to the
harness (``kernels.api.attention_unheld``): a peer's 16-bit call that falls below the
harness's budget on this CPU is timed too, and the report marks it from ``PeerAccuracy``.
Grids and fixed shapes come from ``kernels.bench_spec`` (d = 64 throughout), whose names
the report reads.
"""
import kernels
from kernels import bench_spec as spec
from kernels.api import attention_unheld, planned
from kernels.costs import attention_flops
from kernels.memory import peak_extra_bytes

from .common import (KERNEL_NAMES, THREAD_COUNTS, ThreadBudget, check_fits, prepare, rate_samples,
                     seconds_each, side_by_side)


class _Attention(ThreadBudget):
    """One attention call per sample; long calls get few samples, not a time-out."""

    rounds = 1
    repeat = (1, 5, 5.0)  # at least 1, at most 5 samples, stop adding them after 5 s
    warmup_time = 0.0     # setup has already made the warm-up call
    timeout = 600
    batch, causal = 1, False

    def call(self):
        attention_unheld(self.q, self.k, self.v, kernel=self.kernel, causal=self.causal)


class _OneHead(_Attention):
    def setup(self, kernel, seq_len, dtype):
        self.kernel = kernel
        self.q, self.k, self.v = prepare(kernel, self.batch, seq_len, dtype)


class SeqLen(_OneHead):
    """One head, full attention: the O(n²) wall in time and in memory."""

    params = [KERNEL_NAMES, list(spec.SEQ_LENS), list(spec.SEQ_LEN_DTYPES)]
    param_names = ["kernel", "seq_len", "dtype"]

    def setup(self, kernel, seq_len, dtype):
        if dtype in spec.HALF_DTYPES and kernel in kernels.KERNELS and kernels.KERNELS[kernel].external:
            raise NotImplementedError("a peer's 16-bit types are measured beside c_tiled (PeerSpeedup)")
        super().setup(kernel, seq_len, dtype)

    def time_attention(self, kernel, seq_len, dtype):
        self.call()

    def track_peak_extra_bytes(self, kernel, seq_len, dtype):
        return peak_extra_bytes(self.call)

    track_peak_extra_bytes.unit = "bytes"


class SeqLenProcess(_OneHead):
    """asv's own view: the whole process's peak RSS (inputs and imports included),
    float32 only; ``SeqLen.track_peak_extra_bytes`` is the per-call figure."""

    params = [KERNEL_NAMES, list(spec.SEQ_LENS), ["float32"]]
    param_names = ["kernel", "seq_len", "dtype"]

    def peakmem_attention(self, kernel, seq_len, dtype):
        self.call()


class MultiHead(_Attention):
    """8 heads at n = 1024 and 4096, causal and full: the shape the speed goals use.
    (The report turns its times into GFLOP/s; ``Threads`` tracks GFLOP/s directly.)"""

    params = [KERNEL_NAMES, list(spec.MULTI_HEAD_SEQ_LENS), list(spec.MULTI_HEAD_DTYPES), [False, True]]
    param_names = ["kernel", "seq_len", "dtype", "causal"]
    batch = spec.HEADS

    def setup(self, kernel, seq_len, dtype, causal):
        self.kernel, self.causal = kernel, causal
        self.q, self.k, self.v = prepare(kernel, self.batch, seq_len, dtype, causal)

    def time_attention(self, kernel, seq_len, dtype, causal):
        self.call()


class Threads(_Attention):
    """Throughput at one thread and at the whole budget: how well each kernel scales."""

    params = [KERNEL_NAMES, THREAD_COUNTS]
    param_names = ["kernel", "threads"]
    batch, seq_len, dtype = spec.HEADS, spec.HEADLINE_SEQ_LEN, spec.THREADS_DTYPE

    def setup(self, kernel, threads):
        self.kernel = kernel
        self.use_threads(threads, kernel)
        self.q, self.k, self.v = prepare(kernel, self.batch, self.seq_len, self.dtype)
        self.flops = attention_flops(self.seq_len, self.seq_len, spec.HEAD_DIM, batch=self.batch)

    def track_gflops(self, kernel, threads):
        return rate_samples(self.flops, self.call)

    track_gflops.unit = "GFLOP/s"


class NumpySpeedup(_Attention):
    """Each tiled kernel's speed over the numpy rung, timed side by side: one head, full,
    float32, n = 8192 (quick: 2048), where numpy's n x n scores have long left the caches."""

    params = [list(spec.TILED), [spec.NUMPY_SPEEDUP_SEQ_LEN]]
    param_names = ["kernel", "seq_len"]
    dtype = spec.NUMPY_SPEEDUP_DTYPE

    def setup(self, kernel, seq_len):
        self.kernel = kernel
        self.q, self.k, self.v = prepare(kernel, self.batch, seq_len, self.dtype)
        self.numpy_call()  # warm-up

    def numpy_call(self):
        kernels.attention(self.q, self.k, self.v, kernel="numpy")

    def track_speedup(self, kernel, seq_len):
        return side_by_side(self.numpy_call, self.call, spec.NUMPY_SPEEDUP_ROUNDS)

    track_speedup.unit = "times"


class MemoryWall(_Attention):
    """n = 65536, float64, causal, one head: numpy would need 32 GiB of scores (plus its
    mask), more than this machine has; the tiled kernels run in tens of MiB.  Each case
    first checks that its inputs, output and workspace fit in the memory available now,
    with ``HEADROOM_BYTES`` to spare for other work, and skips, saying so, when not."""

    params = [KERNEL_NAMES]
    param_names = ["kernel"]
    seq_len, dtype, causal = spec.WALL_SEQ_LEN, spec.WALL_DTYPE, spec.WALL_CAUSAL

    def setup(self, kernel):
        if spec.QUICK:
            raise NotImplementedError("the memory wall takes minutes; skipped in a quick run")
        problem = planned((1,), self.seq_len, self.seq_len, spec.HEAD_DIM, spec.HEAD_DIM, self.dtype, self.causal)
        check_fits(kernel, problem, extra_bytes=problem.input_bytes)  # before the inputs exist
        self.kernel = kernel
        self.q, self.k, self.v = prepare(kernel, 1, self.seq_len, self.dtype, self.causal, warm_up=False)
        # warm up (JIT, extension) on a small problem: the big one runs once, measured
        prepare(kernel, 1, 256, self.dtype, self.causal)

    def track_peak_extra_bytes(self, kernel):
        return peak_extra_bytes(self.call)

    track_peak_extra_bytes.unit = "bytes"

    def track_seconds(self, kernel):
        return seconds_each({"call": self.call}, repeats=1)["call"][0]

    track_seconds.unit = "seconds"
