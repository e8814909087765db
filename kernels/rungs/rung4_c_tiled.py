"""c_tiled: the tiled online-softmax attention in C, with SIMD micro-kernels, on our thread pool.

The idea it adds over the ``numba_tiled`` rung: the same algorithm (query tiles walk
over key tiles keeping the running row maximum m, sum l and a rescaled accumulator O;
the n_q x n_k scores never exist) and the same transposed, register-blocked tiles, but
written by hand the way a small GEMM library is written, with nothing left to a
compiler's judgement: each query tile's Qᵀ is packed once into panels of queries, each
K tile into blocks of 8 keys side by side and each V tile into blocks of 8 columns; per
panel, two intrinsic micro-kernels compute Sᵀ = scale · K Qᵀ and
Oᵀ = alpha · Oᵀ + Vᵀ Pᵀ, and between them, while the panel's Sᵀ is still in L1, the
online softmax runs down the columns with a 2-ulp polynomial exp, so a query's max and
sum never need a horizontal reduction.  One algorithm text serves both SIMD paths, each
with its own register plan: AVX-512 blocks of 8 keys (or value columns) x 48 queries
(24 in float64) in 24 of the 32 zmm registers; AVX2 + FMA blocks of 4 x 24 (4 x 12)
in the 16 ymm registers.
The (batch·head, query tile) pairs are the tasks of the project's thread pool
(csrc/pool.c, described in ``kernels.threads``): the calling thread claims them from the
start, heaviest causal tiles first, and helper threads join when they are awake, so a
call never waits for a thread that has not started; it runs without the GIL (cffi API
mode).
Decoding (at most 4 query rows per head) takes a split-KV path instead: each head's keys
are cut into chunks, (head, chunk) tasks stream K and V once with SIMD along d and keep a
partial (max, sum, accumulator) per row, merged per row at the end.  A call under 2e5
flops runs on the calling thread without waking a helper.  The SIMD path is
chosen at run time, the best the CPU has (``isa``/``use_isa``): AVX-512 (F, VL), then
AVX2 + FMA, then a portable C path.

Shapes: q (B, n_q, d), k (B, n_k, d), v (B, n_k, d_v) -> out (B, n_q, d_v),
float32 or float64 (accumulated in the same precision); B is batch and heads flattened.
bfloat16 and float16: each tile of Q, K and V is widened exactly to float32 as it is
packed (csrc/widen.c: F16C's vcvtph2ps and a 16-bit shift for bfloat16 on AVX2, their
AVX-512 forms, scalar code on the generic path), and from there the float32 tile
operations run unchanged: scores, softmax, P (kept in float32) and P·V all in float32, the
output written in float32 and rounded once by the API.  The widening is O(n·(d + d_v)) per
query tile beside its O(n·tile·(d + d_v)) products; what the 16-bit types save is half
the bytes read.  (A bfloat16 dot-product path, vdpbf16ps on CPUs with AVX512-BF16, is not
built yet.)
Cost: time O(B · n_q · n_k · (d + d_v)) (about half of it when causal);
extra memory O(threads · (tile · (d + d_v) + key tile · (d + d_v + panel))): one scratch
block per thread per call, holding a query tile, its output accumulator, the packed K
and V tiles and one panel × key tile of scores.
Causal: query i sees keys j <= i + (n_k - n_q); key tiles no row of a query tile can
see are skipped, only tiles crossing the diagonal are masked.
Sources: csrc/attention.h (interface), csrc/flash_driver_template.h (the algorithm),
csrc/pool.c (the thread pool),
csrc/tile_ops_simd_template.h (the SIMD micro-kernels, instantiated per ISA and
precision by csrc/tile_ops_{avx512,avx2}_{f32,f64}.c), csrc/tile_ops_generic_template.h
(the portable path); built by csrc/build_attention.py.
"""
import numpy as np

from ..api import ExtensionNotBuilt
from ..dtypes import FLOATS
from ..threads import budget

try:
    from .._attention_c import ffi, lib
except ImportError as missing:  # not built, or built for another interpreter
    raise ExtensionNotBuilt(missing) from missing

# the names isa() reports, and "auto"
_ISA_NAMES = ("auto", "avx512", "avx2-fma", "generic")

# dtype -> (the C entry point, its input pointer type, its output's), from the dtype table
_FORWARD = {row.dtype: (getattr(lib, f"attn_forward_{row.c_suffix}"), row.c_pointer,
                        FLOATS[row.compute.name].c_pointer) for row in FLOATS.values()}


def run(q, k, v, out, causal, scale):
    """q (B, n_q, d), k (B, n_k, d), v (B, n_k, d_v): C-contiguous, one dtype of the table,
    already validated; out (B, n_q, d_v) of its compute type (float32 for the 16-bit
    types, which go to C as their bits). Writes every element of out."""
    forward, pointer, out_pointer = _FORWARD[q.dtype]
    if out.dtype != FLOATS[q.dtype.name].compute:   # C would write past a narrower out
        raise TypeError(f"c_tiled: out must be {FLOATS[q.dtype.name].compute} for {q.dtype} inputs, got {out.dtype}")
    batch, n_q, d = q.shape
    n_k, d_v = v.shape[1], v.shape[2]
    if q.dtype.itemsize == 2:  # bfloat16's dtype has no buffer-protocol format: pass the bits
        q, k, v = (x.view(np.uint16) for x in (q, k, v))
    status = forward(
        ffi.cast(pointer, ffi.from_buffer(q)),
        ffi.cast(pointer, ffi.from_buffer(k)),
        ffi.cast(pointer, ffi.from_buffer(v)),
        ffi.cast(out_pointer, ffi.from_buffer(out, require_writable=True)),
        batch, n_q, n_k, d, d_v, bool(causal), scale, budget(),
    )
    if status != 0:
        raise MemoryError(
            f"c_tiled: could not allocate per-thread scratch tiles "
            f"(d={d}, d_v={d_v}, threads={budget()})"
        )


def isa():
    """The active SIMD path: "avx512", "avx2-fma" or "generic"."""
    return ffi.string(lib.attn_active_isa()).decode()


def use_isa(name):
    """Select the SIMD path by the name ``isa()`` reports: "auto" (the best the CPU has:
    AVX-512, then AVX2+FMA, then generic), "avx512", "avx2-fma" or "generic"."""
    if name not in _ISA_NAMES:
        raise ValueError(f"unknown ISA {name!r}; expected one of {', '.join(_ISA_NAMES)}")
    if lib.attn_select_isa(name.encode()) != 0:
        raise ValueError(f"ISA {name!r} is not supported by this CPU")
