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
Decoding (at most 4 query rows per head) takes a split-KV path instead: each K/V head's
keys are cut into chunks, (K/V head, chunk) tasks stream K and V once with SIMD along d
and keep a partial (max, sum, accumulator) per query row of the head's group, merged per
row at the end.  A call under 2e5 flops runs on the calling thread without waking a
helper.  The SIMD path is chosen at run time, the best the CPU has (``isa``/``use_isa``):
AVX-512 (F, VL) with AVX512-BF16 (and BW), AVX-512, AVX2 + FMA, then a portable C path.

Shapes: q (B, n_q, d), k (B_kv, n_k, d), v (B_kv, n_k, d_v) -> out (B, n_q, d_v),
float32 or float64 (accumulated in the same precision); B is batch and heads flattened.
Grouped-query attention: B_kv divides B, and query head h attends to K/V head
h // (B / B_kv) (B_kv = B: one K/V head per query head; B_kv = 1: multi-query).  K and V
are read in place with a head stride: each head's rows C-contiguous, heads kv_rows >= n_k
rows apart, so that a KV cache's buffers (B_kv, capacity, d) viewed as [:, :n_k] are never
copied (other layouts are copied to C order first).  The decode path takes the group's
query heads of one K/V head together, as group · n_q rows of one head, so each K/V head
is read from memory once per call, not once per query head: with 4 query heads per K/V
head a decode step reads a quarter of the bytes.  The query-tile path points each
(query head, tile) task at its K/V head (bound by its products there, not by the reads).
bfloat16 and float16: each tile of Q, K and V is widened exactly to float32 as it is
packed (csrc/convert.c: F16C's vcvtph2ps and a 16-bit shift for bfloat16 on AVX2, their
AVX-512 forms, scalar code on the generic path), and from there the float32 tile
operations run unchanged: scores, softmax, P (kept in float32) and P·V all in float32.  The
widening is O(n·(d + d_v)) per query tile beside its O(n·tile·(d + d_v)) products; what the
16-bit types save is half the bytes read.  The output, given as the 16-bit type (what
``kernels.attention`` gives it: ``writes_half``), is written row by row, each row rounded
to nearest even as it is stored (convert.c: vcvtps2ph, and bfloat16's rounding in integer
instructions), bit for bit NumPy's and ml_dtypes' rounding of the float32 result, without
the pass over the whole output that rounding it afterwards takes; given as float32 (a
16-bit KV cache's attention), it stays float32.
bfloat16 on a CPU with AVX512-BF16 (the "avx512-bf16" path, which "auto" takes where those
dot products outrun float32's FMAs: ``ceilings.bf16_dot_pays``; on Sapphire Rapids they issue
at half an FMA's rate, and bfloat16 runs 1.7x faster widened): Q, K and V are never widened
but multiplied as bfloat16 by vdpbf16ps, two exact products per float32 lane summed in
float32, twice an FMA's work in one instruction (csrc/tile_ops_bf16_dot.h): Q and K packed
in pairs along d, V in pairs of keys, and each weight P rounded to bfloat16 as the (float32)
softmax computes it, its sum l taken over the rounded weights, so that each output row is
still a convex combination of V's rows; the split-KV path reads K and V rows in place as
pairs.  The unit reads subnormal inputs as zeros (below 2^-126).  The same path runs on any
CPU as "avx512-bf16-emulated", every instruction emulated in portable C (slowly), so that
its tiles are checked where the unit is missing; tests/test_c_bf16_dot.py holds the
emulation to the instruction reference and, where the unit exists, to the unit.
int8 KV cache (``run_int8``): k and v int8 with one float32 scale per row (token and K/V
head), key j = k_scale[j] · k[j]; q and out float32.  Read in place, 1 byte per element
plus 4 bytes per row of scales, a quarter of float32's bytes at d = 64 (plus 3%), never
dequantised as a whole.  Decoding (up to ``DECODE_MAX_QUERIES`` query rows per head), the
step's query rows are quantised once, to int16 (codes in ±32767 for d <= 516, one step
max|q_row| / 32767 each: ``kernels.cache_formats.decode_query_codes``), and Q·Kᵀ is a
pure integer dot product per score (csrc/int8_dot.c: vpdpwssd on AVX512-VNNI or AVX-VNNI,
vpmaddwd on AVX2, C otherwise; ``int8_dot``), the key's scale and the query's applied once
per score after the exact sum; a score moves by at most |scale| · max|q_row| / 65534 ·
Σ_c |k_jc| (k dequantised), and the step computes float32's result on the quantised
queries (``kernels.cache_formats.decode_queries``).  (int8 queries, vpmaddubsw's 32
products a instruction, moved the decode errors of ``kernels.decode.fidelity`` from 3.7 to
5.5·10⁻², and on AVX2 ran slower: 6.9 cycles a key and query row at d = 64 against 4.9.)
The values are converted as they are loaded (vpmovsxbd, vcvtdq2ps), their scales folded
into the softmax weights (one multiply per key and row) when a K/V head has up to 8 query
rows; with more, each block of 64 value rows is dequantised once into per-thread scratch.
The query-tile path (prefill) dequantises each key and value tile as it packs it and is
float32's on the dequantised cache, bit for bit.  A NaN scale makes its rows NaN.
Measured (2-core AMD EPYC Zen 3, AVX2, 2 threads, one query, 8 query heads, d = 64,
n_k = 65,536, medians of 15 calls side by side in one process): int8 with 2 K/V heads
over float32 with 8, 7.3x with the keys dequantised, 9.7x with integer keys (2.0 ms, 0.39
of the streaming read, each call after the other's; called alone, 1.26 ms, 14 GB/s, and
18.6 ns a key a core from n = 8,192 to 131,072, in cache or not); int8 with 8 K/V heads
0.80 of the streaming read.  The step with 2 K/V heads stays bound by arithmetic there
(rdtsc, in L1, per key of a K/V head and its 4 rows: Q·Kᵀ 19.5 ticks, the softmax 5.4,
P·V 19.5): its 4 query rows per K/V head make 8
multiply-adds per cached byte, 80 G a second per core at 10 GB/s, beyond the 16 per
cycle of 2 FMA units (P·V) and what vpmaddwd sustains (Q·Kᵀ: 4.9 cycles per key and row
at d = 64, rdtsc around qk_rows in L1).
int4 KV cache (``run_int4``): two codes a byte and a float32 scale per 32 values of a row
(``kernels.cache_formats``), 40 bytes a row at d = 64 against int8's 68 and float32's 256.
Read in place.  The query tiles dequantise each tile into per-thread scratch (csrc/convert.c's
widen_q4) and compute float32's result on the dequantised cache, bit for bit.  Decoding
unpacks each block of 64 key rows to int8 codes (unpack_q4) and multiplies them as the
int8 cache's keys, a group of 32 values at a time with the step's queries quantised per
group (``decode_queries(q, INT4_GROUP)``), the groups' scores added in float; the values
likewise, a group of columns at a time, for up to 8 query rows per K/V head (dequantised
into scratch beyond, and on the generic path).
Cost: time O(B · n_q · n_k · (d + d_v)) (about half of it when causal; with a window of w
keys and s sinks, O(B · n_q · (w + s + query tile) · (d + d_v))); decoding is bound
by the bytes read, B_kv · n_k · (d + d_v) elements (int8: plus 8 bytes of scales a row);
extra memory O(threads · (tile · (d + d_v) + key tile · (d + d_v + panel))): one scratch
block per thread per call, holding a query tile, its output accumulator, the packed K
and V tiles and one panel × key tile of scores.
Causal, windows and sinks (``kernels.band``): causal query i sees keys j <= i + (n_k - n_q);
key tiles no row of a query tile can see are skipped (a window's query tile walks two runs
of key tiles: the sinks, then the windows), only tiles crossing the diagonal or a window's
left edge are masked.  A key a query does not see scores -inf; at a window's left edge such
keys are still summed with weight 0 by the SIMD P·V where their values are finite (0 · v
adds nothing), and one product at a time where they are not, so that a NaN value reaches
only the queries that see it.  A window's decode step (n_q <= DECODE_MAX_QUERIES) takes the
query tiles, not split-KV.
Sources: csrc/attention.h (interface), csrc/flash_driver_template.h (the algorithm),
csrc/pool.c (the thread pool),
csrc/tile_ops_simd_template.h (the SIMD micro-kernels, instantiated per ISA and
precision by csrc/tile_ops_{avx512,avx2}_{f32,f64}.c), csrc/tile_ops_generic_template.h
(the portable path); built by csrc/build_attention.py.
"""
import numpy as np

from ..api import ExtensionNotBuilt, kv_layout
from ..band import Band
from ..cache_formats import FORMATS
from ..dtypes import FLOATS
from ..threads import address, budget

try:
    from .._attention_c import ffi, lib
except ImportError as missing:  # not built, or built for another interpreter
    raise ExtensionNotBuilt(missing) from missing

# the names isa() reports, and "auto"
ISA_NAMES = ("auto", "avx512-bf16", "avx512", "avx2-fma", "generic", "avx512-bf16-emulated")
# the int8 cache's integer dot-product units, best first (csrc/int8_dot.c)
INT8_DOT_UNITS = ("avx512-vnni", "avx-vnni", "avx2", "generic")
# query rows per head up to which a call decodes (split-KV; an int8 cache's queries quantised)
DECODE_MAX_QUERIES = int(lib.attn_decode_max_queries())

# dtype -> (the C entry point, its input pointer type, the dtype computed in), from the dtype
# table (looked up by dtype: dtype.name is Python code, microseconds a call)
_FORWARD = {row.dtype: (getattr(lib, f"attn_forward_{row.c_suffix}"), row.c_pointer, row.compute)
            for row in FLOATS.values()}
_F32, _I8, _U8 = np.dtype(np.float32), np.dtype(np.int8), np.dtype(np.uint8)
# each pointer type the entry points take -> the array type ffi.from_buffer views a buffer as
_ARRAYS = {pointer: ffi.typeof(ffi.getctype(ffi.typeof(pointer).item, "[]"))
           for pointer in {*(row.c_pointer for row in FLOATS.values()), "int8_t *", "uint8_t *", "float *"}}


def run(q, k, v, out, causal, scale, band=None, n_k=None):
    """q (B, n_q, d) C-contiguous; k (B_kv, n_k, d), v (B_kv, n_k, d_v) with B a multiple of
    B_kv (query head h reads K/V head h // (B // B_kv)), each with C-contiguous rows and
    its heads kv_rows >= n_k rows apart, the same for both (a cache's buffers viewed as
    [:, :n_k]; any other layout is first copied to C order, O(B_kv · n_k · (d + d_v)));
    one dtype of the table, already validated; out (B, n_q, d_v) C-contiguous, of its
    compute type, or for 16-bit inputs (which go to C as their bits) of their own type,
    each row rounded to nearest even as C stores it.  Writes every element of out.  band:
    the keys each query sees (``kernels.band``; None: full, or causal): the key tiles
    outside it are skipped.  n_k: given, k (B_kv, kv_rows, d) and v (B_kv, kv_rows, d_v)
    are C-contiguous buffers whose heads' first n_k rows are the keys and values (a KV
    cache's whole buffers, ``KVCache.attend``): read in place, with no layout to work out."""
    forward, pointer, compute = _FORWARD[q.dtype]
    half = q.dtype.itemsize == 2
    rounded = half and out.dtype == q.dtype
    if out.dtype != compute and not rounded:   # C would write past a narrower out
        raise TypeError(f"c_tiled: out must be {compute} or {q.dtype} for {q.dtype} inputs, got {out.dtype}")
    if n_k is None:
        k, v, kv_rows = kv_layout(k, v)
        n_k = k.shape[1]
    else:
        kv_rows = k.shape[1]
    if half:  # bfloat16's dtype has no buffer-protocol format: pass the bits
        q, k, v = (x.view(np.uint16) for x in (q, k, v))
        out = out.view(np.uint16) if rounded else out
    # the 16-bit entry points take round_out after out
    _call(forward, q, pointer, ((k, pointer), (v, pointer)), (v.shape[0], n_k, v.shape[2]), out, kv_rows,
          band or Band.of(causal), scale, round_out=(int(rounded),) if half else ())


def run_int8(q, k, k_scale, v, v_scale, out, causal, scale):
    """Attention against an int8 KV cache, read in place: q float32 (B, n_q, d)
    C-contiguous; k int8 (B_kv, n_k, d) with k_scale float32 (B_kv, n_k), key j of K/V head
    g being k_scale[g, j] · k[g, j] (rounded once to float32; a NaN scale makes the row
    NaN), v int8 (B_kv, n_k, d_v) with v_scale alike; out float32 (B, n_q, d_v)
    C-contiguous.  The four K/V arrays need C-contiguous rows and one head stride of
    kv_rows >= n_k rows (views [:, :n_k] of a cache's (B_kv, capacity, ·) buffers);
    otherwise all four are first copied to C order.  The result is bit for bit ``run``'s
    on the dequantised float32 K and V; what it saves is the bytes read: n_k · (d + d_v)
    bytes and 8 · n_k of scales per K/V head, against 4 · n_k · (d + d_v) for float32."""
    _run_scaled(lib.attn_forward_q8, "int8", _I8, "int8_t *", q, k, k_scale, v, v_scale, out, causal, scale)


def run_int4(q, k, k_scale, v, v_scale, out, causal, scale):
    """Attention against an int4 KV cache (``kernels.cache_formats``), read in place: q
    float32 (B, n_q, d) C-contiguous; k uint8 (B_kv, n_k, ceil(d / 2)), two codes a byte,
    with k_scale float32 (B_kv, n_k, ceil(d / 32)), one per group of 32 values; v and
    v_scale alike for d_v = out's last axis; out float32 (B, n_q, d_v) C-contiguous.  The
    layout is ``run_int8``'s (copied to C order otherwise); a tile or a decode block of rows
    is dequantised at a time, and the result is bit for bit ``run``'s on the dequantised
    float32 K and V, for n_k · (d + d_v) / 2 bytes and 4 per group of 32 read per K/V head."""
    FORMATS["int4"].check_arrays("c_tiled", q.shape[2], out.shape[2], k, k_scale, v, v_scale)
    _run_scaled(lib.attn_forward_q4, "int4", _U8, "uint8_t *", q, k, k_scale, v, v_scale, out, causal, scale)


def _run_scaled(forward, name, code_dtype, code_pointer, q, k, k_scale, v, v_scale, out, causal, scale):
    """run_int8's and run_int4's call: the dtypes checked, the four K/V arrays in one
    layout (or copied to C order), then forward."""
    for label, x, dtype in (("q", q, _F32), ("k", k, code_dtype), ("k_scale", k_scale, _F32),
                            ("v", v, code_dtype), ("v_scale", v_scale, _F32), ("out", out, _F32)):
        if x.dtype != dtype:   # C would read or write the wrong widths
            raise TypeError(f"c_tiled {name} cache: {label} must be {dtype}, got {x.dtype}")
    k, v, kv_rows = kv_layout(k, v)
    if not (_scales_fit(k_scale, kv_rows) and _scales_fit(v_scale, kv_rows)):
        k, k_scale, v, v_scale = map(np.ascontiguousarray, (k, k_scale, v, v_scale))
        kv_rows = k.shape[1]
    _call(forward, q, "float *", ((k, code_pointer), (k_scale, "float *"), (v, code_pointer), (v_scale, "float *")),
          (*v.shape[:2], out.shape[2]), out, kv_rows, Band.of(causal), scale)


def _scales_fit(scales, kv_rows):
    """Whether scales (B_kv, n_k) or (B_kv, n_k, groups) float32 lie as the cache's rows do:
    each row's contiguous, rows contiguous within a head, heads kv_rows rows apart (a
    cache's always do)."""
    heads, n_k = scales.shape[:2]
    per_row = scales.shape[2] if scales.ndim == 3 else 1
    return ((per_row <= 1 or scales.strides[2] == 4) and (n_k <= 1 or scales.strides[1] == 4 * per_row)
            and (heads == 1 or scales.strides[0] == 4 * per_row * kv_rows))


def _call(forward, q, q_pointer, kv, v_shape, out, kv_rows, band, scale, round_out=()):
    """forward(q, *kv, out, *round_out, B, group, n_q, n_k, kv_rows, d, d_v, left, right,
    sinks, scale, threads) (a side of the band that is None: -1, unbounded), kv: (array, C
    pointer type) pairs in forward's order (k, [k_scale,] v, [v_scale]), v_shape (B_kv, n_k,
    d_v) (``_pointer``: a view with a head stride goes by its address); the caller's frame
    keeps them alive for the call.  q and out must be C-contiguous (from_buffer refuses them
    otherwise); out goes as a void pointer, of the type forward writes."""
    batch, n_q, d = q.shape
    kv_heads, n_k, d_v = v_shape
    if kv_heads == 0 or batch % kv_heads:
        raise ValueError(f"c_tiled: {batch} query heads are not a multiple of {kv_heads} K/V heads")
    status = forward(
        ffi.from_buffer(_ARRAYS[q_pointer], q),
        *[_pointer(x, pointer) for x, pointer in kv],
        ffi.cast("void *", ffi.from_buffer(out, require_writable=True)), *round_out,
        batch, batch // kv_heads, n_q, n_k, kv_rows, d, d_v, _side(band.left), _side(band.right), band.sinks,
        scale, budget(),
    )
    if status:
        _raise_status(status, kv_rows, n_k, d, d_v)


def cache_step(k, v, band, scale):
    """A KV cache's step with every argument but the step's own worked out once
    (``KVCache.attend``'s repeated calls): k (B_kv, capacity, d), v (B_kv, capacity, d_v),
    the cache's whole buffers, C-contiguous, float32 or float64; band and scale checked.
    -> step(q, out, n_k), which is ``run(q, k, v, out, band.causal, scale, band=band,
    n_k=n_k)`` for q (B, n_q, d) C-contiguous of k's dtype, B a multiple of B_kv, out
    (B, n_q, d_v) C-contiguous of it, n_k <= capacity: the cache's own calls, checked by it
    once for their signature, so a step pays the C call and little else (each Python
    operation after a step that has streamed the cache through L2 costs several times
    what it costs warm)."""
    forward, pointer, _ = _FORWARD[k.dtype]
    array = _ARRAYS[pointer]
    kv = (ffi.from_buffer(array, k), ffi.from_buffer(array, v))   # kept alive by the step
    kv_heads, kv_rows, d = k.shape
    d_v = v.shape[2]
    sides = (_side(band.left), _side(band.right), band.sinks)

    def step(q, out, n_k):
        batch, n_q = q.shape[:2]
        status = forward(ffi.from_buffer(array, q), *kv, ffi.from_buffer(array, out),
                         batch, batch // kv_heads, n_q, n_k, kv_rows, d, d_v, *sides, scale, budget())
        if status:
            _raise_status(status, kv_rows, n_k, d, d_v)

    return step


def call_step(q, k, v, band, scale, out_shape):
    """``kernels.attention``'s call for one call signature, every argument but the arrays'
    addresses worked out once: q (..., B, n_q, d), k (..., B_kv, n_k, d), v (..., B_kv, n_k,
    d_v) C-contiguous, float32 or float64, the signature's checks passed (``Plan``);
    out_shape (..., B, n_q, d_v).
    -> step(q, k, v), which is ``run(q, k, v, out, band.causal, scale, band=band)`` on a
    new out of out_shape and q's dtype, returned, for arrays of that signature; None for
    the 16-bit types (``run`` passes their bits) and for empty arrays.  A tiny call's Python
    then is its output, its four buffers and the call, in one frame (``run`` and ``_call``
    work out the shapes and the band again: 1.5 us of a 9 us call; each further frame and
    argument tuple costs a tenth of a microsecond or more after the C call has run)."""
    if q.dtype.itemsize == 2 or not (q.size and k.size and v.size):
        return None
    forward, pointer, _ = _FORWARD[q.dtype]
    array, dtype, from_buffer, empty = _ARRAYS[pointer], q.dtype, ffi.from_buffer, np.empty
    n_q, d = q.shape[-2:]
    n_k, d_v = v.shape[-2:]
    batch, kv_heads = q.size // (n_q * d), k.size // (n_k * d)
    group, left, right, sinks = batch // kv_heads, _side(band.left), _side(band.right), band.sinks

    def step(q, k, v):
        out = empty(out_shape, dtype)   # C-contiguous: (B, n_q, d_v) as the entry point writes it
        status = forward(from_buffer(array, q), from_buffer(array, k), from_buffer(array, v),
                         from_buffer(array, out), batch, group, n_q, n_k, n_k, d, d_v, left, right, sinks,
                         scale, budget())
        if status:
            _raise_status(status, n_k, n_k, d, d_v)
        return out

    return step


def _raise_status(status, kv_rows, n_k, d, d_v):
    """The error of an entry point's nonzero status."""
    if status < 0:   # a shape attention.h says it cannot read (the checks before a call refuse them all)
        raise ValueError(f"c_tiled: the C kernel cannot read this shape (n_k={n_k}, K/V heads {kv_rows} rows "
                         f"apart, d={d}, d_v={d_v})")
    raise MemoryError(f"c_tiled: could not allocate per-thread scratch tiles (d={d}, d_v={d_v}, threads={budget()})")


def _pointer(x, pointer):
    """x's data for a C parameter of type ``pointer`` ("float *"): a C-contiguous array's
    buffer, typed (a third of a microsecond: a call's fixed cost); a view with a head
    stride (a cache's [:, :n_k]), which has no contiguous buffer, by its address."""
    try:
        return ffi.from_buffer(_ARRAYS[pointer], x)
    except ValueError:   # "ndarray is not C-contiguous"
        return ffi.cast(pointer, address(x))


def _side(side):
    """A band's side as the C entry points take it: -1 for None (unbounded)."""
    return -1 if side is None else side


def isa():
    """The active SIMD path: "avx512-bf16", "avx512", "avx2-fma", "generic" or
    "avx512-bf16-emulated"."""
    return ffi.string(lib.attn_active_isa()).decode()


def use_isa(name):
    """Select the SIMD path by the name ``isa()`` reports: "auto" (the best the CPU has:
    AVX-512 with AVX512-BF16 where its dot products outrun float32's FMAs, AVX-512,
    AVX2+FMA, generic), one of those, or
    "avx512-bf16-emulated" (the avx512-bf16 path with every instruction emulated in portable
    C: any CPU runs it, slowly; it is there to check the bfloat16 dot-product path where the
    CPU lacks the unit)."""
    if name not in ISA_NAMES:
        raise ValueError(f"unknown ISA {name!r}; expected one of {', '.join(ISA_NAMES)}")
    if lib.attn_select_isa(name.encode()) != 0:
        raise ValueError(f"ISA {name!r} is not supported by this CPU")


def has_bf16_dot(name=None):
    """Whether the SIMD path ``name`` (default: the active one) multiplies bfloat16 by a
    dot-product instruction (vdpbf16ps, or its emulation) rather than widening it."""
    return (name or isa()).startswith("avx512-bf16")


def int8_dot():
    """The unit computing the int8 cache's Q·Kᵀ when decoding: "avx512-vnni" (vpdpwssd),
    "avx-vnni" (the same, VEX-encoded), "avx2" (vpmaddwd, vpaddd) or "generic" (C);
    ``use_isa`` picks the best the CPU runs (the generic path: "generic")."""
    return ffi.string(lib.attn_int8_dot()).decode()


def int8_dot_runs(unit):
    """Whether this CPU runs the integer dot-product unit ``unit`` (``INT8_DOT_UNITS``)."""
    if unit not in INT8_DOT_UNITS:
        raise ValueError(f"unknown int8 dot-product unit {unit!r}; expected one of {', '.join(INT8_DOT_UNITS)}")
    return bool(lib.attn_int8_dot_runs(unit.encode()))


def use_int8_dot(unit):
    """Select the integer dot-product unit by name, one the CPU runs (until the next ``use_isa``)."""
    if not int8_dot_runs(unit):
        raise ValueError(f"int8 dot-product unit {unit!r} is not supported by this CPU")
    lib.attn_select_int8_dot(unit.encode())


def int8_scores(unit, k, k_scale, q, scale):
    """A decode step's scores as ``unit`` computes them, for the tests: q (rows, d) float32,
    1 <= rows <= 4, quantised as the step quantises it; k (keys, d) int8 codes with k_scale
    (keys,) float32, 1 <= keys <= 64 -> s (rows, keys) float32 (csrc/attention.h,
    attn_int8_scores)."""
    return _integer_scores(lib.attn_int8_scores, "int8_t *", np.int8, unit, k, k_scale, q, scale)


def int4_scores(unit, k, k_scale, q, scale):
    """The same on int4 keys: k (keys, ceil(d / 2)) uint8, two codes a byte, with k_scale
    (keys, ceil(d / 32)) float32, as the int4 cache holds them; q quantised a group of 32
    values at a time (csrc/attention.h, attn_int4_scores)."""
    return _integer_scores(lib.attn_int4_scores, "uint8_t *", np.uint8, unit, k, k_scale, q, scale)


def _integer_scores(function, key_type, key_dtype, unit, k, k_scale, q, scale):
    q, k, k_scale = (np.ascontiguousarray(x, t) for x, t in ((q, np.float32), (k, key_dtype), (k_scale, np.float32)))
    rows, d = q.shape
    keys = k.shape[0]
    stride = -(-keys // 16) * 16
    s = np.empty((rows, stride), np.float32)
    status = function(unit.encode(), ffi.cast(key_type, ffi.from_buffer(k)), ffi.cast("float *", ffi.from_buffer(k_scale)),
                      keys, d, ffi.cast("float *", ffi.from_buffer(q)), rows, scale,
                      ffi.cast("float *", ffi.from_buffer(s, require_writable=True)), stride)
    if status != 0:
        raise ValueError(f"integer dot-product unit {unit!r}: not run by this CPU, or rows={rows}, keys={keys} "
                         f"out of range (1-4, 1-64)")
    return s[:, :keys]
