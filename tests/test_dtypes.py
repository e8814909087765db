"""kernels.dtypes: the one table of floating-point types, checked against NumPy and the C
extension, and the errors it words for every entry point."""
import numpy as np
import pytest

import kernels
from kernels import dtypes


@pytest.mark.parametrize("row", dtypes.FLOATS.values(), ids=dtypes.NAMES)
def test_each_row_agrees_with_numpy_and_the_c_extension(row):
    assert row.dtype == np.dtype(row.name) and row.itemsize == np.dtype(row.name).itemsize
    assert row.unit_roundoff == np.finfo(row.dtype).eps / 2     # u = ε/2: round to nearest
    assert row.gemm == {"f32": "sgemm", "f64": "dgemm"}[row.c_suffix]
    lib = kernels.threads._pool().lib
    assert hasattr(lib, f"attn_forward_{row.c_suffix}")
    assert kernels.threads._pool().ffi.sizeof(row.c_pointer.rstrip(" *")) == row.itemsize


def test_every_kernel_of_ours_takes_every_type_of_the_table():
    for kernel in kernels.KERNELS.values():
        if not kernel.external:
            assert kernel.dtypes == dtypes.NAMES


@pytest.mark.parametrize("bad", [np.int64, np.float16, "complex128"])
def test_a_type_not_in_the_table_is_named_with_the_types_taken(bad):
    with pytest.raises(TypeError, match=rf"dtype must be float32 or float64, got {np.dtype(bad).name}"):
        dtypes.float_type(bad)
    x = np.zeros((4, 8), bad)
    with pytest.raises(TypeError, match=rf"q has dtype {np.dtype(bad).name}; attention takes float32 or float64"):
        kernels.attention(x, x, x)
    with pytest.raises(TypeError, match="dtype must be float32 or float64"):
        kernels.KVCache(heads=1, head_dim=8, dtype=bad)


def test_none_is_not_a_dtype():
    with pytest.raises(TypeError, match="dtype must be float32 or float64, got None"):
        dtypes.float_type(None)     # np.dtype(None) would be float64
