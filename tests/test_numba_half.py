"""numba_tiled in half precision (bfloat16, float16): the widening of their bits to
float32 exact for every one of the 65,536 patterns, the kernel through the harness on
both of its paths (query tiles, split-KV decoding), and its result the float32
computation of the widened inputs, bit for bit."""
import dataclasses

import ml_dtypes
import numpy as np
import pytest
from numba import njit

from kernels import harness
from kernels.dtypes import FLOATS
from kernels.rungs import rung3_numba_simd as numba_simd, rung3_numba_tiled as numba_tiled
from kernels.rungs.rung3_numba_simd import BFLOAT16, FLOAT16, FLOAT16_BY_INTEGERS, widen_rows
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


@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
def test_input_format_passes_bits_and_computes_in_float32(dtype):
    stored, real, fmt = numba_simd.input_format(dtype)
    assert (stored, real) == (np.uint16, FLOATS[np.dtype(dtype).name].compute.type)
    assert fmt == {ml_dtypes.bfloat16: BFLOAT16, np.float16: FLOAT16}[dtype]
    assert numba_simd.input_format(np.float32) == (np.float32, np.float32, numba_simd.AS_IS)
    assert numba_simd.input_format(np.float64) == (np.float64, np.float64, numba_simd.AS_IS)


def _cases():
    names = {"n=1", "odd d=33", "d_v=40 != d=16", "n_q=7 < n_k=90", "n=193 prime", "strided views",
             "large logits x30", "NaN in k", "NaN in v", "Inf in q", "n_q=300 n_k=1100 d=127"}
    tiled = [case for case in harness.CASES if case.name in names]
    assert len(tiled) == 2 * len(names)
    decode = [
        harness.Case("half decode n_q=1 n_k=700", (3,), 1, 700, 64, 64),
        harness.Case("half decode n_q=4 n_k=600 d=33 d_v=17", (2,), 4, 600, 33, 17),
        harness.Case("half decode NaN in v", (2,), 3, 600, 16, 16, poison="nan_v"),
        harness.Case("half decode large logits x30", (2,), 2, 900, 64, 64, logit_scale=30.0),
    ]
    return tiled + [dataclasses.replace(case, causal=causal) for case in decode for causal in (False, True)]


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


SHAPES = [(3, 200, 300, 64, 48), (2, 97, 97, 33, 33), (3, 1, 700, 64, 64), (2, 4, 513, 16, 24)]


@pytest.mark.parametrize("causal", (False, True))
@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=[f"B={s[0]} n_q={s[1]} n_k={s[2]}" for s in SHAPES])
def test_out_is_the_float32_computation_of_the_widened_inputs(shape, dtype, causal):
    """The rung's float32 output (before the API rounds it) for 16-bit inputs equals, bit
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
