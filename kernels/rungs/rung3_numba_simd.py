"""SIMD building blocks for Numba kernels: a vectorisable exp2, stack register blocks,
explicit vector FMA, vector-aligned scratch, and the option sets to compile them with.

Numba hands LLVM scalar loops and lets its loop vectoriser decide.  Several things a
fast attention kernel (numba_tiled) needs do not come out of that; this module
supplies them and what they are built on:

- ``exp2(t)``: a branch-free 2**t that LLVM vectorises.  ``np.exp`` compiles to a scalar
  libm call per element, which keeps the loop scalar, and there is no SVML here (Intel's
  vector maths library, which Numba would otherwise call).  2**k is built in the exponent
  field from the bits of k plus a magic constant: AVX2 has no float64 to int64 conversion
  (AVX-512DQ has; there the trick costs the same one instruction, so one code serves both).
- ``register_block(dtype)``: a (BLOCK_ROWS, panel_width(dtype)) array on the stack
  that LLVM keeps in SIMD registers (Numba has no way to say "keep these in registers").
- ``fma_vector(acc, i, a, x, j)``: one explicit SIMD fused multiply-add.  Numba runs no
  SLP vectoriser, and its loop vectoriser would rather sum along the contraction and pay
  a horizontal reduction per result.
- ``panel_width(dtype)``: the columns of a register block (AVX-512: 48 float32, 24
  float64; otherwise 24, 12), a compile-time constant in compiled code.
- ``prefer_wide_vectors()``: lets LLVM's loop vectoriser use VECTOR_BYTES-wide
  vectors in the function that calls it (on AVX-512 CPUs it would use 256 bits).
- ``aligned_empty(rows, cols, dtype)``: np.empty whose data starts on a VECTOR_BYTES
  boundary (Numba aligns to 32 bytes: half the 64-byte loads would straddle two lines).
- ``address_as_voidptr(address)``: an integer address as a pointer, for compiled code to
  view an array it was given by address (``numba.carray``).
- ``widen(x, fmt)``, ``widen_rows``, ``rows_in_compute_type``: 16-bit inputs (bfloat16,
  float16), passed as their bits (``input_format``), widened exactly to float32 where a
  kernel reads them, in loops LLVM vectorises (float16 by F16C's vcvtph2ps where Numba
  compiles for it: ``F16C``); the format is a compile-time constant.
- ``narrow(x, fmt)``: the way back, float32 to a 16-bit output's bits (``output_format``),
  rounded to nearest even as NumPy and ml_dtypes cast (float16 by F16C's vcvtps2ph where
  Numba compiles for it), in code LLVM vectorises.
- The shape of a register block (VECTOR_BYTES, BLOCK_ROWS, BLOCK_VECTORS) and the option
  sets for ``@njit`` and ``@overload`` (FASTMATH, OVERLOAD_OPTIONS, JIT_OPTIONS, INTERNAL).

Vector width: chosen once, at import, for the CPU Numba compiles for (the host, or
NUMBA_CPU_NAME / NUMBA_CPU_FEATURES when set): with AVX-512F, 64-byte vectors and
register blocks of 8 x 3 vectors (24 of 32 registers); otherwise 32-byte (AVX2)
vectors and 4 x 3 blocks (12 of 16).  LLVM turns the explicit 64-byte operations
into zmm instructions even though it prefers 256-bit vectors on these CPUs: Numba's
functions carry no "min-legal-vector-width" attribute, which is what keeps clang's
512-bit code in ymm halves.  To build for a CPU without AVX-512 on one that has it,
set for example NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES="" (Numba's cache keys on
both, so the two builds do not mix).  Only a features string naming +avx512f selects
64 bytes: NUMBA_CPU_NAME=skylake-avx512 with empty features gets 32 (correct, slower).

The intrinsics generate LLVM IR through Numba internals (``make_array``,
``context.populate_array``, ``cgutils.alloca_once``), which may change between
releases: tested only with Numba 0.68.1 (llvmlite 0.50.0).  ``prefer_wide_vectors``
also writes a string attribute that llvmlite's attribute set does not know about.

Caching: ``cache=True`` validates a cached function against a hash of its own source
file only, and the code of this module is compiled into the kernels that call it, so
editing this module leaves their cached, stale machine code in use.  After a change
here, delete the cache files (``*.nbi``, ``*.nbc`` in ``kernels/rungs/__pycache__``, or
under NUMBA_CACHE_DIR if set).
"""
import math

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.core import cgutils, config
from numba.core.codegen import get_host_cpu_features
from numba.extending import intrinsic, overload
from numba.np.arrayobj import make_array

from ..dtypes import float_type


def compiles_for(feature):
    """Whether the CPU Numba compiles for (NUMBA_CPU_FEATURES if set, as Numba's code
    generator reads it, else the host's) has ``feature``: "avx512f", "f16c"."""
    features = config.CPU_FEATURES if config.CPU_FEATURES is not None else get_host_cpu_features()
    return f"+{feature}" in features.split(",")


if compiles_for("avx512f"):
    VECTOR_BYTES = 64  # one zmm register
    BLOCK_ROWS = 8  # register block: keys (numba_tiled.qk_tile) or value columns (pv_tile) ...
else:
    VECTOR_BYTES = 32  # one AVX2 register; on narrower CPUs LLVM splits each vector operation
    BLOCK_ROWS = 4
BLOCK_VECTORS = 3  # ... times a panel of this many vectors of queries: 24 of 32 (12 of 16) registers
# A panel is 48 float32 or 24 float64 queries (AVX2: 24 or 12).

# No 'nnan'/'ninf': masked scores are -inf and NaN in the inputs must propagate.
FASTMATH = {"reassoc", "contract", "nsz", "arcp"}
# IEEE division (x / 0 -> inf or NaN) instead of Python's ZeroDivisionError.  An
# overload (exp2) takes no cache option: it is compiled for, and cached with, its callers.
OVERLOAD_OPTIONS = {"fastmath": FASTMATH, "error_model": "numpy"}
JIT_OPTIONS = dict(OVERLOAD_OPTIONS, cache=True)
# Helpers called only from compiled code need no Python entry point: less to compile.
INTERNAL = dict(JIT_OPTIONS, no_cpython_wrapper=True, no_cfunc_wrapper=True)


def _exp2_coefficients(degree, float_type):
    """Taylor coefficients of 2**f = exp(f ln 2), highest power first.  On |f| <= 1/2
    the truncation error is below (ln 2 / 2)**(degree+1) / (degree+1)!, a fraction of
    an ulp for degree 7 (float32) and 13 (float64)."""
    return tuple(float_type(math.log(2.0) ** n / math.factorial(n)) for n in range(degree, -1, -1))


def exp2(t):
    """2**t; compiled code only (see _exp2_overload)."""
    raise NotImplementedError("exp2 is only callable from jitted code")


@overload(exp2, jit_options=OVERLOAD_OPTIONS)
def _exp2_overload(t):
    """Branch-free 2**t that LLVM can vectorise (no libm call, no SVML here).

    t = k + f with k = rint(t), |f| <= 1/2; 2**f is a polynomial and 2**k is built
    directly in the exponent field, from the bits of k + 1.5·2**mantissa_bits, which
    hold k in the low mantissa bits: integer lanes do the rest, since AVX2 cannot
    convert float64 to int64 lanes.  Within 1 ulp for results in the normal range;
    t < min_exponent (and -inf) gives 0, t >= max_exponent - 1/2 gives inf, NaN
    stays NaN (the clamps are written so that a NaN compares false and passes
    through).  Attention only calls it with t <= 0.
    Cost per element: a Horner polynomial of degree 7 (float32) or 13 (float64),
    plus a few compares, selects and integer operations.
    """
    if t == types.float32:
        float_type, int_type, bias, mantissa_bits, degree = np.float32, np.int32, 127, 23, 7
    elif t == types.float64:
        float_type, int_type, bias, mantissa_bits, degree = np.float64, np.int64, 1023, 52, 13
    else:
        return None
    coefficients = _exp2_coefficients(degree, float_type)
    leading, rest = coefficients[0], coefficients[1:]
    min_exponent = float_type(1 - bias)  # 2**k stays a normal number
    max_exponent = float_type(bias + 1)  # k = bias + 1 is the inf exponent field
    magic = float_type(1.5 * 2.0**mantissa_bits)
    zero = float_type(0.0)
    inf = float_type(np.inf)

    def exp2_impl(t):
        clamped = min_exponent if t < min_exponent else t
        clamped = max_exponent if clamped > max_exponent else clamped
        k = np.rint(clamped)
        f = clamped - k
        p = leading
        for c in rest:
            p = p * f + c
        scale = int_type((float_type(k + magic).view(int_type) + bias) << mantissa_bits).view(float_type)
        result = p * scale
        result = zero if t < min_exponent else result
        return inf if t > max_exponent else result

    return exp2_impl


def _panel(scalar_type):
    """Queries per panel: BLOCK_VECTORS SIMD vectors of ``scalar_type``."""
    return BLOCK_VECTORS * VECTOR_BYTES * 8 // scalar_type.bitwidth


def panel_width(dtype):
    """Queries per panel for ``dtype`` (a compile-time constant); compiled code only."""
    raise NotImplementedError("panel_width is only callable from jitted code")


@overload(panel_width)
def _panel_width_overload(dtype):
    width = _panel(dtype.dtype)
    return lambda dtype: width


@intrinsic
def register_block(typingctx, dtype):
    """A (BLOCK_ROWS, panel_width(dtype)) C array of ``dtype`` on the stack.

    No pointer to it escapes, so LLVM knows that no other load or store can touch
    it and keeps a block that a loop updates in registers for the whole loop.
    Cost: BLOCK_ROWS · BLOCK_VECTORS · VECTOR_BYTES bytes of stack frame (1536 with
    AVX-512, 384 with AVX2: 24 or 12 registers' worth), reserved once per call of
    the enclosing function; no heap allocation, no reference count.
    """
    array_type = types.Array(dtype.dtype, 2, "C")
    cols = _panel(dtype.dtype)

    def codegen(context, builder, signature, args):
        element = context.get_value_type(dtype.dtype)
        itemsize = context.get_abi_sizeof(element)
        intp = context.get_value_type(types.intp)
        block = make_array(array_type)(context, builder)
        context.populate_array(
            block,
            data=cgutils.alloca_once(builder, element, size=BLOCK_ROWS * cols),
            shape=[intp(BLOCK_ROWS), intp(cols)],
            strides=[intp(cols * itemsize), intp(itemsize)],
            itemsize=intp(itemsize),
            meminfo=None,
        )
        return block._getvalue()

    return array_type(dtype), codegen


@intrinsic
def fma_vector(typingctx, acc, i, a, x, j):
    """acc[i : i + lanes] += a · x[j : j + lanes] as one SIMD fused multiply-add,
    lanes = VECTOR_BYTES / itemsize; acc and x are C-contiguous 1-D arrays and a is
    a scalar, all of one dtype.  No bounds check: callers stay inside their panels.
    Cost: one vector load of x, one load and one store of acc (both vanish when acc
    is a row of a register block held in registers), one broadcast of a, one FMA."""
    if not (
        isinstance(acc, types.Array) and isinstance(x, types.Array)
        and acc.ndim == x.ndim == 1 and acc.layout == x.layout == "C"
        and acc.dtype == x.dtype == a
    ):
        return None
    lanes = VECTOR_BYTES * 8 // a.bitwidth

    def codegen(context, builder, signature, args):
        acc_value, i_value, a_value, x_value, j_value = args
        element = context.get_value_type(a)
        vector = ir.VectorType(element, lanes)
        align = context.get_abi_sizeof(element)

        def vector_at(array_type, array_value, index):
            data = make_array(array_type)(context, builder, array_value).data
            return builder.bitcast(builder.gep(data, [index]), vector.as_pointer())

        acc_address = vector_at(acc, acc_value, i_value)
        x_vector = builder.load(vector_at(x, x_value, j_value), align=align)
        a_vector = builder.insert_element(ir.Constant(vector, None), a_value, ir.Constant(ir.IntType(32), 0))
        a_vector = builder.shuffle_vector(a_vector, a_vector, ir.Constant(ir.VectorType(ir.IntType(32), lanes), None))
        product = builder.fmul(a_vector, x_vector, flags=["contract"])
        total = builder.fadd(builder.load(acc_address, align=align), product, flags=["contract"])
        builder.store(total, acc_address, align=align)
        return context.get_dummy_value()

    return types.none(acc, i, a, x, j), codegen


@intrinsic
def prefer_wide_vectors(typingctx):
    """Let LLVM's loop vectoriser use VECTOR_BYTES-wide vectors in the calling function.

    On CPUs with AVX-512, LLVM's X86 backend prefers 256-bit vectors (the tuning
    "prefer-256-bit", from the days when zmm instructions lowered the clock), so a loop
    it vectorises by itself (exp2 across queries) would use half the register.  This
    sets the caller's "prefer-vector-width" function attribute, which overrides that per
    function; llvmlite's attribute set only takes names it knows, so the key="value"
    string goes into the underlying set, printed verbatim into the function's definition.
    (NUMBA_CPU_FEATURES=-prefer-256-bit does the same for the whole process, but must be
    set before Numba starts: not a library's choice.)  Cost: none at run time.
    """

    def codegen(context, builder, signature, args):
        set.add(builder.function.attributes, f'"prefer-vector-width"="{VECTOR_BYTES * 8}"')
        return context.get_dummy_value()

    return types.none(), codegen


def aligned_empty(rows, cols, dtype):
    """A (rows, cols) C array of ``dtype`` starting on a VECTOR_BYTES boundary;
    compiled code only (see _aligned_empty_overload)."""
    raise NotImplementedError("aligned_empty is only callable from jitted code")


@overload(aligned_empty, jit_options=OVERLOAD_OPTIONS)
def _aligned_empty_overload(rows, cols, dtype):
    """np.empty allocates on a 32-byte boundary: a 64-byte vector load from it would
    straddle two cache lines every other time.  So allocate up to one vector more and
    start the view at the first aligned element; a row of cols · itemsize bytes (a
    multiple of VECTOR_BYTES for whole panels) keeps every row aligned.
    Cost: one np.empty of rows · cols + lanes - 1 elements, uninitialised."""
    itemsize = dtype.dtype.bitwidth // 8
    lanes = VECTOR_BYTES // itemsize

    def aligned_empty_impl(rows, cols, dtype):
        buffer = np.empty(rows * cols + lanes - 1, dtype)
        skip = (-(buffer.ctypes.data // itemsize)) % lanes
        return buffer[skip : skip + rows * cols].reshape((rows, cols))

    return aligned_empty_impl


@intrinsic
def address_as_voidptr(typingctx, address):
    """The integer ``address`` as a void pointer, for ``numba.carray(pointer, shape,
    dtype)`` to view the memory of an array whose address came in a record (a parallel
    task of the thread pool gets its call's arrays that way).  Cost: none."""

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return types.voidptr(address), codegen


# The thread pool's task signature, pool_task_fn (csrc/attention.h): the call's address,
# the task's index, the worker's.  A compiled task is a ``cfunc`` of this type.
TASK = types.void(types.voidptr, types.int64, types.int32)


@njit(inline="always", **JIT_OPTIONS)
def call_arrays(call, stored, out_stored, kv_stored):
    """A task's view of its call record: q (heads, n_q, d) of ``stored``, out of
    ``out_stored`` (``output_format``); k and v of ``kv_stored`` as whole buffers
    (kv_heads, kv_rows, ·), a K/V head's n_k rows at its start (k[h, :n_k]: a view with
    spare rows between heads, a KV cache's, is read in place)."""
    q = carray(address_as_voidptr(call.q), (call.heads, call.n_q, call.d), stored)
    k = carray(address_as_voidptr(call.k), (call.kv_heads, call.kv_rows, call.d), kv_stored)
    v = carray(address_as_voidptr(call.v), (call.kv_heads, call.kv_rows, call.d_v), kv_stored)
    out = carray(address_as_voidptr(call.out), (call.heads, call.n_q, call.d_v), out_stored)
    return q, k, v, out


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
