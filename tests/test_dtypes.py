"""kernels.dtypes: the one table of floating-point types, checked against NumPy and the C
extension, and the errors it words for every entry point."""
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import kernels
from kernels import dtypes


@pytest.mark.parametrize("row", dtypes.FLOATS.values(), ids=dtypes.NAMES)
def test_each_row_agrees_with_numpy_and_the_c_extension(row):
    assert row.dtype == np.dtype(row.name) and row.itemsize == np.dtype(row.name).itemsize
    assert row.unit_roundoff == float(ml_dtypes.finfo(row.dtype).eps) / 2   # u = ε/2: round to nearest
    assert row.compute == (np.float32 if row.itemsize <= 4 else np.float64)
    assert row.is_half == (row.itemsize == 2)
    assert row.gemm == {4: "sgemm", 8: "dgemm"}[row.compute.itemsize]   # the compute type's product
    lib = kernels.threads._pool().lib
    assert hasattr(lib, f"attn_forward_{row.c_suffix}")
    assert kernels.threads._pool().ffi.sizeof(row.c_pointer.rstrip(" *")) == row.itemsize


def test_every_kernel_of_ours_takes_every_type_of_the_table():
    for kernel in kernels.KERNELS.values():
        if not kernel.external:
            assert kernel.dtypes == dtypes.NAMES


TAKEN = "float32, float64, bfloat16 or float16"


@pytest.mark.parametrize("bad", [np.int64, ml_dtypes.float8_e4m3fn, "complex128"])
def test_a_type_not_in_the_table_is_named_with_the_types_taken(bad):
    with pytest.raises(TypeError, match=rf"dtype must be {TAKEN}, got {np.dtype(bad).name}"):
        dtypes.float_type(bad)
    x = np.zeros((4, 8), bad)
    with pytest.raises(TypeError, match=rf"q has dtype {np.dtype(bad).name}; attention takes {TAKEN}"):
        kernels.attention(x, x, x)
    with pytest.raises(TypeError, match="dtype must be float32 or float64"):
        kernels.KVCache(heads=1, head_dim=8, dtype=bad)


@pytest.mark.parametrize("half", dtypes.HALF)
def test_the_16_bit_types_are_a_kernels_types_only(half):
    """The layers, the cache and the model compute in float32 or float64: a 16-bit type is
    refused there, naming the types they take."""
    with pytest.raises(TypeError, match=f"dtype must be float32 or float64, got {half}"):
        kernels.KVCache(heads=1, head_dim=8, dtype=half)
    x = np.zeros((2, 3, 8), half)
    with pytest.raises(TypeError, match=f"x has dtype {half}; multi-head attention takes float32 or float64"):
        kernels.multi_head_attention(x, *[np.eye(8, dtype=half)] * 4, heads=2)


@pytest.mark.parametrize("half", dtypes.HALF)
def test_a_16_bit_call_returns_its_type_rounded_once_from_float32(half):
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 9, 8)).astype(half) for _ in range(3))
    wide = kernels.attention(*(x.astype(np.float32) for x in (q, k, v)), kernel="numpy")
    out = kernels.attention(q, k, v, kernel="numpy")
    assert out.dtype == np.dtype(half)
    np.testing.assert_array_equal(out, wide.astype(half))


def test_none_is_not_a_dtype():
    with pytest.raises(TypeError, match=f"dtype must be {TAKEN}, got None"):
        dtypes.float_type(None)     # np.dtype(None) would be float64


def test_import_kernels_leaves_ml_dtypes_until_bfloat16_is_asked_for():
    """ml_dtypes' extension takes over a second to import: `import kernels`, and a float32
    call, must not pay for it; the bfloat16 row's dtype imports it."""
    script = ("import sys, numpy as np, kernels\n"
              "q = np.ones((1, 4, 8), np.float32)\n"
              "kernels.attention(q, q, q, kernel='numpy')\n"
              "assert kernels.KERNELS['numpy'].refusal('bfloat16') is None\n"
              "assert 'ml_dtypes' not in sys.modules\n"
              "from kernels import dtypes\n"
              "assert dtypes.FLOATS['bfloat16'].dtype.name == 'bfloat16' and 'ml_dtypes' in sys.modules\n")
    subprocess.run([sys.executable, "-c", script], check=True)
