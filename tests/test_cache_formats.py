"""KV caches in fewer bytes: grouped K/V heads and the float16, bfloat16, int8 and int4 formats,
each decode step held against float64 recomputation over the values the cache stores,
on every kernel that takes the format (and a clear refusal from every one that does not)."""
import re

import numpy as np
import pytest

import kernels
from kernels.cache_formats import (FORMATS, INT4_GROUP, INT4_LEVELS, cache_format, decode_queries,
                                    pack_int4, quantise_int4, quantise_int8, unpack_int4)
from kernels.harness import Case, compare, error_budget
from kernels.reference import reference_attention

CACHE_FORMATS = ("float32", "float16", "bfloat16", "int8", "int4")
HEADS, HEAD_DIM, HEAD_DIM_V = 4, 16, 24
CAUSAL = Case("cache", (HEADS,), 1, 1, HEAD_DIM, HEAD_DIM_V, causal=True)  # error_budget reads .causal


def tokens(n, kv_heads, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((HEADS, n, HEAD_DIM), dtype=np.float32),
            rng.standard_normal((kv_heads, n, HEAD_DIM), dtype=np.float32),
            rng.standard_normal((kv_heads, n, HEAD_DIM_V), dtype=np.float32))


def held_to(cache, q, kernel_name):
    """(inputs, dtype) a kernel attending ``cache`` is held to: the queries as the cache
    passes them on (rounded to a 16-bit format; quantised where the kernel multiplies int8
    or int4 keys as integers: ``Kernel.int8_query_rows``, int4's per group of 32 values),
    the keys and values as stored, the type whose budget applies (the 16-bit type's: its
    kernels may round P in it)."""
    fmt = cache.format
    record = kernels.KERNELS[kernel_name]
    if fmt.name in record.quantised_caches and q.shape[1] <= record.int8_query_rows:
        q = decode_queries(q, fmt.group or None)
    if fmt.scaled or fmt.name == "float32":
        keys, values = cache.dequantised()
        return (q, keys, values), np.float32
    return (q.astype(fmt.dtype), cache.keys, cache.values), fmt.dtype


def check_step(cache, q, out, kernel_name, label):
    inputs, dtype = held_to(cache, q, kernel_name)
    ref = reference_attention(*inputs, causal=True)
    comparison = compare(out, ref, inputs[2], error_budget(CAUSAL, dtype, inputs, ref))
    assert comparison.ok, f"{kernel_name} {cache.format.name} {label}: {comparison}"


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
@pytest.mark.parametrize("cache_dtype", CACHE_FORMATS)
def test_every_decode_step_is_float64_attention_over_the_stored_values(kernel_name, cache_dtype, kv_heads):
    """A prompt of 5 tokens, 25 generated one at a time (the buffers grow from 4 tokens, so
    the kernels read strided views), then a chunk of 7 queries (the query-tile path)."""
    record = kernels.KERNELS[kernel_name]
    q, k, v = tokens(37, kv_heads)
    cache = kernels.KVCache(HEADS, HEAD_DIM, head_dim_v=HEAD_DIM_V, kv_heads=kv_heads, cache_dtype=cache_dtype,
                            capacity=4)
    cache.append(k[:, :5], v[:, :5])
    refusal = record.cache_refusal(cache_dtype)
    if refusal:
        with pytest.raises(ValueError, match=re.escape(refusal)):
            cache.attend(q[:, :1], kernel=kernel_name)
        return
    if cache_dtype in record.own_caches:
        pytest.skip(f"{kernel_name} keeps a {cache_dtype} cache of its own values "
                    f"(test_a_peer_keeping_its_own_cache_attends_through_it)")
    if not record.fits(HEADS, 7, 37):
        pytest.skip(f"above {kernel_name}'s cap")
    check_step(cache, q[:, :5], cache.attend(q[:, :5], kernel=kernel_name), kernel_name, "prompt")
    for t in range(5, 30):
        cache.append(k[:, t:t + 1], v[:, t:t + 1])
        out = cache.attend(q[:, t:t + 1], kernel=kernel_name)
        assert out.shape == (HEADS, 1, HEAD_DIM_V) and out.dtype == np.float32
        check_step(cache, q[:, t:t + 1], out, kernel_name, f"step {t}")
    cache.append(k[:, 30:], v[:, 30:])
    check_step(cache, q[:, 30:], cache.attend(q[:, 30:], kernel=kernel_name), kernel_name, "chunk of 7")


# A peer's own cache holds its own rounding of the values ours stores (ONNX Runtime's int8:
# a scale per channel; OpenVINO's u8: a scale and zero point per token), so it is held to
# float64 attention over our stored values within its format's error on data of this
# spread, not within float32's budget: float32 and float16 at 8 unit roundoffs of float16,
# bfloat16 at 8 of bfloat16 (the peer rounds the queries too), int8 at 8 times an element's
# relative error (max|x| / 254 of values of spread 1, max |x| < 4.5 here: 1.8e-2; ggml
# quantises the queries too), each the larger; int4 (ggml's Q4_0, a step of max|block| / 8)
# at one element's worst rounding, max|x| / 16 = 0.28 (0.10-0.11 measured: 4 bits leave no
# room for a factor).
OWN_CACHE_BOUND = {"float32": 8 * 2.0**-11, "float16": 8 * 2.0**-11, "bfloat16": 8 * 2.0**-8,
                   "int8": 8 * 4.5 / 254, "int4": 4.5 / 16}


def test_a_peer_keeping_its_own_cache_attends_through_it(kernel_name):
    """attend and a decoder's first step agree, on one query, on a chunk of 3 and on more
    queries than cached tokens (the first see none: zeros), within the format's error of
    float64 over what our cache stores; a decoder refuses an empty query."""
    record = kernels.KERNELS[kernel_name]
    if not record.own_caches:
        pytest.skip(f"{kernel_name} keeps no cache of its own")
    rng = np.random.default_rng(4)
    # d = 32: a whole block of ggml's int8 and int4 caches (Q8_0, Q4_0), which take no other widths
    q, k, v = (rng.standard_normal((heads, 37, 32), dtype=np.float32) for heads in (HEADS, 2, 2))
    for cache_dtype in record.own_caches:
        cache = kernels.KVCache(HEADS, 32, kv_heads=2, cache_dtype=cache_dtype)
        cache.append(k, v)
        keys, values = cache.dequantised()
        for t in (1, 3, 40):
            queries = np.concatenate([q, q[:, :3]], axis=1)[:, -t:]
            out = cache.attend(queries, kernel=kernel_name)
            np.testing.assert_array_equal(cache.decoder(kernel_name)(queries), out)
            ref = reference_attention(queries, np.repeat(keys, 2, axis=0), np.repeat(values, 2, axis=0),
                                      causal=True)
            error = np.linalg.norm(out - ref) / np.linalg.norm(ref)
            assert error < OWN_CACHE_BOUND[cache_dtype], f"{kernel_name} {cache_dtype} t={t}: {error:.2g}"
        with pytest.raises(ValueError, match="at least one query"):
            cache.decoder(kernel_name)(q[:, :0])


def test_the_registry_names_the_caches_each_peer_keeps():
    """``Kernel.own_caches`` (read without importing the peer) is its module's CACHE_FORMATS."""
    for record in kernels.KERNELS.values():
        if record.external:
            assert record.own_caches == getattr(record.implementation, "CACHE_FORMATS", ()), record.name


@pytest.mark.parametrize("cache_dtype", ["float16", "bfloat16", "int8", "int4"])
def test_a_nan_key_reaches_exactly_the_queries_that_see_it(own_kernel_name, cache_dtype):
    q, k, v = tokens(12, 2)
    k[1, 6, 3] = np.nan
    cache = kernels.KVCache(HEADS, HEAD_DIM, head_dim_v=HEAD_DIM_V, kv_heads=2, cache_dtype=cache_dtype)
    cache.append(k, v)
    out = cache.attend(q[:, -8:], kernel=own_kernel_name)   # query i sees keys j <= i + 4
    sees = np.arange(8) + 4 >= 6
    assert np.isnan(out[2:, sees]).all()           # heads 2, 3 read K/V head 1
    assert np.isfinite(out[2:, ~sees]).all() and np.isfinite(out[:2]).all()


@pytest.mark.parametrize("cache_dtype", CACHE_FORMATS)
def test_the_cache_stores_each_format_in_its_bytes(cache_dtype):
    _, k, v = tokens(10, 2)
    cache = kernels.KVCache(HEADS, HEAD_DIM, head_dim_v=HEAD_DIM_V, kv_heads=2, cache_dtype=cache_dtype)
    cache.append(k, v)
    fmt = cache_format(cache_dtype)
    stored_width = HEAD_DIM // 2 if cache_dtype == "int4" else HEAD_DIM   # two codes a byte
    assert cache.keys.dtype == fmt.dtype and cache.keys.shape == (2, 10, stored_width)
    # bytes a row: the elements' and 4 per scale (int8: one a row; int4: one per 32, so one at
    # d = 16 and one at d_v = 24)
    per_row = {"float32": 4 * 40, "float16": 2 * 40, "bfloat16": 2 * 40, "int8": 40 + 8, "int4": 20 + 8}
    assert cache.nbytes == 10 * 2 * per_row[cache_dtype]
    keys, values = cache.dequantised()
    assert keys.dtype == values.dtype == np.float32 and keys.shape == k.shape and values.shape == v.shape
    # each element within what its format promises: half a step (int8: max|row| / 127; int4:
    # max|group| / 7, a group being a whole row at these widths), or a 16-bit rounding
    for stored, given in ((keys, k), (values, v)):
        if fmt.scaled:
            bound = np.abs(given).max(axis=-1, keepdims=True) / (2 * fmt.levels)
        else:
            bound = np.abs(given) * float(np.finfo(fmt.dtype).eps) / 2 if fmt.bits < 32 else 0
        assert (np.abs(stored - given) <= bound * (1 + 1e-6)).all()


def test_int8_codes_are_symmetric_and_zero_and_nonfinite_rows_are_kept_apart():
    x = np.array([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0], [np.inf, 1.0, 2.0], [3.0, np.nan, 1.0]], np.float32)
    codes, scales = quantise_int8(x)
    np.testing.assert_array_equal(codes[0], [64, -127, 32])   # 2 / 127 per step: 1 -> 63.5 -> 64 (to even)
    assert scales[0] == np.float32(2.0 / 127) and scales[1] == 0 and (codes[1] == 0).all()
    assert np.isnan(scales[2:]).all() and (codes[2:] == 0).all()
    minus_codes, minus_scales = quantise_int8(-x[:1])
    np.testing.assert_array_equal(minus_codes, -codes[:1])
    assert minus_scales[0] == scales[0]
    per_channel_codes, per_channel_scales = quantise_int8(x[:2], axis=-2)
    assert per_channel_scales.shape == (3,) and per_channel_codes.shape == (2, 3)


def test_int4_codes_are_packed_two_to_a_byte_as_documented():
    """kernels.cache_formats: element 2i in byte i's low nibble, 2i + 1 in its high one, each
    code plus 8; a last odd element's partner is 8 (a zero)."""
    codes = np.array([[-7, 7, 0, 1, -1]], np.int8)
    packed = pack_int4(codes)
    assert packed.dtype == np.uint8 and packed.tolist() == [[1 | 15 << 4, 8 | 9 << 4, 7 | 8 << 4]]
    np.testing.assert_array_equal(unpack_int4(packed, 5), codes)
    np.testing.assert_array_equal(unpack_int4(packed), np.append(codes, 0)[None])


def test_int4_groups_are_quantised_apart_symmetric_and_nonfinite_groups_kept_apart():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 70), dtype=np.float32)   # groups of 32, 32 and 6
    x[1, 3] = np.nan
    x[2, 69] = np.inf
    x[3, 32:64] = 0
    packed, scales = quantise_int4(x)
    assert packed.shape == (4, 35) and scales.shape == (4, 3)
    tops = [np.abs(x[:, g * INT4_GROUP:(g + 1) * INT4_GROUP]).max(axis=-1) for g in range(3)]
    np.testing.assert_array_equal(scales[0], np.float32([top[0] for top in tops]) / np.float32(INT4_LEVELS))
    assert np.isnan(scales[1, 0]) and np.isfinite(scales[1, 1:]).all()    # only the NaN's group
    assert np.isnan(scales[2, 2]) and np.isfinite(scales[2, :2]).all()
    assert scales[3, 1] == 0
    values = FORMATS["int4"].decode(packed, scales, width=70)
    assert np.isnan(values[1, :32]).all() and np.isnan(values[2, 64:]).all() and (values[3, 32:64] == 0).all()
    finite = np.isfinite(values)
    bound = np.repeat(scales, INT4_GROUP, axis=-1)[:, :70] / 2
    assert (np.abs(values - x)[finite] <= bound[finite] * (1 + 1e-6)).all()
    minus_packed, minus_scales = quantise_int4(-x[:1])
    np.testing.assert_array_equal(unpack_int4(minus_packed, 70), -unpack_int4(packed[:1], 70))
    np.testing.assert_array_equal(minus_scales, scales[:1])


@pytest.mark.parametrize("reader", ["c_tiled", "numba_tiled"])
@pytest.mark.parametrize("d, d_v", [(1, 1), (5, 33), (64, 64), (70, 96)])
def test_an_int4_cache_read_in_place_is_read_as_float32_reads_its_values(reader, d, d_v):
    """run_int4, in place and on odd widths and a short last group: in query tiles (9
    queries) bit for bit the kernel's float32 call on the dequantised cache; decoding (1 and
    3 queries: c_tiled's integer keys, numba_tiled's blocks dequantised as they are read)
    float32 on the queries as the kernel takes them (c_tiled's quantised per group); its
    layout errors named."""
    assert "int4" in kernels.KERNELS[reader].quantised_caches
    rng = np.random.default_rng(d)
    cache = kernels.KVCache(4, d, head_dim_v=d_v, kv_heads=2, cache_dtype="int4", capacity=8)
    cache.append(rng.standard_normal((2, 150, d), dtype=np.float32), rng.standard_normal((2, 150, d_v), dtype=np.float32))
    keys, values = cache.dequantised()
    for t in (1, 3):
        q = rng.standard_normal((4, t, d), dtype=np.float32)
        check_step(cache, q, cache.attend(q, kernel=reader), reader, f"{t} queries")
    q = rng.standard_normal((4, 9, d), dtype=np.float32)
    expected = kernels.attention(q, keys, values, kernel=reader, causal=True)
    np.testing.assert_array_equal(cache.attend(q, kernel=reader), expected)
    run_int4 = kernels.KERNELS[reader].implementation.run_int4
    out = np.empty((4, 1, d_v), np.float32)
    with pytest.raises(ValueError, match=rf"{reader} int4 cache: k_scale must be \(B_kv, n_k, "):
        run_int4(q[:, :1], cache.keys, cache.key_scales[..., :0], cache.values, cache.value_scales, out, True, 1.0)


@pytest.mark.parametrize("cache_dtype", ["float16", "int8", "int4"])
def test_a_failed_append_leaves_a_narrow_cache_as_it_was(cache_dtype):
    _, k, v = tokens(3, 2)
    cache = kernels.KVCache(HEADS, HEAD_DIM, head_dim_v=HEAD_DIM_V, kv_heads=2, cache_dtype=cache_dtype, capacity=3)
    cache.append(k, v)
    before = [None if a is None else a.copy() for a in (cache.keys, cache.values, cache.key_scales)]
    with pytest.raises(ValueError, match=r"v must have shape \(kv_heads, t, head_dim_v\) = \(2, t, 24\)"):
        cache.append(k, k)   # would need to grow: nothing is allocated or changed
    with pytest.raises(TypeError, match="k has dtype float64; this cache takes float32"):
        cache.append(k.astype(np.float64), v)
    assert len(cache) == 3 and cache.capacity == 3
    for now, was in zip((cache.keys, cache.values, cache.key_scales), before):
        np.testing.assert_array_equal(now, was)


@pytest.mark.parametrize("args, error, match", [
    (dict(heads=8, head_dim=8, kv_heads=3), ValueError, "kv_heads = 3 must divide heads = 8"),
    (dict(heads=8, head_dim=8, kv_heads=0), ValueError, "kv_heads must be a positive integer"),
    (dict(heads=2, head_dim=8, cache_dtype="int2"), ValueError, "unknown KV cache format 'int2'; known: float64"),
    (dict(heads=2, head_dim=8, dtype=np.float64, cache_dtype="int8"), ValueError,
     "a float64 cache is stored as float64 only"),
    (dict(heads=2, head_dim=8, dtype=np.float64, cache_dtype="int4"), ValueError,
     "a float64 cache is stored as float64 only"),
])
def test_bad_grouping_or_format_is_a_clear_error(args, error, match):
    with pytest.raises(error, match=match):
        kernels.KVCache(**args)


def test_repr_and_sizes_name_the_grouping_and_format():
    cache = kernels.KVCache(8, 64, kv_heads=2, cache_dtype="int8", capacity=16)
    assert repr(cache) == ("KVCache(heads=8, kv_heads=2, head_dim=64, dtype=float32, cache_dtype=int8, "
                           "tokens=0, capacity=16)")
    assert set(FORMATS) == {"float64", "float32", "float16", "bfloat16", "int8", "int4"}
