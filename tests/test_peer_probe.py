"""Peers held to the harness on the CPU they run on (``kernels.harness.probe``), on any CPU:
a peer that rounds its scores to the 16-bit type (``rounding_peer``, tests/half_models.py)
is refused that type through the one validation path, with what was measured, at its first
such call in a process and from then on without measuring again; the harness skips it
with that reason; the benchmarks time it all the same, and PeerAccuracy records that it
fails.  The same peer computing in float32 is taken.  Our rungs, and the types a peer
declares once and for all, are never probed."""
import re
import subprocess
import sys
import threading
import weakref

import numpy as np
import pytest

import half_models
import kernels
from kernels import api, bench_spec, harness
from kernels.dtypes import FLOATS, HALF
from kernels.machine_id import machine_name
from kernels.reference import reference_attention

HALF_TYPES = [FLOATS[name].dtype.type for name in HALF]


def qkv(dtype, shape=(2, 9, 16), seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(dtype) for _ in range(3))


@pytest.fixture
def counted_calls(monkeypatch):
    """The number of calls the rounding peer has run so far, as a one-element list."""
    calls = [0]
    run = half_models.run

    def counted(*args):
        calls[0] += 1
        run(*args)

    monkeypatch.setattr(half_models, "run", counted)
    return calls


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=HALF)
def test_a_peer_below_the_budget_is_refused_saying_what_was_measured(rounding_peer, dtype):
    name = np.dtype(dtype).name
    worst = max((harness.check(rounding_peer, case, dtype, held=False) for case in harness.PROBE_CASES),
                key=lambda outcome: outcome.comparison.error / outcome.comparison.budget)
    # rounding the scores reorders the near ties of large logits (tests/test_harness.py)
    assert worst.case.name == "large logits x30 n=700" and worst.status == "FAIL"
    reason = (f"{rounding_peer} computes {name} below the harness's budget on this CPU ({machine_name()}): "
              f"error {worst.comparison.error:.2g} against a budget of {worst.comparison.budget:.2g} on the "
              f"case 'large logits x30 n=700' (measured at its first {name} call in this process)")
    assert kernels.KERNELS[rounding_peer].refusal(dtype) == reason
    with pytest.raises(ValueError, match=re.escape(f"kernel '{rounding_peer}' does not take this call: {reason}")):
        kernels.attention(*qkv(dtype), kernel=rounding_peer)
    outcome = harness.check(rounding_peer, harness.CASES[2], dtype)   # the harness skips it, saying why
    assert outcome.status == "skip" and outcome.note == reason
    probe = harness.probe(rounding_peer, dtype)
    assert probe.over_budget == worst.comparison.error / worst.comparison.budget > 1


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=HALF)
def test_the_verdict_is_measured_once_per_process_at_the_first_call(rounding_peer, counted_calls, dtype):
    q, k, v = qkv(dtype)
    kernels.attention(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), kernel=rounding_peer)
    assert counted_calls == [1] and not harness._PROBES   # float32 is not probed
    for _ in range(3):
        with pytest.raises(ValueError, match="below the harness's budget"):
            kernels.attention(q, k, v, kernel=rounding_peer)
    assert counted_calls == [1 + len(harness.PROBE_CASES)]   # the probe's calls, once
    assert list(harness._PROBES) == [(rounding_peer, np.dtype(dtype).name)]


def test_threads_asking_at_once_share_one_probe(rounding_peer, counted_calls):
    refusals = []
    threads = [threading.Thread(target=lambda: refusals.append(kernels.KERNELS[rounding_peer].refusal("bfloat16")))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(refusals) == 4 and len(set(refusals)) == 1 and refusals[0]
    assert counted_calls == [len(harness.PROBE_CASES)]


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=HALF)
def test_the_same_peer_computing_in_float32_is_taken(rounding_peer, monkeypatch, dtype):
    monkeypatch.setattr(half_models, "ROUNDS_SCORES", False)
    assert kernels.KERNELS[rounding_peer].refusal(dtype) is None
    assert harness.probe(rounding_peer, dtype).over_budget <= 1
    q, k, v = qkv(dtype)
    out = kernels.attention(q, k, v, kernel=rounding_peer, causal=True)
    # small O(1) logits: the budget's floor (8 float32 roundings and the two 16-bit ones) holds
    comparison = harness.compare(out, reference_attention(q, k, v, causal=True), v, harness.budget_floor(dtype))
    assert out.dtype == dtype and comparison.ok, f"error {comparison.error:.3g} > {comparison.budget:.3g}"


def test_attention_unheld_makes_the_refused_call(rounding_peer):
    q, k, v = qkv(HALF_TYPES[0])
    out = api.attention_unheld(q, k, v, kernel=rounding_peer)
    expected = half_models.half_model(q, k, v, False, q.dtype, "scores in half")
    assert out.dtype == q.dtype and np.array_equal(out, expected)


def test_our_rungs_and_declared_types_are_never_probed(rounding_peer, monkeypatch):
    monkeypatch.setattr(harness, "probe", lambda *args: pytest.fail(f"probed {args}"))
    for name, record in kernels.KERNELS.items():
        for dtype in FLOATS:
            if not record.external:
                assert record.refusal(dtype) is None, (name, dtype)
            if dtype not in record.probed:
                record.refusal(dtype)   # a peer's fixed declaration: no probe
    assert kernels.KERNELS[rounding_peer].refusal("float64") == (
        f"{rounding_peer} takes float32, bfloat16, float16 only (bfloat16, float16 where within the "
        "harness's budget on this CPU): a test's peer has no float64")


def test_a_type_not_probed_cannot_be(rounding_peer):
    for name, dtype in ((rounding_peer, "float32"), (rounding_peer, "float64"), ("c_tiled", "bfloat16")):
        with pytest.raises(ValueError, match="is not held to the harness in"):
            harness.probe(name, dtype)


def test_importing_kernels_probes_nothing(project_root):
    """Nor imports the harness that probes: a peer is probed at its first 16-bit call."""
    code = "import sys, kernels; print('kernels.harness' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=project_root, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.split() == ["False"], result.stderr


def test_peer_accuracy_records_the_verdict(bench_modules, rounding_peer, monkeypatch):
    benchmark = bench_modules["bench_peers"].PeerAccuracy()
    benchmark.setup(rounding_peer, "bfloat16")
    assert benchmark.track_error_over_budget(rounding_peer, "bfloat16") > 1
    monkeypatch.setattr(harness, "_PROBES", {})
    monkeypatch.setattr(half_models, "ROUNDS_SCORES", False)
    assert benchmark.track_error_over_budget(rounding_peer, "bfloat16") <= 1
    for dtype, why in (("float32", "is not held to the harness in float32"), ("float64", "has no float64")):
        with pytest.raises(NotImplementedError, match=why):
            benchmark.setup(rounding_peer, dtype)
    with pytest.raises(NotImplementedError, match="not installed"):
        benchmark.setup("no_such_peer", "bfloat16")


@pytest.mark.parametrize("dtype", HALF)
def test_the_benchmarks_time_a_peer_that_fails_the_harness(bench_modules, rounding_peer, monkeypatch, dtype):
    """PeerSpeedup and MultiHead measure the refused peer (on a small n, the same path) rather
    than skip it; the report marks those rows from PeerAccuracy (tests/test_report.py)."""
    assert kernels.KERNELS[rounding_peer].refusal(dtype)
    monkeypatch.setattr(bench_spec, "HEADLINE_SEQ_LEN", 64)
    monkeypatch.setitem(bench_spec.PEER_ROUNDS, "full", 3)
    ratios = _track_speedup(bench_modules, (rounding_peer, bench_spec.HALF_PEER_KERNEL, "full", 1, dtype))
    assert len(ratios["samples"]) == 3 and all(np.isfinite(r) and r > 0 for r in ratios["samples"]), ratios
    multi_head = bench_modules["bench_attention"].MultiHead()
    multi_head.setup(rounding_peer, 64, dtype, True)
    multi_head.time_attention(rounding_peer, 64, dtype, True)


def test_a_cache_held_in_l3_is_timed_over_several_placements(bench_modules, rounding_peer, monkeypatch):
    """PeerSpeedup spreads a PEER_PLACEMENTS shape's rounds over that many placements: each
    share with both sides made anew (our KV cache, the peer's prepared call), every earlier
    cache still alive when the next is made, so that it lands elsewhere (a step over a cache
    in L3 runs at a speed that depends on where its buffers lie: bench_spec)."""
    module = bench_modules["bench_peers"]
    monkeypatch.setitem(bench_spec.PEER_ROUNDS, "short_decode", 6)
    monkeypatch.setitem(bench_spec.PEER_PLACEMENTS, "short_decode", 3)
    monkeypatch.setattr(bench_spec, "CALL_COST_CACHE", 64)
    monkeypatch.setattr(bench_spec, "PEER_SETTLE_SECONDS", 0.001)
    caches, alive_at_each, prepared = [], [], []

    class RecordedCache(kernels.KVCache):
        def __init__(self, *args, **kwargs):
            alive_at_each.append(sum(cache() is not None for cache in caches))
            super().__init__(*args, **kwargs)
            caches.append(weakref.ref(self))

    monkeypatch.setattr(module.kernels, "KVCache", RecordedCache)
    peer_call = module.peer_call
    monkeypatch.setattr(module, "peer_call", lambda *args, **kwargs: prepared.append(args) or peer_call(*args, **kwargs))
    ratios = _track_speedup(bench_modules, (rounding_peer, "c_tiled", "short_decode", 1, "float32"))
    assert len(ratios["samples"]) == 6 and all(np.isfinite(r) and r > 0 for r in ratios["samples"]), ratios
    assert alive_at_each == [0, 1, 2] and len(prepared) == 3


def _track_speedup(bench_modules, params):
    """PeerSpeedup's samples for ``params``, the budget its setup set put back."""
    speedup = bench_modules["bench_peers"].PeerSpeedup()
    try:
        speedup.setup(*params)
        return speedup.track_speedup(*params)
    finally:
        speedup.teardown(*params)
