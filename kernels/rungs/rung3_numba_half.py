"""16-bit inputs and outputs in Numba kernels: bfloat16 and float16, passed to compiled code
as their bits (uint16) with a format constant, widened exactly to float32 where a kernel
reads them and rounded back to nearest even where it writes a 16-bit output.

- ``input_format(dtype)``, ``output_format(dtype, out_dtype)``: the type compiled code reads
  (writes) an array as, and its format: AS_IS for float32 and float64, else BFLOAT16 or
  FLOAT16 (a literal in compiled code, so that ``widen`` and ``narrow`` are chosen while
  compiling).
- ``widen(x, fmt)``, ``widen_rows``, ``rows_in_compute_type``: widened exactly to float32,
  in loops LLVM vectorises (float16 by F16C's vcvtph2ps where Numba compiles for it:
  ``F16C``).
- ``narrow(x, fmt)``: the way back, float32 to a 16-bit output's bits, rounded to nearest
  even as NumPy and ml_dtypes cast (float16 by F16C's vcvtps2ph where Numba compiles for
  it), in code LLVM vectorises.

Built on ``rung3_numba_simd`` (its option sets, ``prefer_wide_vectors``); its caching note
holds here too: editing this module leaves the kernels' cached machine code stale.
"""
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

from ..dtypes import float_type
from .rung3_numba_simd import INTERNAL, OVERLOAD_OPTIONS, compiles_for, prefer_wide_vectors

# 16-bit inputs and outputs reach compiled code as their bits (uint16) and a format
# constant, a literal there, so that ``widen`` and ``narrow`` are chosen while compiling.
# FLOAT16 uses F16C where Numba compiles for it (LLVM would otherwise call a runtime
# function), else FLOAT16_BY_INTEGERS's way.
AS_IS, BFLOAT16, FLOAT16, FLOAT16_BY_INTEGERS = 0, 1, 2, 3
F16C = compiles_for("f16c")
_U32 = np.uint32


@intrinsic
def _float16_bits_to_float32(typingctx, bits):
    """float16 bits (uint16) to float32 by LLVM's fpext: F16C's vcvtph2ps, exact."""

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(bits), codegen


def input_format(dtype):
    """(stored, real, fmt) for ``dtype``: the type compiled code reads inputs as, the type it
    computes in, the format: float32, float32, AS_IS (float64 alike); uint16, float32, FLOAT16."""
    row = float_type(dtype)
    if not row.is_half:
        return row.dtype.type, row.dtype.type, AS_IS
    return np.uint16, row.compute.type, {"bfloat16": BFLOAT16, "float16": FLOAT16}[row.name]


def output_format(dtype, out_dtype):
    """(stored, fmt) of an output of ``out_dtype`` for inputs of ``dtype``: the type compiled
    code writes it as and the format ``narrow`` rounds to: out of the compute type (float32
    for 16-bit inputs too: a 16-bit KV cache's attention), (that type, AS_IS); out of the
    16-bit inputs' own type, (uint16, their format)."""
    stored, real, fmt = input_format(dtype)
    if np.dtype(out_dtype) == np.dtype(real):
        return real, AS_IS
    if np.dtype(out_dtype) != np.dtype(dtype) or fmt == AS_IS:
        raise TypeError(f"an output of {np.dtype(out_dtype)} for inputs of {np.dtype(dtype)}: "
                        f"it must be {np.dtype(real)} or the inputs' own 16-bit type")
    return stored, fmt


def widen(x, fmt):
    """x in the compute type, exactly; compiled code only (see _widen_overload)."""
    raise NotImplementedError("widen is only callable from jitted code")


@overload(widen, prefer_literal=True, jit_options=OVERLOAD_OPTIONS)
def _widen_overload(x, fmt):
    """A float as it is; the uint16 bits of format ``fmt`` (a literal) as the float32 of
    equal value.  bfloat16 is float32's upper half: its bits shifted left by 16.  float16
    in integers (5 exponent, 10 fraction bits, bias 15), by its magnitude h = bits & 0x7fff:
    exponent 1-30, h << 13 puts the fraction in float32's place, plus 112 << 23 rebiases;
    exponent 31 (inf, NaN), plus 224 << 23 instead (exponent 255, payload kept); exponent 0
    (subnormal, zero), the integer h (< 1024) converted, times 2**-24, both exact; then the
    sign bit OR-ed back.  Selects, in 32-bit integer lanes: LLVM vectorises a loop of it.
    No float32 subnormal is made (the magic multiply, (h << 13) as float32 times 2**112,
    makes one), so a denormals-are-zero mode cannot change a result.  Exact for all 65,536
    patterns (tests/test_numba_half.py).  Cost per element: bfloat16 2 integer operations;
    float16 about 10 (one conversion, one multiply), with F16C 1."""
    if isinstance(x, types.Float):
        return lambda x, fmt: x
    if x != types.uint16 or not isinstance(fmt, types.IntegerLiteral) or fmt.literal_value == AS_IS:
        return None
    if fmt.literal_value == BFLOAT16:
        return lambda x, fmt: _U32(_U32(x) << _U32(16)).view(np.float32)
    if fmt.literal_value == FLOAT16 and F16C:
        return lambda x, fmt: _float16_bits_to_float32(x)
    # uint32 constants and a _U32() per result: Numba computes uint32 arithmetic in 64 bits
    magnitude_mask, sign_mask, infinite, smallest_normal = _U32(0x7FFF), _U32(0x8000), _U32(0x7C00), _U32(0x400)
    shift, sign_shift, rebias, rebias_inf = _U32(13), _U32(16), _U32(112 << 23), _U32(224 << 23)

    def float16_impl(x, fmt):
        bits = _U32(x)
        magnitude = _U32(bits & magnitude_mask)
        wide = _U32(_U32(magnitude << shift) + (rebias_inf if magnitude >= infinite else rebias))
        small = np.float32(np.float32(np.int32(magnitude)) * np.float32(2.0**-24)).view(np.uint32)
        wide = small if magnitude < smallest_normal else wide
        return _U32(wide | _U32(_U32(bits & sign_mask) << sign_shift)).view(np.float32)

    return float16_impl


@njit(**INTERNAL)
def widen_rows(src, first, count, dst, fmt):
    """dst[j, c] = widen(src[first + j, c], fmt), j < count, c < src.shape[1]: vectorised."""
    prefer_wide_vectors()
    for j in range(count):
        row, wide = src[first + j], dst[j]
        for c in range(src.shape[1]):
            wide[c] = widen(row[c], fmt)


@intrinsic
def _float32_to_float16_bits(typingctx, x):
    """float32 to float16's bits (uint16) by LLVM's fptrunc: F16C's vcvtps2ph, rounding to
    nearest even (the default rounding mode)."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))

    return types.uint16(x), codegen


def narrow(x, fmt):
    """x rounded to format ``fmt``; compiled code only (see _narrow_overload)."""
    raise NotImplementedError("narrow is only callable from jitted code")


@overload(narrow, prefer_literal=True, jit_options=OVERLOAD_OPTIONS)
def _narrow_overload(x, fmt):
    """AS_IS: x as it is.  Else the uint16 bits of the 16-bit value of format ``fmt`` (a
    literal) nearest to the float32 x, ties to even: what NumPy's and ml_dtypes' casts
    give, subnormals, overflow to inf and -0 included; a NaN stays a NaN (quiet, its sign
    kept).  bfloat16 is float32's upper half: bits + 0x7fff + (the kept half's lowest
    bit), shifted right by 16, rounds to nearest even, a carry moving into the exponent
    (up to inf) as it should.  float16 in integers, by the magnitude a = bits & 0x7fffffff:
    a NaN gives 0x7e00; a >= 65536 gives inf; a normal float16 (2**-14 <= a < 65536)
    rounds as bfloat16 does, at bit 13, after rebiasing the exponent (minus 112 << 23),
    which takes the tie at 65520 above the largest finite float16, 65504, and all past
    it up to inf; a smaller one is added to 0.5, whose unit in the last place, 2**-24, is
    float16's subnormal step, so that the FPU rounds it (to nearest even) and the low
    bits of the sum are float16's (0x400, the smallest normal, when it rounds up to it);
    then the sign bit OR-ed back.  Selects, in 32-bit integer lanes: LLVM vectorises a
    loop of it.  Exact for every float32 class (tests/test_numba_half.py).  Cost per
    element: bfloat16 about 7 integer operations; float16 about 15, with F16C 1."""
    if isinstance(fmt, types.IntegerLiteral) and fmt.literal_value == AS_IS:
        return lambda x, fmt: x
    if x != types.float32 or not isinstance(fmt, types.IntegerLiteral):
        return None
    magnitude_mask, sign_mask, infinite = _U32(0x7FFFFFFF), _U32(0x80000000), _U32(0x7F800000)
    if fmt.literal_value == BFLOAT16:
        half, low_bit, quiet = _U32(16), _U32(1), _U32(0x40)

        def bfloat16_impl(x, fmt):
            bits = np.float32(x).view(np.uint32)
            rounded = _U32(_U32(bits + _U32(0x7FFF) + _U32(_U32(bits >> half) & low_bit)) >> half)
            quieted = _U32(_U32(bits >> half) | quiet)
            return np.uint16(quieted if _U32(bits & magnitude_mask) > infinite else rounded)

        return bfloat16_impl
    if fmt.literal_value == FLOAT16 and F16C:
        return lambda x, fmt: _float32_to_float16_bits(x)
    if fmt.literal_value not in (FLOAT16, FLOAT16_BY_INTEGERS):
        return None
    shift, sign_shift, low_bit, round_down = _U32(13), _U32(16), _U32(1), _U32(0xFFF)
    rebias, smallest_normal, too_large = _U32(112 << 23), _U32(0x38800000), _U32(0x47800000)
    nan_half, inf_half, half_bits = _U32(0x7E00), _U32(0x7C00), np.float32(0.5).view(np.uint32)
    one_half = np.float32(0.5)

    def float16_impl(x, fmt):
        bits = np.float32(x).view(np.uint32)
        magnitude = _U32(bits & magnitude_mask)
        rebiased = _U32(magnitude - rebias)
        normal = _U32(_U32(rebiased + round_down + _U32(_U32(rebiased >> shift) & low_bit)) >> shift)
        subnormal = _U32(np.float32(_U32(magnitude).view(np.float32) + one_half).view(np.uint32) - half_bits)
        result = normal if magnitude >= smallest_normal else subnormal
        result = inf_half if magnitude >= too_large else result
        result = nan_half if magnitude > infinite else result
        return np.uint16(result | _U32(_U32(bits & sign_mask) >> sign_shift))

    return float16_impl


def rows_in_compute_type(src, first, count, scratch, fmt):
    """(rows, start), rows[start + j] = src[first + j] in the compute type for j < count:
    (src, first) for a float src, read in place; else widened into scratch, (scratch, 0)."""
    raise NotImplementedError("rows_in_compute_type is only callable from jitted code")


@overload(rows_in_compute_type, prefer_literal=True, jit_options=OVERLOAD_OPTIONS)
def _rows_overload(src, first, count, scratch, fmt):
    if isinstance(src.dtype, types.Float):
        return lambda src, first, count, scratch, fmt: (src, first)

    def widened_impl(src, first, count, scratch, fmt):
        widen_rows(src, first, count, scratch, fmt)
        return scratch, 0

    return widened_impl
