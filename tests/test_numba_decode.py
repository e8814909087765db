"""numba_tiled's split-KV path (decoding: a few queries per head, tasks over key chunks)
against the float64 reference, through the harness's comparison and budget rule."""
import dataclasses

import numpy as np
import pytest

import kernels
from kernels import harness
from kernels.dtypes import FLOATS
from kernels.rungs import rung3_numba_split_kv as split_kv
from kernels.reference import reference_attention
from kernels.threads import using_budget

KERNEL = "numba_tiled"
DTYPE_IDS = [np.dtype(d).name for d in harness.DTYPES]
N_Q = (1, 2, 3)
N_K = (1, 7, 100, 5000)  # 5000 keys: many chunks and a partial last one


def _cases():
    grid = [harness.Case(f"decode n_q={n_q} n_k={n_k}", (3,), n_q, n_k, 64, 64)
            for n_q in N_Q for n_k in N_K]
    special = [
        harness.Case("decode odd d=33 d_v=17", (2,), 3, 700, 33, 17),
        harness.Case("decode heads (2,4) d=1", (2, 4), 2, 300, 1, 1),
        harness.Case("decode NaN in k", (2,), 2, 100, 16, 16, poison="nan_k"),
        harness.Case("decode NaN in v", (2,), 3, 600, 16, 16, poison="nan_v"),
        harness.Case("decode Inf in q", (2,), 3, 600, 16, 16, poison="inf_q"),
        harness.Case("decode large logits x30", (2,), 3, 900, 64, 64, logit_scale=30.0),
    ]
    return [dataclasses.replace(case, causal=causal) for case in grid + special for causal in (False, True)]


CASES = _cases()


def _assert_ok(comparison, label):
    print(f"{label}: error {comparison.error:.2e} (budget {comparison.budget:.2e}), "
          f"max abs {comparison.max_abs:.2e}")
    assert comparison.ok, (f"{label}: error {comparison.error:.3e} > budget {comparison.budget:.3e}, "
                           f"first bad index {comparison.first_bad}")


def test_the_cases_take_the_split_path():
    assert max(case.n_q for case in CASES) <= split_kv.SPLIT_KV_MAX_ROWS
    assert max(case.n_k for case in CASES) > 10 * split_kv.SPLIT_KV_CHUNK


@pytest.mark.parametrize("threads", (1, 2))
@pytest.mark.parametrize("dtype", harness.DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", CASES, ids=[case.label for case in CASES])
def test_split_kv_matches_reference(case, dtype, threads):
    with using_budget(threads):
        outcome = harness.check(KERNEL, case, dtype)
    _assert_ok(outcome.comparison, f"{case.label} {outcome.dtype} {threads} threads")


def _budget_at_scale(dtype, q, k, v, causal, scale, ref):
    """harness.error_budget's rule, for a scale other than the 1/√d it assumes (a 16-bit
    type: the float32 budget of its inputs plus its own roundings, the output's)."""
    if np.dtype(dtype) == np.float64:
        return harness.REFERENCE_BUDGET
    plain = reference_attention(q, k, v, causal=causal, scale=scale, compute_dtype=np.float32)
    magnitude = (np.abs(q.astype(np.float64)) @ np.abs(np.swapaxes(k.astype(np.float64), -1, -2))).max()
    return harness.half_roundings(dtype) + max(
        2 * harness.compare(plain, ref, v, np.inf).error, harness.budget_floor(np.float32),
        2 * FLOATS['float32'].unit_roundoff * abs(scale) * magnitude)


@pytest.mark.parametrize("scale", (0.0, -1.0, 0.3))
@pytest.mark.parametrize("causal", (False, True))
@pytest.mark.parametrize("dtype", harness.DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("n_q", N_Q)
def test_scale_zero_and_negative(n_q, dtype, causal, scale):
    """scale 0 averages the visible values; a negative scale flips the softmax."""
    q, k, v = harness.Case(f"decode scale n_q={n_q}", (2,), n_q, 600, 33, 20).inputs(dtype)
    ref = reference_attention(q, k, v, causal=causal, scale=scale)
    out = kernels.attention(q, k, v, kernel=KERNEL, causal=causal, scale=scale)
    budget = _budget_at_scale(dtype, q, k, v, causal, scale, ref)
    _assert_ok(harness.compare(out, ref, v, budget), f"scale {scale} n_q={n_q} causal={causal}")


@pytest.mark.parametrize("dtype", harness.DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("causal", (False, True))
def test_nan_past_a_rows_limit_stays_out_of_it(dtype, causal):
    """Causal n_q = 3, n_k = 5000: key 4999 is seen by the last row only, key 4998 by the
    last two; a NaN there must reach exactly those rows (no 0 · NaN in the others)."""
    case = harness.Case("decode late NaN", (2,), 3, 5000, 16, 16, causal=causal)
    q, k, v = case.inputs(dtype)
    k[0, 4999, 1] = np.nan
    v[1, 4998, 2] = np.nan
    ref = reference_attention(q, k, v, causal=causal)
    out = kernels.attention(q, k, v, kernel=KERNEL, causal=causal)
    expected_nan_rows = [[False, False, True], [False, True, True]] if causal else [[True] * 3] * 2
    assert (np.isnan(ref).any(axis=-1) == expected_nan_rows).all()
    _assert_ok(harness.compare(out, ref, v, harness.error_budget(case, dtype, (q, k, v), ref)), case.label)


@pytest.mark.parametrize("dtype", harness.DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("infinite_score", (-np.inf, np.inf))
def test_a_row_of_infinite_scores_gives_nan_as_the_reference(dtype, infinite_score):
    """Every score of row 0 infinite (q = inf in one column, that column of k all of one
    sign), across several key chunks: the reference gives NaN (inf - inf), so must we;
    row 1 stays finite."""
    case = harness.Case("decode infinite scores", (1,), 2, 600, 8, 8)
    q, k, v = case.inputs(dtype)
    q[0, 0, 0] = np.inf
    k[0, :, 0] = np.sign(infinite_score) * (np.abs(k[0, :, 0]) + 1)
    ref = reference_attention(q, k, v)
    out = kernels.attention(q, k, v, kernel=KERNEL)
    assert np.isnan(ref[0, 0]).all() and np.isfinite(ref[0, 1]).all()
    _assert_ok(harness.compare(out, ref, v, harness.error_budget(case, dtype, (q, k, v), ref)), case.label)
