"""The floating-point types the kernels take: one row each, read by everything else.

    FLOATS          name -> Float, in order (float32 first: the type the speed is measured in)
    NAMES           ("float32", "float64")
    float_type(x)   the Float of a dtype, a name or an array's dtype; TypeError naming the
                    types taken when there is none
    require(dtype, what, user)  the same, worded for an argument: "x has dtype int64;
                    multi-head attention takes float32 or float64"

A row says what each part of the project needs to know of a type: NumPy's dtype and item
size, its unit roundoff (the verification harness's budget is built from it), the BLAS
product whose speed bounds a kernel in it (the report's ceilings), the suffix of the C
entry point (``attn_forward_f32``) and its pointer type, and the type the float64
reference's plain counterpart computes in (the harness holds a kernel to no worse than
twice that plain computation's error).  Adding a type is one row here, the kernels that
take it, and their tests.
"""
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Float:
    name: str               # "float32"
    dtype: np.dtype
    unit_roundoff: float    # u = 2^-p for p significand bits: the relative error of one rounding
    gemm: str               # the BLAS product of this type ("sgemm"), the report's compute ceiling
    c_suffix: str           # the C entry point attn_forward_<suffix>
    c_pointer: str          # its element pointer type, for cffi
    plain: np.dtype         # the type the plain NumPy computation the harness compares with runs in

    @property
    def itemsize(self):
        return self.dtype.itemsize

    @property
    def is_reference(self):
        """True for the type of the reference itself (float64): held to a fixed budget."""
        return self.dtype == REFERENCE


REFERENCE = np.dtype(np.float64)   # the precision of kernels.reference, the truth
FLOATS = {row.name: row for row in (
    Float("float32", np.dtype(np.float32), 2.0**-24, "sgemm", "f32", "float *", np.dtype(np.float32)),
    Float("float64", np.dtype(np.float64), 2.0**-53, "dgemm", "f64", "double *", np.dtype(np.float64)),
)}
NAMES = tuple(FLOATS)
TAKEN = ", ".join(NAMES[:-1]) + " or " + NAMES[-1]    # "float32 or float64", for messages


def float_type(dtype):
    """The ``Float`` row of ``dtype`` (a NumPy dtype, a type or a name); TypeError saying
    which types are taken when it has none (None too, which NumPy would read as float64)."""
    name = _name(dtype)
    if name not in FLOATS:
        raise TypeError(f"dtype must be {TAKEN}, got {name}")
    return FLOATS[name]


def require(dtype, what, user):
    """``float_type`` for an argument: TypeError "``what`` has dtype ...; ``user`` takes
    float32 or float64"."""
    name = _name(dtype)
    if name not in FLOATS:
        raise TypeError(f"{what} has dtype {name}; {user} takes {TAKEN}")
    return FLOATS[name]


def _name(dtype):
    if dtype is None:
        return "None"
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)
