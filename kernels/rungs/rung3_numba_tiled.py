"""numba_tiled: tiled attention with the online softmax, compiled by Numba.

The idea it adds over the ``numpy`` rung: the n_q x n_k score matrix is never
materialised.  Queries are cut into tiles of TILE_Q rows and keys into tiles of
TILE_K; each query tile walks over the key tiles keeping, per query, the running
maximum ``m`` and the running sum ``l`` of the softmax and an accumulator ``O`` of
weighted values (flash-attention style):

    S = Q_tile K_tileᵀ                                            (qk_tile)
    m_new = max(m, rowmax S),  P = exp(scale · (S - m_new)),
    alpha = exp(scale · (m - m_new)),  l = alpha · l + rowsum P    (online_softmax)
    O = alpha · O + P V_tile                                      (pv_tile)
    out = O / l                                                   after the last key tile

Every (batch·head, query tile) pair is one task of the project's thread pool (the one
c_tiled runs on, ``kernels.threads``), so both cores share the work even for a single
head: each task is compiled as a C callback (``query_tile_task``, a Numba ``cfunc``)
that the pool's threads call, the calling thread first.  What makes it fast on a CPU
without SVML:

- the tiles are stored transposed, one query per column (Qᵀ, Sᵀ = Pᵀ, Oᵀ), so that
  all three steps are vectorised across queries and K is read in place (V through
  a copy of its tile, zero-padded to whole register blocks);
- both products are register-blocked outer products: BLOCK_ROWS keys (or value
  columns) times one panel of BLOCK_VECTORS SIMD vectors of queries, 24 zmm (AVX-512)
  or 12 ymm (AVX2) vector accumulators summed over d (or over the keys) without
  leaving the registers.
  Numba cannot say "keep these in registers", and its loop vectoriser would rather
  sum along the contraction and pay a horizontal reduction per score (it runs no
  SLP vectoriser).  So the block is a small array on the stack (``register_block``),
  which LLVM promotes to registers because nothing else can point into it, and
  each update is one explicit SIMD fused multiply-add (``fma_vector``);
- the exponential is ``exp2``, a polynomial plus an exponent-field shift that LLVM
  vectorises, applied to (S - m) · scale · log2(e);
- on AVX-512 CPUs every step uses the whole 64-byte register: the explicit vectors
  are 64 bytes wide, the loops LLVM vectorises itself are allowed 512 bits
  (``prefer_wide_vectors``; LLVM would otherwise pick 256), and the tiles start on
  64-byte boundaries (``aligned_empty``).  Against the 32-byte build with 4 x 3
  blocks, 1.45x (float32) and 1.6x (float64) faster on a 2-core Xeon (Emerald
  Rapids), 8 heads, n = 4096, d = 64;
- no NumPy/BLAS call inside a task: OpenBLAS would start its own threads inside the
  pool's.

``register_block``, ``fma_vector``, ``exp2``, ``prefer_wide_vectors``, ``aligned_empty``,
the register-block shape (chosen for the CPU at import) and the JIT option sets come
from ``rung3_numba_simd``, which explains how they work.

Shapes: q (B, n_q, d), k (B_kv, n_k, d), v (B_kv, n_k, d_v) -> out (B, n_q, d_v),
float32, float64, bfloat16 or float16 (out of the inputs' type, or float32 for the
16-bit types: what a 16-bit KV cache's attention returns); B is batch and heads
flattened, B_kv divides it (grouped-query attention: query head h reads K/V head
h // (B / B_kv), in place; a (head, query tile) task reads its own K/V head's tiles).
A call under the pool's size for threads (``threads.threads_for``) runs on the calling
thread alone.
Cost: time O(B · n_q · n_k · (d + d_v)) (about half of it when causal; with a window of
w keys and s sinks, O(B · n_q · (w + s + TILE_Q) · (d + d_v)));
extra memory O(threads · TILE_Q · (TILE_K + d + d_v)) (TILE_Q_HALF for 16-bit
inputs), independent of n: per-task scratch tiles only.
Causal, windows and sinks (``kernels.band``): causal query i sees keys j <= i + (n_k - n_q).
Key tiles a query tile cannot see are skipped (``attend_query_tile`` walks the sinks and
the windows as two runs of tiles), and on a tile crossing the diagonal or a window's
left edge so are the blocks and panels of queries that see none of its keys (in the
softmax and P V as in qk_tile); a key a query does not see gets the score -inf and
stays out of that query's P V, so that not even 0 · NaN reaches it.  Tasks are handed
out heaviest first (``task_order``).

bfloat16 and float16: the inputs reach the tasks as their bits (uint16) and are widened
to float32, exactly (``rung3_numba_half.widen``), inside the tiles: Qᵀ as it is filled,
the V tile as it is copied, and each key tile into a float32 scratch tile (TILE_K x d)
that qk_tile reads (float32 and float64 keys are read in place, as before).  No
widened copy of a whole input is made.  Scores, softmax, P and P·V are float32, as for
float32 inputs.  An output of the 16-bit type (``kernels.attention``) is written here,
each value rounded to nearest even as its row is stored (``rung3_numba_half.narrow``:
NumPy's and ml_dtypes' casts of the float32 result, bit for bit), so that no pass over
the output is left; a float32 output (``attention_unrounded``) is written as is.
A 16-bit task takes TILE_Q_HALF = 288 queries, three times float32's: widening a key
tile (4,096 values at d = 64, 0.1 ns each on the Zen 3 below) costs what the tile's
scores, softmax and P·V cost for about 2 queries, so with float32's 96-query tiles the
16-bit types ran 0.97-0.99x float32's speed; now each widened key and value tile
serves three times the queries.  Measured on a 2-core AMD EPYC (Zen 3, AVX2, F16C),
8 heads, n = 4,096, d = 64, 1 and 2 threads, the 16-bit and float32 calls alternating
in one process (medians of 12 rounds' ratios, each pair of types and shapes in 2-4
runs): bfloat16 and float16 ran at 0.94-1.0x float32's speed in full attention and
0.91-0.99x causal when the API still rounded the output and the tiles were float32's;
now 1.01-1.04x full and 1.00-1.03x causal, 0.97-0.99x in runs disturbed by other work
on the machine (float32 and float64 themselves unchanged, within 1%).  (float32 ran
2-3% faster with 288-query tiles on that CPU too; its tile is left as it was
chosen on AVX-512, where larger ones measured no faster.)
Cost: the widening is O(TILE_Q_HALF · d + n_k · (d + d_v)) per query tile, beside its
O(TILE_Q_HALF · n_k · (d + d_v)) products, and the rounding O(d_v) per query; one more
scratch tile per task.  A 16-bit dtype gets its own compiled task, its format and its
output's constants in it.

Decoding (up to SPLIT_KV_MAX_ROWS = 4 queries per head) takes the split-KV path of
``rung3_numba_split_kv`` instead.
"""
import functools
import math

import numpy as np
from numba import carray, cfunc, njit

from ..api import kv_layout
from ..band import Band
from ..cache_formats import FORMATS
from ..threads import address, parallel_for, threads_for
from . import rung3_numba_split_kv
from .rung3_numba_half import input_format, narrow, output_format, rows_in_compute_type, widen, widen_rows
from .rung3_numba_simd import (
    BLOCK_ROWS, BLOCK_VECTORS, INTERNAL, JIT_OPTIONS, TASK, aligned_empty, call_arrays, exp2, fma_vector,
    panel_width, prefer_wide_vectors, register_block,
)
from .rung3_numba_split_kv import SPLIT_KV_MAX_ROWS

# Query rows per parallel task: a multiple of every panel (AVX-512: 48 float32, 24 float64
# queries; AVX2: 24, 12).  Its Qᵀ, Sᵀ and Oᵀ tiles (24 KB each at d = 64, float32) and a
# key tile stay near L1; larger tiles (144 rows, or TILE_K = 128) measured no faster.
TILE_Q = 96
# 16-bit inputs: three times the rows, so that each key tile widened into scratch (and each V
# tile widened into its copy) serves three times the queries (the module docstring says what it
# bought; 192 rows gained less, 384 measured slower than 288).
TILE_Q_HALF = 3 * TILE_Q
TILE_K = 64  # keys per step of the online softmax (a multiple of BLOCK_ROWS)
LOG2_E = 1.0 / math.log(2.0)
UNBOUNDED = 2**62  # a window side without a bound: further than any key, with room to add


@njit(**INTERNAL)
def qk_tile(qt, k, j0, first, visible, st):
    """Sᵀ = K_tile Qᵀ: st[j, i] = k[j0 + j] · qt[:, i].

    qt (d, rows) holds the query tile transposed, rows a multiple of the panel
    width; k (n_k, d) the keys of one head; st (TILE_K, rows).  Query i sees the tile's
    keys [first[i], visible[i]), both non-decreasing: a panel computes the blocks of
    BLOCK_ROWS keys from the one holding its first query's first key to the one holding
    its last query's last (keys past n_k repeat the last one; such scores are never
    read, nor those of keys a query does not see: masked).
    Key blocks are the outer loop: their BLOCK_ROWS rows of K stay in L1 while the
    panels of Qᵀ stream past (float64: 10% faster than panels outer).
    """
    prefer_wide_vectors()
    block = register_block(qt.dtype)
    panel = block.shape[1]
    lanes = panel // BLOCK_VECTORS
    d, rows = qt.shape
    last_key = k.shape[0] - 1
    for j in range(0, visible[rows - 1], BLOCK_ROWS):
        for i0 in range(0, rows, panel):
            if j >= visible[i0 + panel - 1] or j + BLOCK_ROWS <= first[i0]:
                continue
            block[:] = 0
            for p in range(d):
                q_row = qt[p]
                for r in range(BLOCK_ROWS):
                    key = k[min(j0 + j + r, last_key), p]
                    for u in range(0, panel, lanes):
                        fma_vector(block[r], u, key, q_row, i0 + u)
            for r in range(BLOCK_ROWS):
                st_row = st[j + r, i0 : i0 + panel]
                for u in range(panel):
                    st_row[u] = block[r, u]


@njit(inline="always", **JIT_OPTIONS)  # inlined into the caller's IR: one compile less
def mask_band(st, first, visible, keys, start, stop):
    """st[j, i] = -inf for the keys j < first[i] and visible[i] <= j < keys that query
    start <= i < stop must not see."""
    neg_inf = st.dtype.type(-np.inf)
    for i in range(start, stop):
        for j in range(first[i]):
            st[j, i] = neg_inf
        for j in range(visible[i], keys):
            st[j, i] = neg_inf


@njit(**INTERNAL)
def online_softmax(st, keys, start, stop, log2_scale, m, l, alpha, m_new, shift):
    """One online-softmax step over a tile of unscaled scores Sᵀ = K Qᵀ, in place.

    st (TILE_K, rows): its first ``keys`` rows become P = 2**((S - m_new) · log2_scale),
    log2_scale > 0 (masked scores are -inf and give 0), for the queries start <= i < stop:
    the queries outside see none of the tile's keys (before a causal diagonal, after a
    window's left edge), and their state stands as it is (for them the step would be
    alpha = 1, P = 0).  m, l (rows,) are the running
    max and sum; alpha (rows,) receives the factor that rescales what earlier tiles
    summed; m_new and shift (rows,) are scratch.  Every loop runs across queries,
    which LLVM vectorises.  Scaling after the max subtraction keeps large logits
    accurate: S - m is exact for the scores that matter, and only that small
    difference is rounded.
    """
    prefer_wide_vectors()  # LLVM vectorises these loops itself
    neg_inf = st.dtype.type(-np.inf)
    zero = st.dtype.type(0.0)
    # Unsigned indices: Numba adds no negative-index fix-up to them, which for a loop
    # starting at a run-time offset would keep LLVM from vectorising it (2.3x slower).
    first, rows = np.uint64(start), np.uint64(stop)
    for i in range(first, rows):
        m_new[i] = m[i]
    for j in range(keys):
        s = st[j]
        for i in range(first, rows):
            # m_new = max(m, rowmax S); fmax skips a NaN score, which poisons the row
            # through P.  (Written as "s if s > m_new else m_new", the store back in
            # place became a masked store, microcoded on AMD CPUs: 3x slower.)
            m_new[i] = np.fmax(m_new[i], s[i])
    for i in range(first, rows):
        # While every score seen is -inf (m_new = -inf) shift by 0, so that P = 0
        # rather than exp(-inf + inf) = NaN.
        shift[i] = zero if m_new[i] == neg_inf else m_new[i]
        # Before any finite score m = -inf and alpha = 0: there is nothing to rescale.
        alpha[i] = exp2((m[i] - shift[i]) * log2_scale)
        l[i] *= alpha[i]
        m[i] = m_new[i]
    for j in range(keys):
        s = st[j]
        for i in range(first, rows):
            p = exp2((s[i] - shift[i]) * log2_scale)
            s[i] = p
            l[i] += p


@njit(**INTERNAL)
def pv_tile(pt, v_tile, first, visible, start, stop, alpha, ot, masked):
    """Oᵀ = alpha · Oᵀ + V_tileᵀ Pᵀ, query i summing over exactly its keys
    [first[i], visible[i]) (both non-decreasing).

    pt (TILE_K, rows) = Pᵀ; v_tile (TILE_K, width) the tile's values, zero-padded to
    width = d_v rounded up to BLOCK_ROWS; alpha, first, visible (rows,); ot (width, rows)
    = Oᵀ.  Only the queries start <= i < stop (multiples of the panel width), as
    online_softmax.
    A panel sums its keys in register blocks: all the keys any of its queries sees when
    they are not ``masked`` for some of them (a tile crossing the causal diagonal or a
    window's left edge) or their values are finite (a masked key's P is exactly 0, and
    0 · v adds nothing); else only those all its queries see, the few more that only some
    see added query by query, so that 0 · NaN in V gives NaN exactly where the key is
    seen.  The choice depends on the panel's keys only, not on the query tile around it
    (the 16-bit tiles' sums are float32's, bit for bit).  A key is never skipped for a
    small weight.
    """
    prefer_wide_vectors()
    block = register_block(pt.dtype)
    panel = block.shape[1]
    lanes = panel // BLOCK_VECTORS
    width = ot.shape[0]
    one = pt.dtype.type(1.0)
    for c in range(width):
        o_row = ot[c]
        for i in range(np.uint64(start), np.uint64(stop)):  # unsigned: see online_softmax
            o_row[i] *= alpha[i]
    for i0 in range(start, stop, panel):
        # keys [shared_lo, shared_hi) summed for the whole panel: every key of it when the
        # values are finite, else those all its queries see (none when a window's left edge
        # passes the whole panel's diagonal: then all are added query by query)
        shared_lo, shared_hi = first[i0], visible[i0 + panel - 1]
        if masked and not all_finite(v_tile, shared_lo, shared_hi):
            shared_lo = first[i0 + panel - 1]
            shared_hi = max(shared_lo, visible[i0])
        for c0 in range(0, width, BLOCK_ROWS):
            block[:] = 0
            for j in range(np.uint64(shared_lo), np.uint64(shared_hi)):  # unsigned: see online_softmax
                p_row = pt[j]
                v_row = v_tile[j]
                for r in range(BLOCK_ROWS):
                    for u in range(0, panel, lanes):
                        fma_vector(block[r], u, v_row[c0 + r], p_row, i0 + u)
            for r in range(BLOCK_ROWS):  # Oᵀ[c0 + r, panel] += block[r]
                for u in range(0, panel, lanes):
                    fma_vector(ot[c0 + r], i0 + u, one, block[r], u)
        for i in range(i0, i0 + panel):
            _add_weighted(pt, v_tile, i, first[i], min(shared_lo, visible[i]), ot)
            _add_weighted(pt, v_tile, i, shared_hi, visible[i], ot)


@njit(inline="always", **JIT_OPTIONS)  # inlined into the caller's IR: one compile less
def all_finite(rows, begin, end):
    """Whether rows[begin:end] holds no NaN or infinity: x · 0 is 0 for every finite x and
    NaN otherwise (no fast-math flag lets LLVM fold it away)."""
    total = rows.dtype.type(0.0)
    for j in range(begin, end):
        row = rows[j]
        for c in range(row.size):
            total += row[c] * 0
    return total == 0


@njit(inline="always", **JIT_OPTIONS)  # inlined into pv_tile
def _add_weighted(pt, v_tile, i, j_from, j_to, ot):
    """Oᵀ[:, i] += Σ_{j_from <= j < j_to} P[i, j] V_tile[j], one query's keys one by one."""
    for j in range(j_from, j_to):
        weight = pt[j, i]
        v_row = v_tile[j]
        for c in range(ot.shape[0]):
            ot[c, i] += weight * v_row[c]


@njit(inline="always", **JIT_OPTIONS)  # inlined into the caller's IR: one compile less
def task_order(task, n_heads, n_query_tiles):
    """(head, query tile) of a parallel task, heaviest first: the pool hands tasks out in
    index order, and under the causal mask a head's last query tiles see the most keys,
    so the tasks left for the end, when a thread that claims one may be the one the call
    waits for, are the lightest."""
    return task % n_heads, n_query_tiles - 1 - task // n_heads


def query_tile_rows(fmt):
    """Query rows per task for inputs of format ``fmt`` (``input_format``): TILE_Q, or
    TILE_Q_HALF for the 16-bit formats."""
    return TILE_Q_HALF if fmt else TILE_Q


@njit(**INTERNAL)
def attend_query_tile(q, k, v, out, i0, tile_rows, offset, left_offset, sinks, q_factor, log2_scale, dtype, fmt,
                      out_fmt):
    """out[i0 : i0 + tile_rows] for one head: q (n_q, d), k (n_k, d), v (n_k, d_v),
    out (n_q, d_v).  Query i sees the keys of its window, i + left_offset <= j < i + 1 +
    offset, and the sinks j < sinks below its right edge (``_constants``); the scores are
    (q_factor · q) · k, scaled by log2_scale > 0 inside the softmax, all computed in
    ``dtype``.  q, k, v are of that type, or the uint16 bits of the 16-bit format fmt
    (a literal), widened as the tiles are filled: Qᵀ and the V tile as they are copied,
    each key tile into a scratch tile that qk_tile reads (a float k is read in place).
    out is of that type (out_fmt AS_IS) or the uint16 bits of the 16-bit format out_fmt,
    each row rounded as it is stored (``narrow``).

    The keys are walked in two runs, each a range of key tiles with, per query, a range
    of keys [lo, hi) whose ends never decrease from query to query: the sinks, for the
    queries whose window starts after them, then the windows (from key 0 for a query
    whose window starts within the sinks).  No key tile outside them is visited: a
    window of w keys costs O(tile_rows · (w + tile_rows + sinks)), not O(tile_rows · n_k)."""
    n_q, d = q.shape
    n_k, d_v = v.shape
    n_rows = min(tile_rows, n_q - i0)
    # The last tile is cut to whole panels, so a short query (decoding, n_q = 1)
    # does not pay for a whole tile.
    panel = panel_width(dtype)
    rows = (n_rows + panel - 1) // panel * panel
    width = (d_v + BLOCK_ROWS - 1) // BLOCK_ROWS * BLOCK_ROWS
    # Tile-sized scratch, all allocated alike (each distinct allocation call is one
    # more function to compile) and filled by hand; rows of whole panels keep every
    # row of qt, st and ot on a vector boundary, as the panels' vector loads want.
    qt = aligned_empty(d, rows, dtype)
    st = aligned_empty(TILE_K, rows, dtype)
    ot = aligned_empty(width, rows, dtype)
    v_tile = aligned_empty(TILE_K, width, dtype)
    k_tile = aligned_empty(TILE_K if fmt else 0, d, dtype)  # 16-bit keys, widened
    state = aligned_empty(5, rows, dtype)
    m, l, alpha, m_new, shift = state[0], state[1], state[2], state[3], state[4]
    window_lo, window_hi, sinks_hi = np.empty(rows, np.int64), np.empty(rows, np.int64), np.empty(rows, np.int64)
    sinks_lo = np.zeros(rows, np.int64)  # every query's sinks start at key 0
    first, visible = np.empty(rows, np.int64), np.empty(rows, np.int64)
    qt[:] = 0
    ot[:] = 0
    v_tile[:] = 0
    k_tile[:] = 0  # rows past a tile's keys are read (their scores never are): no garbage
    m[:] = -np.inf
    l[:] = 0
    for r in range(n_rows):
        for c in range(d):
            qt[c, r] = widen(q[i0 + r, c], fmt) * q_factor
    # Padding rows past n_q follow the same formulas, which keeps every range sorted.
    for r in range(rows):
        window_hi[r] = min(n_k, max(0, i0 + r + 1 + offset))
        lo = min(n_k, max(0, i0 + r + left_offset))
        after_sinks = lo > sinks
        window_lo[r] = lo if after_sinks else 0
        sinks_hi[r] = min(sinks, window_hi[r]) if after_sinks else 0
    last = n_rows - 1
    for run in range(2):
        if run == 0:  # the sinks of the queries whose window starts after them
            lo_run, hi_run, j_begin, j_end = sinks_lo, sinks_hi, 0, sinks_hi[last]
        else:
            lo_run, hi_run, j_begin, j_end = window_lo, window_hi, window_lo[0], window_hi[last]
        for j0 in range(j_begin, j_end, TILE_K):
            n_valid = min(TILE_K, j_end - j0)
            for r in range(rows):
                first[r] = min(n_valid, max(0, lo_run[r] - j0))
                visible[r] = min(n_valid, max(0, hi_run[r] - j0))
            keys = visible[rows - 1]
            # the panels [start, stop) that see a key of this tile: the others (before a
            # causal diagonal, past a window's left edge) are skipped (by qk_tile itself)
            start, stop = 0, rows
            while visible[start] == 0:
                start += 1
            while first[stop - 1] >= visible[stop - 1]:
                stop -= 1
            start, stop = start // panel * panel, (stop + panel - 1) // panel * panel
            keys_read, first_key = rows_in_compute_type(k, j0, keys, k_tile, fmt)
            qk_tile(qt, keys_read, first_key, first, visible, st)
            masked = visible[0] < keys or first[rows - 1] > 0
            if masked:
                mask_band(st, first, visible, keys, start, stop)
            online_softmax(st, keys, start, stop, log2_scale, m, l, alpha, m_new, shift)
            # The copy's padding columns (zeros) let the last register block of value
            # columns read whole rows, even when d_v is not a multiple of BLOCK_ROWS.
            widen_rows(v, j0, keys, v_tile, fmt)
            pv_tile(st, v_tile, first, visible, start, stop, alpha, ot, masked)
    for r in range(n_rows):
        # A row that sees no key has O = 0 and gets zeros; one whose scores
        # were all -inf has l = 0 and gets 0 * inf = NaN, as the reference does.
        # (1 / l is float64: each output is rounded to dtype, then to a 16-bit out_fmt.)
        sees_a_key = i0 + r + 1 + offset > 0
        inv_l = 1 / l[r] if sees_a_key else dtype(0.0)
        for c in range(d_v):
            out[i0 + r, c] = narrow(dtype(ot[c, r] * inv_l), out_fmt)


# What a task needs of its call: the arrays' addresses and shapes and the call's
# constants, filled by run() and read by the compiled tasks.
CALL = np.dtype([
    ("q", np.intp), ("k", np.intp), ("v", np.intp), ("out", np.intp),
    ("heads", np.int64), ("n_q", np.int64), ("n_k", np.int64), ("d", np.int64), ("d_v", np.int64),
    ("kv_heads", np.int64), ("kv_rows", np.int64), ("group", np.int64), ("n_query_tiles", np.int64),
    ("offset", np.int64), ("left_offset", np.int64), ("sinks", np.int64), ("q_factor", np.float64),
    ("log2_scale", np.float64),
])


# The task, compiled as a C callback the pool calls (``call`` points to one CALL record),
# for one dtype and only when a call first needs it (a cached process loads only what it
# runs): attention for one (head, query tile) pair, allocating no more than its tiles.
# It closes over plain constants only (its input and compute scalar types and the 16-bit
# format, ``input_format``), so that Numba's cache finds it again in the next process
# (a closure over a dispatcher would be compiled anew in each); the format reaches
# attend_query_tile as a literal, compiled into its own specialisation.
@functools.cache
def query_tile_task(dtype, out_dtype):
    stored, real, fmt = input_format(dtype)
    out_stored, out_fmt = output_format(dtype, out_dtype)
    tile_rows = query_tile_rows(fmt)

    @cfunc(TASK, **JIT_OPTIONS)
    def query_tile(call_address, task, worker):
        call = carray(call_address, 1, CALL)[0]
        q, k, v, out = call_arrays(call, stored, out_stored, stored)
        head, tile = task_order(task, call.heads, call.n_query_tiles)
        kv_head = head // call.group
        attend_query_tile(q[head], k[kv_head, :call.n_k], v[kv_head, :call.n_k], out[head], tile * tile_rows,
                          tile_rows, call.offset, call.left_offset, call.sinks, real(call.q_factor),
                          real(call.log2_scale), real, fmt, out_fmt)

    return query_tile


def run(q, k, v, out, causal, scale, band=None, n_k=None):
    """q (B, n_q, d) C-contiguous, k (B_kv, n_k, d), v (B_kv, n_k, d_v) with B_kv dividing B
    (grouped-query attention: query head h reads K/V head h // (B / B_kv)) and C-contiguous
    rows, heads any whole number of rows apart (``api.kv_layout``: a KV cache's spare
    capacity is skipped, not copied); one dtype of ``kernels.dtypes``, already validated;
    out (B, n_q, d_v) C-contiguous, of its compute type or, for 16-bit inputs, of their
    own type, each row rounded to nearest even as it is stored.  Writes every element of
    out.  Up to SPLIT_KV_MAX_ROWS queries per query head (decoding) take the split-KV
    path, which reads each K/V head once for its whole group, unless the band has a
    window (the query tiles skip the keys outside it).  band: the keys each query sees
    (``kernels.band``; None: full, or causal).  16-bit inputs and outputs go to compiled
    code as their bits (uint16 views).  n_k: given, k (B_kv, kv_rows, d) and v (B_kv,
    kv_rows, d_v) are C-contiguous buffers whose heads' first n_k rows are the keys and
    values (a KV cache's whole buffers, ``KVCache.attend``): read in place, with no layout
    to work out."""
    band = band or Band.of(causal)
    dtype = q.dtype
    stored, _, fmt = input_format(dtype)
    if n_k is None:
        k, v, kv_rows = kv_layout(k, v)
        n_k = k.shape[1]
    else:
        kv_rows = k.shape[1]
    q, k, v = (a.view(stored) for a in (q, k, v))
    heads, n_q, d = q.shape
    kv_heads, d_v = v.shape[0], v.shape[2]
    offset, left_offset, q_factor, log2_scale = _constants(n_q, n_k, band, scale)
    if n_q <= SPLIT_KV_MAX_ROWS and not band.windowed:
        rung3_numba_split_kv.run(q, k, v, out, kv_rows, n_k, offset, q_factor, log2_scale, dtype)
        return
    n_query_tiles = -(-n_q // query_tile_rows(fmt))
    call = np.array([(*map(address, (q, k, v, out)), heads, n_q, n_k, d, d_v, kv_heads, kv_rows,
                      heads // kv_heads, n_query_tiles, offset, left_offset, band.sinks, q_factor, log2_scale)],
                    CALL)
    seen = float(band.seen_keys(n_q, n_k).sum())  # the band's scores, n_q · n_k when full
    parallel_for(heads * n_query_tiles, threads_for(2.0 * heads * seen * (d + d_v)),
                 query_tile_task(dtype, out.dtype), call)


def run_int8(q, k, k_scales, v, v_scales, out, causal, scale):
    """As ``run``, against an int8 KV cache: q float32 (B, n_q, d); k int8 (B_kv, n_k, d) and
    k_scales float32 (B_kv, n_k), key j of head h being k_scales[h, j] · k[h, j] (v, v_scales
    alike), heads kv_rows rows apart in all four; out float32 (B, n_q, d_v).  Decoding (up to
    SPLIT_KV_MAX_ROWS queries per head) reads the int8 rows in place, a block at a time
    dequantised into scratch: 1 byte per element and 4 per row read.  More queries per head
    (a prompt's chunk against the cache) are compute-bound: the visible cache is dequantised
    to float32 first, O(n_k · (d + d_v)) beside the O(n_q · n_k · (d + d_v)) products."""
    _run_scaled(FORMATS["int8"], q, k, k_scales, v, v_scales, out, causal, scale)


def run_int4(q, k, k_scales, v, v_scales, out, causal, scale):
    """As ``run_int8``, against an int4 KV cache (``kernels.cache_formats``): k uint8
    (B_kv, n_k, ceil(d / 2)), two codes a byte, with k_scales float32 (B_kv, n_k,
    ceil(d / 32)), one per group of 32 values (v, v_scales alike for d_v = out's last
    axis).  Decoding reads the bytes in place, a block of rows at a time dequantised into
    scratch: half a byte per element and 4 per group read.  More queries per head: the
    visible cache dequantised to float32 first, as ``run_int8`` does."""
    FORMATS["int4"].check_arrays("numba_tiled", q.shape[2], out.shape[2], k, k_scales, v, v_scales)
    _run_scaled(FORMATS["int4"], q, k, k_scales, v, v_scales, out, causal, scale)


def _run_scaled(fmt, q, k, k_scales, v, v_scales, out, causal, scale):
    """run_int8's and run_int4's call (fmt: their ``CacheFormat``): decoding through the
    split-KV path on the cache in place, more queries per head on the visible cache
    dequantised as ``fmt.decode`` dequantises it."""
    if q.shape[1] > SPLIT_KV_MAX_ROWS:
        run(q, fmt.decode(k, k_scales, width=q.shape[2]), fmt.decode(v, v_scales, width=out.shape[2]),
            out, causal, scale)
        return
    kv_rows = _scaled_layout(k, k_scales, v, v_scales)
    offset, _, q_factor, log2_scale = _constants(q.shape[1], k.shape[1], Band.of(causal), scale)
    rung3_numba_split_kv.run(q, k, v, out, kv_rows, k.shape[1], offset, q_factor, log2_scale, q.dtype, k_scales,
                             v_scales)


def _scaled_layout(k, k_scales, v, v_scales):
    """The rows between K/V heads shared by an int8 or int4 cache's four arrays
    (``api.kv_layout``; scales (B_kv, n_k) or (B_kv, n_k, groups)); ValueError when they do
    not share one (a KVCache's always do)."""
    _, _, kv_rows = kv_layout(k, v)
    per_row = [s if s.ndim == 3 else s[..., None] for s in (k_scales, v_scales)]   # (B_kv, n_k, groups)
    scale_rows = {kv_layout(s, s)[2] for s in per_row}
    if scale_rows != {kv_rows} or kv_layout(k, v)[0] is not k:
        raise ValueError("a scaled cache's keys, values and scales must be views of buffers with "
                         "one row count per head (a KVCache's are)")
    return kv_rows


def _constants(n_q, n_k, band, scale):
    """(offset, left_offset, q_factor, log2_scale): query i sees keys i + left_offset <= j <
    i + 1 + offset of its window (the band's sinks besides); the running max
    is taken over unscaled scores, so the sign of the scale moves (exactly) into q: -1, or 0
    for scale = 0, which makes every score 0 (NaN where an input is not finite) while
    log2_scale stays positive, so that a masked score (-inf) still weighs exp(-inf) = 0
    rather than exp(-inf · 0) = NaN."""
    offset = n_k if band.right is None else n_k - n_q + band.right
    left_offset = -UNBOUNDED if band.left is None else n_k - n_q - band.left
    return offset, left_offset, np.sign(scale), abs(scale) * LOG2_E if scale != 0 else 1.0
