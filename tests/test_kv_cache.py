"""kernels.KVCache: cached decoding equals full recomputation at every step, on every kernel."""
import dataclasses

import numpy as np
import pytest

import kernels
from kernels.reference import reference_attention

HEADS, HEAD_DIM, HEAD_DIM_V = 3, 8, 5
# float32: the harness budgets of these small cases are a few float32 ulps of values ~1;
# float64: the harness's 1e-10
TOLERANCE = {np.float32: 2e-6, np.float64: 1e-10}


def sequence(n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((HEADS, n, HEAD_DIM)).astype(dtype),
            rng.standard_normal((HEADS, n, HEAD_DIM)).astype(dtype),
            rng.standard_normal((HEADS, n, HEAD_DIM_V)).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_cached_decoding_equals_full_recomputation_at_every_step(kernel_name, dtype, skip_refused):
    """A prompt of 5 tokens, then 40 generated one at a time (the cache grows from a
    capacity of 4): each step's output is row t of causal attention over the whole prefix."""
    skip_refused(kernel_name, dtype)
    q, k, v = sequence(45, dtype)
    cache = kernels.KVCache(HEADS, HEAD_DIM, dtype=dtype, capacity=4, head_dim_v=HEAD_DIM_V)
    cache.append(k[:, :5], v[:, :5])
    prompt = cache.attend(q[:, :5], kernel=kernel_name)
    np.testing.assert_allclose(prompt, reference_attention(q[:, :5], k[:, :5], v[:, :5], causal=True),
                               atol=TOLERANCE[dtype])
    for t in range(5, 45):
        cache.append(k[:, t:t + 1], v[:, t:t + 1])
        out = cache.attend(q[:, t:t + 1], kernel=kernel_name)
        assert out.shape == (HEADS, 1, HEAD_DIM_V) and out.dtype == dtype
        full = reference_attention(q[:, :t + 1], k[:, :t + 1], v[:, :t + 1], causal=True)[:, t:t + 1]
        np.testing.assert_allclose(out, full, atol=TOLERANCE[dtype], err_msg=f"step {t}")
    assert len(cache) == 45 and cache.capacity >= 45
    np.testing.assert_array_equal(cache.keys, k)
    np.testing.assert_array_equal(cache.values, v)


def test_growth_doubles_and_keeps_every_token():
    q, k, v = sequence(300, np.float32)
    cache = kernels.KVCache(HEADS, HEAD_DIM, capacity=1, head_dim_v=HEAD_DIM_V)
    capacities = set()
    for t in range(300):
        cache.append(k[:, t:t + 1], v[:, t:t + 1])
        capacities.add(cache.capacity)
    assert capacities == {2 ** p for p in range(10)}  # 1, 2, 4, ..., 512: amortised O(1) per token
    np.testing.assert_array_equal(cache.keys, k)
    assert cache.nbytes == 300 * HEADS * (HEAD_DIM + HEAD_DIM_V) * 4
    cache.append(k[:, :0], v[:, :0])  # no new tokens: nothing changes
    assert len(cache) == 300


def test_views_are_read_only():
    cache = kernels.KVCache(HEADS, HEAD_DIM)
    _, k, _ = sequence(3, np.float32)
    cache.append(k, k)  # values as wide as the keys: head_dim_v defaults to head_dim
    with pytest.raises(ValueError, match="read-only"):
        cache.keys[0, 0, 0] = 1.0


@pytest.mark.parametrize("k_shape, v_shape, k_dtype, error, match", [
    ((2, 1, 8), (2, 1, 8), np.float32, ValueError, r"k must have shape \(kv_heads, t, head_dim\) = \(3, t, 8\)"),
    ((3, 1, 7), (3, 1, 8), np.float32, ValueError, r"got \(3, 1, 7\)"),
    ((3, 1, 8), (3, 1, 6), np.float32, ValueError, r"v must have shape \(kv_heads, t, head_dim_v\) = \(3, t, 8\)"),
    ((3, 2, 8), (3, 1, 8), np.float32, ValueError, "same number of new tokens"),
    ((3, 1, 8), (3, 1, 8), np.float64, TypeError, "k has dtype float64; this cache takes float32"),
])
def test_a_failed_append_is_a_clear_error_and_changes_nothing(k_shape, v_shape, k_dtype, error, match):
    cache = kernels.KVCache(HEADS, HEAD_DIM, capacity=2)
    _, k, _ = sequence(2, np.float32)
    cache.append(k, 2 * k)
    before = (cache.keys.copy(), cache.values.copy(), cache.capacity)
    with pytest.raises(error, match=match):
        cache.append(np.zeros(k_shape, k_dtype), np.zeros(v_shape, np.float32))
    assert len(cache) == 2 and cache.capacity == before[2]
    np.testing.assert_array_equal(cache.keys, before[0])
    np.testing.assert_array_equal(cache.values, before[1])


def test_attend_has_the_api_errors():
    cache = kernels.KVCache(HEADS, HEAD_DIM)
    q = np.zeros((HEADS, 1, HEAD_DIM), np.float32)
    with pytest.raises(ValueError, match=r"the cache is empty: append at least one token's key and value "
                                         r"\(cache.append\(k, v\)\) before attend"):
        cache.attend(q)
    cache.append(np.zeros((HEADS, 2, HEAD_DIM), np.float32), np.zeros((HEADS, 2, HEAD_DIM), np.float32))
    with pytest.raises(ValueError, match=r"q must have shape \(heads, t, head_dim\) = \(3, t, 8\), got \(2, 1, 8\)"):
        cache.attend(np.zeros((2, 1, HEAD_DIM), np.float32))
    with pytest.raises(TypeError, match="q has dtype float64; this cache takes float32"):
        cache.attend(q.astype(np.float64))
    with pytest.raises(ValueError, match="unknown kernel"):
        cache.attend(q, kernel="flash")


def test_repr_says_the_shape_dtype_tokens_and_capacity():
    cache = kernels.KVCache(8, 64, capacity=16)
    cache.append(np.zeros((8, 12, 64), np.float32), np.zeros((8, 12, 64), np.float32))
    assert repr(cache) == "KVCache(heads=8, head_dim=64, dtype=float32, tokens=12, capacity=16)"
    narrow_values = kernels.KVCache(HEADS, HEAD_DIM, dtype=np.float64, capacity=4, head_dim_v=HEAD_DIM_V)
    assert repr(narrow_values) == "KVCache(heads=3, head_dim=8, head_dim_v=5, dtype=float64, tokens=0, capacity=4)"


@pytest.mark.parametrize("args, error, match", [
    (dict(heads=0, head_dim=8), ValueError, "heads must be a positive integer"),
    (dict(heads=2, head_dim=8, capacity=0), ValueError, "capacity must be a positive integer"),
    (dict(heads=2, head_dim=8, dtype=np.int32), TypeError, "float32 or float64"),
])
def test_bad_construction_is_a_clear_error(args, error, match):
    with pytest.raises(error, match=match):
        kernels.KVCache(**args)


def test_a_cache_beyond_memory_is_refused_before_allocating():
    with pytest.raises(MemoryError, match=r"KV cache of 1,000,000,000,000 tokens"):
        kernels.KVCache(8, 64, capacity=10**12)


@pytest.mark.parametrize("kernel", ["numba_tiled", "c_tiled"])
@pytest.mark.parametrize("cache_dtype", [None, "bfloat16"])
def test_a_tiled_rung_is_called_straight_on_the_cache(monkeypatch, kernel, cache_dtype):
    """``attend`` with a rung that reads the rows in place calls its ``run`` on the cache's
    own buffers, not through ``kernels.attention``'s checks (the cache knows its layout),
    and gives what ``kernels.attention`` gives on the same rows."""
    q, k, v = sequence(20, np.float32)
    cache = kernels.KVCache(HEADS, HEAD_DIM, head_dim_v=HEAD_DIM_V, capacity=32, cache_dtype=cache_dtype)
    cache.append(k, v)
    query = q[:, -2:]
    keys, values = cache.dequantised()
    stored = cache.cache_dtype
    expected = kernels.api.attention_unrounded(query.astype(stored), keys.astype(stored), values.astype(stored),
                                               kernel=kernel, causal=True)

    def not_called(*args, **kwargs):
        raise AssertionError("attend went through kernels.attention")

    monkeypatch.setattr(kernels.decode.cache, "attention", not_called)
    monkeypatch.setattr(kernels.decode.cache, "attention_unrounded", not_called)
    out = cache.attend(query, kernel=kernel)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, expected)
    with pytest.raises(ValueError, match="at least one query"):
        cache.attend(q[:, :0], kernel=kernel)


@pytest.mark.parametrize("kernel", ["numba_tiled", "c_tiled"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_repeated_steps_equal_checked_calls_as_the_cache_grows(kernel, dtype):
    """A decoder's repeated steps (one signature: the checks made once, ``KVCache._step``)
    give bit for bit what ``kernels.attention`` gives on the stored rows, step after step,
    across the buffers' reallocations (capacity 4 -> 64: a step kept across one would read
    the old buffer), with a scale and without."""
    q, k, v = sequence(40, dtype)
    cache = kernels.KVCache(HEADS, HEAD_DIM, dtype=dtype, capacity=4, head_dim_v=HEAD_DIM_V)
    for t in range(40):
        cache.append(k[:, t:t + 1], v[:, t:t + 1])
        query = q[:, t:t + 1].copy()   # C-contiguous, as a model's step makes it
        for scale in (None, 0.3):
            out = cache.attend(query, kernel=kernel, scale=scale)
            expected = kernels.attention(query, k[:, :t + 1], v[:, :t + 1], kernel=kernel, causal=True, scale=scale)
            np.testing.assert_array_equal(out, expected, err_msg=f"step {t}, scale {scale}")
    assert cache._steps, "no step was kept for the repeated signature"


def test_a_kept_step_still_refuses_what_its_signature_does_not_cover(monkeypatch):
    """Once a signature has a step, a q of another dtype, shape or layout, an unhashable
    scale, or a kernel registered anew under the name is checked (and used) as a first call
    is; a cache keeps the steps of its newest MAX_PLANS signatures only; a bounded cache keeps
    no step for several queries, whose band changes with the evictions."""
    q, k, v = sequence(6, np.float32)
    cache = kernels.KVCache(HEADS, HEAD_DIM, head_dim_v=HEAD_DIM_V)
    cache.append(k, v)
    query = q[:, -1:].copy()
    first = cache.attend(query)
    np.testing.assert_array_equal(cache.attend(query), first)
    with pytest.raises(TypeError, match="q has dtype float64; this cache takes float32"):
        cache.attend(query.astype(np.float64))
    with pytest.raises(ValueError, match=r"q must have shape \(heads, t, head_dim\)"):
        cache.attend(query[:2])
    with pytest.raises(TypeError, match="scale must be a real number"):
        cache.attend(query, scale=[0.5])
    cache.attend(query, scale=1)
    with pytest.raises(TypeError, match="scale must be a real number"):   # True == 1, and hashes alike
        cache.attend(query, scale=True)
    strided = np.repeat(query, 2, axis=2)[:, :, ::2]   # the same values, another layout
    np.testing.assert_array_equal(cache.attend(strided), first)

    calls = []
    record = kernels.KERNELS["c_tiled"]
    replaced = dataclasses.replace(record)
    real_run = record.implementation.run
    monkeypatch.setitem(kernels.KERNELS, "c_tiled", replaced)
    monkeypatch.setattr(record.implementation, "run", lambda *a, **kw: calls.append(1) or real_run(*a, **kw))
    np.testing.assert_array_equal(cache.attend(query), first)
    assert calls, "the step of the replaced record was used"

    for t_q in range(1, kernels.api.MAX_PLANS + 10):   # ever new shapes: the newest steps only
        cache.attend(np.zeros((HEADS, t_q, HEAD_DIM), np.float32))
    assert len(cache._steps) == kernels.api.MAX_PLANS

    bounded = kernels.KVCache(HEADS, HEAD_DIM, head_dim_v=HEAD_DIM_V, window=3)
    bounded.append(k[:, :3], v[:, :3])
    bounded.attend(q[:, 1:3].copy())   # nothing evicted yet: the band is the window's
    bounded.append(k[:, 3:], v[:, 3:])
    with pytest.raises(ValueError, match="has evicted 3 tokens"):
        bounded.attend(q[:, 1:3].copy())
