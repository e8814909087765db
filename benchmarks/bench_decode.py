"""Decoding a token at a time, the bridge to §11.2: with a KV cache each new token costs
O(n·d) and is bound by memory bandwidth; recomputing the prefix costs O(n²·d).

8 heads, d = 64, float32 (``kernels.bench_spec``).  The cache is a ``kernels.KVCache``
filled to exactly n tokens (so its views are contiguous and no kernel copies them); one
new token's query attends to it (through ``KVCache.decoder``: OpenVINO and ggml keep the
cache in their own layouts, encoded once in setup).  Recomputation is causal attention
over all n queries of the prefix, the work a decoder without a cache repeats for every
token; it stops at n = 16,384 (at 65,536 it takes minutes per token: the fitted slope
carries it on).
"""
import functools
import math

import numpy as np

import kernels
from kernels import bench_spec as spec

from .common import KERNEL_NAMES, check_runs, make_inputs, peer_call, rate_samples, read_fraction, side_by_side


class _Prefix:
    """q, k, v (8, n, 64) of a seeded prefix of n tokens, in a cache of exactly n."""

    rounds, repeat, warmup_time, timeout = 1, (1, 10, 5.0), 0.0, 900

    def setup(self, kernel, seq_len):
        self.kernel = kernel
        self.prefix, k, v = make_inputs(spec.HEADS, seq_len, spec.DECODE_DTYPE)
        self.cache = kernels.KVCache(spec.HEADS, spec.HEAD_DIM, capacity=seq_len)
        self.cache.append(k, v)
        self.query = self.prefix[:, -1:]  # the newest token's query
        check_runs(kernel, self.queries(), k, v, causal=True)
        self.token()  # warm-up: JIT, extension, pages


class _CachedStep(_Prefix):
    """The newest token's query against the cache: O(n·d), reading the cache once."""

    def queries(self):
        return self.query

    @functools.cached_property
    def step(self):
        """The cache's decode step: a peer that keeps the cache in its own layout (OpenVINO's
        stateful model, ggml's tensors) encodes it here, once, in setup (KVCache.decoder)."""
        return self.cache.decoder(self.kernel)

    def token(self):
        return self.step(self.query)


class CachedDecode(_CachedStep):
    """One new token against the cache, against n."""

    params = [KERNEL_NAMES, list(spec.DECODE_SEQ_LENS)]
    param_names = ["kernel", "seq_len"]

    def time_token(self, kernel, seq_len):
        self.token()

    def track_cache_read_gbytes_per_second(self, kernel, seq_len):
        """Bytes of the cached keys and values over the time of a step (9 steps)."""
        return rate_samples(self.cache.nbytes, self.token, repeats=9)

    track_cache_read_gbytes_per_second.unit = "GB/s"


class CachedDecodeReadFraction(_CachedStep):
    """A step's read rate of the cache as a fraction of the streaming read of as many bytes,
    side by side (``common.read_fraction``), at the largest n and at a short cache (in L3,
    where a step's fixed cost and its arithmetic show beside its reading)."""

    params = [KERNEL_NAMES, [spec.CALL_COST_CACHE, max(spec.DECODE_SEQ_LENS)]]
    param_names = ["kernel", "seq_len"]

    def track_fraction(self, kernel, seq_len):
        rounds = spec.DECODE_SHORT_READ_ROUNDS if seq_len == spec.CALL_COST_CACHE else spec.DECODE_READ_ROUNDS
        return read_fraction(self.token, self.cache.nbytes, rounds)

    track_fraction.unit = "fraction"


class RecomputedDecode(_Prefix):
    """The same token without a cache: causal attention over the whole prefix, O(n²·d)."""

    params = [KERNEL_NAMES, list(spec.RECOMPUTE_SEQ_LENS)]
    param_names = ["kernel", "seq_len"]

    def queries(self):
        return self.prefix

    def token(self):
        return kernels.attention(self.prefix, self.cache.keys, self.cache.values, kernel=self.kernel,
                                 causal=True)

    def time_token(self, kernel, seq_len):
        self.token()


class TinyCall:
    """One head, n = 64, d = 64: about a megaflop, so the time is the call's fixed cost
    (validation, dispatch, threads).  Ours through ``kernels.attention``, as our users call
    it; a peer through its own API on tensors of its own (``common.peer_call``)."""

    params = [KERNEL_NAMES]
    param_names = ["kernel"]

    def setup(self, kernel):
        q, k, v = make_inputs(1, spec.TINY_SEQ_LEN, spec.DECODE_DTYPE)
        check_runs(kernel, q, k, v)
        if kernels.KERNELS[kernel].external:
            self.call = peer_call(kernel, q, k, v)
        else:
            self.call = functools.partial(kernels.attention, q, k, v, kernel=kernel)
            self.call()  # warm-up: JIT, extension, pages

    def time_attention(self, kernel):
        self.call()


class CallCost:
    """What the Python in front of a tiled rung costs a call: ours as users call it ÷ the
    rung's own ``run`` on the same arrays (its output preallocated), side by side,
    CALL_COST_CALLS calls of each a round.  "tiny": ``kernels.attention`` on one head,
    n = 64 (every check it makes); "decode": ``KVCache.attend`` on one query, 8 heads, over
    CALL_COST_CACHE cached tokens in a cache with room to grow (its rows a strided view, as
    a decoder's are)."""

    params = [list(spec.TILED), list(spec.CALL_COST_SHAPES)]
    param_names = ["kernel", "shape"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 300

    def setup(self, kernel, shape):
        run = kernels.KERNELS[kernel].run
        scale = 1.0 / math.sqrt(spec.HEAD_DIM)
        if shape == "tiny":
            q, k, v = make_inputs(1, spec.TINY_SEQ_LEN, spec.DECODE_DTYPE)
            check_runs(kernel, q, k, v)
            ours = functools.partial(kernels.attention, q, k, v, kernel=kernel)
            own = functools.partial(run, q, k, v, np.empty_like(q), False, scale)
        else:
            q, k, v = make_inputs(spec.HEADS, spec.CALL_COST_CACHE, spec.DECODE_DTYPE)
            query = q[:, -1:].copy()
            check_runs(kernel, query, k, v, causal=True)
            cache = kernels.KVCache(spec.HEADS, spec.HEAD_DIM, capacity=2 * spec.CALL_COST_CACHE)
            cache.append(k, v)
            ours = functools.partial(cache.attend, query, kernel=kernel)
            own = functools.partial(run, query, cache.keys, cache.values, np.empty_like(query), True, scale)
        self.ours, self.own = (functools.partial(_repeated, call, spec.CALL_COST_CALLS) for call in (ours, own))
        self.ours(), self.own()  # warm-up: JIT, extension, pages, the call's plan

    def track_over_run(self, kernel, shape):
        return side_by_side(self.ours, self.own, spec.CALL_COST_ROUNDS)

    track_over_run.unit = "times"


def _repeated(call, times):
    """call() ``times`` times over."""
    for _ in range(times):
        call()
