"""The harness's verdicts themselves: it catches wrong answers, and its float32 budget holds
for every seed, not only for the committed cases."""
import dataclasses

import numpy as np
import pytest

from kernels import harness
from kernels.dtypes import FLOATS
from kernels.reference import reference_attention

U = FLOATS["float32"].unit_roundoff


@pytest.mark.parametrize("dtype", harness.DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", [c for c in harness.CASES if not c.poison][::5], ids=lambda c: c.label)
def test_an_error_above_the_budget_fails_and_one_below_passes(case, dtype):
    q, k, v = case.inputs(dtype)
    ref, budget = harness._expected(case, np.dtype(dtype).type)
    scale = np.abs(ref).max() + np.abs(v).max()  # the error's denominator, at most
    index = (0,) * ref.ndim
    for factor, ok in ((3.0, False), (0.5, True)):
        out = ref.copy()
        out[index] += factor * budget * scale
        assert harness.compare(out, ref, v, budget).ok is ok


def test_a_nan_where_the_reference_has_none_fails_any_finite_budget():
    case = harness.CASES[0]
    q, k, v = case.inputs(np.float64)
    ref = reference_attention(q, k, v)
    out = ref.copy()
    out[(0,) * out.ndim] = np.nan
    assert not harness.compare(out, ref, v, 1e300).ok


def test_float32_budgets_stay_near_rounding_for_moderate_logits():
    """The magnitude term must not swamp ordinary cases: there the budget is tens of ulps."""
    for case in harness.CASES:
        if case.logit_scale == 1.0:
            assert harness._expected(case, np.float32)[1] < 64 * U, case.label


@pytest.mark.parametrize("logit_scale", [3.0, 10.0, 30.0])
def test_large_logits_pass_on_every_seed(own_kernel_name, logit_scale):
    """Seeds the committed cases do not use; with the plain-float32 term alone some failed."""
    for seed in range(12):
        for causal in (False, True):
            case = harness.Case(f"seed {seed}", (1,), 96, 96, 64, 64, causal=causal,
                                logit_scale=logit_scale)
            outcome = harness.check(own_kernel_name, case, np.float32)
            if outcome.status == "skip":
                pytest.skip(f"{outcome.kernel}: {outcome.note}")
            c = outcome.comparison
            assert c.ok, f"{own_kernel_name} {case.label} x{logit_scale}: error {c.error:.3e} > {c.budget:.3e}"


def test_the_magnitude_term_ignores_non_finite_inputs():
    case = dataclasses.replace(harness.CASES[0], name="inf", n_q=4, n_k=4, poison="inf_q")
    assert harness._expected(case, np.float32)[1] < 64 * U
