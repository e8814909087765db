"""SIMD building blocks for Numba kernels: a vectorisable exp2, stack register blocks,
explicit vector FMA, vector-aligned scratch, and the option sets to compile them with
(the 16-bit types' widening and rounding: ``rung3_numba_half``).

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
- ``call_arrays``: a pool task's view of its call's arrays, given by address.
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
