"""Sliding windows and attention sinks (``kernels.band``): the convention, its checks, the
reference's semantics, and every kernel that takes a band against the reference."""
import dataclasses
import itertools

import numpy as np
import pytest

import kernels
from kernels.api import check_resources, planned
from kernels.band import CAUSAL, FULL, Band
from kernels.reference import reference_attention
from kernels.registry import KERNELS

WINDOWED = [name for name, kernel in KERNELS.items() if kernel.windows]
# our rungs, in float64 (the peers meet the harness's band cases in the types they take:
# tests/test_kernels.py)
OURS = [name for name in WINDOWED if not KERNELS[name].external]
SHAPES = [(9, 9), (5, 12), (12, 5), (1, 7)]
BANDS = [(None, None, 0), (0, 0, 0), (1, 0, 0), (3, 2, 0), (None, 1, 0), (2, None, 0), (100, 100, 0),
         (0, 0, 2), (2, 0, 3), (1, 1, 1), (4, None, 2)]


def seen_by_definition(band, n_q, n_k):
    """The band's mask written from its docstring, key by key."""
    seen = np.zeros((n_q, n_k), bool)
    for i, j in itertools.product(range(n_q), range(n_k)):
        p = i + n_k - n_q
        below_right = band.right is None or j <= p + band.right
        in_window = band.left is None or j >= p - band.left
        seen[i, j] = below_right and (in_window or j < band.sinks)
    return seen


@pytest.mark.parametrize("n_q, n_k", SHAPES)
@pytest.mark.parametrize("left, right, sinks", BANDS)
@pytest.mark.parametrize("causal", [False, True])
def test_mask_rows_counts_and_first_row_follow_the_definition(causal, left, right, sinks, n_q, n_k):
    band = Band.of(causal, (left, right), sinks)
    seen = seen_by_definition(band, n_q, n_k)
    assert np.array_equal(band.mask(n_q, n_k), seen)
    assert np.array_equal(band.seen_keys(n_q, n_k), seen.sum(axis=1))
    first = band.first_row(n_q, n_k)
    assert not seen[:first].any() and (first == n_q or seen[first].any())
    assert seen[first:].any(axis=1).all()   # only a leading block of rows sees nothing
    lo, hi = band.rows(n_q, n_k)
    assert (np.diff(lo) >= 0).all() and (np.diff(hi) >= 0).all()


def test_causal_folds_into_the_right_side_and_sinks_need_a_left_edge():
    assert Band.of(True) == CAUSAL and Band.of() == FULL
    assert Band.of(True, (5, 3)) == Band(5, 0) and Band.of(True, (5, None)) == Band(5, 0)
    assert Band.of(False, (None, 2), sinks=4) == Band(None, 2, 0)   # nothing left of the window
    assert Band.of(window=(8, 0)).causal and not Band.of(window=(8, 1)).causal
    assert Band.of(window=(8, 0), sinks=4).describe() == "window (8, 0) + 4 sinks"
    assert FULL.describe() == "full" and CAUSAL.describe() == "causal"


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(window=(-1, 0)), ValueError, ["window[0] (left)", ">= 0", "an unbounded side is None here"]),
    (dict(window=(0, -1)), ValueError, ["window[1] (right)", "-1"]),
    (dict(window=3), TypeError, ["window", "pair"]),
    (dict(window=(1, 2, 3)), TypeError, ["pair"]),
    (dict(window="ab"), TypeError, ["pair"]),
    (dict(window=(1.5, 0)), TypeError, ["window[0] (left)", "1.5"]),
    (dict(window=(True, 0)), TypeError, ["window[0] (left)"]),
    (dict(window=(4, 0), sinks=-2), ValueError, ["sinks", "-2"]),
    (dict(window=(4, 0), sinks=1.0), TypeError, ["sinks"]),
    (dict(causal=1), TypeError, ["causal"]),
])
def test_a_bad_window_or_sinks_is_refused_naming_the_argument(kwargs, error, words):
    q = np.zeros((1, 4, 8), np.float32)
    with pytest.raises(error) as raised:
        kernels.attention(q, q, q, **kwargs)
    assert all(word in str(raised.value) for word in words), raised.value


def test_only_a_windows_side_is_told_that_unbounded_is_none():
    """A negative sinks count is an error of its own: no side of a window to leave unbounded."""
    q = np.zeros((1, 4, 8), np.float32)
    with pytest.raises(ValueError) as raised:
        kernels.attention(q, q, q, window=(4, 0), sinks=-2)
    assert str(raised.value) == "sinks must be >= 0, got -2"


def test_numpy_integers_are_taken_as_window_sides_and_sinks():
    assert Band.of(window=(np.int64(3), np.int32(0)), sinks=np.uint8(2)) == Band(3, 0, 2)


def test_a_window_of_no_width_returns_each_querys_own_value():
    """window (0, 0): query i sees exactly the key at its aligned position, whose weight is 1."""
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, 3, 6, 8))
    v = rng.standard_normal((3, 10, 5))
    out = reference_attention(q, k[:, :10 - 4].repeat(2, axis=1)[:, :10], v, window=(0, 0))
    np.testing.assert_allclose(out, v[:, 4:], rtol=0, atol=1e-15)


def test_sinks_add_the_first_keys_to_a_window_and_never_a_future_one():
    """window (0, 0) with 2 sinks: the query at position p >= 2 blends keys 0, 1 and p; one at
    p < 2 sees keys 0..p only (a sink after it is a future key)."""
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((3, 1, 6, 4))
    out = reference_attention(q, k, v, window=(0, 0), sinks=2)
    scores = (q @ k.swapaxes(-1, -2))[0] / 2.0
    for i, keys in [(0, [0]), (1, [0, 1]), (4, [0, 1, 4])]:
        weights = np.exp(scores[i, keys] - scores[i, keys].max())
        np.testing.assert_allclose(out[0, i], weights @ v[0, keys] / weights.sum(), rtol=1e-13)


def test_a_window_wider_than_the_keys_is_full_attention():
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((3, 2, 7, 4))
    np.testing.assert_array_equal(reference_attention(q, k, v, window=(7, 7), sinks=3), reference_attention(q, k, v))
    np.testing.assert_array_equal(reference_attention(q, k, v, window=(9, 0)), reference_attention(q, k, v, True))


@pytest.mark.parametrize("kernel", OURS)
@pytest.mark.parametrize("n_q, n_k", SHAPES + [(130, 200), (200, 130)])
@pytest.mark.parametrize("left, right, sinks", BANDS + [(70, 0, 4), (5, 5, 65), (64, 0, 0)])
def test_every_kernel_that_takes_a_band_matches_the_reference(kernel, left, right, sinks, n_q, n_k):
    """float64, the reference's own type: the harness's 1e-10 (a few roundings of 2^-53 per
    sum of at most n_k terms)."""
    if not KERNELS[kernel].fits(2, n_q, n_k):
        pytest.skip(f"{kernel} is capped at {KERNELS[kernel].cap}")
    rng = np.random.default_rng(n_q * 1000 + n_k)
    q = rng.standard_normal((2, n_q, 16))
    k, v = rng.standard_normal((2, 1, n_k, 16))   # grouped: 2 query heads on one K/V head
    ref = reference_attention(q, k, v, window=(left, right), sinks=sinks)
    out = kernels.attention(q, k, v, kernel=kernel, window=(left, right), sinks=sinks)
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-10 * (1 + np.abs(v).max()))


@pytest.mark.parametrize("kernel", OURS)
def test_a_nan_value_outside_a_querys_band_does_not_reach_it(kernel):
    """A key outside the band takes no part, not even as 0 · NaN (nor does a tile that holds it)."""
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((3, 1, 150, 16))
    v[0, 20, 3] = np.nan
    out = kernels.attention(q, k, v, kernel=kernel, window=(10, 0), sinks=2)
    seen_by = Band.of(window=(10, 0), sinks=2).mask(150, 150)[:, 20]
    assert np.isnan(out[0, seen_by, 3]).all() and np.isfinite(out[0, ~seen_by]).all()


def test_a_kernel_without_windows_refuses_a_band_and_names_those_that_take_one():
    plain = dataclasses.replace(KERNELS["numpy"], name="plain", windows=False)
    assert plain.band_refusal(FULL) is None and plain.band_refusal(CAUSAL) is None
    refusal = plain.band_refusal(Band.of(window=(8, 0), sinks=4))
    assert "window (8, 0) + 4 sinks" in refusal and all(name in refusal for name in WINDOWED)
    assert plain.band_refusal(Band.of(window=(None, 3)))


def test_the_validation_path_refuses_a_band_to_a_kernel_without_one():
    plain = dataclasses.replace(KERNELS["numpy"], name="plain", windows=False)
    with pytest.raises(ValueError, match="plain takes full and causal attention only"):
        check_resources(plain, planned((1,), 4, 4, 8, 8, np.float32, window=(2, 0)))
    check_resources(plain, planned((1,), 4, 4, 8, 8, np.float32, causal=True))
