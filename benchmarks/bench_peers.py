"""Our tiled kernels beside every CPU attention a user could pick instead, side by side.

Each (peer, kernel, shape, threads, dtype) is one asv sample in a process of its own
(asv runs every parameter combination in a fresh process), so a peer's thread pool,
still spinning after its call, never steals from another peer's measurement; within the
process the peer's call and ours alternate (``side_by_side``).  Each is timed as its users
call it: ours through ``kernels.attention`` (a decode step through ``KVCache.attend``), with
every check it makes; a peer through its own API on tensors of its own, made before the
timing (``Kernel.implementation.prepare``: PyTorch's scaled_dot_product_attention on torch
tensors, an ONNX Runtime session with its inputs bound, a compiled OpenVINO request, a
jitted JAX function on device arrays, a built ggml graph), no conversion or check of ours
inside the timed call.  The shapes
(``kernels.bench_spec``): 8 heads at the headline n, full and causal; one new token's
query against a KV cache of 65,536 tokens (decode) and of 1,024 (short_decode, the
cache in L3); one head at n = 64 (a tiny call,
where the fixed cost shows).  A peer that is not installed, that declares it does not
take a dtype, or that does not honour a thread budget below every CPU, is skipped with
the reason.  One that computes a 16-bit type below the harness's budget on this CPU, which
``kernels.attention`` refuses, is timed all the same (``kernels.api.attention_unheld``),
so that what its rounding buys is seen: ``PeerAccuracy`` records its verdict, and the
report shows such a ratio in a row of its own, as failing the budget.
"""
import kernels
from kernels import bench_spec as spec
from kernels import harness
from kernels.api import attention_unheld
from kernels.spread import asv_samples

from .common import PEER_THREAD_COUNTS, ThreadBudget, check_runs, make_inputs, peer_call, side_by_side


class PeerSpeedup(ThreadBudget):
    """A tiled kernel's speed over one peer: the peer's median time ÷ ours, timed side by side;
    a shape of ``spec.PEER_PLACEMENTS`` (a cache held in L3) in equal shares of its rounds,
    both sides' arrays made anew for each."""

    params = [list(spec.PEERS), list(spec.PEER_KERNELS), list(spec.PEER_SHAPES), PEER_THREAD_COUNTS,
              list(spec.PEER_DTYPES)]
    param_names = ["peer", "kernel", "shape", "threads", "dtype"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 900

    def setup(self, peer, kernel, shape, threads, dtype):
        if peer not in kernels.KERNELS:
            raise NotImplementedError(f"{peer} is not installed (make peers)")
        if dtype not in spec.PEER_SHAPE_DTYPES[shape]:
            raise NotImplementedError(f"the {shape} shape is measured in {', '.join(spec.PEER_SHAPE_DTYPES[shape])}")
        if dtype in spec.HALF_DTYPES and kernel != spec.HALF_PEER_KERNEL:
            raise NotImplementedError(f"the 16-bit types are measured beside {spec.HALF_PEER_KERNEL} only")
        self.use_threads(threads, peer)
        self._place(peer, kernel, shape, dtype)

    def _place(self, peer, kernel, shape, dtype):
        """Both sides' calls on arrays made here (``_call``), warmed up."""
        self.peer_call, self.call = (self._call(name, shape, dtype) for name in (peer, kernel))
        self.peer_call(), self.call()  # warm-up: compilation, sessions, pages

    def _call(self, name, shape, dtype):
        """The call of kernel ``name`` on ``shape`` as its users make it: ours through
        ``kernels.attention`` (a decode step through ``KVCache.attend``), a peer through its
        own API on its own tensors, made before the timing (``peer_call``);
        NotImplementedError if it cannot run it."""
        if shape in ("decode", "short_decode"):
            cached = spec.DECODE_PEER_SEQ_LEN if shape == "decode" else spec.CALL_COST_CACHE
            query, k, v = make_inputs(spec.HEADS, cached, dtype)
            query = query[:, -1:].copy()
            check_runs(name, query, k, v, causal=True)
            if kernels.KERNELS[name].external:
                return peer_call(name, query, k, v, causal=True)
            cache = kernels.KVCache(spec.HEADS, spec.HEAD_DIM, dtype=dtype, capacity=cached)
            cache.append(k, v)
            return lambda: cache.attend(query, kernel=name)
        heads, seq_len = (1, spec.TINY_SEQ_LEN) if shape == "tiny" else (spec.HEADS, spec.HEADLINE_SEQ_LEN)
        causal = shape == "causal"
        q, k, v = make_inputs(heads, seq_len, dtype)
        check_runs(name, q, k, v, causal)
        if kernels.KERNELS[name].external:
            return peer_call(name, q, k, v, causal)
        return lambda: attention_unheld(q, k, v, kernel=name, causal=causal)

    def track_speedup(self, peer, kernel, shape, threads, dtype):
        placements = spec.PEER_PLACEMENTS.get(shape, 1)
        rounds = spec.PEER_ROUNDS[shape] // placements
        samples, kept = [], []
        for placement in range(placements):
            if placement:  # both sides anew, elsewhere: the earlier arrays are kept alive
                kept.append((self.peer_call, self.call))
                self._place(peer, kernel, shape, dtype)
            samples += side_by_side(self.peer_call, self.call, rounds, settle=spec.PEER_SETTLE_SECONDS)["samples"]
        return asv_samples(samples)

    track_speedup.unit = "times"


class PeerAccuracy:
    """A peer's probed type held to the harness on this CPU (``kernels.harness.probe``): its
    worst error ÷ budget over the probe's cases; above 1 it fails the harness here.  The
    same on every run but for the peer's summation order: one round."""

    params = [list(spec.PEERS), list(spec.PEER_ACCURACY_DTYPES)]
    param_names = ["peer", "dtype"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 300

    def setup(self, peer, dtype):
        record = kernels.KERNELS.get(peer)
        if record is None:
            raise NotImplementedError(f"{peer} is not installed (make peers)")
        if record.refusal(dtype, held=False):
            raise NotImplementedError(record.refusal(dtype, held=False))
        if dtype not in record.probed:
            raise NotImplementedError(f"{peer} is not held to the harness in {dtype} (kernels.registry)")

    def track_error_over_budget(self, peer, dtype):
        return harness.probe(peer, dtype).over_budget

    track_error_over_budget.unit = "budgets"
