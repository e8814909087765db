"""Ways out of the quadratic (§11.2): a sliding window and attention sinks, in one call and
in a bounded KV cache.

8 heads, d = 64, float32, every thread of the budget (``kernels.bench_spec``):

``WindowSeqLen``: one call against n for each band (full, causal, causal windows, one with
4 sinks) on the tiled rungs, which skip the key tiles outside the band: a window costs
O(n·w), full and causal O(n²).  Its time, its GFLOP/s of the band (4·d·Σ seen keys per
head, ``kernels.costs.band_flops``: only the scores the band keeps) and its peak extra
memory.  Full and causal stop at WINDOW_QUADRATIC_MAX: a causal call at 65,536 takes about
a minute on 2 cores, full two, so asv takes one sample of such a call (its repeat stops
adding samples after 5 s) and the GFLOP/s is one timed call too; those are warmed up on a
small call of the same band, as ``MemoryWall`` is.

``BoundedDecode``: one token's step (append its key and value, attend its query) on a
``KVCache(window=4096, sinks=4)`` that has seen N tokens, beside an unbounded cache holding
exactly N, and the bytes each holds.  ``BoundedOverUnbounded``: the bounded step after N
tokens over the unbounded step on a cache of sinks + window tokens, side by side.

``WindowPeers``: each tiled rung's speed over each peer (the peer's time ÷ ours, side by
side) at one windowed shape; the peers take the band as their library allows
(``Kernel.window_form``): JAX by its local_window_size, the others by an n × n mask.

``WindowFidelity``: what a window costs a model trained with full attention: all-MiniLM-L6-v2's
embeddings with every layer's attention windowed, with or without [CLS] as a sink, against its
full-attention embeddings (``kernels.models.fidelity``), the mean and smallest cosine over the
bundled sentences or paragraphs.  Not timed, as ``HalfFidelity``: one round.

A kernel that does not take a window (``Kernel.band_refusal``), a peer not installed, the model
not installed (``make model``), or a call that would not fit in memory is skipped, saying so
(``check_fits``).
"""
import numpy as np

import kernels
from kernels import bench_spec as spec
from kernels.api import attention_unheld, planned
from kernels.costs import band_flops
from kernels.memory import peak_extra_bytes

from .bench_model import load_model
from .common import check_fits, check_runs, make_inputs, peer_call, prepare, rate_samples, side_by_side

WARM_UP_SEQ_LEN = 1024  # a quadratic call at the largest n is warmed up on this n instead
# Tokens an unbounded cache has room for beyond those it holds: every step a benchmark makes
# (warm-up, asv's samples, the side-by-side rounds), so that it never reallocates while timed.
STEP_ROOM = spec.BOUNDED_ROUNDS + 2


class WindowSeqLen:
    """One call of each band against n: O(n·w) for a window, O(n²) for full and causal."""

    params = [list(spec.WINDOW_KERNELS), list(spec.WINDOW_SEQ_LENS), list(spec.WINDOW_SHAPES)]
    param_names = ["kernel", "seq_len", "shape"]
    rounds, repeat, warmup_time, timeout = 1, (1, 5, 5.0), 0.0, 1800

    def setup(self, kernel, seq_len, shape):
        band = spec.WINDOW_SHAPES[shape]
        if not band.windowed and seq_len > spec.WINDOW_QUADRATIC_MAX:
            raise NotImplementedError(f"{shape} attention is measured up to n = {spec.WINDOW_QUADRATIC_MAX:,} "
                                      "(a causal call there takes about a minute on 2 cores)")
        self.flops = band_flops(band, seq_len, seq_len, spec.HEAD_DIM, batch=spec.HEADS)
        long_call = self.flops > spec.WINDOW_ONE_SAMPLE_FLOPS
        self.kernel, self.band = kernel, band.arguments()
        self.q, self.k, self.v = prepare(kernel, spec.HEADS, seq_len, spec.WINDOW_DTYPE, warm_up=not long_call,
                                         **self.band)
        if long_call:  # warm up (JIT, extension, threads) on a small call: the big one runs once
            prepare(kernel, spec.HEADS, WARM_UP_SEQ_LEN, spec.WINDOW_DTYPE, **self.band)
        self.rate_repeats = 1 if long_call else spec.WINDOW_RATE_REPEATS

    def call(self):
        attention_unheld(self.q, self.k, self.v, kernel=self.kernel, **self.band)

    def time_attention(self, kernel, seq_len, shape):
        self.call()

    def track_band_gflops(self, kernel, seq_len, shape):
        """The band's flops (the scores it keeps, not n²) over the time of a call."""
        return rate_samples(self.flops, self.call, repeats=self.rate_repeats)

    track_band_gflops.unit = "GFLOP/s"

    def track_peak_extra_bytes(self, kernel, seq_len, shape):
        return peak_extra_bytes(self.call)

    track_peak_extra_bytes.unit = "bytes"


def _token_checked(kernel, cached):
    """NotImplementedError (asv: skip) when ``kernel`` cannot attend one query (8 heads)
    to ``cached`` tokens here; checked before the cache is built (its bytes counted)."""
    problem = planned((spec.HEADS,), 1, cached, spec.HEAD_DIM, spec.HEAD_DIM, spec.DECODE_DTYPE, True)
    check_fits(kernel, problem, extra_bytes=problem.input_bytes)


def _cache(seen, bounded):
    """A float32 cache (8 heads, d = 64) that has seen ``seen`` seeded tokens: bounded (the
    spec's window and sinks), appended a chunk at a time so that only what survives is ever
    stored, or unbounded, holding all of them (with STEP_ROOM to spare)."""
    if bounded:
        cache = kernels.KVCache(spec.HEADS, spec.HEAD_DIM, window=spec.BOUNDED_WINDOW, sinks=spec.BOUNDED_SINKS)
    else:
        cache = kernels.KVCache(spec.HEADS, spec.HEAD_DIM, capacity=seen + STEP_ROOM)
    chunk = 8192
    for start in range(0, seen, chunk):
        _, k, v = make_inputs(spec.HEADS, min(chunk, seen - start), spec.DECODE_DTYPE, seed=start)
        cache.append(k, v)
    return cache


class _Step:
    """A decode step on a cache: append the new token's key and value, attend its query."""

    def __init__(self, cache, kernel):
        self.cache, self.kernel = cache, kernel
        self.q, self.k, self.v = make_inputs(spec.HEADS, 1, spec.DECODE_DTYPE, seed=1)

    def __call__(self):
        self.cache.append(self.k, self.v)
        return self.cache.attend(self.q, kernel=self.kernel)


def _stored(seen, bounded):
    return min(seen, spec.BOUNDED_SINKS + spec.BOUNDED_WINDOW) if bounded else seen


class BoundedDecode:
    """One step on a bounded cache after N tokens (constant time and bytes), and on an
    unbounded cache of N (growing with N).  number = 1: asv runs setup before every sample,
    so each sample is one step on a cache of exactly N tokens."""

    params = [list(spec.TILED), list(spec.BOUNDED_CACHES), list(spec.BOUNDED_SEEN)]
    param_names = ["kernel", "cache", "seen"]
    rounds, repeat, number, warmup_time, timeout = 1, (1, 10, 5.0), 1, 0.0, 900

    def setup(self, kernel, cache, seen):
        bounded = cache == "bounded"
        _token_checked(kernel, _stored(seen, bounded))
        self.step = _Step(_cache(seen, bounded), kernel)
        self.step()  # warm-up: JIT, extension, pages (the cache then holds N + 1 tokens, or its N newest)

    def time_step(self, kernel, cache, seen):
        self.step()

    def track_cache_bytes(self, kernel, cache, seen):
        """The bytes the cache's keys and values hold: what each step reads."""
        return self.step.cache.nbytes

    track_cache_bytes.unit = "bytes"


class BoundedOverUnbounded:
    """The bounded step after N tokens ÷ the unbounded step on a cache of sinks + window
    tokens (what the bounded cache stores), side by side: 1 when a window's cost does not
    grow with the tokens seen.  Each round appends one token to each cache, so the
    unbounded one ends BOUNDED_ROUNDS tokens (0.5%) above its start."""

    params = [list(spec.TILED), list(spec.BOUNDED_SEEN)]
    param_names = ["kernel", "seen"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 900

    def setup(self, kernel, seen):
        stored = spec.BOUNDED_SINKS + spec.BOUNDED_WINDOW
        _token_checked(kernel, stored)
        self.bounded = _Step(_cache(seen, True), kernel)
        self.unbounded = _Step(_cache(stored, False), kernel)
        self.bounded(), self.unbounded()  # warm-up

    def track_time_over_unbounded(self, kernel, seen):
        return side_by_side(self.bounded, self.unbounded, spec.BOUNDED_ROUNDS)

    track_time_over_unbounded.unit = "times"


class WindowPeers:
    """A tiled rung's speed over a peer with a window: the peer's time ÷ ours, side by side,
    8 heads, n = ``seq_len`` (WINDOW_PEER_SEQ_LEN), the band ``shape`` names
    (WINDOW_PEER_BAND), float32, all threads."""

    params = [list(spec.PEERS), list(spec.PEER_KERNELS), [spec.WINDOW_PEER_SEQ_LEN], [spec.WINDOW_PEER_BAND.describe()]]
    param_names = ["peer", "kernel", "seq_len", "shape"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 900
    bands = {spec.WINDOW_PEER_BAND.describe(): spec.WINDOW_PEER_BAND}   # a shape's band

    def setup(self, peer, kernel, seq_len, shape):
        self.peer_call, self.call = (self._call(name, seq_len, self.bands[shape]) for name in (peer, kernel))
        self.peer_call(), self.call()  # warm-up: compilation, sessions, pages

    @staticmethod
    def _call(name, seq_len, band):
        """Kernel ``name``'s windowed call as its users make it (ours through
        ``kernels.attention``, a peer through its own API: ``common.peer_call``);
        NotImplementedError if it cannot make it."""
        band = band.arguments()
        q, k, v = make_inputs(spec.HEADS, seq_len, spec.WINDOW_DTYPE)
        check_runs(name, q, k, v, **band)
        if kernels.KERNELS[name].external:
            return peer_call(name, q, k, v, **band)
        return lambda: attention_unheld(q, k, v, kernel=name, **band)

    def track_speedup(self, peer, kernel, seq_len, shape):
        return side_by_side(self.peer_call, self.call, spec.WINDOW_PEER_ROUNDS, settle=spec.PEER_SETTLE_SECONDS)

    track_speedup.unit = "times"


class WindowFidelity:
    """cosine(MiniLM's embedding with every layer's attention windowed to (width, width), the
    first ``sinks`` tokens ([CLS] for 1) in view besides; its full-attention embedding) over
    ``texts``: the 30 bundled sentences (5-23 tokens) or the 5 paragraphs of six of them
    (67-95 tokens), on WINDOW_FIDELITY_KERNEL, on the suite's thread budget.

    Not timed: the cosines are the same on every run of a commit (but for the BLAS's
    summation order), so one round.  Setup computes them, (len(texts),): two forward passes
    per text (``fidelity.window_cosines``; 2-10 s a case on 2 busy CPUs), which the two
    track_ methods read."""

    params = [list(spec.WINDOW_FIDELITY_TEXTS), list(spec.WINDOW_FIDELITY_WIDTHS), list(spec.WINDOW_FIDELITY_SINKS)]
    param_names = ["texts", "width", "sinks"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 600

    def setup(self, texts, width, sinks):
        minilm, _ = load_model()
        from kernels.models import fidelity

        chosen = {"sentences": fidelity.sentences, "paragraphs": fidelity.paragraphs}[texts]()
        longest = max(map(minilm.token_count, chosen))  # a layer's attention: (12 heads, n, 32)
        check_runs(spec.WINDOW_FIDELITY_KERNEL, *(np.empty((minilm.HEADS, longest, 32), np.float32),) * 3,
                   window=(width, width), sinks=sinks)
        self.cosines = fidelity.window_cosines(spec.WINDOW_FIDELITY_KERNEL, width, chosen, sinks)

    def track_mean_cosine(self, texts, width, sinks):
        return float(self.cosines.mean())

    track_mean_cosine.unit = "cosine"

    def track_min_cosine(self, texts, width, sinks):
        return float(self.cosines.min())

    track_min_cosine.unit = "cosine"
