"""c_tiled's SIMD paths: each one the CPU has (AVX-512 with AVX512-BF16, AVX-512, AVX2+FMA,
the portable generic path a CPU without them falls back to, and the emulated AVX512-BF16
path every CPU runs) passes the harness, reads the 16-bit types exactly (the bfloat16
dot-product unit reads a subnormal as zero), and "auto" picks the best."""
import numpy as np
import pytest

from kernels import ceilings, harness
from kernels.band import Band
from kernels.dtypes import HALF
from kernels.reference import reference_attention
from kernels.rungs import rung4_c_tiled as c_tiled


def cpu_flags():
    with open("/proc/cpuinfo") as cpuinfo:
        return next(line for line in cpuinfo if line.startswith("flags")).split()


@pytest.mark.parametrize("dtype", harness.DTYPES, ids=[np.dtype(d).name for d in harness.DTYPES])
def test_every_path_passes_the_harness(isa, dtype):
    assert c_tiled.isa() == isa   # use_isa takes the names isa() reports
    failures = [(o.case.label, o.comparison) for o in harness.verify(["c_tiled"], dtypes=[dtype])
                if o.status != "ok"]
    assert not failures


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("n_q", [1, 5], ids=["split-KV path", "query-tile path"])
def test_every_path_reads_every_16_bit_value_exactly(isa, dtype, n_q):
    """One key, so that each query's output is that key's value row times its weight over
    the same weight: the value row holds all 65,536 bit patterns, and the float32 output must
    be NumPy's (or ml_dtypes') exact widening of each, NaN where it is NaN.  A bfloat16
    dot-product unit reads subnormal inputs as zeros (vdpbf16ps: "denormals are zero"), so
    on such a path bfloat16's subnormals (below 2^-126, 1.2e-38) come back as 0."""
    bits = np.arange(2**16, dtype=np.uint16)
    v = bits.view(dtype).reshape(1, 1, -1)
    q, k = np.zeros((1, n_q, 8), dtype), np.zeros((1, 1, 8), dtype)
    out = np.empty((1, n_q, bits.size), np.float32)
    c_tiled.run(q, k, v, out, False, 1.0)
    expected = v.astype(np.float32)
    if c_tiled.has_bf16_dot() and np.dtype(dtype).name == "bfloat16":
        expected[np.abs(expected) < np.finfo(np.float32).tiny] = 0
    np.testing.assert_array_equal(out, np.broadcast_to(expected, out.shape))


def test_auto_picks_the_best_simd_the_cpu_has():
    c_tiled.use_isa("auto")
    flags = set(cpu_flags())
    if {"avx512f", "avx512vl", "avx512bw", "avx512_bf16"} <= flags and ceilings.bf16_dot_pays():
        expected = "avx512-bf16"
    elif {"avx512f", "avx512vl"} <= flags:
        expected = "avx512"
    elif {"avx2", "fma"} <= flags:
        expected = "avx2-fma"
    else:
        expected = "generic"
    assert c_tiled.isa() == expected


def test_unknown_isa_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown ISA 'sse9'"):
        c_tiled.use_isa("sse9")


@pytest.mark.parametrize("dtype", harness.DTYPES, ids=[np.dtype(d).name for d in harness.DTYPES])
def test_every_path_keeps_a_nan_value_to_the_queries_whose_band_holds_it(isa, dtype):
    """A window's left edge crosses every panel of a tile at a different key: the keys a query
    leaves out there are summed with weight 0 only while their values are finite, and one at a
    time otherwise (csrc/flash_driver_template.h, pv_panel_exact).  NaN values at a sink (key
    1), at a window's edge (key 150) and beyond every window (key 40, seen by queries 40-77
    only) reach exactly the queries that see them."""
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 300, 32)).astype(dtype) for _ in range(3))
    v[0, [1, 40, 150], 5] = np.nan
    band = Band.of(window=(37, 0), sinks=2)
    out = np.empty((2, 300, 32), np.float64 if np.dtype(dtype) == np.float64 else np.float32)
    c_tiled.run(q, k, v, out, False, 32**-0.5, band=band)
    seen = band.mask(300, 300)[:, [1, 40, 150]].any(axis=1)
    assert np.array_equal(np.isnan(out[0, :, 5]), seen) and not np.isnan(out[0, :, :5]).any()
    assert np.isfinite(out[1]).all()


@pytest.mark.parametrize("dtype", harness.DTYPES, ids=[np.dtype(d).name for d in harness.DTYPES])
def test_a_rows_result_does_not_depend_on_the_rows_called_with_it(isa, dtype):
    """Causal rows computed in one call of 300 (wide panels, tiles crossing the diagonal
    and a second key tile) come out bit for bit as in calls of a few of them against the
    keys they see (5-50 rows: the narrow panels where the path has them, csrc/
    flash_driver_template.h's tile_ops_for).  A lane's arithmetic must not depend on its
    panel: a masked product fused as the others (AVX2), and exp(0) = 1 exactly, so that a
    row that sees none of a key tile its panel walks keeps its sums' bits."""
    rng = np.random.default_rng(11)
    q, k, v = (rng.standard_normal((2, 300, 64)).astype(dtype) for _ in range(3))
    compute = np.float64 if np.dtype(dtype) == np.float64 else np.float32
    whole = np.empty((2, 300, 64), compute)
    c_tiled.run(q, k, v, whole, True, 0.125)
    for r0, rows in ((0, 24), (40, 5), (100, 17), (136, 64), (250, 50)):
        part = np.empty((2, rows, 64), compute)
        end = r0 + rows   # causal, aligned at the end: the part's query j is the whole's r0 + j
        c_tiled.run(np.ascontiguousarray(q[:, r0:end]), np.ascontiguousarray(k[:, :end]),
                    np.ascontiguousarray(v[:, :end]), part, True, 0.125)
        assert np.array_equal(part, whole[:, r0:end]), (r0, rows)


def test_calls_of_any_size_in_turn_share_each_threads_kept_scratch():
    """Each thread keeps its tile scratch from call to call (attention.c, thread_scratch):
    grown for a head dimension of 2,048 (megabytes), replaced by the next smaller call's,
    grown again; every result the reference's."""
    rng = np.random.default_rng(5)
    for d in (2048, 64, 2048, 16):
        q, k, v = (rng.standard_normal((2, 40, d)).astype(np.float32) for _ in range(3))
        out = np.empty_like(q)
        c_tiled.run(q, k, v, out, True, d ** -0.5)
        expected = reference_attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), causal=True)
        # float32: each score sums d products of unit normals (its rounding error grows as
        # sqrt(d) ulp of its size), the output a convex blend of V rows of unit size
        np.testing.assert_allclose(out, expected, rtol=0, atol=1e-5 * np.sqrt(d))


# (batch, group, n_q, n_k, d, d_v) -> the status every C entry point returns: an empty call
# writes nothing; a shape it cannot read is -1 (attention.h), never a crash (a batch of 0
# once divided by zero: SIGFPE)
C_EDGE_SHAPES = {
    (0, 1, 1, 8, 8, 8): 0, (0, 1, 40, 40, 8, 8): 0, (2, 1, 0, 8, 8, 8): 0,
    (2, 1, 40, 40, 0, 8): -1, (2, 1, 1, 40, 0, 8): -1, (-2, 1, 40, 40, 8, 8): -1,
    (2, 1, -1, 8, 8, 8): -1, (2, 1, 40, -8, 8, 8): -1, (2, 1, 40, 40, 8, -8): -1,
}


@pytest.mark.parametrize("entry", ["f32", "f64", "bf16", "f16", "q8", "q4"])
def test_the_c_entry_points_answer_an_empty_or_unreadable_shape_with_a_status(entry):
    """Called as attention.h declares them, on every split-KV and query-tile shape of
    C_EDGE_SHAPES, each entry point returns its status and leaves out as it was."""
    ffi, lib = c_tiled.ffi, c_tiled.lib
    buffer, out = np.ones(4096), np.full(4096, 7.0)
    real, elem = {"f64": ("double *", "double *"), "bf16": ("float *", "uint16_t *"),
                  "f16": ("float *", "uint16_t *"), "q8": ("float *", "int8_t *"),
                  "q4": ("float *", "uint8_t *")}.get(entry, ("float *", "float *"))
    x, o, scales = ffi.cast(elem, ffi.from_buffer(buffer)), ffi.cast(real, ffi.from_buffer(out)), \
        ffi.cast("float *", ffi.from_buffer(buffer))
    forward = getattr(lib, f"attn_forward_{entry}")
    for (batch, group, n_q, n_k, d, d_v), status in C_EDGE_SHAPES.items():
        shape = (batch, group, n_q, n_k, max(n_k, 0), d, d_v, -1, -1, 0, 0.125, 2)
        if entry in ("q8", "q4"):
            answer = forward(ffi.cast("float *", x), x, scales, x, scales, o, *shape)
        elif entry in ("bf16", "f16"):
            answer = forward(x, x, x, o, 0, *shape)
        else:
            answer = forward(x, x, x, o, *shape)
        assert answer == status, (batch, group, n_q, n_k, d, d_v)
        assert (out == 7.0).all(), (batch, group, n_q, n_k, d, d_v)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_rows_beside_one_whose_weights_underflow_keep_their_bits(isa, dtype):
    """The SIMD softmax leaves the underflow's compare out of a panel whose queries' scores
    all lie within the underflow bound of their maxima (qk_tile's minima, csrc/
    tile_ops_simd_template.h), and keeps it where one query's spread past it: a weight below
    2^-126 (float64: 2^-1022) beside the row's largest is 0.  Both give a lane the same bits,
    so 47 ordinary rows come out as alone beside a row whose scores spread over thousands
    (natural units: float32's bound is 87 below the max, float64's 708).  That row is all
    but its top key's value row, and stays it: finite, and within 1e-3 of the values' scale
    of the float64 reference (its error is a few roundings of numbers of that scale)."""
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((1, 256, 64)).astype(dtype) for _ in range(3))
    q[0, 0] *= 400   # scores of sd 400 · 8 · 0.125 = 400
    compute = np.float64 if np.dtype(dtype) == np.float64 else np.float32
    whole, alone = np.empty((1, 256, 64), compute), np.empty((1, 255, 64), compute)
    c_tiled.run(q, k, v, whole, False, 0.125)
    c_tiled.run(np.ascontiguousarray(q[:, 1:]), k, v, alone, False, 0.125)
    assert np.array_equal(whole[:, 1:], alone)
    ref = reference_attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), scale=0.125)
    assert np.isfinite(whole[0, 0]).all()
    assert np.abs(whole[0, 0] - ref[0, 0]).max() < 1e-3 * np.abs(v).max()
