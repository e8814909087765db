"""rung 3's decode path, split-KV ("flash decoding"): a few queries per head against a
long key sequence, compiled by Numba on the project's thread pool.  ``rung3_numba_tiled``
sends a call here when it has at most SPLIT_KV_MAX_ROWS = 4 queries per query head (one
new token against a KV cache, say): a query tile would pad one query to a whole panel,
and B tasks could not use the threads.

One loop of tasks runs over (K/V head, chunk of SPLIT_KV_CHUNK keys); each task reads
its keys and values once for all the rows of its K/V head, the queries of every query
head of its group (grouped-query attention: B / B_kv query heads share one K/V head, so
a K/V head is read once for all of them, never once per query head), and leaves a
partial (m, l, acc) per row, which a second loop over (query head, query) merges.  Time
O(B · n_q · n_k · (d + d_v)) with plain vectorised dot products (memory-bound: the bytes
read are B_kv · n_k · (d + d_v) elements); extra memory O(B · n_k / SPLIT_KV_CHUNK ·
n_q · d_v) partials.  Same NaN/Inf and causal semantics as the tiled path.

Shapes: q (B, n_q, d), k (B_kv, n_k, d), v (B_kv, n_k, d_v) -> out (B, n_q, d_v), float32,
float64, bfloat16 or float16 (partials float32 for these, out float32 or of their own
type), validated by the caller;
B is batch and heads flattened, query head h reads K/V head h // (B / B_kv).  q and out
are C-contiguous; a K/V head's rows are contiguous and the heads kv_rows rows apart
(a KV cache's buffers with room to spare are read in place).

bfloat16 and float16 come as their bits (uint16) and are widened exactly to float32
inside each task: the queries as they are scaled, keys and values KEY_BLOCK rows at a
time into a scratch block (KEY_BLOCK x max(d, d_v) float32), each row once for all the
group's rows; never a widened copy of the cache.  Everything after is float32, as for
float32 inputs; an output of the 16-bit type is rounded (to nearest even, ``narrow``) as
the merge stores it.  An int8 cache (``run`` with
scales: q float32, k and v int8 with one float32 scale per row) is read in place too, 1
byte per element and 4 per row, a block of codes widened (exactly) into the scratch
block, each row's scale applied once per score and weight (``fold_scales``): each score is
k_scale · (q · codes), each weight p · v_scale.  (Integer dot products, as c_tiled's, ran
at half the float ones' speed here: LLVM's vectoriser multiplies int8 as int32 lanes,
10.3 ns a key and query row against 5.2, one thread, in L1.)  Cost: O(n_q · d + n_k ·
(d + d_v)) widening per K/V head, beside its O(group · n_q · n_k · (d + d_v)) products;
with one query the two are of one order (decoding is memory-bound), but the rows read are
half or a quarter as wide.  An int4 cache (k and v uint8, two codes a byte, a float32 scale
per group of 32 values: ``kernels.cache_formats``) is read in place the same way, each
block dequantised (code times its group's scale) as it is widened: a group's scale cannot
fold into a score or a weight, which spans every group of the row.
"""
import functools

import numpy as np
from numba import carray, cfunc, njit, types
from numba.extending import overload

from ..cache_formats import INT4_GROUP, INT4_OFFSET
from ..threads import address, parallel_for, threads_for
from .rung3_numba_half import input_format, narrow, output_format, rows_in_compute_type, widen
from .rung3_numba_simd import (
    INTERNAL, JIT_OPTIONS, OVERLOAD_OPTIONS, TASK, address_as_voidptr, call_arrays, exp2, prefer_wide_vectors,
)

# A query tile would pad a few queries to a whole panel (24 float32 rows) and leave the
# threads idle, so up to this many queries per head split the keys instead.
SPLIT_KV_MAX_ROWS = 4
SPLIT_KV_CHUNK = 256  # keys per split-KV task
KEY_BLOCK = 32  # 16-bit or int8 inputs: keys (and values) widened at a time, into a scratch block
INT8, INT4 = 8, 9  # the formats of int8 and int4 KV caches (rung3_numba_half's formats are 0-3)

# What a task needs of its call: the arrays' addresses and shapes and the call's
# constants, filled by run() and read by the compiled tasks.
CALL = np.dtype([
    ("q", np.intp), ("k", np.intp), ("v", np.intp), ("out", np.intp),
    ("stats", np.intp), ("acc", np.intp),
    ("k_scales", np.intp), ("v_scales", np.intp),
    ("heads", np.int64), ("n_q", np.int64), ("n_k", np.int64), ("d", np.int64), ("d_v", np.int64),
    ("kv_heads", np.int64), ("kv_rows", np.int64), ("group", np.int64), ("n_chunks", np.int64), ("offset", np.int64), ("q_factor", np.float64), ("log2_scale", np.float64),
    ("k_groups", np.int64), ("v_groups", np.int64),   # scales a K and a V row holds (0: none)
])


def cache_rows(src, scales, first, count, width, scratch, fmt):
    """(rows, start), rows[start + j] = src[first + j] in the compute type for j < count:
    ``rows_in_compute_type``'s, an int8 src's codes widened into scratch (exact; their
    scales apply once per score or weight: ``fold_scales``), or an int4 src's (rows of
    width values, two codes a byte) dequantised into scratch with their group scales
    (scales (kv_rows, groups)), each value one product rounded to float32, as
    ``kernels.cache_formats`` decodes it."""
    raise NotImplementedError("cache_rows is only callable from jitted code")


@overload(cache_rows, prefer_literal=True, jit_options=OVERLOAD_OPTIONS)
def _cache_rows_overload(src, scales, first, count, width, scratch, fmt):
    if getattr(fmt, "literal_value", None) == INT4:
        def dequantised(src, scales, first, count, width, scratch, fmt):
            # value c by value c, its nibble shifted out of byte c // 2 (LLVM vectorises
            # this one loop; a loop over bytes storing each byte's two values, or the
            # scales applied in a pass of their own, measured 1.3x and 1.5x slower)
            prefer_wide_vectors()
            for j in range(count):
                row, wide, row_scales = src[first + j], scratch[j], scales[first + j]
                for c in range(width):
                    code = np.int32((row[c >> 1] >> ((c & 1) << 2)) & 15) - INT4_OFFSET
                    wide[c] = np.float32(code) * row_scales[c // INT4_GROUP]
            return scratch, 0

        return dequantised
    if src.dtype != types.int8:
        return lambda src, scales, first, count, width, scratch, fmt: rows_in_compute_type(src, first, count, scratch,
                                                                                            fmt)

    def widened(src, scales, first, count, width, scratch, fmt):
        prefer_wide_vectors()
        for j in range(count):
            row, wide = src[first + j], scratch[j]
            for c in range(width):
                wide[c] = np.float32(row[c])
        return scratch, 0

    return widened


@njit(**INTERNAL)
def chunk_scores(scratch, k, k_scales, j0, keys, first_row, block, fmt):
    """scratch[r, d + j] = the score of key j0 + j for the rows that see it (r >= first_row[j],
    j < keys) from the scaled queries scratch[:, :d], the keys widened a block at a time
    (an int8 cache's codes unscaled: fold_scales applies their scales to the sums)."""
    n_rows = scratch.shape[0]
    d = scratch.shape[1] - SPLIT_KV_CHUNK
    zero = scratch.dtype.type(0.0)
    # S = (q_factor · Q) K_chunkᵀ for the rows that see each key, four keys at a time: one
    # dot product alone is a chain of dependent adds (latency-bound), four are independent
    # chains that share q's loads (float16 caches, 8 query heads, n_k = 65,536, 2 threads:
    # 1.1x faster; float32's step is bound by its bytes either way).  A row that sees the
    # first of four keys but not the last gets scores past its limit too: they are never
    # read (the softmax and P V stop at visible[r]), and the keys exist (they are below
    # `keys`, what the last row sees).
    for b in range(0, keys, KEY_BLOCK):
        end = min(b + KEY_BLOCK, keys)
        rows, start = cache_rows(k, k_scales, j0 + b, end - b, d, block, fmt)
        j = b
        while j + 4 <= end:
            k0, k1, k2, k3 = rows[start + j - b], rows[start + j - b + 1], rows[start + j - b + 2], rows[start + j - b + 3]
            for r in range(first_row[j], n_rows):
                q_row = scratch[r, :d]
                s0 = s1 = s2 = s3 = zero
                for c in range(d):
                    x = q_row[c]
                    s0 += x * k0[c]
                    s1 += x * k1[c]
                    s2 += x * k2[c]
                    s3 += x * k3[c]
                scratch[r, d + j] = s0
                scratch[r, d + j + 1] = s1
                scratch[r, d + j + 2] = s2
                scratch[r, d + j + 3] = s3
            j += 4
        for j in range(j, end):
            k_row = rows[start + j - b]
            for r in range(first_row[j], n_rows):
                q_row = scratch[r, :d]
                s = zero
                for c in range(d):
                    s += q_row[c] * k_row[c]
                scratch[r, d + j] = s



def fold_scales(scratch, first, visible, scales, j0, fmt):
    """An int8 cache's row scales (scales (kv_rows, 1)), key j0 + j's into its column of scratch[:, first:] for the
    rows that see it, X[r, j] *= scales[j0 + j] for j < visible[r]: the keys' into the
    scores (scale · Σ q · code), the values' into the weights P, so that the products
    read each code widened, unscaled: a multiply per key and row, not per element; nothing
    for other formats.  Compiled code only."""
    raise NotImplementedError("fold_scales is only callable from jitted code")


@overload(fold_scales, prefer_literal=True, jit_options=OVERLOAD_OPTIONS)
def _fold_scales_overload(scratch, first, visible, scales, j0, fmt):
    if getattr(fmt, "literal_value", None) != INT8:
        return lambda scratch, first, visible, scales, j0, fmt: None

    def fold(scratch, first, visible, scales, j0, fmt):
        for r in range(visible.size):
            row = scratch[r, first:first + visible[r]]
            for j in range(visible[r]):
                row[j] *= scales[j0 + j, 0]

    return fold


@njit(**INTERNAL)
def visible_rows(n_rows, group, j0, j1, offset):
    """(visible, first_row): the keys of [j0, j1) each row r = i · group + h sees, visible[r]
    (non-decreasing in r), and the first row that sees each key j0 + j, first_row[j]."""
    visible = np.empty(n_rows, np.int64)
    for r in range(n_rows):
        visible[r] = min(j1, max(j0, r // group + 1 + offset)) - j0
    first_row = np.empty(visible[n_rows - 1], np.int64)
    first = 0
    for j in range(first_row.size):
        while visible[first] <= j:
            first += 1
        first_row[j] = first
    return visible, first_row


@njit(**INTERNAL)
def chunk_softmax(scratch, first, visible, log2_scale, stats, acc):
    """Per row r, over its scores scratch[r, first:first + visible[r]]: m = their max (fmax
    skips a NaN score, which poisons the row through P), P = 2**((S - m) · log2_scale) in
    place, l = Σ P into stats[r] = (m, l); acc[r] = 0.  The shift is 0 while m = -inf, as
    online_softmax does, so that P = 0 rather than NaN.  (scratch whole and C-contiguous:
    a row of the slice scratch[:, first:] has no known stride, and LLVM left its loops
    scalar: 8.6 ns a key and row, 1.7 here, one thread, in L1.)"""
    dtype = acc.dtype
    neg_inf = dtype.type(-np.inf)
    zero = dtype.type(0.0)
    for r in range(visible.size):
        p_row = scratch[r, first:first + visible[r]]
        m = neg_inf
        for j in range(visible[r]):
            m = np.fmax(m, p_row[j])
        shift = zero if m == neg_inf else m
        l = zero
        for j in range(visible[r]):
            p = exp2((p_row[j] - shift) * log2_scale)
            p_row[j] = p
            l += p
        stats[r, 0] = m
        stats[r, 1] = l
        acc[r, :] = 0


@njit(**INTERNAL)
def attend_key_chunk(q, k, v, k_scales, v_scales, j0, j1, offset, q_factor, log2_scale, stats, acc, fmt):
    """One split-KV task: every query of one K/V head's group against its keys j0 <= j < j1.

    q (group, n_q, d): the group's query heads; k (n_k, d), v (n_k, d_v); query i sees keys
    j < i + 1 + offset.  The group's rows are taken query by query, row r = i · group + h
    (query i of head h), so that what a row sees never shrinks as r grows.
    q, k, v are of acc's type, read in place, or the uint16 bits of the 16-bit format
    fmt (a literal), or (fmt INT8, INT4) q in acc's type and k, v int8 with one scale per
    row (k_scales (n_k, 1), v_scales; empty otherwise), or int4 bytes, two values each, with
    one per group (k_scales (n_k, groups)): q widened as it is scaled, K and V a block of
    KEY_BLOCK rows at a time into a scratch block, each row widened once for all rows
    (int8: the codes widened unscaled, the keys' scales folded into the scores and the
    values' into P, ``fold_scales``; int4: dequantised, ``cache_rows``).  d_v is acc's.
    Writes, per row, the chunk's max m and sum l of P = 2**((S - m) · log2_scale)
    into stats (rows, 2), and the un-normalised acc (rows, d_v) = P V.  A row that sees
    none of the chunk gets m = -inf, l = 0, acc = 0; keys past its limit never enter.
    Each key and value row is read once, for all rows; the loops over d and d_v
    are the ones LLVM vectorises.
    """
    group, n_q, d = q.shape
    n_rows = group * n_q
    d_v = acc.shape[1]
    dtype = acc.dtype
    # scratch: the scaled queries (q_factor · q) and this chunk's scores, then P
    scratch = np.empty((n_rows, d + SPLIT_KV_CHUNK), dtype)
    # 16-bit or int8 inputs: a block of keys or values widened (nothing for a float type)
    block = np.empty((KEY_BLOCK if fmt else 0, max(d, d_v)), dtype)
    for r in range(n_rows):
        for c in range(d):
            scratch[r, c] = widen(q[r % group, r // group, c], fmt) * q_factor
    # Key j is seen by the rows first_row[j] ... n_rows - 1 (visible is non-decreasing), so
    # both products loop over exactly those rows.  (A test "j < visible[r]" around the
    # loop over d kept LLVM from vectorising it: 3x slower.)
    visible, first_row = visible_rows(n_rows, group, j0, j1, offset)
    keys = visible[n_rows - 1]
    chunk_scores(scratch, k, k_scales, j0, keys, first_row, block, fmt)
    fold_scales(scratch, d, visible, k_scales, j0, fmt)
    chunk_softmax(scratch, d, visible, log2_scale, stats, acc)
    fold_scales(scratch, d, visible, v_scales, j0, fmt)
    # acc = P V_chunk, again over the rows that see each key (a key is never skipped for a
    # zero weight: 0 · NaN must give NaN).  With several rows, four keys at a time for the
    # rows that see all four: one load and store of acc per four rows of V, not per row
    # (8 query heads on 2 K/V heads, n_k = 65,536, 2 threads: float16 1.2x, int8 1.3x
    # faster); with one row, a key at a time (four at a time: 0.9x, float32 on 8 K/V heads)
    step = 4 if n_rows > 1 else KEY_BLOCK + 1
    for b in range(0, keys, KEY_BLOCK):
        end = min(b + KEY_BLOCK, keys)
        rows, start = cache_rows(v, v_scales, j0 + b, end - b, d_v, block, fmt)
        j = b
        while j + step <= end:
            v0, v1, v2, v3 = rows[start + j - b], rows[start + j - b + 1], rows[start + j - b + 2], rows[start + j - b + 3]
            for r in range(first_row[j], first_row[j + 3]):   # rows that see some of the four
                acc_row = acc[r]
                for jj in range(j, j + 4):
                    if r >= first_row[jj]:
                        p, v_row = scratch[r, d + jj], rows[start + jj - b]
                        for c in range(d_v):
                            acc_row[c] += p * v_row[c]
            for r in range(first_row[j + 3], n_rows):
                p0, p1, p2, p3 = scratch[r, d + j], scratch[r, d + j + 1], scratch[r, d + j + 2], scratch[r, d + j + 3]
                acc_row = acc[r]
                for c in range(d_v):
                    acc_row[c] += p0 * v0[c] + p1 * v1[c] + p2 * v2[c] + p3 * v3[c]
            j += 4
        for j in range(j, end):
            v_row = rows[start + j - b]
            for r in range(first_row[j], n_rows):
                p = scratch[r, d + j]
                acc_row = acc[r]
                for c in range(d_v):
                    acc_row[c] += p * v_row[c]


@njit(**INTERNAL)
def merge_chunks(stats, acc, out_row, visible, log2_scale, out_fmt):
    """out_row (d_v) of one query from the partials of its head's chunks, stats
    (n_chunks, 2) and acc (n_chunks, d_v) (attend_key_chunk):
        m = max m_c,  f_c = 2**((m_c - m) · log2_scale),
        out = (Σ f_c · acc_c) / (Σ f_c · l_c).
    The sum is gathered in acc[0] (this query's own partial, not read again), so that
    out_row, of acc's type (out_fmt AS_IS) or the uint16 bits of the 16-bit format
    out_fmt, is written once, each value rounded as it is stored (``narrow``).
    visible: whether the query sees any key."""
    dtype = acc.dtype
    neg_inf = dtype.type(-np.inf)
    zero = dtype.type(0.0)
    n_chunks, d_v = acc.shape
    m = neg_inf
    for chunk in range(n_chunks):
        m = max(m, stats[chunk, 0])  # never NaN: see attend_key_chunk
    # m = -inf: every chunk's m_c is -inf too and f_c = 0, not exp(-inf + inf) = NaN
    shift = zero if m == neg_inf else m
    total = acc[0]
    factor = exp2((stats[0, 0] - shift) * log2_scale)
    l = factor * stats[0, 1]
    for c in range(d_v):
        total[c] *= factor
    for chunk in range(1, n_chunks):
        factor = exp2((stats[chunk, 0] - shift) * log2_scale)
        l += factor * stats[chunk, 1]
        for c in range(d_v):
            total[c] += factor * acc[chunk, c]
    # as attend_query_tile: no key seen gives zeros; scores all -inf give l = 0,
    # so 0 · (1 / 0) = NaN, as the reference does
    inv_l = 1 / l if visible else zero  # float64: each output rounded to acc's type first
    for c in range(d_v):
        out_row[c] = narrow(dtype.type(total[c] * inv_l), out_fmt)


@njit(inline="always", **JIT_OPTIONS)
def call_partials(call, real):
    """The call's split-KV partials: stats (kv_heads, n_chunks, group · n_q, 2), acc (..., d_v)."""
    rows = call.group * call.n_q
    stats = carray(address_as_voidptr(call.stats), (call.kv_heads, call.n_chunks, rows, 2), real)
    acc = carray(address_as_voidptr(call.acc), (call.kv_heads, call.n_chunks, rows, call.d_v), real)
    return stats, acc


# The two loops' tasks, compiled as C callbacks the pool calls (``call`` points to one
# CALL record), each for one (query dtype, cache dtype) and only when a call first needs it:
#     key_chunk_task(...)    one (K/V head, chunk of SPLIT_KV_CHUNK keys), its partials
#                            into stats and acc
#     merge_task(...)        one (K/V head, row) merged from them
# A task closes over plain constants only (``input_format``: the input and compute
# scalar types, the 16-bit format; INT8), so that Numba's cache finds it again.
def _formats(dtype, cache_dtype):
    """(q's stored type, K/V's stored type, compute type, format) of a call."""
    stored, real, fmt = input_format(dtype)
    if cache_dtype == np.int8:
        return stored, np.int8, real, INT8
    if cache_dtype == np.uint8:
        return stored, np.uint8, real, INT4
    return stored, stored, real, fmt


@functools.cache
def key_chunk_task(dtype, cache_dtype):
    stored, kv_stored, real, fmt = _formats(dtype, cache_dtype)

    @cfunc(TASK, **JIT_OPTIONS)
    def key_chunk(call_address, task, worker):
        call = carray(call_address, 1, CALL)[0]
        q, _, _, _ = call_arrays(call, stored, real, kv_stored)
        k, v, k_scales, v_scales = call_cache(call, kv_stored, fmt)
        stats, acc = call_partials(call, real)
        head, chunk = task // call.n_chunks, task % call.n_chunks
        j0 = chunk * SPLIT_KV_CHUNK
        attend_key_chunk(q[head * call.group:(head + 1) * call.group], k[head, :call.n_k], v[head, :call.n_k],
                         k_scales[head], v_scales[head], j0, min(call.n_k, j0 + SPLIT_KV_CHUNK), call.offset,
                         real(call.q_factor), real(call.log2_scale), stats[head, chunk], acc[head, chunk], fmt)

    return key_chunk


@functools.cache
def merge_task(dtype, cache_dtype, out_dtype):
    stored, kv_stored, real, _ = _formats(dtype, cache_dtype)
    out_stored, out_fmt = output_format(dtype, out_dtype)

    @cfunc(TASK, **JIT_OPTIONS)
    def merge(call_address, task, worker):
        call = carray(call_address, 1, CALL)[0]
        _, _, _, out = call_arrays(call, stored, out_stored, kv_stored)
        stats, acc = call_partials(call, real)
        rows = call.group * call.n_q
        head, r = task // rows, task % rows
        i = r // call.group
        merge_chunks(stats[head, :, r], acc[head, :, r], out[head * call.group + r % call.group, i],
                     i + 1 + call.offset > 0, real(call.log2_scale), out_fmt)

    return merge


@njit(inline="always", **JIT_OPTIONS)
def call_cache(call, kv_stored, fmt):
    """The call's K and V, (kv_heads, kv_rows, ·) whole buffers of kv_stored (int4: two
    values a byte), and their scales (kv_heads, kv_rows, groups) float32 ((kv_heads, 0, 0)
    when not scaled)."""
    k_width = (call.d + 1) // 2 if fmt == INT4 else call.d
    v_width = (call.d_v + 1) // 2 if fmt == INT4 else call.d_v
    k = carray(address_as_voidptr(call.k), (call.kv_heads, call.kv_rows, k_width), kv_stored)
    v = carray(address_as_voidptr(call.v), (call.kv_heads, call.kv_rows, v_width), kv_stored)
    scaled_rows = call.kv_rows if call.k_scales else 0
    k_scales = carray(address_as_voidptr(call.k_scales), (call.kv_heads, scaled_rows, call.k_groups), np.float32)
    v_scales = carray(address_as_voidptr(call.v_scales), (call.kv_heads, scaled_rows, call.v_groups), np.float32)
    return k, v, k_scales, v_scales


def run(q, k, v, out, kv_rows, n_k, offset, q_factor, log2_scale, dtype, k_scales=None, v_scales=None):
    """out (B, n_q, d_v) from q (B, n_q, d), k (B_kv, ·, d), v (B_kv, ·, d_v) as
    ``rung3_numba_tiled.run`` gets them (16-bit inputs as uint16 views, ``dtype`` the
    inputs' own; K/V heads kv_rows rows apart, the first n_k of each read), with its
    offset (query i sees keys j < i + 1 + offset), sign of the scale (q_factor) and
    |scale| · log2(e).  An int8
    cache: k and v int8, k_scales and v_scales float32 (B_kv, n_k) with heads kv_rows apart;
    an int4 cache: k (B_kv, n_k, ceil(d / 2)) and v uint8, the scales (B_kv, n_k, groups).
    Extra memory: partials of B · n_chunks · n_q · (d_v + 2) in out's type."""
    heads, n_q, d = q.shape
    kv_heads, d_v = v.shape[0], out.shape[2]
    group = heads // kv_heads
    n_chunks = -(-n_k // SPLIT_KV_CHUNK)
    real = input_format(dtype)[1]
    stats = np.empty((kv_heads, n_chunks, group * n_q, 2), real)
    acc = np.empty((kv_heads, n_chunks, group * n_q, d_v), real)
    scales = (0, 0) if k_scales is None else (address(k_scales), address(v_scales))
    groups = [0 if x is None else x.shape[2] if x.ndim == 3 else 1 for x in (k_scales, v_scales)]
    call = np.array([(*map(address, (q, k, v, out, stats, acc)), *scales, heads, n_q, n_k, d, d_v,
                      kv_heads, kv_rows, group, n_chunks, offset, q_factor, log2_scale, *groups)], CALL)
    parallel_for(kv_heads * n_chunks, threads_for(2.0 * heads * n_q * n_k * (d + d_v)),
                 key_chunk_task(dtype, k.dtype), call, in_shares=True)
    parallel_for(heads * n_q, threads_for(4.0 * heads * n_q * n_chunks * d_v), merge_task(dtype, k.dtype, out.dtype),
                 call)
