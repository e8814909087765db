"""A bounded KV cache (``KVCache(window=W, sinks=S)``): memory fixed at S + W rows, each step
equal to attention over its band, every format and grouping read in place."""
import numpy as np
import pytest

import kernels
from kernels.cache_formats import NARROW
from kernels.reference import reference_attention

HEADS, KV_HEADS, HEAD_DIM = 4, 2, 16
WINDOW, SINKS = 7, 3
OURS = ["numpy", "numba_tiled", "c_tiled"]


def sequence(n, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((HEADS, n, HEAD_DIM)).astype(np.float32),
            *rng.standard_normal((2, KV_HEADS, n, HEAD_DIM)).astype(np.float32))


def band_reference(q, k, v, t):
    """Step t's output: the newest token's query over the sinks and the newest WINDOW tokens
    (the band window=(WINDOW - 1, 0), sinks=SINKS), in float64."""
    return reference_attention(q[:, :t + 1], k[:, :t + 1], v[:, :t + 1], window=(WINDOW - 1, 0),
                               sinks=SINKS)[:, t:t + 1]


@pytest.mark.parametrize("kernel", OURS)
def test_each_step_is_attention_over_the_sinks_and_the_newest_window(kernel):
    """float32, a prompt of 5 tokens then 50 steps (evicting from step 10 on): within 2e-6,
    a few float32 ulps of outputs ~1 (tests/test_kv_cache.py's tolerance)."""
    q, k, v = sequence(55)
    cache = kernels.KVCache(HEADS, HEAD_DIM, kv_heads=KV_HEADS, window=WINDOW, sinks=SINKS)
    cache.append(k[:, :5], v[:, :5])
    np.testing.assert_allclose(cache.attend(q[:, :5], kernel=kernel),
                               reference_attention(q[:, :5], k[:, :5], v[:, :5], causal=True), atol=2e-6)
    for t in range(5, 55):
        cache.append(k[:, t:t + 1], v[:, t:t + 1])
        np.testing.assert_allclose(cache.attend(q[:, t:t + 1], kernel=kernel), band_reference(q, k, v, t),
                                   atol=2e-6, err_msg=f"step {t}")
    assert (len(cache), cache.seen, cache.evicted, cache.capacity) == (10, 55, 45, 10)


@pytest.mark.parametrize("cache_dtype", NARROW)
@pytest.mark.parametrize("kernel", OURS)
def test_a_narrow_bounded_cache_reads_its_ring_as_an_ordered_cache_of_the_same_tokens(kernel, cache_dtype):
    """The ring holds the same stored rows as an unbounded cache given only the sinks and the
    newest tokens, in another order: a softmax over a set, so the outputs agree up to the
    order of the sums (1e-5 of values ~1, above float32's reordering, far below any
    format's rounding)."""
    q, k, v = sequence(40, seed=1)
    bounded = kernels.KVCache(HEADS, HEAD_DIM, kv_heads=KV_HEADS, window=WINDOW, sinks=SINKS, cache_dtype=cache_dtype)
    for t in range(40):
        bounded.append(k[:, t:t + 1], v[:, t:t + 1])
    kept = np.r_[0:SINKS, 40 - WINDOW:40]
    ordered = kernels.KVCache(HEADS, HEAD_DIM, kv_heads=KV_HEADS, cache_dtype=cache_dtype)
    ordered.append(k[:, kept], v[:, kept])
    np.testing.assert_allclose(bounded.attend(q[:, 39:], kernel=kernel), ordered.attend(q[:, 39:], kernel=kernel),
                               atol=1e-5)
    assert bounded.nbytes == ordered.nbytes


def test_memory_stays_fixed_however_many_tokens_are_appended():
    q, k, v = sequence(1)
    cache = kernels.KVCache(HEADS, HEAD_DIM, kv_heads=KV_HEADS, window=WINDOW, sinks=SINKS, cache_dtype="int8")
    buffers = [id(b) for b in cache._buffers]
    for chunk in (1, 2, 9, 25, 3):
        rng = np.random.default_rng(chunk)
        cache.append(*rng.standard_normal((2, KV_HEADS, chunk, HEAD_DIM)).astype(np.float32))
        assert cache.capacity == SINKS + WINDOW and [id(b) for b in cache._buffers] == buffers
    assert cache.seen == 40 and len(cache) == SINKS + WINDOW
    assert cache.nbytes == (SINKS + WINDOW) * KV_HEADS * 2 * (HEAD_DIM + 4)


@pytest.mark.parametrize("chunks", [[1] * 30, [2, 9, 25, 3], [30], [3, 1, 20]])
def test_positions_name_the_token_in_every_row_whatever_the_chunks(chunks):
    """A token's key is the token's own position (k[h, p] = p), so the stored keys are the
    positions, and they are the sinks plus the newest WINDOW tokens."""
    cache = kernels.KVCache(1, 1, window=WINDOW, sinks=SINKS)
    seen = 0
    for chunk in chunks:
        tokens = np.arange(seen, seen + chunk, dtype=np.float32).reshape(1, chunk, 1)
        cache.append(tokens, tokens)
        seen += chunk
        assert np.array_equal(cache.keys[0, :, 0], cache.positions)
        expected = sorted(set(range(min(SINKS, seen))) | set(range(max(0, seen - WINDOW), seen)))
        assert sorted(cache.positions) == expected


def test_a_prompt_chunk_before_any_eviction_is_attended_with_the_band():
    q, k, v = sequence(9, seed=2)   # 9 tokens: past the window, within sinks + window
    cache = kernels.KVCache(HEADS, HEAD_DIM, kv_heads=KV_HEADS, window=WINDOW, sinks=SINKS)
    cache.append(k, v)
    out = cache.attend(q, kernel="numba_tiled")
    np.testing.assert_allclose(out, reference_attention(q, k, v, window=(WINDOW - 1, 0), sinks=SINKS), atol=2e-6)


def test_several_queries_after_an_eviction_are_refused_with_the_call_that_does_it():
    q, k, v = sequence(12)
    cache = kernels.KVCache(HEADS, HEAD_DIM, kv_heads=KV_HEADS, window=WINDOW, sinks=SINKS)
    cache.append(k, v)
    with pytest.raises(ValueError, match=r"evicted 2 tokens.*window=\(6, 0\), sinks=3"):
        cache.attend(q[:, -2:])
    assert cache.attend(q[:, -1:]).shape == (HEADS, 1, HEAD_DIM)


@pytest.mark.parametrize("kwargs, words", [
    (dict(sinks=2), "needs a window"),
    (dict(window=4, capacity=9), "not both"),
    (dict(window=0), "window must be a positive integer"),
    (dict(window=2.5), "window must be a positive integer"),
    (dict(window=3, sinks=-1), "sinks must be an integer >= 0"),
])
def test_a_bad_window_or_sinks_is_refused(kwargs, words):
    with pytest.raises(ValueError, match=words):
        kernels.KVCache(HEADS, HEAD_DIM, **kwargs)


def test_a_failed_append_leaves_a_bounded_cache_as_it_was():
    q, k, v = sequence(12)
    cache = kernels.KVCache(HEADS, HEAD_DIM, kv_heads=KV_HEADS, window=WINDOW, sinks=SINKS)
    cache.append(k, v)
    before = cache.keys.copy(), cache.positions
    with pytest.raises(ValueError):
        cache.append(k[:, :2], v[:, :3])
    assert np.array_equal(cache.keys, before[0]) and np.array_equal(cache.positions, before[1])
    assert cache.seen == 12
