"""Soft against hard retrieval (§11.1.1, card C11-01): exact match, nearest key, attention.

The claims the experiment makes, asserted on a small seeded store: exact match fails
under any noise, attention does not; soft retrieval never beats the nearest-key lookup
and becomes it as T → 0; cooling focuses the weights monotonically.  Timings are only
checked for shape, sign and spread: this machine's load is not the code's property.  The
under-load rule is held to scheduler counts the test makes up, never to the real load.
"""
import dataclasses
import itertools
import math
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from kernels.harness import REFERENCE_BUDGET
from kernels.layers import retrieval
from kernels.layers.retrieval import AGREEMENT_LEVEL, LOADED_BELOW, retrieval_cost, soft_vs_hard
from kernels.spread import Measured
from kernels.viz import retrieval as retrieval_plots

N_ITEMS, DIM, N_QUERIES = 200, 32, 100
NOISE_LEVELS = (0.0, 0.1, 0.5, 2.0)  # 2.0: noise about twice the key, where the nearest key fails too
SMALL_NOISE = np.array(NOISE_LEVELS) <= 0.5
TEMPERATURES = np.geomspace(10.0, 1e-3, 21)
MODERATE_T = 0.1  # on the grid; weights still a blend here (mean max weight ≈ 0.95)
# Sums of N = 200 terms in float64 carry rounding of about N · 1.1e-16 ≈ 2e-14: a
# property that holds exactly in real arithmetic may fail by that much, not by 1e-12.
ROUNDING = 1e-12


def small_experiment(**overrides):
    settings = dict(n_items=N_ITEMS, dim=DIM, n_queries=N_QUERIES, noise_levels=NOISE_LEVELS,
                    temperatures=TEMPERATURES, seed=1)
    return soft_vs_hard(**(settings | overrides))


@pytest.fixture(scope="module")
def result():
    return small_experiment()


def test_shapes_and_temperature_order(result):
    levels, temps = len(NOISE_LEVELS), len(TEMPERATURES)
    for field in ("exact_accuracy", "nearest_accuracy", "agreement_temperature"):
        assert getattr(result, field).shape == (levels,), field
    for field in ("soft_accuracy", "max_weight", "entropy", "error_to_nearest", "agreement"):
        assert getattr(result, field).shape == (levels, temps), field
    assert np.all(np.diff(result.temperatures) < 0), "temperatures run hot to cold"


def test_exact_match_needs_a_bit_identical_query(result):
    np.testing.assert_array_equal(result.exact_accuracy, [1.0, 0.0, 0.0, 0.0])


def test_soft_retrieval_never_beats_the_nearest_key(result):
    """An output within √2/2 of e_i has w_i as its strictly largest weight (if w_j ≥ w_i,
    |w − e_i|² ≥ 2w_i² − 2w_i + 1 ≥ 1/2), so soft is right only where argmax is: exact."""
    assert np.all(result.soft_accuracy <= result.nearest_accuracy[:, None])
    # at T = 10 the weights are within e^{±0.2} of uniform: the blend names no item
    np.testing.assert_array_equal(result.soft_accuracy[:, 0], 0.0)
    assert np.all(result.nearest_accuracy[SMALL_NOISE] == 1.0)
    assert result.nearest_accuracy[-1] < 0.9, "at noise 2.0 the nearest key is often another item"


def test_cooling_focuses_the_weights_monotonically(result):
    """Per query, exactly: max weight rises as T falls (each exp((s_j − s_max)/T) falls),
    entropy falls (dH/d(1/T) = −Var_w(s)/T), and |w − e_n|² falls (its derivative in 1/T
    is −2w_n(1 − w_n)(s_n − s̄) + 2Σ_{j≠n} w_j²(s_j − s̄) ≤ 0, as w_j ≤ w_n, s_j ≤ s_n);
    so the means over queries do too, up to rounding."""
    colder = np.diff  # along the temperature axis, hot to cold
    assert np.all(colder(result.max_weight) >= -ROUNDING)
    assert np.all(colder(result.entropy) <= ROUNDING)
    assert np.all(colder(result.error_to_nearest) <= ROUNDING)
    hottest, coldest = 0, -1
    assert np.all(result.entropy[:, hottest] > 0.99 * math.log(N_ITEMS))
    assert np.all(result.max_weight[:, hottest] < 2 / N_ITEMS)
    # at T = 1e-3 a score gap of 0.01 is a weight ratio of e^10; the small-noise queries'
    # gaps are ~0.5, so their weights are one-hot to well below rounding
    assert np.all(result.max_weight[SMALL_NOISE, coldest] > 1 - 1e-9)
    assert np.all(result.entropy[SMALL_NOISE, coldest] < 1e-9)
    assert np.all(result.error_to_nearest[SMALL_NOISE, coldest] < 1e-9)


def test_cold_soft_retrieval_is_the_argmax_lookup(result):
    assert np.all(result.agreement[:, -1] >= AGREEMENT_LEVEL)
    np.testing.assert_allclose(result.soft_accuracy[:, -1], result.nearest_accuracy, atol=1 - AGREEMENT_LEVEL)
    assert np.all(np.isfinite(result.agreement_temperature[SMALL_NOISE]))
    for level, temperature in enumerate(result.agreement_temperature):
        agreeing = result.temperatures[result.agreement[level] >= AGREEMENT_LEVEL]
        assert temperature == agreeing.max()


def test_attention_beats_exact_match_under_noise(result):
    noisy = NOISE_LEVELS.index(0.1)
    moderate = np.flatnonzero(np.isclose(result.temperatures, MODERATE_T))[0]
    assert result.max_weight[noisy, moderate] < 0.99, "at moderate T the output is still a blend"
    assert result.soft_accuracy[noisy, moderate] >= AGREEMENT_LEVEL
    assert result.exact_accuracy[noisy] == 0.0


def test_deterministic_given_the_seed(result):
    again, other_seed = small_experiment(), small_experiment(seed=2)
    for field in dataclasses.fields(result):
        np.testing.assert_array_equal(getattr(again, field.name), getattr(result, field.name), err_msg=field.name)
    assert not np.array_equal(other_seed.entropy, result.entropy)


@pytest.mark.parametrize("kernel", ["numpy", "c_tiled"])
def test_kernel_outputs_are_the_weights(kernel):
    """With one-hot values w V = w: a kernel's output matches the weights within the
    harness's float64 budget, and no decision on the √2/2 radius changes."""
    settings = dict(noise_levels=(0.1, 2.0), temperatures=(1.0, 0.1, 0.01))
    by_weights, by_kernel = small_experiment(**settings), small_experiment(kernel=kernel, **settings)
    error = np.abs(by_kernel.error_to_nearest - by_weights.error_to_nearest).max()
    print(f"{kernel}: max difference in mean error to nearest {error:.2e}")
    assert error <= REFERENCE_BUDGET
    np.testing.assert_array_equal(by_kernel.soft_accuracy, by_weights.soft_accuracy)
    np.testing.assert_array_equal(by_kernel.agreement, by_weights.agreement)


@pytest.mark.parametrize("overrides", [dict(noise_levels=(-0.1,)), dict(noise_levels=()),
                                       dict(temperatures=(1.0, 0.0)), dict(temperatures=(np.inf,)),
                                       dict(n_items=1), dict(n_queries=0)],
                         ids=["negative noise", "no noise level", "zero T", "infinite T", "one item",
                              "no query"])
def test_bad_arguments_raise_value_error(overrides):
    with pytest.raises(ValueError):
        small_experiment(**overrides)


SMALL_COST = dict(sizes=(100, 400), dim=16, n_queries=4, repeats=3)


def test_retrieval_cost_shapes():
    cost = retrieval_cost(**SMALL_COST)
    for field in ("hash_seconds", "attention_seconds"):
        figures = getattr(cost, field)
        assert len(figures) == 2, field
        for figure in figures:
            assert isinstance(figure, Measured) and figure.n == SMALL_COST["repeats"], field
            assert 0 < figure.low <= figure <= figure.high, field
    assert cost.cpu_share.shape == (2,)
    np.testing.assert_array_equal(cost.attention_flops, [4 * 100 * 16, 4 * 400 * 16])
    assert cost.hashed_bytes == 16 * 8


def fake_scheduler(monkeypatch, waiting_per_running, threads=(1,)):
    """Replace the scheduler's counts with made-up ones: at every reading each of ``threads``
    has run 1 ms more and queued ``waiting_per_running`` ms more (real time plays no part)."""
    readings = itertools.count(1)

    def scheduled_times():
        reading = next(readings)
        return {thread: (reading * 1_000_000, round(reading * 1_000_000 * waiting_per_running))
                for thread in threads}
    monkeypatch.setattr(retrieval, "scheduled_times", scheduled_times)


@pytest.mark.parametrize("waiting_per_running, share, under_load", [
    (0.0, 1.0, False),                 # never queued: an idle machine
    (0.05, 1 / 1.05, False),           # queued 5% as long as it ran: above the threshold
    (1.0, 0.5, True),                  # as long on the queue as on a core: another process had it half the time
    (9.0, 0.1, True),
])
def test_under_load_is_the_share_of_ready_time_on_a_core(monkeypatch, waiting_per_running, share, under_load):
    fake_scheduler(monkeypatch, waiting_per_running, threads=(1, 2))
    cost = retrieval_cost(**SMALL_COST)
    np.testing.assert_allclose(cost.cpu_share, share, rtol=1e-6)
    assert cost.load_known
    assert cost.under_load is under_load
    assert (share < LOADED_BELOW) is under_load


def test_one_loaded_size_is_enough():
    cost = retrieval_cost(**SMALL_COST)
    assert dataclasses.replace(cost, cpu_share=np.array([0.99, LOADED_BELOW - 0.01])).under_load
    assert not dataclasses.replace(cost, cpu_share=np.array([0.99, LOADED_BELOW])).under_load


def test_threads_that_start_or_end_while_timing(monkeypatch):
    """A thread that starts counts from zero; one that ends drops out (its counts go with it)."""
    readings = iter([{1: (0, 0), 2: (5_000_000, 5_000_000)},   # 2 ends before the next reading
                     {1: (1_000_000, 0), 3: (1_000_000, 2_000_000)}])  # 3 started meanwhile
    monkeypatch.setattr(retrieval, "scheduled_times", lambda: next(readings))
    seconds, running, waiting = retrieval._timed_after_warm_up(lambda: 1e-6, repeats=2)
    assert seconds == [1e-6, 1e-6]
    assert (running, waiting) == (2_000_000, 2_000_000)


def test_without_schedstats_the_load_is_unknown(monkeypatch):
    monkeypatch.setattr(retrieval, "scheduled_times", dict)
    cost = retrieval_cost(**SMALL_COST)
    assert np.all(np.isnan(cost.cpu_share))
    assert not cost.load_known and not cost.under_load
    assert "unknown" in retrieval_plots.load_text(cost)


@pytest.mark.skipif(not retrieval.scheduled_times(), reason="no /proc/self/task/*/schedstat here")
def test_schedstat_counts_this_thread():
    before = retrieval.scheduled_times()
    sum(range(2_000_000))  # some CPU time on this thread (tens of ms) ...
    time.sleep(0.01)        # ... and a switch off the CPU, at which Linux adds it to the count
    after = retrieval.scheduled_times()
    me = threading.get_native_id()
    assert after[me][0] > before[me][0] and after[me][1] >= before[me][1]


def test_figures_are_png(result, tmp_path, assert_png):
    cost = retrieval_cost(sizes=(100, 400, 1600), dim=16, n_queries=4, repeats=3)
    for path in (retrieval_plots.plot_soft_vs_hard(result, tmp_path / "soft_vs_hard.png"),
                 retrieval_plots.plot_retrieval_cost(cost, tmp_path / "retrieval_cost.png")):
        assert_png(path, min_bytes=20_000)  # fewer bytes than labelled axes and lines take


def test_importing_does_not_import_matplotlib():
    code = ("import sys, kernels, kernels.layers.retrieval, kernels.viz.retrieval; "
            "assert 'matplotlib' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
