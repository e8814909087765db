"""The floating-point types the kernels take: one row each, read by everything else.

    FLOATS          name -> Float, in order (float32 first: the type the speed is measured in)
    NAMES           ("float32", "float64", "bfloat16", "float16")
    WIDE            ("float32", "float64"): the types the layers, the KV cache and the model
                    compute in (half precision is a kernel's input and output type only)
    HALF            ("bfloat16", "float16")
    float_type(x)   the Float of a dtype, a name or an array's dtype; TypeError naming the
                    types taken when there is none
    require(dtype, what, user, names=NAMES)  the same, worded for an argument: "x has dtype
                    int64; multi-head attention takes float32 or float64"

A row says what each part of the project needs to know of a type: NumPy's dtype and item
size, its unit roundoff (the verification harness's budget is built from it), the type the
kernels compute in (``compute``: the type itself, or float32 for the 16-bit types, whose
scores, softmax and sums every rung accumulates in float32), the BLAS product whose speed
bounds a kernel in it (the report's ceilings), the suffix of the C entry point
(``attn_forward_f32``) and its input pointer type.  Adding a type is one row here, the
kernels that take it, and their tests.

bfloat16 is not NumPy's own: its dtype comes from ``ml_dtypes`` (the extension JAX uses),
which also gives NumPy its casts to and from float32, correctly rounded.  Its extension
takes over a second to import, so it is imported when a row's ``dtype`` is first asked
for (an array of bfloat16 that a caller made has imported it already).
"""
import functools
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Float:
    name: str               # "float32"
    unit_roundoff: float    # u = 2^-p for p significand bits: the relative error of one rounding
    compute: np.dtype       # the type the kernels accumulate in; their output buffer's type
    gemm: str               # the BLAS product of the compute type ("sgemm"), the report's compute ceiling
    c_suffix: str           # the C entry point attn_forward_<suffix>
    c_pointer: str          # its input element pointer type, for cffi (16-bit types: their bits)

    @property
    def dtype(self):
        """NumPy's dtype of the type (bfloat16's imports ml_dtypes, once)."""
        return _numpy_dtype(self.name)

    @property
    def itemsize(self):
        return self.dtype.itemsize

    @property
    def is_reference(self):
        """True for the type of the reference itself (float64): held to a fixed budget."""
        return self.dtype == REFERENCE

    @property
    def is_half(self):
        """A 16-bit type: kernels widen it to float32 and round their result back to it."""
        return self.compute.name != self.name


@functools.cache
def _numpy_dtype(name):
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


REFERENCE = np.dtype(np.float64)   # the precision of kernels.reference, the truth
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
FLOATS = {row.name: row for row in (
    Float("float32", 2.0**-24, _F32, "sgemm", "f32", "float *"),
    Float("float64", 2.0**-53, _F64, "dgemm", "f64", "double *"),
    # 8 and 11 significand bits; the products and sums run in float32 (sgemm's roof), or for
    # bfloat16 in c_tiled on a CPU with AVX512-BF16, on its dot-product unit (whose own roof
    # kernels.ceilings measures)
    Float("bfloat16", 2.0**-8, _F32, "sgemm", "bf16", "uint16_t *"),
    Float("float16", 2.0**-11, _F32, "sgemm", "f16", "uint16_t *"),
)}
NAMES = tuple(FLOATS)
WIDE = tuple(name for name, row in FLOATS.items() if not row.is_half)
HALF = tuple(name for name, row in FLOATS.items() if row.is_half)


def listing(names, last="or"):
    """"float32, float64 or bfloat16": the names, for a message (``last``: the word before the
    last name)."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" {last} " + names[-1]


TAKEN = listing(NAMES)    # "float32, float64, bfloat16 or float16", for messages


def float_type(dtype, names=NAMES):
    """The ``Float`` row of ``dtype`` (a NumPy dtype, a type or a name); TypeError saying
    which types of ``names`` are taken when it is not one of them (None too, which NumPy
    would read as float64)."""
    name = type_name(dtype)
    if name not in names:
        raise TypeError(f"dtype must be {listing(names)}, got {name}")
    return FLOATS[name]


def require(dtype, what, user, names=NAMES):
    """``float_type`` for an argument: TypeError "``what`` has dtype ...; ``user`` takes
    float32 or float64"."""
    name = type_name(dtype)
    if name not in names:
        raise TypeError(f"{what} has dtype {name}; {user} takes {listing(names)}")
    return FLOATS[name]


def type_name(dtype):
    """The name of a NumPy dtype, a type or a name ("bfloat16" also before ml_dtypes is
    imported); "None" for None."""
    if dtype is None:
        return "None"
    if isinstance(dtype, np.dtype):
        return _dtype_name(dtype)
    try:
        return _dtype_name(np.dtype(dtype))
    except TypeError:
        return str(dtype)


@functools.lru_cache(maxsize=64)
def _dtype_name(dtype):
    """NumPy's name of a dtype, kept: ``dtype.name`` is Python code in NumPy (microseconds a
    read), and a call's checks ask it of every array."""
    return dtype.name
