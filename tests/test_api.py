"""The public contract of kernels.attention: shapes, dtypes, errors, layouts, inputs."""
import dataclasses
import pathlib
import re
import subprocess
import sys
import types

import numpy as np
import pytest

import kernels
from kernels import api, harness
from kernels.api import ExtensionNotBuilt, check_resources, planned, require_memory
from kernels.band import Band
from kernels.memory import format_bytes
from kernels.reference import reference_attention

MiB = 2**20


def qkv(shape_q=(2, 5, 8), n_k=6, d_v=None, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    *lead, n_q, d = shape_q
    d_v = d if d_v is None else d_v
    return (rng.standard_normal(shape_q).astype(dtype),
            rng.standard_normal((*lead, n_k, d)).astype(dtype),
            rng.standard_normal((*lead, n_k, d_v)).astype(dtype))


def test_registry_holds_the_ladder_in_order():
    assert list(kernels.KERNELS)[:4] == ["naive", "numpy", "numba_tiled", "c_tiled"]
    for record in kernels.KERNELS.values():
        assert record.description and record.memory_class
        assert callable(record.run)
    assert kernels.KERNELS["naive"].max_scores is not None
    assert kernels.KERNELS["numpy"].materialises


@pytest.mark.parametrize("dtype", harness.DTYPES, ids=lambda d: np.dtype(d).name)
def test_shapes_and_dtype_of_the_output(kernel_name, dtype):
    q, k, v = qkv((2, 3, 5, 9), n_k=7, d_v=4, dtype=dtype)
    refusal = kernels.KERNELS[kernel_name].refusal(dtype)
    if refusal:  # a peer that computes it below its precision (declared, or measured on this CPU)
        with pytest.raises(ValueError, match=re.escape(f"kernel '{kernel_name}' does not take this call: {refusal}")):
            kernels.attention(q, k, v, kernel=kernel_name)
        return
    out = kernels.attention(q, k, v, kernel=kernel_name)
    assert out.shape == (2, 3, 5, 4) and out.dtype == dtype


def test_custom_scale_and_default_scale(kernel_name, widest_dtype):
    q, k, v = qkv(dtype=widest_dtype)
    atol = 1e-10 if widest_dtype == np.float64 else 1e-6  # outputs are O(1): float32's few ulp
    for scale in (None, 0.0, 0.3, -2.0):
        out = kernels.attention(q, k, v, kernel=kernel_name, scale=scale)
        np.testing.assert_allclose(out, reference_attention(q, k, v, scale=scale), rtol=0, atol=atol)
    np.testing.assert_array_equal(kernels.attention(q, k, v, kernel=kernel_name),
                                  kernels.attention(q, k, v, kernel=kernel_name, scale=1 / np.sqrt(8)))


def test_causal_rows_that_see_no_key_are_zero(kernel_name, widest_dtype):
    q, k, v = qkv((1, 9, 4), n_k=3, dtype=widest_dtype)
    out = kernels.attention(q, k, v, kernel=kernel_name, causal=True)
    np.testing.assert_array_equal(out[0, :6], 0.0)
    assert np.all(np.abs(out[0, 6:]) > 0)


@pytest.mark.parametrize("layout", ["F", "strided", "readonly", "broadcast"])
def test_any_layout_and_inputs_never_modified(kernel_name, layout):
    q, k, v = qkv((2, 40, 16), n_k=33, d_v=12, dtype=np.float32)
    if layout == "F":
        q, k, v = (np.asfortranarray(a) for a in (q, k, v))
    elif layout == "strided":
        q, k, v = (np.repeat(a, 3, axis=-1)[..., ::3] for a in (q, k, v))
    elif layout == "readonly":
        for a in (q, k, v):
            a.flags.writeable = False
    else:  # the same head broadcast over the batch: zero strides
        q, k, v = (np.broadcast_to(a[:1], a.shape) for a in (q, k, v))
    before = [a.copy() for a in (q, k, v)]
    out = kernels.attention(q, k, v, kernel=kernel_name, causal=True)
    for a, b in zip((q, k, v), before):
        np.testing.assert_array_equal(a, b)
    ref = reference_attention(q, k, v, causal=True)
    np.testing.assert_allclose(out, ref, rtol=0, atol=2e-6)


def test_inputs_with_nan_are_not_modified(kernel_name, widest_dtype):
    q, k, v = qkv((1, 10, 4), n_k=10, dtype=widest_dtype)
    v[0, 2, 1] = np.nan
    before = v.copy()
    kernels.attention(q, k, v, kernel=kernel_name, causal=True)
    np.testing.assert_array_equal(v, before)


def test_empty_batch_gives_empty_output():
    q, k, v = qkv((0, 5, 8))
    assert kernels.attention(q, k, v).shape == (0, 5, 8)


@pytest.mark.parametrize(
    "shapes, match",
    [
        (((5,), (5, 8), (5, 8)), "at least 2 dimensions"),
        (((2, 5, 8), (5, 8), (5, 8)), "same number of dimensions"),
        (((2, 5, 8), (3, 5, 8), (3, 5, 8)), r"K/V heads \(axis -3 of k and v: 3\) to divide the query heads \(2\)"),
        (((4, 5, 8), (2, 5, 8), (4, 5, 8)), "k and v must share their leading"),
        (((2, 4, 5, 8), (3, 2, 5, 8), (3, 2, 5, 8)), "may have fewer heads"),
        (((5, 8), (6, 7), (6, 8)), "head dimension"),
        (((5, 8), (6, 8), (7, 8)), "number of keys"),
        (((0, 8), (6, 8), (6, 8)), "n_q must be at least 1"),
        (((5, 8), (0, 8), (0, 8)), "n_k must be at least 1"),
        (((5, 0), (6, 0), (6, 8)), "d must be at least 1"),
        (((5, 8), (6, 8), (6, 0)), "d_v must be at least 1"),
    ],
)
def test_bad_shapes_raise_value_error_naming_them(shapes, match):
    q, k, v = (np.zeros(s) for s in shapes)
    with pytest.raises(ValueError, match=match) as info:
        kernels.attention(q, k, v)
    assert str(shapes[0]) in str(info.value) or "got shape" in str(info.value)


@pytest.mark.parametrize(
    "dtypes, match",
    [
        ((np.int64, np.int64, np.int64), "dtype int64"),
        ((np.uint16, np.uint16, np.uint16), "attention takes float32, float64, bfloat16 or float16"),
        ((np.complex128, np.float64, np.float64), "complex128"),
        ((np.float32, np.float64, np.float32), "share one dtype"),
    ],
)
def test_bad_dtypes_raise_type_error(dtypes, match):
    q, k, v = (np.ones((4, 8), dtype=t) for t in dtypes)
    with pytest.raises(TypeError, match=match):
        kernels.attention(q, k, v)


def test_non_arrays_and_bad_scale_or_causal():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="NumPy array"):
        kernels.attention(q.tolist(), k, v)
    with pytest.raises(ValueError, match="finite"):
        kernels.attention(q, k, v, scale=float("nan"))
    with pytest.raises(TypeError, match="scale"):
        kernels.attention(q, k, v, scale="0.5")
    with pytest.raises(TypeError, match="causal"):
        kernels.attention(q, k, v, causal="yes")


def test_unknown_kernel_lists_the_known_names():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="unknown kernel 'flash'") as info:
        kernels.attention(q, k, v, kernel="flash")
    for name in ("naive", "numpy", "numba_tiled", "c_tiled"):
        assert name in str(info.value)


def test_numpy_refuses_scores_that_cannot_fit_before_allocating():
    # one head of n = 2^21 float32 scores is 16 TiB; the inputs themselves are a few MiB
    # as broadcast views, so a MemoryError here comes from the check, not from NumPy.
    n = 2**21
    q = np.broadcast_to(np.ones((1, 1, 8), np.float32), (1, n, 8))
    with pytest.raises(MemoryError, match=r"needs 16\.0 TiB") as info:
        kernels.attention(q, q, q, kernel="numpy")
    message = str(info.value)
    assert "available" in message and "numba_tiled" in message and "c_tiled" in message


def test_tiled_kernel_refuses_an_output_that_cannot_fit():
    q = np.broadcast_to(np.ones((1, 1, 8), np.float32), (2**20, 2**12, 8))
    with pytest.raises(MemoryError, match="needs"):
        kernels.attention(q, q, q, kernel="c_tiled")


def test_naive_cap_is_a_clear_error():
    q, k, v = qkv((1, 300, 4), n_k=300)
    with pytest.raises(ValueError, match="capped at .*'numpy'"):
        kernels.attention(q, k, v, kernel="naive")


def test_every_kernel_refuses_an_output_that_cannot_fit(kernel_name, monkeypatch):
    # tiny contiguous inputs (no copies, 4096 x 1 scores) whose output, (1, 4096, 16384)
    # float32, is 256 MiB: more than the 128 MiB available, with the kernel's own buffers
    monkeypatch.setattr(kernels.api, "available_bytes", lambda: 128 * MiB)
    q, k, v = np.ones((1, 2**12, 1), np.float32), np.ones((1, 1, 1), np.float32), np.ones((1, 1, 2**14), np.float32)
    needed = 256 * MiB + kernels.KERNELS[kernel_name].workspace_bytes(1, 2**12, 1, 1, 2**14, 4, False)
    with pytest.raises(MemoryError, match=rf"needs {re.escape(format_bytes(needed))} .* only 128\.0 MiB is available"):
        kernels.attention(q, k, v, kernel=kernel_name)


def test_check_resources_counts_inputs_yet_to_be_made_and_headroom(monkeypatch):
    monkeypatch.setattr(kernels.api, "available_bytes", lambda: 1024 * MiB)
    problem = planned((8,), 2**16, 2**16, 64, 64, np.float32)  # inputs 384 MiB, output 128 MiB
    assert problem.input_bytes == 384 * MiB and problem.output_bytes() == 128 * MiB
    c_tiled = kernels.KERNELS["c_tiled"]
    check_resources(c_tiled, problem, problem.input_bytes)
    with pytest.raises(MemoryError, match=r"needs 2\.5 GiB .* only 1\.0 GiB is available.*2\.0 GiB of it headroom"):
        check_resources(c_tiled, problem, problem.input_bytes, headroom_bytes=2048 * MiB)
    with pytest.raises(MemoryError, match=r"needs 1\.2 GiB \(1,342,177,280 bytes\)"):
        check_resources(c_tiled, problem, 3 * problem.input_bytes)


def test_require_memory_reads_nothing_for_small_allocations(monkeypatch):
    def unreadable():
        raise AssertionError("read /proc/meminfo for a small allocation")

    monkeypatch.setattr(kernels.api, "available_bytes", unreadable)
    require_memory(MiB, lambda needed, available: "never")


def test_multi_head_attention_refuses_before_projecting(monkeypatch):
    # x is 16 MiB; its projections, copies and outputs about 112 MiB, and only 100 available.
    # attention() alone (output and copies: 64 MiB) would fit: the refusal is multi-head's own.
    monkeypatch.setattr(kernels.api, "available_bytes", lambda: 100 * MiB)
    x = np.ones((2**16, 64), np.float32)
    w = np.eye(64, dtype=np.float32)
    with pytest.raises(MemoryError, match=r"needs 112\.0 MiB"):
        kernels.multi_head_attention(x, w, w, w, w, heads=4, kernel="c_tiled")


def test_c_extension_missing_says_how_to_rebuild(monkeypatch, plans):
    monkeypatch.setitem(sys.modules, "kernels._attention_c", None)  # as if never built (no plan kept)
    monkeypatch.delitem(sys.modules, "kernels.rungs.rung4_c_tiled", raising=False)
    q, k, v = qkv()
    with pytest.raises(ExtensionNotBuilt, match=r"kernels\._attention_c cannot be imported") as info:
        kernels.attention(q, k, v, kernel="c_tiled")
    message = str(info.value)
    assert isinstance(info.value, ImportError) and "\n" not in message
    assert "`make install`" in message and "csrc/build_attention.py" in message and sys.executable in message


def test_import_kernels_works_without_the_c_extension():
    script = (
        "import sys\n"
        "sys.modules['kernels._attention_c'] = None\n"  # what an unbuilt extension looks like
        "import numpy as np, kernels\n"
        "q = np.ones((1, 4, 8))\n"
        "assert kernels.attention(q, q, q, kernel='numpy').shape == (1, 4, 8)\n"
        "try:\n"
        "    kernels.attention(q, q, q, kernel='c_tiled')\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "rebuild it with `make install`" in result.stdout


def test_an_extension_built_only_for_another_python_is_named(monkeypatch):
    other = "_attention_c.cpython-399-x86_64-linux-gnu.so"  # no interpreter here loads this one
    monkeypatch.setattr(pathlib.Path, "glob", lambda folder, pattern: [folder / other])
    message = str(ExtensionNotBuilt(ModuleNotFoundError("No module named 'kernels._attention_c'")))
    assert f"found only {other}, built for another Python" in message and "`make install`" in message


# -- a call's checks decided once per signature ------------------------------------------

@pytest.fixture
def plans(monkeypatch):
    """kernels.api's plans, emptied for the test (and the ones kept before put back)."""
    monkeypatch.setattr(api, "_PLANS", {})
    return api._PLANS


def test_a_repeated_call_is_checked_once_and_gives_the_same_result(plans, monkeypatch):
    q, k, v = qkv((2, 3, 16, 8), n_k=16, dtype=np.float32)
    first = kernels.attention(q, k, v, kernel="c_tiled", causal=True)
    assert len(plans) == 1

    def checked(*args, **kwargs):
        raise AssertionError("a kept plan's call was checked again")

    monkeypatch.setattr(api, "validate", checked)
    monkeypatch.setattr(api, "check_resources", checked)
    np.testing.assert_array_equal(kernels.attention(q, k, v, kernel="c_tiled", causal=True), first)
    shifted = [x + 1 for x in (q, k, v)]   # the same signature, other values: the plan serves them
    np.testing.assert_allclose(kernels.attention(*shifted, kernel="c_tiled", causal=True),
                               reference_attention(*shifted, causal=True), rtol=0, atol=1e-5)
    with pytest.raises(AssertionError, match="checked again"):  # another signature: checked
        kernels.attention(q, k, v, kernel="c_tiled")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape_q, kv_heads, options", [
    ((2, 3, 16, 8), 3, {"causal": True}),
    ((1, 64, 64), 1, {}),
    ((2, 4, 9, 12), 2, {"window": (3, 1), "sinks": 1}),   # grouped heads, a band
    ((6, 5, 16), 3, {"scale": 0.25}),
])
def test_a_plans_step_gives_the_rungs_bits(plans, dtype, shape_q, kv_heads, options):
    """c_tiled's plans call the C entry point through a step worked out once for their
    signature (rung4_c_tiled.call_step): its result is the rung's run's, bit for bit."""
    *lead, n_q, d = shape_q
    rng = np.random.default_rng(3)
    q = rng.standard_normal(shape_q).astype(dtype)
    k, v = (rng.standard_normal((*lead[:-1], kv_heads, 11, d)).astype(dtype) for _ in range(2))
    for _ in range(2):   # the plan's first call, then its step again
        got = kernels.attention(q, k, v, kernel="c_tiled", **options)
    (plan,) = plans.values()
    assert plan.step is not None
    band = Band.of(options.get("causal", False), options.get("window"), options.get("sinks", 0))
    expected = np.empty((q.size // (n_q * d), n_q, d), dtype)
    kernels.KERNELS["c_tiled"].implementation.run(q.reshape(-1, n_q, d), k.reshape(-1, 11, d), v.reshape(-1, 11, d), expected, band.causal,
                api.checked_scale(options.get("scale"), d), band=band)
    assert np.array_equal(got, expected.reshape(got.shape))


def test_a_replaced_run_takes_over_from_the_plans_step(plans, monkeypatch):
    q, k, v = qkv((1, 8, 8), n_k=8, dtype=np.float32)
    kernels.attention(q, k, v, kernel="c_tiled")
    monkeypatch.setattr(kernels.KERNELS["c_tiled"].implementation, "run", lambda q, k, v, out, causal, scale, band=None, n_k=None: out.fill(0.0))
    assert not kernels.attention(q, k, v, kernel="c_tiled").any()


def test_another_layout_of_the_same_shape_has_a_plan_of_its_own(plans):
    q, k, v = qkv((2, 16, 8), n_k=16, dtype=np.float32)
    wide = np.zeros((2, 16, 16), np.float32)
    wide[:, :, ::2] = q          # q's values with a stride of 2 along d: needs a copy
    strided = wide[:, :, ::2]
    contiguous = kernels.attention(q, k, v, kernel="c_tiled")
    np.testing.assert_array_equal(kernels.attention(strided, k, v, kernel="c_tiled"), contiguous)
    assert len(plans) == 2
    assert [plan.copied for plan in plans.values()] == [(False, False, False), (True, False, False)]


def test_bad_calls_are_never_kept_and_fail_every_time(plans):
    q, k, v = qkv(dtype=np.float32)
    for _ in range(2):
        with pytest.raises(ValueError, match="scale must be finite"):
            kernels.attention(q, k, v, scale=float("nan"))
        with pytest.raises(TypeError, match="share one dtype"):
            kernels.attention(q, k.astype(np.float64), v)
    assert plans == {}


@pytest.mark.parametrize("entry", [kernels.attention, api.attention_unrounded, api.attention_unheld])
def test_a_kept_plan_never_serves_a_band_argument_the_checks_refuse(plans, entry):
    """The commonest bands are taken without calling Band.of, and a kept plan is looked up by
    the band: an argument equal to a valid one (1 == True, 0.0 == 0) is still refused."""
    q, k, v = qkv(dtype=np.float32)
    causal, full = entry(q, k, v, causal=True), entry(q, k, v)   # both plans kept
    assert len(plans) == 2
    with pytest.raises(TypeError, match="causal must be a bool, got 1"):
        entry(q, k, v, causal=1)
    with pytest.raises(TypeError, match="sinks must be an int >= 0, got 0.0"):
        entry(q, k, v, sinks=0.0)
    np.testing.assert_array_equal(entry(q, k, v, causal=np.True_), causal)   # a NumPy bool is a bool
    np.testing.assert_array_equal(entry(q, k, v, window=(None, None)), full)   # the same band, said otherwise


def test_calls_outside_the_fast_path_are_checked_every_time(plans, monkeypatch):
    q, k, v = qkv(dtype=np.float32)

    class Subclass(np.ndarray):
        pass

    kernels.attention(q.view(Subclass), k, v)          # not a plain ndarray
    kernels.attention(q, k, v, scale=np.float32(0.5))  # a scale that is not a float
    assert plans == {}
    monkeypatch.setattr(api, "SMALL_ALLOCATION", 0)    # every call "large": its memory checked each time
    kernels.attention(q, k, v)
    assert plans == {}


def test_plans_kept_are_bounded(plans, monkeypatch):
    monkeypatch.setattr(api, "MAX_PLANS", 3)
    for n in range(1, 8):
        q, k, v = qkv((1, n, 4), n_k=n, dtype=np.float32)
        kernels.attention(q, k, v)
    assert len(plans) == 3
    assert [plan.problem.n_q for plan in plans.values()] == [5, 6, 7]   # the newest kept


def test_a_kernel_registered_anew_under_its_name_is_planned_anew(plans, monkeypatch):
    q, k, v = qkv(dtype=np.float32)
    assert kernels.attention(q, k, v, kernel="numpy").any()
    rung = types.ModuleType("zero_rung")
    rung.run = lambda q, k, v, out, causal, scale, band=None: out.fill(0.0)
    rung.workspace_bytes = kernels.KERNELS["numpy"].implementation.workspace_bytes
    monkeypatch.setitem(sys.modules, "zero_rung", rung)
    monkeypatch.setitem(kernels.KERNELS, "numpy", dataclasses.replace(kernels.KERNELS["numpy"], module="zero_rung"))
    assert not kernels.attention(q, k, v, kernel="numpy").any()
