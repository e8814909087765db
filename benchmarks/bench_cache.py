"""The cache in fewer bytes (§11.2): decoding against KV caches of fewer K/V heads and
narrower formats, where one token's time is the cache's bytes over the memory bandwidth.

One new token's query, 8 query heads, d = 64, against a cache of ``seq_len`` tokens
(CACHE_SEQ_LEN in ``kernels.bench_spec``: 65,536, a quick run's 16,384), every thread of
the budget.  The sizes a quick run shrinks are parameters of one value (``Benchmark.sizes``),
so that the results say what was measured:

``CacheFormats``: a kernel on a cache of one format (float32, float16, bfloat16, int8, int4) and
K/V grouping (8 or 2 K/V heads), its time per token, its read rate (the cache's bytes,
scales included, over the time), and its speed over itself on the float32 cache of 8 K/V
heads, timed side by side in one process.

``CachePeers``: a peer that takes the format (``Kernel.cache_refusal``) over our tiled
rungs on the same cache, side by side; a peer that keeps it in its own library's layout
(``Kernel.own_caches``: ONNX Runtime's, OpenVINO's and ggml's caches, int8 and ggml's int4
with scales of their own) reads its own encoding of the same values, built before the
timing.

``CacheGenerate``: the seconds to generate ``generated`` tokens after a ``prompt``-token
prompt, each step one token's key and value appended (the cache growing in place, read as a
strided view) and its query attended; samples of ten blocks of a tenth of the steps each,
times ten.

``CacheFidelity`` and ``KeyGranularity``: what the formats cost in accuracy
(``kernels.decode.fidelity``); deterministic, so one round.
"""
import time

import kernels
from kernels import bench_spec as spec
from kernels.api import planned
from kernels.spread import asv_samples

from .common import check_fits, make_inputs, rate_samples, read_fraction, side_by_side


def _cache(cache_dtype, kv_heads, seq_len, capacity=None, seed=0):
    """A seeded cache of ``seq_len`` tokens and the newest token's query (8 heads, 1, 64)."""
    query, _, _ = make_inputs(spec.HEADS, 1, "float32", seed=seed)
    _, k, v = make_inputs(kv_heads, seq_len, "float32", seed=seed)
    cache = kernels.KVCache(spec.HEADS, spec.HEAD_DIM, kv_heads=kv_heads, cache_dtype=cache_dtype,
                            capacity=capacity or seq_len)
    cache.append(k, v)
    return cache, query


def _check_takes(kernel, cache_dtype, seq_len):
    """NotImplementedError (asv: skip) with the reason when ``kernel`` is not installed or
    does not attend a cache of ``cache_dtype``, or its call on ``seq_len`` tokens would not
    fit in memory."""
    record = kernels.KERNELS.get(kernel)
    if record is None:
        raise NotImplementedError(f"{kernel} is not installed (make peers)")
    refusal = record.cache_refusal(cache_dtype)
    if refusal:
        raise NotImplementedError(refusal)
    # the widest call: a kernel that widens the cache first holds a float32 copy of it
    check_fits(kernel, planned((spec.HEADS,), 1, seq_len, spec.HEAD_DIM, spec.HEAD_DIM, "float32", True),
               3 * spec.HEADS * seq_len * spec.HEAD_DIM * 4)


class CacheFormats:
    """A kernel's decode step on one cache format and grouping."""

    params = [list(spec.CACHE_KERNELS), list(spec.CACHE_DTYPES), list(spec.CACHE_KV_HEADS), [spec.CACHE_SEQ_LEN]]
    param_names = ["kernel", "cache_dtype", "kv_heads", "seq_len"]
    rounds, repeat, warmup_time, timeout = 1, (1, 11, 5.0), 0.0, 900

    def setup(self, kernel, cache_dtype, kv_heads, seq_len):
        _check_takes(kernel, cache_dtype, seq_len)
        self.kernel = kernel
        self.cache, self.query = _cache(cache_dtype, kv_heads, seq_len)
        self.token()  # warm-up: compilation, extension, pages

    def token(self):
        return self.cache.attend(self.query, kernel=self.kernel)

    def time_token(self, kernel, cache_dtype, kv_heads, seq_len):
        self.token()

    def track_read_gbytes_per_second(self, kernel, cache_dtype, kv_heads, seq_len):
        """The cache's bytes (scales included) over the time of a step."""
        return rate_samples(self.cache.nbytes, self.token, repeats=spec.CACHE_ROUNDS)

    track_read_gbytes_per_second.unit = "GB/s"

    def track_read_fraction(self, kernel, cache_dtype, kv_heads, seq_len):
        """The step's read rate ÷ the streaming read's, side by side (``common.read_fraction``)."""
        return read_fraction(self.token, self.cache.nbytes, spec.CACHE_ROUNDS)

    track_read_fraction.unit = "fraction"

    def track_speedup(self, kernel, cache_dtype, kv_heads, seq_len):
        """The float32 cache of 8 K/V heads' time ÷ this one's, side by side."""
        baseline, query = _cache("float32", spec.HEADS, seq_len)
        full = lambda: baseline.attend(query, kernel=kernel)  # noqa: E731
        full()
        return side_by_side(full, self.token, spec.CACHE_ROUNDS)

    track_speedup.unit = "times"


class CachePeers:
    """A tiled rung's speed over a peer on the same cache: the peer's time ÷ ours, side by side."""

    params = [list(spec.PEERS), list(spec.PEER_KERNELS), list(spec.CACHE_DTYPES), list(spec.CACHE_KV_HEADS),
              [spec.CACHE_SEQ_LEN]]
    param_names = ["peer", "kernel", "cache_dtype", "kv_heads", "seq_len"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 900

    def setup(self, peer, kernel, cache_dtype, kv_heads, seq_len):
        _check_takes(peer, cache_dtype, seq_len)
        _check_takes(kernel, cache_dtype, seq_len)
        cache, query = _cache(cache_dtype, kv_heads, seq_len)
        # a peer keeping the format in its own layout encodes it here, once (KVCache.decoder)
        self.peer_call, self.call = (lambda step=cache.decoder(name): step(query) for name in (peer, kernel))
        self.peer_call(), self.call()  # warm-up: compilation, sessions, pages

    def track_speedup(self, peer, kernel, cache_dtype, kv_heads, seq_len):
        return side_by_side(self.peer_call, self.call, spec.CACHE_ROUNDS, settle=spec.PEER_SETTLE_SECONDS)

    track_speedup.unit = "times"


class CacheGenerate:
    """Seconds to generate ``generated`` tokens after a ``prompt``-token prompt
    (CACHE_GENERATED, CACHE_PROMPT)."""

    params = [list(spec.TILED), list(spec.CACHE_DTYPES), list(spec.CACHE_KV_HEADS), [spec.CACHE_PROMPT],
              [spec.CACHE_GENERATED]]
    param_names = ["kernel", "cache_dtype", "kv_heads", "prompt", "generated"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 900

    def setup(self, kernel, cache_dtype, kv_heads, prompt, generated):
        total = prompt + generated
        _check_takes(kernel, cache_dtype, total)
        self.queries, _, _ = make_inputs(spec.HEADS, generated, "float32", seed=1)
        _, self.k, self.v = make_inputs(kv_heads, total, "float32", seed=1)
        self.cache = kernels.KVCache(spec.HEADS, spec.HEAD_DIM, kv_heads=kv_heads, cache_dtype=cache_dtype,
                                     capacity=total)
        self.cache.append(self.k[:, :prompt], self.v[:, :prompt])
        self.cache.attend(self.queries[:, :1], kernel=kernel)  # warm-up

    def track_seconds(self, kernel, cache_dtype, kv_heads, prompt, generated):
        blocks, block = 10, generated // 10
        seconds = []
        for b in range(blocks):
            start = time.perf_counter()
            for i in range(b * block, (b + 1) * block):
                t = prompt + i
                self.cache.append(self.k[:, t:t + 1], self.v[:, t:t + 1])
                self.cache.attend(self.queries[:, i:i + 1], kernel=kernel)
            seconds.append((time.perf_counter() - start) * blocks)
        return asv_samples(seconds)

    track_seconds.unit = "seconds"


class CacheFidelity:
    """Norm-wise relative error of the output against float64 over the float32 values:
    one step on a cache of ``seq_len`` tokens ("step"), and the largest over a ``steps``-step
    decode after a 1,024-token prompt ("decode"); 8 query heads on 2 K/V heads, c_tiled."""

    params = [list(spec.CACHE_DTYPES), list(spec.CACHE_ERRORS), [spec.CACHE_SEQ_LEN], [spec.CACHE_FIDELITY_STEPS]]
    param_names = ["cache_dtype", "error", "seq_len", "steps"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 900

    def setup(self, cache_dtype, error, seq_len, steps):
        from kernels.decode import fidelity

        self.fidelity = fidelity

    def track_error(self, cache_dtype, error, seq_len, steps):
        kernel = spec.CACHE_FIDELITY_KERNEL
        if error == "step":
            return self.fidelity.step_errors((cache_dtype,), n=seq_len, kv_heads=2, kernel=kernel)[cache_dtype]
        errors = self.fidelity.decode_errors((cache_dtype,), steps=steps, kernel=kernel)
        return float(errors[cache_dtype].max())

    track_error.unit = "relative"


class KeyGranularity:
    """int8 keys per token or per channel (KIVI): the mean error of 256 new tokens' outputs,
    float64 attention over the dequantised values, on even keys and on keys with a few
    outlier channels."""

    params = [["even", "outliers"], ["per token", "per channel"]]
    param_names = ["keys", "granularity"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 600

    def setup_cache(self):
        # one computation gives all four errors: asv runs it once for the class and hands
        # its result to each benchmark process (each would otherwise repeat it, 5 s here)
        from kernels.decode import fidelity

        return fidelity.key_granularity()

    def track_error(self, results, keys, granularity):
        return results[keys][granularity]

    track_error.unit = "relative"
