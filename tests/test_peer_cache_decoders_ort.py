"""ONNX Runtime's own KV caches (``onnxruntime_attention.cache_decoder``: a
GroupQueryAttention node decoding over its float16 or int8 cache) against float64 attention
on the same float32 keys and values: float16 within a few of its unit roundoffs, int8 within
the bound its per-channel quantisation implies (and beyond anything float16 rounding could
explain, so the values were quantised), and equal, to float32 accuracy, to attention over
the int8 cache as the module documents it.  A step is repeatable and returns a fresh array; a
format ONNX Runtime does not keep here is refused.  Skips when the peer is not installed
(``make peers``)."""
import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="onnxruntime_attention needs onnxruntime (make peers)")
pytest.importorskip("onnx", reason="onnxruntime_attention needs onnx (make peers)")
from kernels.peers import onnxruntime_attention  # noqa: E402  (after the skips)
from own_caches import N, attention64, cache, query, relative_errors  # noqa: E402

U16 = 2.0 ** -11  # float16's unit roundoff
# float16: the cache, the query and the output are rounded to float16 (relative error u each)
# and accumulated in float32; the rounding errors are as random as the values, so the
# softmax's average shrinks them as it shrinks the output, and the norm-wise error of a head
# stays of the order of u (1.3 u at most on this grid).  8 u leaves room, not slack for a bug.
FLOAT16_BOUND = 8 * U16
# int8 against attention over its own codes: float32 arithmetic alone, its rounding errors
# growing like √n · u32 summed over n keys (≤ 19 u32 = 1.1e-6 seen); twice that bound
FLOAT32_SUMS = 2 * np.sqrt(N) * 2.0 ** -24
SHAPES = [pytest.param(8, 2, id="8 heads on 2"), pytest.param(8, 8, id="8 heads on 8")]


def dequantised(x):
    """x (kv_heads, n, d) as ``onnxruntime_attention`` documents its int8 cache: codes
    rint(x / s) (ties to even), s = max_j |x_jc| / 127 in float32 per K/V head and channel."""
    scales = np.abs(x).max(axis=1, keepdims=True) / np.float32(127)
    return np.rint(x / scales) * scales.astype(np.float64)


def int8_bound(q, keys, values, scale, ref, weights):
    """Elementwise bound on the error of attention over an int8 cache quantised per K/V head
    and channel (scale s_c = max_j |x_jc| / 127, codes rounded to nearest: |δx_jc| <= s_c / 2
    = max |x_c| / 254).  A key error moves query i's score j by at most
    ε_i = scale · Σ_c |q_ic| s^K_c / 2, so each weight by a factor within e^(±2ε_i), and
        |Δo_ic| <= s^V_c / 2 + (e^(2ε_i) - 1) · Σ_j p_ij |v_jc - o_ic|
    (the value errors are averaged by weights summing to 1; Σ_j Δp_ij = 0, so the weight
    errors multiply v - o).  The float32 and output roundings, ~1e-7 here, fit its margin."""
    group = q.shape[0] // keys.shape[0]
    half_step = [np.repeat(np.abs(x).max(axis=1, keepdims=True) / 254, group, axis=0)
                 for x in (keys, values)]                              # (heads, 1, d)
    epsilon = scale * np.abs(q) @ half_step[0].transpose(0, 2, 1)     # (heads, t, 1)
    v = np.repeat(values.astype(np.float64), group, axis=0)
    spread = np.einsum("hij,hijc->hic", weights, np.abs(v[:, None] - ref[:, :, None]))
    return half_step[1] + np.expm1(2 * epsilon) * spread


@pytest.mark.parametrize("t", [1, 3], ids=lambda t: f"t={t}")
@pytest.mark.parametrize("d", [64, 32], ids=lambda d: f"d={d}")
@pytest.mark.parametrize("heads, kv_heads", SHAPES)
def test_float16_cache_is_within_a_few_unit_roundoffs(heads, kv_heads, d, t):
    keys, values = cache(kv_heads, d)
    q, scale = query(heads, t, d), 1 / np.sqrt(d)
    out = onnxruntime_attention.cache_decoder("float16", keys, values, heads, scale)(q)
    ref, _ = attention64(q, keys, values, scale)
    assert out.dtype == np.float32 and out.shape == (heads, t, d)
    errors = relative_errors(out, ref)
    assert errors.max() <= FLOAT16_BOUND, f"{errors.max() / U16:.2f} u > {FLOAT16_BOUND / U16:.0f} u"


@pytest.mark.parametrize("t", [1, 3], ids=lambda t: f"t={t}")
@pytest.mark.parametrize("d", [64, 32], ids=lambda d: f"d={d}")
@pytest.mark.parametrize("heads, kv_heads", SHAPES)
def test_int8_cache_is_within_its_quantisation_bound(heads, kv_heads, d, t):
    keys, values = cache(kv_heads, d)
    q, scale = query(heads, t, d), 1 / np.sqrt(d)
    out = onnxruntime_attention.cache_decoder("int8", keys, values, heads, scale)(q)
    ref, weights = attention64(q, keys, values, scale)
    bound = int8_bound(q, keys, values, scale, ref, weights)
    worst = np.max(np.abs(out - ref) / bound)
    assert worst <= 1, f"an error reaches {worst:.2f} times its bound"
    # the bound is a worst case (every rounding error aligned); quantised, the output is
    # still off by more than any float16 rounding could make it
    assert relative_errors(out, ref).min() > FLOAT16_BOUND


@pytest.mark.parametrize("t", [1, 3], ids=lambda t: f"t={t}")
@pytest.mark.parametrize("d", [64, 32], ids=lambda d: f"d={d}")
@pytest.mark.parametrize("heads, kv_heads", SHAPES)
def test_int8_cache_holds_the_documented_codes(heads, kv_heads, d, t):
    keys, values = cache(kv_heads, d)
    q, scale = query(heads, t, d), 1 / np.sqrt(d)
    out = onnxruntime_attention.cache_decoder("int8", keys, values, heads, scale)(q)
    ref, _ = attention64(q, dequantised(keys), dequantised(values), scale)
    assert relative_errors(out, ref).max() <= FLOAT32_SUMS


@pytest.mark.parametrize("cache_format", onnxruntime_attention.CACHE_FORMATS)
def test_a_step_is_repeatable_and_returns_a_fresh_array(cache_format):
    keys, values = cache(2, 64)
    step = onnxruntime_attention.cache_decoder(cache_format, keys, values, 8, 0.125)
    q1, q3 = query(8, 1, 64), query(8, 3, 64)
    first = step(q1)
    step(q3)  # rewrites the three newest slots (from the same floats, to the same contents)
    again = step(q1)
    np.testing.assert_array_equal(again, first)
    assert not np.shares_memory(again, first)
    first[...] = np.nan  # the caller owns what a step returns
    np.testing.assert_array_equal(step(q1), again)


@pytest.mark.parametrize("cache_format", ["bfloat16", "float32", "int4"])
def test_a_format_onnxruntime_does_not_keep_is_refused(cache_format):
    keys, values = cache(2, 32)
    with pytest.raises(ValueError, match=repr(cache_format)):
        onnxruntime_attention.cache_decoder(cache_format, keys, values, 8, 0.125)
