"""The harness's verdicts themselves: it catches wrong answers, and its float32 budget holds
for every seed, not only for the committed cases."""
import dataclasses

import numpy as np
import pytest

from kernels import harness
from kernels.dtypes import FLOATS, HALF
from kernels.reference import expand_kv, reference_attention

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


def half_model(q, k, v, causal, dtype, bug=None):
    """Attention as a 16-bit kernel may compute it: float32 throughout, P rounded to ``dtype``
    before P·V (l summed from the unrounded P, as PyTorch's bfloat16 kernel does) and the
    output rounded to ``dtype``: the two roundings the budget allows.  ``bug``: "scores in
    half" rounds the scores to ``dtype`` too; "drops a key" leaves out every row's last key."""
    q, k, v = (x.astype(np.float32) for x in (q, k, v))
    k, v = expand_kv(q, k), expand_kv(q, v)   # grouped cases: each query head's K/V head
    scores = q @ np.swapaxes(k, -1, -2) / np.float32(np.sqrt(q.shape[-1]))
    if bug == "scores in half":
        scores = scores.astype(dtype).astype(np.float32)
    n_q, n_k = scores.shape[-2:]
    visible = np.tri(n_q, n_k, k=n_k - n_q, dtype=bool) if causal else np.ones((n_q, n_k), bool)
    if bug == "drops a key":
        visible &= np.tri(n_q, n_k, k=n_k - n_q - 1, dtype=bool) if causal else np.arange(n_k) < n_k - 1
    scores = np.where(visible, scores, -np.inf)
    with np.errstate(invalid="ignore"):
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p = np.nan_to_num(p)   # rows that see no key: zero weights, zero output
    l = p.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(l > 0, (p.astype(dtype).astype(np.float32) @ v) / l, 0)
    return out.astype(dtype)


HALF_CASES = [c for c in harness.CASES if not c.poison]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("case", HALF_CASES, ids=lambda c: c.label)
def test_a_16_bit_kernel_rounding_p_and_its_output_passes(case, dtype):
    q, k, v = case.inputs(np.dtype(dtype).type)
    ref, budget = harness._expected(case, np.dtype(dtype).type)
    comparison = harness.compare(half_model(q, k, v, case.causal, dtype), ref, v, budget)
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


def test_16_bit_budgets_are_the_float32_budget_of_their_inputs_plus_two_roundings():
    for case in HALF_CASES[::7]:
        for dtype in HALF:
            inputs = case.inputs(np.dtype(dtype).type)
            ref = reference_attention(*inputs, causal=case.causal)
            widened = tuple(x.astype(np.float32) for x in inputs)   # exact
            assert harness.error_budget(case, dtype, inputs, ref) == (
                2 * FLOATS[dtype].unit_roundoff + harness.error_budget(case, np.float32, widened, ref))
