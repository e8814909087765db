"""The harness's verdicts themselves: it catches wrong answers, and its float32 budget holds
for every seed, not only for the committed cases."""
import dataclasses

import numpy as np
import pytest

from half_models import ROUNDING_BUGS, half_model
from kernels import harness
from kernels.dtypes import FLOATS, HALF
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


HALF_CASES = [c for c in harness.CASES if not c.poison]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("case", HALF_CASES, ids=lambda c: c.label)
def test_a_16_bit_kernel_rounding_p_and_its_output_passes(case, dtype):
    q, k, v = case.inputs(np.dtype(dtype).type)
    ref, budget = harness._expected(case, np.dtype(dtype).type)
    comparison = harness.compare(half_model(q, k, v, case.causal, dtype, band=case.band), ref, v, budget)
    assert comparison.ok, f"error {comparison.error:.3e} > budget {comparison.budget:.3e}"


BUGGY = {   # a bug, and a case it must fail (in both 16-bit types)
    # scores ~ N(0, 9²), max ~ 25: bfloat16 rounds them by up to 1/16, float16 by 1/128 (at
    # logits x30 the softmax is one-hot and rounding the scores goes unseen)
    "scores in half": harness.Case("moderate logits x3", (1,), 64, 64, 64, 64, logit_scale=3.0),
    # one key of 40 moves a row by ~1/40 of max|v|, above bfloat16's 2u = 7.8e-3
    "drops a key": harness.Case("n=40", (2,), 40, 40, 16, 16),
}


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bug", BUGGY)
def test_a_16_bit_kernel_with_a_real_bug_fails(bug, causal, dtype):
    case = dataclasses.replace(BUGGY[bug], causal=causal)
    q, k, v = case.inputs(np.dtype(dtype).type)
    ref, budget = harness._expected(case, np.dtype(dtype).type)
    assert harness.compare(half_model(q, k, v, case.causal, dtype), ref, v, budget).ok  # without it
    assert not harness.compare(half_model(q, k, v, case.causal, dtype, bug), ref, v, budget).ok


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("bug", ROUNDING_BUGS)
def test_the_probe_fails_a_kernel_rounding_its_scores_or_sums_to_16_bits(bug, dtype):
    """The probe's cases (``harness.PROBE_CASES``) catch either way a library may compute part
    of a 16-bit type's work in it, and pass the two roundings the budget allows."""
    assert len(harness.PROBE_CASES) == 2 and not any(case.causal for case in harness.PROBE_CASES)
    errors = {}
    for case in harness.PROBE_CASES:
        q, k, v = case.inputs(np.dtype(dtype).type)
        ref, budget = harness._expected(case, np.dtype(dtype).type)
        assert harness.compare(half_model(q, k, v, case.causal, dtype), ref, v, budget).ok, case.label
        errors[case.name] = harness.compare(half_model(q, k, v, case.causal, dtype, bug), ref, v, budget).error / budget
    print(f"{bug}, {dtype}: error ÷ budget " + ", ".join(f"{name} {ratio:.2f}" for name, ratio in errors.items()))
    assert max(errors.values()) > 1


def test_16_bit_budgets_are_the_float32_budget_of_their_inputs_plus_two_roundings():
    for case in HALF_CASES[::7]:
        for dtype in HALF:
            inputs = case.inputs(np.dtype(dtype).type)
            ref = reference_attention(*inputs, causal=case.causal, window=case.window, sinks=case.sinks)
            widened = tuple(x.astype(np.float32) for x in inputs)   # exact
            assert harness.error_budget(case, dtype, inputs, ref) == (
                2 * FLOATS[dtype].unit_roundoff + harness.error_budget(case, np.float32, widened, ref))
