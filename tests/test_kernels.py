"""Every registered kernel against the float64 reference, through the one harness."""
import numpy as np
import pytest

import kernels
from kernels import harness
from kernels.reference import reference_attention

DTYPE_IDS = [np.dtype(d).name for d in harness.DTYPES]


def _assert_outcome(outcome):
    if outcome.status == "skip":
        pytest.skip(f"{outcome.kernel}: {outcome.note}")
    c = outcome.comparison
    print(f"{outcome.kernel} {outcome.case.label} {outcome.dtype}: error {c.error:.2e} "
          f"(budget {c.budget:.2e}), max abs {c.max_abs:.2e}, max rel {c.max_rel:.2e}")
    assert c.ok, (f"{outcome.kernel} on {outcome.case.label} ({outcome.dtype}): error {c.error:.3e} "
                  f"> budget {c.budget:.3e}, first bad index {c.first_bad}")


@pytest.mark.parametrize("dtype", harness.DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", harness.CASES, ids=[c.label for c in harness.CASES])
def test_kernel_matches_reference(kernel_name, case, dtype):
    _assert_outcome(harness.check(kernel_name, case, dtype))


def test_nan_rows_match_reference_exactly(kernel_name):
    """A NaN in key j poisons exactly the rows that see j, causal or not."""
    if kernels.KERNELS[kernel_name].external:
        pytest.skip("external peer: NaN semantics are its own")
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 24, 8)) for _ in range(3))
    k[0, 10, 3] = np.nan
    for causal in (False, True):
        out = kernels.attention(q, k, v, kernel=kernel_name, causal=causal)
        ref = reference_attention(q, k, v, causal=causal)
        nan_rows = np.isnan(ref).any(axis=-1)
        assert nan_rows.any() and not nan_rows.all()
        np.testing.assert_array_equal(np.isnan(out).any(axis=-1), nan_rows)


def test_one_thread_and_all_threads_agree(kernel_name):
    case = harness.Case("threads", (3,), 150, 170, 64, 64, causal=True)
    if not kernels.KERNELS[kernel_name].fits(case.batch, case.n_q, case.n_k):
        case = harness.Case("threads small", (2,), 40, 50, 16, 16, causal=True)
    for dtype in harness.DTYPES:
        with kernels.threads.using_budget(1):
            single = harness.check(kernel_name, case, dtype)
        with kernels.threads.using_budget(kernels.threads.available_cpus()):
            every = harness.check(kernel_name, case, dtype)
        _assert_outcome(single)
        _assert_outcome(every)

