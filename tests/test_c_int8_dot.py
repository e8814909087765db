"""The int8 cache's integer dot products (csrc/int8_dot.c): a decode step quantises its query
rows once, to int16, and computes Q·Kᵀ as exact integer sums, on every unit the CPU runs
(an int4 cache's too, a group of 32 values at a time, each key byte's two nibbles multiplied
in place).

Each unit's scores are held bit for bit to an exact model: the queries quantised by
``kernels.cache_formats.decode_query_codes`` (the same float32 operations), the sums in
int64 (exact; the kernel's int32 never wraps: d · 127 · query_levels(d) < 2^31), then
((float32) sum · k_scale) · (scale · step), float32 roundings.  Integer sums are exact, so
every unit gives the same scores: vpdpwssd ("avx512-vnni", "avx-vnni") and vpmaddwd with an
add ("avx2") alike; a unit this CPU lacks skips, saying so.

The error that quantising the query adds is bounded (tile_ops.h): a query element moves by
at most step / 2 = max|q_row| / (2 · query_levels(d)), so a score by at most
|scale| · step / 2 · Σ_c |k_jc|; the decode output is then float32's on the quantised
queries (the reference below reads ``decode_queries``).
"""
import numpy as np
import pytest

from kernels.cache_formats import INT4_GROUP, decode_queries, decode_query_codes, quantise_int4, query_levels, unpack_int4
from kernels.rungs import rung4_c_tiled as c_tiled

UNITS = c_tiled.INT8_DOT_UNITS
NEEDS = {"avx512-vnni": "AVX512-VNNI (vpdpwssd)", "avx-vnni": "AVX-VNNI (vpdpwssd)", "avx2": "AVX2"}


@pytest.fixture(params=UNITS)
def unit(request):
    if not c_tiled.int8_dot_runs(request.param):
        pytest.skip(f"this CPU has no {NEEDS[request.param]}")
    return request.param


def model(k, k_scale, q, scale):
    """The scores a step computes, exactly: s (rows, keys) float32."""
    codes, steps = decode_query_codes(q)
    sums = codes.astype(np.int64) @ k.astype(np.int64).T
    assert np.abs(sums).max(initial=0) < 2**31   # the kernel's int32 sums
    return (sums.astype(np.float32) * k_scale[None, :]) * (np.float32(scale) * steps)[:, None]


def model_int4(k, k_scale, q, scale):
    """int4 keys (k packed, k_scale (keys, groups)): each group's exact sum scaled as a row's
    above, the groups' float32 scores added in order from 0."""
    codes, steps = decode_query_codes(q, INT4_GROUP)
    keys = unpack_int4(k, q.shape[1]).astype(np.int64)
    s = np.zeros((q.shape[0], k.shape[0]), np.float32)
    for g, c in enumerate(range(0, q.shape[1], INT4_GROUP)):
        sums = codes[:, c:c + INT4_GROUP].astype(np.int64) @ keys[:, c:c + INT4_GROUP].T
        s += (sums.astype(np.float32) * k_scale[None, :, g]) * (np.float32(scale) * steps[:, g])[:, None]
    return s


def draw(rng, rows, keys, d):
    q = rng.standard_normal((rows, d)).astype(np.float32)
    k = rng.integers(-127, 128, (keys, d), dtype=np.int8)
    k_scale = rng.uniform(0.001, 0.03, keys).astype(np.float32)
    return q, k, k_scale


@pytest.mark.parametrize("d", (1, 12, 15, 16, 17, 31, 33, 64, 65, 128, 200))
@pytest.mark.parametrize("keys", (1, 7, 8, 9, 64))
def test_every_unit_gives_the_exact_scores(unit, d, keys):
    rng = np.random.default_rng(d * 100 + keys)
    for rows in (1, 2, 3, 4):
        q, k, k_scale = draw(rng, rows, keys, d)
        np.testing.assert_array_equal(c_tiled.int8_scores(unit, k, k_scale, q, 0.125), model(k, k_scale, q, 0.125),
                                      err_msg=f"{unit} rows={rows}")


@pytest.mark.parametrize("d", (1, 2, 15, 16, 31, 32, 33, 63, 64, 70, 128))
@pytest.mark.parametrize("keys", (1, 7, 8, 9, 64))
def test_every_unit_gives_the_exact_int4_scores(unit, d, keys):
    """int4 keys read in place (csrc/int8_dot_template.h, qk_rows_q4: each byte's nibbles
    split, the offset 8 taken out as 8 · Σ codes): whole groups, a short last group, an odd
    width, keys past the last and between steps, every row count."""
    rng = np.random.default_rng(d * 100 + keys)
    for rows in (1, 2, 3, 4):
        q = rng.standard_normal((rows, d)).astype(np.float32)
        k, k_scale = quantise_int4(rng.standard_normal((keys, d)))
        np.testing.assert_array_equal(c_tiled.int4_scores(unit, k, k_scale, q, 0.125),
                                      model_int4(k, k_scale, q, 0.125), err_msg=f"{unit} rows={rows}")


def test_extreme_int4_codes_and_nonfinite_rows(unit):
    """Every nibble at its ends (codes ±7 and the unused −8) against the largest query codes
    of both signs, and a query group holding NaN: that group's scale is NaN, so its row
    scores NaN against every key, as float32 would."""
    d = 96
    q = np.full((3, d), 1.0, np.float32)
    q[1, ::2] = -1.0
    q[2, 40] = np.nan
    k = np.array([[0x00] * 48, [0xFF] * 48, [0xF1] * 48], np.uint8)   # codes −8, 7, and −7/7 alternating
    k_scale = np.ones((3, 3), np.float32)
    s = c_tiled.int4_scores(unit, k, k_scale, q, 1.0)
    np.testing.assert_array_equal(s, model_int4(k, k_scale, q, 1.0))
    assert np.isnan(s[2]).all() and np.isfinite(s[:2]).all()


def test_extreme_codes_sum_exactly_without_wrapping(unit):
    """Every product at its largest, 127 · query_levels(d), all of one sign or alternating,
    at d = 64, at 516 (the last d with int16's 32767 levels) and past it (fewer levels, the
    sums still below 2^31), converted to float32 with one rounding."""
    assert query_levels(516) == 32767 and query_levels(517) < 32767
    for d in (64, 516, 517, 1100):
        q = np.full((4, d), 1.0, np.float32)
        q[1] = -1.0
        q[2, ::2] = -1.0
        q[3, 0] = 1e-30   # codes 0 but one, which is the largest
        k = np.full((3, d), 127, np.int8)
        k[1] = -127
        k[2, 1::2] = -127
        k_scale = np.ones(3, np.float32)
        np.testing.assert_array_equal(c_tiled.int8_scores(unit, k, k_scale, q, 1.0), model(k, k_scale, q, 1.0))


def test_nonfinite_and_zero_rows(unit):
    """A query row holding NaN or Inf scores NaN against every key; a zero row 0 (NaN against
    a key whose scale is NaN, as 0 · NaN is); a key with a NaN scale scores NaN for every row."""
    rng = np.random.default_rng(7)
    q, k, k_scale = draw(rng, 4, 9, 40)
    q[0, 3], q[1, 5] = np.nan, np.inf
    q[2] = 0
    k_scale[4] = np.nan
    s = c_tiled.int8_scores(unit, k, k_scale, q, 0.5)
    assert np.isnan(s[:2]).all()
    assert np.isnan(s[2:, 4]).all()
    assert (s[2, np.arange(9) != 4] == 0).all() and np.isfinite(s[3, np.arange(9) != 4]).all()
    np.testing.assert_array_equal(s, model(k, k_scale, q, 0.5))


@pytest.mark.parametrize("spike", (1.0, 30.0), ids=("even", "one large element"))
def test_the_error_of_quantising_the_query_is_within_its_bound(unit, spike):
    """|s − scale · q · k̂ᵀ| <= |scale| · step / 2 · Σ_c |k̂_jc| (the bound), plus three float32
    roundings of |s| (the sum's conversion, past 2^24 here, and two products).  A code is
    round(q / step) of a quotient already rounded to float32, so within 1/2 + L · 2^-24 <
    0.502 steps of q / step: the bound uses 0.502.  The error is a real one (at least a
    tenth of the bound somewhere), not zero."""
    rng = np.random.default_rng(3)
    q, k, k_scale = draw(rng, 4, 64, 64)
    q[:, 0] *= spike
    scale = 0.125
    k_float = k.astype(np.float64) * k_scale.astype(np.float64)[:, None]
    exact = scale * q.astype(np.float64) @ k_float.T
    step = np.abs(q).max(axis=1).astype(np.float64) / query_levels(64)
    bound = scale * step[:, None] * 0.502 * np.abs(k_float).sum(axis=1)[None, :]
    s = c_tiled.int8_scores(unit, k, k_scale, q, scale).astype(np.float64)
    error = np.abs(s - exact)
    assert (error <= bound + 3 * 2.0**-24 * np.abs(s)).all(), (error / bound).max()
    assert (error / bound).max() > 0.1


def test_the_queries_decoded_are_codes_times_steps():
    q = np.array([[0.5, -1.0, 0.25, 0.0]], np.float32)
    step = np.float64(np.float32(1) / np.float32(32767))   # max|q| / 32767, in float32
    np.testing.assert_array_equal(decode_queries(q), np.array([[16384, -32767, 8192, 0]]) * step)


@pytest.mark.parametrize("kv_heads", (8, 2, 1))
@pytest.mark.parametrize("n_q", (1, 3))
@pytest.mark.parametrize("cache, d, d_v", (("int8", 64, 64), ("int4", 64, 64), ("int4", 70, 33)))
def test_a_decode_step_is_float32_on_the_quantised_queries_with_each_unit(unit, kv_heads, n_q, cache, d, d_v):
    """The whole step (c_tiled.run_int8 or run_int4, split-KV) with the unit selected, against
    the float64 reference on the quantised queries (int4: per group of 32 values, as its keys'
    scales) and the dequantised cache, within float32's tolerance (tests/test_c_grouped.py's)."""
    from tests.test_c_grouped import assert_matches, call, make_call, reference, tolerance

    group = 8 // kv_heads
    args, out, (q, k, v) = make_call(cache, group, n_q, 1000, d, d_v, seed=kv_heads + n_q)
    c_tiled.use_int8_dot(unit)
    try:
        for causal in (False, True):
            call(cache, args, out, causal, 0.125)
            assert_matches(out, reference(q, k, v, causal, 0.125), v, tolerance(cache, 1000, d),
                           f"{unit} {cache} causal={causal}")
    finally:
        c_tiled.use_isa("auto")


def test_units_not_on_this_cpu_are_refused_and_the_best_is_chosen():
    runs = [u for u in UNITS if c_tiled.int8_dot_runs(u)]
    assert runs[-1] == "generic"
    assert c_tiled.int8_dot() == runs[0] if c_tiled.isa() != "generic" else c_tiled.int8_dot() == "generic"
    for missing in set(UNITS) - set(runs):
        with pytest.raises(ValueError, match="not supported by this CPU"):
            c_tiled.use_int8_dot(missing)
    with pytest.raises(ValueError, match="unknown int8 dot-product unit"):
        c_tiled.int8_dot_runs("sse")


def test_the_registry_knows_which_calls_quantise_their_queries():
    import kernels

    assert kernels.KERNELS["c_tiled"].int8_query_rows == c_tiled.DECODE_MAX_QUERIES
