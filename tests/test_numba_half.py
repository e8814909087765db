"""numba_tiled in half precision (bfloat16, float16): the widening of their bits to
float32 exact for every one of the 65,536 patterns, the rounding of float32 back to them
NumPy's and ml_dtypes' casts bit for bit, the kernel through the harness on both of its
paths (query tiles, split-KV decoding), its result the float32 computation of the widened
inputs, bit for bit, and the 16-bit output it writes itself that result's cast."""
import dataclasses

import ml_dtypes
import numpy as np
import pytest
from numba import njit

from kernels import api, harness
from kernels.dtypes import FLOATS
from kernels.rungs import rung3_numba_half as numba_half, rung3_numba_tiled as numba_tiled
from kernels.rungs.rung3_numba_half import BFLOAT16, FLOAT16, FLOAT16_BY_INTEGERS, narrow, widen_rows
from kernels.rungs.rung3_numba_simd import FASTMATH
from kernels.threads import using_budget

HALF = (ml_dtypes.bfloat16, np.float16)
HALF_IDS = ["bfloat16", "float16"]
ALL_BITS = np.arange(2**16, dtype=np.uint16)


@njit
def _widen_bfloat16(bits, out):
    widen_rows(bits, 0, bits.shape[0], out, BFLOAT16)


@njit
def _widen_float16(bits, out):
    widen_rows(bits, 0, bits.shape[0], out, FLOAT16)  # F16C where Numba compiles for it


@njit
def _widen_float16_by_integers(bits, out):
    widen_rows(bits, 0, bits.shape[0], out, FLOAT16_BY_INTEGERS)


def _assert_same_floats(out, expected):
    """Bit for bit (so -0 != +0 and subnormals count), except that any NaN matches NaN."""
    nan = np.isnan(expected)
    assert (np.isnan(out) == nan).all(), np.flatnonzero(np.isnan(out) != nan)[:10]
    differ = (out.view(np.uint32) != expected.view(np.uint32)) & ~nan
    assert not differ.any(), [(hex(b), out[i], expected[i]) for i, b in
                              zip(np.flatnonzero(differ)[:10], ALL_BITS[differ][:10])]


# (256, 256): the vectorised loop; (65536, 1): one element per row, the scalar remainder
@pytest.mark.parametrize("shape", ((256, 256), (2**16, 1)))
@pytest.mark.parametrize("dtype, widen_all", (
    (ml_dtypes.bfloat16, _widen_bfloat16), (np.float16, _widen_float16), (np.float16, _widen_float16_by_integers),
), ids=HALF_IDS + ["float16 by integers"])
def test_widening_is_exact_for_every_bit_pattern(dtype, widen_all, shape):
    """Against the casts NumPy and ml_dtypes make: normals, subnormals, ±0, ±inf, NaN;
    float16 both ways (F16C's instruction, if Numba compiles for it, and the integers)."""
    out = np.full(shape, np.float32(7.0))
    widen_all(ALL_BITS.reshape(shape), out)
    expected = ALL_BITS.view(dtype).astype(np.float32)
    _assert_same_floats(out.ravel(), expected)
    # what the patterns hold, so that the comparison covered every kind
    fraction_bits = {ml_dtypes.bfloat16: 7, np.float16: 10}[dtype]
    assert np.isnan(expected).sum() == 2 * (2**fraction_bits - 1)
    assert np.isinf(expected).sum() == 2 and (expected == 0).sum() == 2
    subnormal = (expected != 0) & (np.abs(expected) < np.finfo(dtype).tiny)
    assert subnormal.sum() == 2 * (2**fraction_bits - 1)


# compiled as the kernels are (their fast-math flags), so that the rounding tested is theirs
@njit(fastmath=FASTMATH)
def _narrow_bfloat16(x, out):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = narrow(x[i, j], BFLOAT16)


@njit(fastmath=FASTMATH)
def _narrow_float16(x, out):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = narrow(x[i, j], FLOAT16)  # F16C where Numba compiles for it


@njit(fastmath=FASTMATH)
def _narrow_float16_by_integers(x, out):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = narrow(x[i, j], FLOAT16_BY_INTEGERS)


def _rounding_edges(dtype):
    """float32 values where rounding to ``dtype`` decides: every finite 16-bit value, every
    midpoint between neighbours (the ties; 9 or 12 significant bits, exact in float32, the
    subnormals' included) and the float32 neighbours of both, of either sign; the
    overflow boundary (the midpoint past the largest finite value, and its neighbours),
    float32's largest finite value, float32 subnormals (they round to ±0 or a 16-bit
    subnormal), ±0, ±inf and NaNs (quiet and signalling, either sign); and a million
    random bit patterns."""
    half = ALL_BITS.view(dtype)
    values = np.unique(np.abs(half[np.isfinite(half)].astype(np.float64)))
    largest = values[-1]
    ulp = largest - values[-2]
    midpoints = (values[:-1] + values[1:]) / 2
    edges = np.concatenate([values, midpoints, [largest + ulp / 2]]).astype(np.float32)
    assert np.array_equal(edges.astype(np.float64)[:values.size], values)  # ties exact in float32
    edges = np.concatenate([edges, np.nextafter(edges, np.float32(0)), np.nextafter(edges, np.float32(np.inf))])
    # float32 subnormals, NaNs (quiet and signalling), the largest finite value, inf, 0
    specials = np.array([1, 2, 3, 0x400000, 0x7FFFFF, 0x7FC00000, 0x7F800001, 0x7FBFFFFF, 0x7FFFFFFF,
                         0x7F7FFFFF, 0x7F800000, 0], np.uint32).view(np.float32)
    random_bits = np.random.default_rng(7).integers(0, 2**32, 2**20, dtype=np.uint32).view(np.float32)
    edges = np.concatenate([edges, specials, random_bits])
    return np.concatenate([edges, -edges])


# (1, n): the vectorised loop; (n, 1): one element per row, the scalar remainder
@pytest.mark.parametrize("vectorised", (True, False), ids=("vectorised", "scalar"))
@pytest.mark.parametrize("dtype, narrow_all", (
    (ml_dtypes.bfloat16, _narrow_bfloat16), (np.float16, _narrow_float16), (np.float16, _narrow_float16_by_integers),
), ids=HALF_IDS + ["float16 by integers"])
def test_narrowing_is_numpys_cast(dtype, narrow_all, vectorised):
    """Round to nearest even, bit for bit as NumPy (float16) and ml_dtypes (bfloat16) cast
    float32: ties both ways, subnormals, the largest finite value, overflow to inf, ±inf,
    -0; a NaN stays a NaN (its bits are the instruction's or ours: not compared)."""
    x = _rounding_edges(dtype)
    out = np.full(x.size, 0x1234, np.uint16)
    shape = (1, x.size) if vectorised else (x.size, 1)
    narrow_all(x.reshape(shape), out.reshape(shape))
    with np.errstate(over="ignore", invalid="ignore"):  # the overflows and NaNs are meant
        expected = x.astype(dtype)
    nan = np.isnan(expected)
    assert (np.isnan(out.view(dtype)) == nan).all(), x[np.isnan(out.view(dtype)) != nan][:10]
    differ = (out != expected.view(np.uint16)) & ~nan
    assert not differ.any(), [(hex(b), hex(o), hex(e)) for b, o, e in
                              zip(x[differ][:10].view(np.uint32), out[differ][:10], expected.view(np.uint16)[differ][:10])]
    # what the values hold, so that the comparison covered every kind
    tiny = np.finfo(dtype).tiny
    assert nan.sum() >= 16 and np.isinf(expected).sum() > 4 and (np.signbit(expected) & (expected == 0)).any()
    assert ((np.abs(expected) < tiny) & (expected != 0)).sum() > 1000  # subnormal results
    assert ((x != 0) & (np.abs(x) < np.finfo(np.float32).tiny) & (expected == 0)).any()
    largest = np.finfo(dtype).max
    assert (expected == largest).any() and (np.isinf(expected) & np.isfinite(x)).any()  # overflow


@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
def test_input_format_passes_bits_and_computes_in_float32(dtype):
    stored, real, fmt = numba_half.input_format(dtype)
    assert (stored, real) == (np.uint16, FLOATS[np.dtype(dtype).name].compute.type)
    assert fmt == {ml_dtypes.bfloat16: BFLOAT16, np.float16: FLOAT16}[dtype]
    assert numba_half.input_format(np.float32) == (np.float32, np.float32, numba_half.AS_IS)
    assert numba_half.input_format(np.float64) == (np.float64, np.float64, numba_half.AS_IS)
    assert numba_half.output_format(dtype, dtype) == (np.uint16, fmt)
    assert numba_half.output_format(dtype, np.float32) == (np.float32, numba_half.AS_IS)
    assert numba_half.output_format(np.float64, np.float64) == (np.float64, numba_half.AS_IS)
    with pytest.raises(TypeError, match="float64"):
        numba_half.output_format(dtype, np.float64)


DECODE = [dataclasses.replace(case, causal=causal) for case in (
    harness.Case("half decode n_q=1 n_k=700", (3,), 1, 700, 64, 64),
    harness.Case("half decode n_q=4 n_k=600 d=33 d_v=17", (2,), 4, 600, 33, 17),
    harness.Case("half decode NaN in v", (2,), 3, 600, 16, 16, poison="nan_v"),
    harness.Case("half decode large logits x30", (2,), 2, 900, 64, 64, logit_scale=30.0),
) for causal in (False, True)]


def _cases():
    names = {"n=1", "odd d=33", "d_v=40 != d=16", "n_q=7 < n_k=90", "n=193 prime", "strided views",
             "large logits x30", "NaN in k", "NaN in v", "Inf in q", "n_q=300 n_k=1100 d=127"}
    tiled = [case for case in harness.CASES if case.name in names]
    assert len(tiled) == 2 * len(names)
    return tiled + DECODE


CASES = _cases()


def test_the_cases_take_both_paths():
    split = [case.n_q <= numba_tiled.SPLIT_KV_MAX_ROWS for case in CASES]
    assert any(split) and not all(split)
    assert {case.causal for case in CASES if case.n_q <= 4} == {case.causal for case in CASES if case.n_q > 4} == {
        False, True}


@pytest.mark.parametrize("threads", (1, 2))
@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("case", CASES, ids=[case.label for case in CASES])
def test_half_precision_matches_the_reference(case, dtype, threads):
    with using_budget(threads):
        outcome = harness.check("numba_tiled", case, dtype)
    comparison = outcome.comparison
    assert comparison is not None, outcome.note
    assert comparison.ok, (f"{case.label} {outcome.dtype}: error {comparison.error:.3e} > budget "
                           f"{comparison.budget:.3e}, first bad index {comparison.first_bad}")


SHAPES = [(3, 200, 300, 64, 48), (2, 97, 97, 33, 33), (2, 610, 700, 64, 64), (3, 1, 700, 64, 64), (2, 4, 513, 16, 24)]


@pytest.mark.parametrize("causal", (False, True))
@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=[f"B={s[0]} n_q={s[1]} n_k={s[2]}" for s in SHAPES])
def test_out_is_the_float32_computation_of_the_widened_inputs(shape, dtype, causal):
    """The rung's float32 output (``attention_unrounded``'s) for 16-bit inputs equals, bit
    for bit, its output for float32 inputs of the same values: the widening is exact and
    scores, softmax and P·V run as in float32, on both paths (n_q <= 4: split-KV).
    Inputs with NaN and a large logit, and left unmodified."""
    batch, n_q, n_k, d, d_v = shape
    rng = np.random.default_rng(sum(shape))
    q, k, v = (rng.standard_normal((batch, n, width)).astype(dtype)
               for n, width in ((n_q, d), (n_k, d), (n_k, d_v)))
    k[0, n_k // 2] *= 8
    v[-1, n_k - 2, 0] = np.nan
    copies = [a.copy() for a in (q, k, v)]
    scale = 1 / np.sqrt(d)
    out_half = np.full((batch, n_q, d_v), np.float32(5.0))
    out_wide = np.full((batch, n_q, d_v), np.float32(5.0))
    numba_tiled.run(q, k, v, out_half, causal, scale)
    numba_tiled.run(*(a.astype(np.float32) for a in (q, k, v)), out_wide, causal, scale)
    assert np.isnan(out_wide).any() and not np.isnan(out_wide).all()
    assert np.array_equal(out_half, out_wide, equal_nan=True), np.abs(out_half - out_wide).max()
    for a, copy in zip((q, k, v), copies):
        assert np.array_equal(a.view(np.uint16), copy.view(np.uint16))


WRITTEN_CASES = harness.CASES + DECODE


def test_the_written_cases_take_both_paths_and_grouped_heads():
    split = {case.n_q <= numba_tiled.SPLIT_KV_MAX_ROWS for case in WRITTEN_CASES}
    grouped = {case.n_q <= numba_tiled.SPLIT_KV_MAX_ROWS for case in WRITTEN_CASES if case.kv_heads}
    assert split == grouped == {False, True}
    assert {case.causal for case in WRITTEN_CASES} == {False, True}


@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("case", WRITTEN_CASES, ids=[case.label for case in WRITTEN_CASES])
def test_written_output_is_the_cast_of_the_float32_output(case, dtype):
    """The 16-bit output the kernel rounds row by row as it stores it (``attention``) is, bit
    for bit, NumPy's (ml_dtypes') cast of its float32 output (``attention_unrounded``, as a
    16-bit KV cache calls it): query tiles and split-KV decoding, causal or not, grouped
    heads, every layout, NaN rows; a NaN may differ in its payload only."""
    assert numba_tiled.run is api.get_kernel("numba_tiled").run and api.get_kernel("numba_tiled").writes_half
    inputs = case.inputs(dtype)
    written = api.attention(*inputs, kernel="numba_tiled", causal=case.causal)
    wide = api.attention_unrounded(*inputs, kernel="numba_tiled", causal=case.causal)
    assert written.dtype == np.dtype(dtype) and wide.dtype == np.float32
    expected = wide.astype(dtype)
    nan = np.isnan(expected)
    assert (np.isnan(written) == nan).all()
    assert np.array_equal(written.view(np.uint16)[~nan], expected.view(np.uint16)[~nan])
