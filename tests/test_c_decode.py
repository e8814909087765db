"""c_tiled's split-KV (decode) path: at most 4 query rows per head, keys split into chunks
across the threads and the chunks' partial softmax states merged.

Every case goes through ``harness.check``, so the tolerance is the harness's budget rule
(float64 1e-10; float32 twice a plain float32 computation's error, with its floors) and NaN
must land exactly where the float64 reference puts it.  n_k = 5000 is a multiple of neither
the 64-key blocks nor the chunks; with 2 threads and 3 heads it is cut into two chunks.
"""
import itertools

import numpy as np
import pytest

from kernels import harness
from kernels.dtypes import FLOATS
from kernels.rungs import rung4_c_tiled as c_tiled
from kernels.harness import Case
from kernels.reference import reference_attention
from kernels.threads import using_budget

HEADS = (3,)


def compute_type(dtype):
    """The type of run()'s out for inputs of ``dtype`` (float32 for the 16-bit types)."""
    return FLOATS[np.dtype(dtype).name].compute


def assert_passes(case, dtype, n_threads):
    with using_budget(n_threads):
        outcome = harness.check("c_tiled", case, dtype)
    comparison = outcome.comparison
    print(f"{case.label} {outcome.dtype} threads={n_threads}: error {comparison.error:.2e} "
          f"budget {comparison.budget:.2e}")
    assert comparison.ok, (case, outcome.dtype, n_threads, comparison)


SHAPE_CASES = [
    Case(f"decode n_q={n_q} n_k={n_k}", HEADS, n_q, n_k, 64, 64, causal=causal)
    for n_q, n_k, causal in itertools.product((1, 2, 3), (1, 7, 100, 5000), (False, True))
]


@pytest.mark.parametrize("n_threads", (1, 2))
@pytest.mark.parametrize("dtype", harness.DTYPES, ids=[np.dtype(d).name for d in harness.DTYPES])
@pytest.mark.parametrize("case", SHAPE_CASES, ids=lambda c: c.label)
def test_split_path_matches_the_reference(isa, case, dtype, n_threads):
    assert_passes(case, dtype, n_threads)


# d and d_v: 1, odd, one short of and one past the lane widths (AVX2: 8 float32, 4 float64;
# AVX-512: 16 and 8), and past pv_rows' pass over the columns (64 of them, float64 AVX2: 32)
HEAD_DIMS = [(1, 1), (3, 5), (7, 9), (9, 7), (15, 17), (17, 15), (33, 65), (64, 33), (65, 129)]


@pytest.mark.parametrize("n_threads", (1, 2))
@pytest.mark.parametrize("dtype", harness.DTYPES, ids=[np.dtype(d).name for d in harness.DTYPES])
@pytest.mark.parametrize("d, d_v", HEAD_DIMS, ids=[f"d={d} d_v={d_v}" for d, d_v in HEAD_DIMS])
@pytest.mark.parametrize("causal", (False, True), ids=("full", "causal"))
def test_split_path_head_dims(isa, d, d_v, causal, dtype, n_threads):
    assert_passes(Case(f"decode d={d} d_v={d_v}", HEADS, 3, 1000, d, d_v, causal=causal), dtype, n_threads)


@pytest.mark.parametrize("n_threads", (1, 2))
@pytest.mark.parametrize("dtype", harness.DTYPES, ids=[np.dtype(d).name for d in harness.DTYPES])
@pytest.mark.parametrize("poison", ("nan_k", "nan_v", "nan_q", "inf_q"))
@pytest.mark.parametrize("n_q, n_k", [(1, 5000), (3, 5), (3, 4), (2, 3000)])
@pytest.mark.parametrize("causal", (False, True), ids=("full", "causal"))
def test_split_path_nan_and_inf(isa, n_q, n_k, poison, causal, dtype, n_threads):
    """The harness poisons row min(3, n - 1): with n_k = 4 and causal, key 3 is seen only by
    the last of 3 rows, so the others must stay finite."""
    case = Case(f"decode {poison} n_q={n_q} n_k={n_k}", HEADS, n_q, n_k, 16, 16, causal=causal,
                poison=poison)
    assert_passes(case, dtype, n_threads)


def test_nan_key_reaches_only_the_rows_that_see_it(isa):
    """n_q = 3, n_k = 4, causal: the rows see 2, 3, 4 keys; a NaN in key 3 reaches only the
    last row (all of it from k, its column 5 from v), exactly where the reference puts it."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 3, 8))
    for target in ("k", "v"):
        k, v = rng.standard_normal((2, 2, 4, 8))
        {"k": k, "v": v}[target][:, 3, 5] = np.nan
        for dtype in harness.DTYPES:
            out = np.empty((2, 3, 8), compute_type(dtype))
            c_tiled.run(*(a.astype(dtype) for a in (q, k, v)), out, True, 1 / np.sqrt(8))
            ref = reference_attention(q, k, v, causal=True)
            assert np.isfinite(out[:, :2]).all(), (target, dtype)
            np.testing.assert_array_equal(np.isnan(out), np.isnan(ref), err_msg=f"{target} {dtype}")
            assert np.isnan(out[:, 2, 5]).all()


@pytest.mark.parametrize("n_threads", (1, 2))
@pytest.mark.parametrize("dtype", harness.DTYPES, ids=[np.dtype(d).name for d in harness.DTYPES])
@pytest.mark.parametrize("n_q, n_k", [(2, 1), (3, 1), (3, 2), (4, 1)])
def test_rows_that_see_no_key_are_zero(isa, n_q, n_k, dtype, n_threads):
    case = Case(f"decode n_q={n_q} > n_k={n_k}", HEADS, n_q, n_k, 8, 8, causal=True)
    assert_passes(case, dtype, n_threads)
    q, k, v = case.inputs(dtype)
    out = np.full((*HEADS, n_q, 8), np.nan, compute_type(dtype))
    with using_budget(n_threads):
        c_tiled.run(q, k, v, out, True, 1 / np.sqrt(8))
    assert (out[:, :n_q - n_k] == 0).all()


@pytest.mark.parametrize("dtype", harness.DTYPES, ids=[np.dtype(d).name for d in harness.DTYPES])
def test_all_minus_inf_scores_give_nan_as_the_reference(isa, dtype):
    """q = −inf·e_0 and k = 1: every score is −inf in every chunk, and the reference's row
    is exp(−inf + inf) = NaN, not the zeros of a row that sees no key."""
    n_k = 700
    q = np.zeros((1, 1, 4), dtype)
    q[..., 0] = -np.inf
    k = np.ones((1, n_k, 4), dtype)
    v = np.ones((1, n_k, 4), dtype)
    out = np.empty((1, 1, 4), compute_type(dtype))
    with using_budget(2):
        c_tiled.run(q, k, v, out, False, 0.5)
    assert np.isnan(out).all()


def test_many_chunks_of_one_head_merge_exactly(isa):
    """One head, 2 threads: n_k = 65,536 cut into 8 chunks of 8,192 keys, each with its own
    maximum (logits x3), so the merge rescales all but one chunk's state."""
    case = Case("decode one head n_k=65536", (1,), 1, 65536, 64, 64, logit_scale=3.0)
    for dtype in harness.DTYPES:
        assert_passes(case, dtype, 2)
