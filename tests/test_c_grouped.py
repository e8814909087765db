"""c_tiled with grouped query heads, K/V heads read in place with a head stride, and the
int8 and int4 KV caches (``rung4_c_tiled.run``, ``run_int8`` and ``run_int4``, called
directly).

Every output is compared with a float64 reference computed here from the same inputs:
the K/V heads repeated for the query heads of their group (np.repeat along axis 0), the
16-bit types widened, the int8 and int4 caches dequantised in float32 as the kernel reads
them (scale · code, one rounding).  The cases cover both paths (n_q = 1 and 3: split-KV, which
takes a group's query heads together; n_q = 50: query tiles), key counts that fill no
tile or block evenly (1, 300, 1000), d = 64 and an odd d with d_v != d, and K/V given as
views [:, :n_k] of larger buffers (heads kv_rows > n_k rows apart, the spare rows NaN so
that a read of one shows), on every SIMD path the CPU has (the ``isa`` fixture).
"""
import itertools

import numpy as np
import pytest

from kernels.cache_formats import INT4_GROUP, decode_queries, pack_int4
from kernels.dtypes import FLOATS
from kernels.rungs import rung4_c_tiled as c_tiled

HEADS = 8                   # query heads; B_kv = HEADS // group
SPARE = 5                   # rows between one K/V head's keys and the next head's
TYPES = ("float32", "float64", "float16", "bfloat16", "int8", "int4")


def reference(q, k, v, causal, scale):
    """softmax(scale · q kᵀ) v in float64, q (B, n_q, d), k (B, n_k, d), v (B, n_k, d_v)
    (K/V already repeated per query head); query i sees keys j <= i + n_k - n_q, a row
    that sees none is zero, and a NaN score makes its row NaN (a NaN value row, the rows
    that see it), as kernels.reference has it."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    heads, n_q, _ = q.shape
    n_k = k.shape[1]
    out = np.zeros((heads, n_q, v.shape[2]))
    for i in range(n_q):
        seen = min(n_k, max(0, i + n_k - n_q + 1)) if causal else n_k
        if seen == 0:
            continue
        s = scale * np.einsum("hd,hjd->hj", q[:, i], k[:, :seen])
        with np.errstate(invalid="ignore"):
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[:, i] = np.einsum("hj,hjc->hc", p, v[:, :seen]) / p.sum(axis=1, keepdims=True)
    return out


def tolerance(dtype, n_k, d):
    """|out - ref| / max|v| allowed.  float64: 1e-10.  float32 compute (float32, the 16-bit
    types, whose widening is exact, and int8 against its dequantised values): a score is a
    d-term float32 dot product and each output a ratio of n_k-term float32 sums, and
    rounding errors of an n-term sum grow like sqrt(n) u (u = 2^-24; Higham, Accuracy and
    Stability of Numerical Algorithms, §2.8), a score error moving the output by about
    twice itself times max|v|: 4 u (sqrt(n_k) + sqrt(d)).  Measured here: at most 5 u.  A
    key leaked past the causal limit, dropped, or read from the wrong head moves a row by
    about max|v| / n_k, hundreds of times more.  bfloat16 on a dot-product path (avx512-bf16,
    emulated or not) rounds each weight P to bfloat16 too: within its unit roundoff 2^-8 of
    itself, the output within 2^-8 max|v| more (the harness's allowance for it)."""
    if dtype == "float64":
        return 1e-10
    rounded_p = 2.0**-8 if dtype == "bfloat16" and c_tiled.has_bf16_dot() else 0.0
    return 4 * 2.0**-24 * (np.sqrt(n_k) + np.sqrt(d)) + rounded_p


def spaced(x, n_k):
    """x (B_kv, n_k, ...) as the view [:, :n_k] of a buffer with SPARE more rows per head,
    those NaN (an int8 buffer: 127; int4's bytes: 255, codes 7): heads n_k + SPARE rows
    apart, read in place."""
    fill = {np.dtype(np.int8): 127, np.dtype(np.uint8): 255}.get(x.dtype, np.nan)
    buffer = np.full((x.shape[0], n_k + SPARE, *x.shape[2:]), fill, x.dtype)
    buffer[:, :n_k] = x
    return buffer[:, :n_k]


def numpy_dtype(name):
    return FLOATS[name].dtype


def make_call(dtype, group, n_q, n_k, d, d_v, seed=0, logits=1.0):
    """(args for run, run_int8 or run_int4 without out, causal and scale; out; the float64
    q, k, v the reference reads, k and v repeated per query head).  int8: codes in [-127,
    127] and per-row scales about 2/127 (values up to about 2), dequantised as the kernel
    does; int4 alike, codes in [-7, 7] packed two to a byte and a scale per 32 values of a
    row; a decode call's queries (n_q <= DECODE_MAX_QUERIES) quantised as it multiplies
    them, per key group (tests/test_c_int8_dot.py)."""
    rng = np.random.default_rng(seed)
    kv_heads = HEADS // group
    if dtype in ("int8", "int4"):
        levels, per = (127, None) if dtype == "int8" else (7, INT4_GROUP)   # per: values a scale
        q = (logits * rng.standard_normal((HEADS, n_q, d))).astype(np.float32)
        codes = [rng.integers(-levels, levels + 1, (kv_heads, n_k, width), dtype=np.int8) for width in (d, d_v)]
        scales = [(logits * rng.uniform(0.5, 1.5, (kv_heads, n_k, *(() if per is None else (-(-width // per),))))
                   / (levels / 2)).astype(np.float32) for width in (d, d_v)]
        scales[1] *= np.float32(1 / logits)   # values of about 1 whatever the logits
        k, v = (c.astype(np.float32) * (s[..., None] if per is None else np.repeat(s, per, axis=-1)[..., :c.shape[-1]])
                for s, c in zip(scales, codes))
        stored = codes if per is None else [pack_int4(c) for c in codes]
        args = (q, spaced(stored[0], n_k), scales[0], spaced(stored[1], n_k), scales[1])
        out = np.empty((HEADS, n_q, d_v), np.float32)
        if n_q <= c_tiled.DECODE_MAX_QUERIES:
            q = decode_queries(q, per)
    else:
        q = (logits * rng.standard_normal((HEADS, n_q, d))).astype(numpy_dtype(dtype))
        k = (logits * rng.standard_normal((kv_heads, n_k, d))).astype(numpy_dtype(dtype))
        v = rng.standard_normal((kv_heads, n_k, d_v)).astype(numpy_dtype(dtype))
        args = (q, spaced(k, n_k), spaced(v, n_k))
        out = np.empty((HEADS, n_q, d_v), FLOATS[dtype].compute)
    return args, out, (q, np.repeat(k, group, axis=0), np.repeat(v, group, axis=0))


def call(dtype, args, out, causal, scale):
    if dtype in ("int8", "int4"):
        getattr(c_tiled, f"run_{dtype}")(*args, out, causal, scale)
    else:
        c_tiled.run(*args, out, causal, scale)


def assert_matches(out, ref, v, tol, label):
    nan = np.isnan(ref)
    np.testing.assert_array_equal(np.isnan(out), nan,
                                  err_msg=f"{label}: NaN not where the reference has it")
    v_max = np.abs(v[np.isfinite(v)]).max()
    error = np.abs(out[~nan] - ref[~nan]).max(initial=0) / v_max
    assert error <= tol, f"{label}: error {error:.3g} x max|v| > {tol:.3g}"


CASES = list(itertools.product((1, 2, 4, 8), (1, 3, 50), (1, 300, 1000), ((64, 64), (33, 20))))


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("group, n_q, n_k, dims", CASES,
                         ids=[f"group={g} n_q={n_q} n_k={n_k} d={d} d_v={d_v}"
                              for g, n_q, n_k, (d, d_v) in CASES])
def test_grouped_heads_match_the_repeated_reference(isa, group, n_q, n_k, dims, dtype):
    d, d_v = dims
    args, out, (q, k, v) = make_call(dtype, group, n_q, n_k, d, d_v, seed=n_q * 7 + n_k + group)
    for causal in (False, True):
        out.fill(np.nan)
        call(dtype, args, out, causal, d**-0.5)
        assert_matches(out, reference(q, k, v, causal, d**-0.5), v, tolerance(dtype, n_k, d),
                       f"{isa} {dtype} causal={causal}")


@pytest.mark.parametrize("n_q", (1, 3, 50), ids=lambda n: f"n_q={n}")
@pytest.mark.parametrize("group", (1, 4))
@pytest.mark.parametrize("dtype", ("int8", "float16", "bfloat16"))
def test_converted_types_are_float32_on_the_converted_inputs_bit_for_bit(isa, dtype, group, n_q):
    """The int8 cache and the 16-bit types are converted to float32 exactly as NumPy
    converts them (int8: scale · code, one rounding), either as the row operations load
    them (decoding, one query row per K/V head; 16-bit: any number), or a block (or key
    tile) at a time into scratch, and then computed by float32's operations: the output is
    run's on the converted float32 inputs, exactly, on both paths, with large logits (x3)
    so that the chunks' maxima differ.  (A bfloat16 dot-product path multiplies bfloat16 as
    pairs, never widened: tests/test_c_bf16_dot.py holds it to its emulation, bit for bit.)"""
    if dtype == "bfloat16" and c_tiled.has_bf16_dot():
        pytest.skip(f"{isa} multiplies bfloat16 by its dot-product unit: not widened to float32")
    if dtype == "int8" and n_q <= c_tiled.DECODE_MAX_QUERIES:
        pytest.skip("a decode step multiplies int8 keys as integers, by quantised queries: "
                    "tests/test_c_int8_dot.py holds it to float32 on those")
    args, out, _ = make_call(dtype, group, n_q, 1000, 64, 64, seed=5, logits=3.0)
    if dtype == "int8":
        q, k, k_scale, v, v_scale = args
        floats = q, *(s[..., None] * x.astype(np.float32) for s, x in ((k_scale, k), (v_scale, v)))
    else:
        floats = [x.astype(np.float32) for x in args]
    expected = np.empty_like(out)
    for causal in (False, True):
        call(dtype, args, out, causal, 0.125)
        c_tiled.run(*floats, expected, causal, 0.125)
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("n_q", (1, 3, 50), ids=lambda n: f"n_q={n}")
@pytest.mark.parametrize("which", ("k", "v"))
def test_a_nan_scale_makes_nan_only_the_rows_that_see_its_key(isa, which, n_q):
    """Key 150 of K/V head 1 gets the scale NaN (as the cache stores a row holding NaN or
    Inf): the query heads of that K/V head's group that see the key become NaN (a NaN key:
    every column; a NaN value: every column too, NaN times any weight), all else stays as
    the reference has it, finite."""
    group, n_k, key = 2, 300, 150
    args, out, (q_ref, k, v) = make_call("int8", group, n_q, n_k, 16, 12, seed=3)
    q, k_codes, k_scale, v_codes, v_scale = args
    scales = {"k": k_scale, "v": v_scale}
    scales[which][1, key] = np.nan
    k_float, v_float = (np.repeat(s[..., None] * x.astype(np.float32), group, axis=0)
                        for s, x in ((k_scale, k_codes), (v_scale, v_codes)))
    for causal in (False, True):
        c_tiled.run_int8(q, k_codes, k_scale, v_codes, v_scale, out, causal, 0.25)
        ref = reference(q_ref, k_float, v_float, causal, 0.25)
        assert np.isnan(ref[2:4]).any() and not np.isnan(ref[:2]).any() and not np.isnan(ref[4:]).any()
        assert_matches(out, ref, v_float, tolerance("int8", n_k, 16), f"{which} causal={causal}")
        seeing = np.arange(n_q) + (n_k - n_q) >= key if causal else np.ones(n_q, bool)
        assert np.isnan(out[2:4, seeing]).all() and np.isfinite(out[2:4, ~seeing]).all()


@pytest.mark.parametrize("n_q", (1, 50), ids=lambda n: f"n_q={n}")
def test_other_layouts_are_copied_and_still_right(n_q):
    """K and V whose heads are not one row count apart (k with spare rows, v contiguous),
    or whose rows are not contiguous (a column slice), or int8 scales laid out unlike their
    codes: run copies them to C order first, with the same result."""
    group, n_k, d = 2, 300, 16
    args, out, (q, k, v) = make_call("float32", group, n_q, n_k, d, d, seed=11)
    ref = reference(q, k, v, True, 0.25)
    tol = tolerance("float32", n_k, d)
    _, spaced_k, spaced_v = args
    wide = np.concatenate([spaced_v, np.zeros_like(spaced_v)], axis=2)[:, :, :d]   # rows 2d apart
    for k_in, v_in in ((spaced_k, np.ascontiguousarray(spaced_v)), (spaced_k, wide)):
        out.fill(np.nan)
        c_tiled.run(q, k_in, v_in, out, True, 0.25)
        assert_matches(out, ref, v, tol, "float32")

    args, out, (q_ref, k, v) = make_call("int8", group, n_q, n_k, d, d, seed=12)
    q, k_codes, k_scale, v_codes, v_scale = args
    ref = reference(q_ref, k, v, True, 0.25)
    wide_scales = np.repeat(k_scale, 2, axis=1)[:, ::2]   # (B_kv, n_k), 8 bytes apart
    np.testing.assert_array_equal(wide_scales, k_scale)
    c_tiled.run_int8(q, k_codes, wide_scales, v_codes, v_scale, out, True, 0.25)
    assert_matches(out, ref, v, tol, "int8 (scales copied)")


def test_mismatched_heads_and_types_are_refused():
    args, out, _ = make_call("float32", 1, 1, 10, 8, 8)
    q, k, v = args
    with pytest.raises(ValueError, match="not a multiple of 3 K/V heads"):
        c_tiled.run(q, k[:3], v[:3], out, False, 1.0)
    args, out, _ = make_call("int8", 2, 1, 10, 8, 8)
    with pytest.raises(TypeError, match="k must be int8"):
        c_tiled.run_int8(args[0], args[1].astype(np.int16), *args[2:], out, False, 1.0)
    with pytest.raises(TypeError, match="out must be float32"):
        c_tiled.run_int8(*args, out.astype(np.float64), False, 1.0)
