"""ggml's own KV caches (``ggml_flash_attn.cache_decoder``: ``ggml_flash_attn_ext`` decoding
over ggml's F32, BF16, Q8_0 or Q4_0 cache) against float64 attention on the same float32
keys and values: float32 within its summation error, bfloat16 within a few of its unit
roundoffs, int8 and int4 within the bound Q8_0's and Q4_0's quantisation implies (and
beyond float16's rounding, so the values were quantised), and equal, to float32 accuracy,
to attention over the codes as the module documents them (Q4_0's clipping included).  A
step is repeatable and returns a fresh array; a format ggml does not keep here, or a width
Q8_0 or Q4_0 cannot take, is refused.  The
refused float16 cache still computes as the refusal says (its float16 sums err by a
random walk on random data and stop growing on even attention), and ``run`` matches the
reference in float32 and bfloat16.  Skips when the peer is not installed (``make peers``)."""
import numpy as np
import pytest

ggml = pytest.importorskip("ggml", reason="ggml_flash_attn needs the ggml-python binding (make peers)")
from kernels.peers import ggml_flash_attn  # noqa: E402  (after the skip)
from own_caches import N, attention64, cache, query, relative_errors  # noqa: E402
from kernels.dtypes import float_type  # noqa: E402
from kernels.reference import reference_attention  # noqa: E402
from kernels.threads import using_budget  # noqa: E402

U16, UBF16, U32 = 2.0 ** -11, 2.0 ** -8, 2.0 ** -24  # unit roundoffs
# Rounding q, the cache and the output to a 16-bit type costs about one unit roundoff of it,
# norm-wise per head (ONNX Runtime's float16 cache: 1.3 u at most on this grid; ggml's
# bfloat16 one: 1.2 u); 8 u leaves room, not slack for a bug.
STORAGE = 8
# float32 arithmetic alone: rounding errors growing like √n · u32 summed over n keys
# (21 u32 = 1.3e-6 seen); twice that bound
FLOAT32_SUMS = 2 * np.sqrt(N) * U32
SHAPES = [pytest.param(8, 2, id="8 heads on 2"), pytest.param(8, 8, id="8 heads on 8")]
GRID = pytest.mark.parametrize("t", [1, 3], ids=lambda t: f"t={t}")
WIDTHS = pytest.mark.parametrize("d", [64, 32], ids=lambda d: f"d={d}")


def float16_accumulation(keys, values, group, weights):
    """The norm-wise error, relative to each head's output, that ggml's float16 accumulation
    is expected to make (one standard deviation): for F16 values it keeps the running
    Y_j = Σ_{i<=j} e^(s_i - M) v_i in float16, rounding it at every key (``VKQ16``,
    ``ggml_vec_mad_f16``), an error uniform within ±u·|Y_j| (variance u² Y_j² / 3), all
    divided by S = Σ e^(s_i - M) at the end.  Summed as independent errors (the running sums
    over one chain of keys; the split-key path's shorter chains err less)."""
    v = np.repeat(values.astype(np.float64), group, axis=0)
    # weights are e^(s - M) / S already: the running sums divided by S
    partial = np.cumsum(weights[..., None] * v[:, None], axis=2)    # (heads, t, n, d_v)
    variance = U16 ** 2 / 3 * (partial ** 2).sum(axis=(1, 2, 3))
    return np.sqrt(variance) / np.linalg.norm(partial[:, :, -1], axis=(1, 2))


def q8_0(x, reference=True):
    """x (..., d) as ggml stores it in Q8_0, dequantised to float64: blocks of 32 along d,
    d = max|block| / 127 in float32 kept as float16.  The cache (``quantize_row_q8_0_ref``):
    codes roundf(x · (1 / d)), halves away from zero; the query (``quantize_row_q8_0``'s
    AVX2 code): codes rint(x · (127 / max|block|)), halves to even."""
    blocks = x.reshape(*x.shape[:-1], -1, ggml_flash_attn.Q8_0_BLOCK)
    largest = np.abs(blocks).max(axis=-1, keepdims=True)
    step = largest / np.float32(127)
    with np.errstate(divide="ignore"):
        if reference:
            inverse = np.where(step != 0, np.float32(1) / step, np.float32(0)).astype(np.float32)
            scaled = (blocks * inverse).astype(np.float64)
            codes = np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)
        else:
            inverse = np.where(largest != 0, np.float32(127) / largest, np.float32(0)).astype(np.float32)
            codes = np.rint((blocks * inverse).astype(np.float64))
    return (codes * step.astype(np.float16).astype(np.float64)).reshape(x.shape)


def q8_0_half_steps(x):
    """Each element's worst Q8_0 error: half a step, max|block| / 254, plus the float16
    rounding of the step (relative 2^-11 at most) times a code of up to 127."""
    largest = np.abs(x).reshape(*x.shape[:-1], -1, ggml_flash_attn.Q8_0_BLOCK).max(axis=-1, keepdims=True)
    block = ggml_flash_attn.Q8_0_BLOCK
    steps = np.broadcast_to(largest / 254 * (1 + 254 * U16), (*largest.shape[:-1], block))
    return steps.reshape(x.shape).astype(np.float64)


def q4_0_blocks(x):
    """(blocks (..., 32) float32, the float32 step D = m / -8 of each, m the block's value of
    largest magnitude (its first, on a tie), keepdims)."""
    blocks = x.reshape(*x.shape[:-1], -1, ggml_flash_attn.Q4_0_BLOCK)
    first = np.abs(blocks).argmax(axis=-1)[..., None]
    return blocks, np.take_along_axis(blocks, first, axis=-1) / np.float32(-8)


def q4_0(x):
    """x (..., d) as ggml stores it in Q4_0, dequantised to float64 (``quantize_row_q4_0_ref``):
    codes min(15, trunc(x · (1 / D) + 8.5)) - 8 times D kept as float16."""
    blocks, step = q4_0_blocks(x)
    with np.errstate(divide="ignore"):
        inverse = np.where(step != 0, np.float32(1) / step, np.float32(0)).astype(np.float32)
    codes = np.minimum(15, np.trunc(blocks * inverse + np.float32(8.5))) - 8
    return (codes * step.astype(np.float16).astype(np.float64)).reshape(x.shape)


def q4_0_half_steps(x):
    """Each element's worst Q4_0 error: half a step |D| = max|block| / 8, or, for a value
    clipped to code 7 (x / D above 7.5), its distance to 7 steps, plus the float16 rounding
    of the step (relative 2^-11 at most) times a code of up to 8."""
    blocks, step = q4_0_blocks(x)
    ratio = blocks.astype(np.float64) / np.where(step != 0, step, 1)
    worst = np.abs(step) * (np.maximum(0.5, ratio - 7) + 8 * U16)
    return worst.reshape(x.shape).astype(np.float64)


def quantised_bound(q, keys, values, scale, ref, weights, half_steps=q8_0_half_steps):
    """Elementwise bound on the error of attention with q quantised to Q8_0 and keys and
    values to Q8_0 or (half_steps=q4_0_half_steps) Q4_0 (|δx| <= h_x, ``*_half_steps``).  Query i's score j moves by at most
        ε_ij = scale · Σ_c (h_q|k_jc| + |q_c| h_k + h_q h_k),
    so with ε_i = max_j ε_ij each weight by a factor within e^(±2ε_i), and
        |Δo_ic| <= e^(2ε_i) Σ_j p_ij h_v,jc + (e^(2ε_i) - 1) · Σ_j p_ij |v_jc - o_ic|
    (the value errors averaged by the perturbed weights; Σ_j Δp_ij = 0, so the weight
    errors multiply v - o).  The float32 and output roundings, ~1e-6 here, fit its margin."""
    group = q.shape[0] // keys.shape[0]
    k, v = (np.repeat(x.astype(np.float64), group, axis=0) for x in (keys, values))
    h_k, h_v = (np.repeat(half_steps(x), group, axis=0) for x in (keys, values))
    h_q, abs_q = q8_0_half_steps(q), np.abs(q).astype(np.float64)
    shifts = scale * (h_q @ np.abs(k).transpose(0, 2, 1) + abs_q @ h_k.transpose(0, 2, 1)
                      + h_q @ h_k.transpose(0, 2, 1))
    epsilon = np.where(weights > 0, shifts, 0).max(axis=2, keepdims=True)   # (heads, t, 1)
    spread = np.einsum("hij,hijc->hic", weights, np.abs(v[:, None] - ref[:, :, None]))
    return np.exp(2 * epsilon) * (weights @ h_v) + np.expm1(2 * epsilon) * spread


def float16_decoder(keys, values, heads, scale):
    """The decoder of ggml's refused float16 cache (F16)."""
    return ggml_flash_attn._decoder(ggml.GGML_TYPE_F16, keys, values, heads, scale)


def decode(cache_format, heads, kv_heads, d, t):
    keys, values = cache(kv_heads, d)
    q, scale = query(heads, t, d), 1 / np.sqrt(d)
    if cache_format == "float16":
        out = float16_decoder(keys, values, heads, scale)(q)
    else:
        out = ggml_flash_attn.cache_decoder(cache_format, keys, values, heads, scale)(q)
    assert out.dtype == np.float32 and out.shape == (heads, t, d)
    return out, q, keys, values, scale


@GRID
@WIDTHS
@pytest.mark.parametrize("heads, kv_heads", SHAPES)
def test_float32_cache_is_within_float32_sums(heads, kv_heads, d, t):
    out, q, keys, values, scale = decode("float32", heads, kv_heads, d, t)
    ref, _ = attention64(q, keys, values, scale)
    assert relative_errors(out, ref).max() <= FLOAT32_SUMS


@GRID
@WIDTHS
@pytest.mark.parametrize("heads, kv_heads", SHAPES)
def test_bfloat16_cache_is_within_a_few_unit_roundoffs(heads, kv_heads, d, t):
    out, q, keys, values, scale = decode("bfloat16", heads, kv_heads, d, t)
    ref, _ = attention64(q, keys, values, scale)
    errors = relative_errors(out, ref)
    assert errors.max() <= STORAGE * UBF16, f"{errors.max() / UBF16:.2f} u > {STORAGE} u"


@GRID
@WIDTHS
@pytest.mark.parametrize("heads, kv_heads", SHAPES)
def test_float16_cache_errs_by_its_float16_sums(heads, kv_heads, d, t):
    out, q, keys, values, scale = decode("float16", heads, kv_heads, d, t)
    ref, weights = attention64(q, keys, values, scale)
    errors = relative_errors(out, ref)
    # two standard deviations of the accumulation (0.9 of one seen), plus the storage
    accumulation = float16_accumulation(keys, values, heads // kv_heads, weights)
    bound = STORAGE * U16 + 2 * accumulation
    assert np.all(errors <= bound), f"{np.max(errors / bound):.2f} times the bound"
    # over 2,048 keys the float16 accumulation outweighs rounding the cache (about 1 u)
    # several times (6.9 u at least seen): the module's precision note still holds
    assert errors.min() > 4 * U16, f"{errors.min() / U16:.2f} u: does ggml accumulate in float32 now?"


@pytest.mark.parametrize("t", [1, 3], ids=lambda t: f"t={t}")
def test_float16_sums_stop_growing_as_the_refusal_says(t):
    # every score 0, every value 1: the answer is 1.  Summed in float16, 2,048 + 1 rounds
    # back to 2,048 (ties to even), so each chain of keys stops at 2,048 weights: with
    # the keys split between the 2 threads (t = 1), at most 4,096 of the 8,192 count
    n = 8192
    keys, values = np.zeros((1, n, 64), np.float32), np.ones((1, n, 64), np.float32)
    with using_budget(2):
        out = float16_decoder(keys, values, 1, 0.125)(np.zeros((1, t, 64), np.float32))
    assert out.max() <= 0.5 + 1e-3, "ggml's float16 cache sums in float32 now: admit it again"
    for cache_format in ggml_flash_attn.CACHE_FORMATS:  # the kept ones sum in float32
        step = ggml_flash_attn.cache_decoder(cache_format, keys, values, 1, 0.125)
        out = step(np.zeros((1, t, 64), np.float32))
        assert np.abs(out - 1).max() < 1e-4  # Q8_0 stores 1 as 127 · fp16(1/127) = 0.99994


# a quantised format: its elements' worst errors, its values as ggml stores them, and the
# least error its output must show (quantised, not merely stored in float16)
QUANTISED = pytest.mark.parametrize("cache_format, half_steps, stored, least", [
    # the bound is a worst case (every rounding error aligned, 0.004 of it seen); the
    # output is still off by more than float16 storage could make it (14.6 u seen)
    pytest.param("int8", q8_0_half_steps, q8_0, STORAGE * U16, id="int8 (Q8_0)"),
    # 0.0016 of the bound seen; ten times float16 storage at least (0.08 seen, 0.19 at most)
    pytest.param("int4", q4_0_half_steps, q4_0, 10 * STORAGE * U16, id="int4 (Q4_0)"),
])


@GRID
@WIDTHS
@pytest.mark.parametrize("heads, kv_heads", SHAPES)
@QUANTISED
def test_a_quantised_cache_is_within_its_quantisation_bound(cache_format, half_steps, stored, least, heads,
                                                           kv_heads, d, t):
    out, q, keys, values, scale = decode(cache_format, heads, kv_heads, d, t)
    ref, weights = attention64(q, keys, values, scale)
    bound = quantised_bound(q, keys, values, scale, ref, weights, half_steps)
    worst = np.max(np.abs(out - ref) / bound)
    assert worst <= 1, f"an error reaches {worst:.2f} times its bound"
    assert relative_errors(out, ref).min() > least


@GRID
@WIDTHS
@pytest.mark.parametrize("heads, kv_heads", SHAPES)
@QUANTISED
def test_a_quantised_cache_holds_the_documented_codes(cache_format, half_steps, stored, least, heads, kv_heads,
                                                     d, t):
    """The keys and values as ``stored``, the query quantised to Q8_0 (the dot-product type
    of Q8_0 and Q4_0 keys)."""
    out, q, keys, values, scale = decode(cache_format, heads, kv_heads, d, t)
    ref, _ = attention64(q8_0(q, reference=False), stored(keys), stored(values), scale)
    assert relative_errors(out, ref).max() <= FLOAT32_SUMS


def test_int4_codes_clip_the_opposite_extreme():
    """A block whose largest magnitude is negative stores it exactly (code -8) and clips the
    positive value of the same size to code 7, a whole step short; the decoder attends over
    exactly those values."""
    keys = np.zeros((1, 2, 32), np.float32)
    keys[0, :, 0], keys[0, :, 1] = -4.0, 4.0
    np.testing.assert_array_equal(q4_0(keys)[0, 0, :2], [-4.0, 3.5])
    values = keys.copy()
    step = ggml_flash_attn.cache_decoder("int4", keys, values, 1, 0.0)
    np.testing.assert_allclose(step(np.zeros((1, 1, 32), np.float32))[0, 0, :2], [-4.0, 3.5], rtol=1e-6)


@pytest.mark.parametrize("cache_format", ggml_flash_attn.CACHE_FORMATS)
def test_a_step_is_repeatable_and_returns_a_fresh_array(cache_format):
    keys, values = cache(2, 64)
    step = ggml_flash_attn.cache_decoder(cache_format, keys, values, 8, 0.125)
    q1, q3 = query(8, 1, 64), query(8, 3, 64)
    first = step(q1)
    step(q3)
    again = step(q1)
    np.testing.assert_array_equal(again, first)
    assert not np.shares_memory(again, first)
    first[...] = np.nan  # the caller owns what a step returns
    np.testing.assert_array_equal(step(q1), again)


def test_values_may_be_narrower_than_keys():
    keys, _ = cache(2, 64)
    _, values = cache(2, 32)
    q = query(8, 3, 64)
    out = ggml_flash_attn.cache_decoder("float32", keys, values, 8, 0.125)(q)
    ref, _ = attention64(q, keys, values, 0.125)
    assert out.shape == (8, 3, 32) and relative_errors(out, ref).max() <= FLOAT32_SUMS


@pytest.mark.parametrize("cache_format", ["float64", "q8_0", "float16"])
def test_a_format_ggml_does_not_keep_is_refused(cache_format):
    keys, values = cache(2, 32)
    with pytest.raises(ValueError, match=repr(cache_format)):
        ggml_flash_attn.cache_decoder(cache_format, keys, values, 8, 0.125)


RUN_CASES = [  # (heads, kv_heads, n_q, n_k, d, d_v): decoding, a few rows, the tiled path
    # (64 rows and more), more queries than keys (causal: the first rows see none)
    (8, 2, 1, 2048, 64, 64), (8, 8, 3, 700, 32, 32), (4, 2, 100, 100, 64, 48), (2, 1, 80, 30, 16, 16)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("heads, kv_heads, n_q, n_k, d, d_v", RUN_CASES)
def test_run_matches_the_reference(heads, kv_heads, n_q, n_k, d, d_v, dtype, causal):
    rng = np.random.default_rng([heads, n_q, n_k, d])
    q, k, v = (rng.standard_normal(shape).astype(float_type(dtype).dtype)
               for shape in ((heads, n_q, d), (kv_heads, n_k, d), (kv_heads, n_k, d_v)))
    out = np.full((heads, n_q, d_v), np.nan, np.float32)
    ggml_flash_attn.run(q, k, v, out, causal, 0.3)
    ref = reference_attention(q, k, v, causal=causal, scale=0.3)
    # float32 sums over n_k keys, on inputs exact in float32 (bfloat16 widens exactly)
    assert np.abs(out - ref).max() <= 2 * np.sqrt(n_k) * U32 * np.abs(v.astype(np.float64)).max()


@pytest.mark.parametrize("cache_format, ggml_name", [("int8", "Q8_0"), ("int4", "Q4_0")])
@pytest.mark.parametrize("d, d_v", [(48, 32), (64, 40)])
def test_blocked_formats_refuse_widths_that_are_not_whole_blocks(cache_format, ggml_name, d, d_v):
    keys, _ = cache(2, d, n=64)
    _, values = cache(2, d_v, n=64)
    with pytest.raises(ValueError, match=rf"{cache_format} cache \({ggml_name}\).*multiples of 32"):
        ggml_flash_attn.cache_decoder(cache_format, keys, values, 8, 0.125)


def test_a_step_refuses_a_query_it_cannot_take():
    keys, values = cache(2, 32, n=16)
    with pytest.raises(ValueError, match="do not divide"):
        ggml_flash_attn.cache_decoder("float32", keys, values, 3, 0.125)
    step = ggml_flash_attn.cache_decoder("float32", keys, values, 8, 0.125)
    for shape in [(8, 17, 32), (8, 0, 32), (4, 1, 32), (8, 1, 16)]:
        with pytest.raises(ValueError, match="q must have shape"):
            step(np.zeros(shape, np.float32))
