"""numba_tiled: tiled attention with the online softmax, compiled by Numba.

The idea it adds over the ``numpy`` rung: the n_q x n_k score matrix is never
materialised.  Queries are cut into tiles of TILE_Q rows and keys into tiles of
TILE_K; each query tile walks over the key tiles keeping, per row, the running
maximum ``m`` and the running sum ``l`` of the softmax and an accumulator ``acc``
of weighted values (flash-attention style):

    S = scale * Q_tile K_tileᵀ                    (qk_tile)
    m_new = max(m, rowmax(S)),  P = exp(S - m_new) (online_softmax)
    l = l * exp(m - m_new) + rowsum(P)
    acc = acc * exp(m - m_new) + P V_tile          (pv_tile)
    out = acc / l                                  after the last key tile

One ``prange`` runs over every (batch·head, query tile) pair, so both cores share
the work even for a single head.  What makes it fast on a CPU without SVML:

- both products are 4 x 2 register blocks of dot products (``dot_4x2``) whose
  contraction runs over contiguous memory (Q and K rows; P rows and the rows of
  a transposed V tile), so LLVM emits FMA vector loops;
- the exponential is ``exp2``, a polynomial plus an exponent-field shift that LLVM
  vectorises, applied to (S - m) · scale · log2(e);
- no NumPy/BLAS call inside the parallel loop: OpenBLAS would start its own
  threads inside Numba's and warn that the program may hang.

Shapes: q (B, n_q, d), k (B, n_k, d), v (B, n_k, d_v) -> out (B, n_q, d_v),
float32 or float64; B is batch and heads flattened.
Cost: time O(B · n_q · n_k · (d + d_v)) (about half of it when causal);
extra memory O(threads · tile · (tile + d + d_v)), independent of n: per-task
scratch tiles only.
Causal: query i sees keys j <= i + (n_k - n_q); key tiles a query tile cannot
see are skipped, and on tiles crossing the diagonal each row stops at its own last
key (no -inf masking pass).  Query tiles are interleaved light/heavy across tasks.
"""
import math

import numba
import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from .threads import budget

TILE_Q = 128  # query rows per parallel task (a multiple of 4)
TILE_K = 64  # keys per step of the online softmax (a multiple of 2)
# The tile loops read their bounds from the arrays rather than from these constants:
# with constant trip counts LLVM unrolls the inlined micro-kernels and the compile
# time triples.

# No 'nnan'/'ninf': masked scores are -inf and NaN in the inputs must propagate.
FASTMATH = {"reassoc", "contract", "nsz", "arcp"}
# IEEE division (x / 0 -> inf or NaN) instead of Python's ZeroDivisionError.
JIT_OPTIONS = {"fastmath": FASTMATH, "error_model": "numpy", "cache": True}
LOG2_E = 1.0 / math.log(2.0)


def _exp2_coefficients(degree, float_type):
    """Taylor coefficients of 2**f = exp(f ln 2), highest power first.  On |f| <= 1/2
    the truncation error is below (ln 2 / 2)**(degree+1) / (degree+1)!, a fraction of
    an ulp for degree 7 (float32) and 13 (float64)."""
    return tuple(float_type(math.log(2.0) ** n / math.factorial(n)) for n in range(degree, -1, -1))


def exp2(t):
    """2**t; compiled code only (see _exp2_overload)."""
    raise NotImplementedError("exp2 is only callable from jitted code")


@overload(exp2, jit_options={"fastmath": FASTMATH, "error_model": "numpy"})
def _exp2_overload(t):
    """Branch-free 2**t that LLVM can vectorise (no libm call, no SVML here).

    t = k + f with k = rint(t), |f| <= 1/2; 2**f is a polynomial and 2**k is built
    directly in the exponent field.  Within 1 ulp for results in the normal range;
    t < min_exponent (and -inf) gives 0, t >= max_exponent - 1/2 gives inf, NaN
    stays NaN (the clamps are written so that a NaN compares false and passes
    through).  Attention only calls it with t <= 0.
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
        scale = int_type((int_type(k) + bias) << mantissa_bits).view(float_type)
        result = p * scale
        result = zero if t < min_exponent else result
        return inf if t > max_exponent else result

    return exp2_impl


@njit(**JIT_OPTIONS)
def dot_4x2(a0, a1, a2, a3, b0, b1, length):
    """The 4 x 2 dot products a_i[:length] · b_j[:length] of four rows a_i and two
    rows b_j, returned row by row.  Eight running sums stay in registers while the
    contraction runs over contiguous memory, which LLVM turns into FMA vector loops.
    """
    zero = a0.dtype.type(0.0)
    s00 = s01 = s10 = s11 = s20 = s21 = s30 = s31 = zero
    for x in range(length):
        s00 += a0[x] * b0[x]
        s01 += a0[x] * b1[x]
        s10 += a1[x] * b0[x]
        s11 += a1[x] * b1[x]
        s20 += a2[x] * b0[x]
        s21 += a2[x] * b1[x]
        s30 += a3[x] * b0[x]
        s31 += a3[x] * b1[x]
    return s00, s01, s10, s11, s20, s21, s30, s31


@njit(**JIT_OPTIONS)
def qk_tile(q_tile, k, j0, scores):
    """scores = q_tile @ k[j0 : j0 + TILE_K]ᵀ: q_tile (rows, d) with rows a multiple of
    4, k (n_k, d) the keys of one head, scores (rows, TILE_K).  Columns past n_k repeat the last key (their
    scores are never read), so every block is full."""
    tile_q, tile_k = scores.shape
    d = q_tile.shape[1]
    last_key = k.shape[0] - 1
    for row in range(0, tile_q, 4):
        q0, q1, q2, q3 = q_tile[row], q_tile[row + 1], q_tile[row + 2], q_tile[row + 3]
        for col in range(0, tile_k, 2):
            s00, s01, s10, s11, s20, s21, s30, s31 = dot_4x2(
                q0, q1, q2, q3, k[min(j0 + col, last_key)], k[min(j0 + col + 1, last_key)], d)
            scores[row, col], scores[row, col + 1] = s00, s01
            scores[row + 1, col], scores[row + 1, col + 1] = s10, s11
            scores[row + 2, col], scores[row + 2, col + 1] = s20, s21
            scores[row + 3, col], scores[row + 3, col + 1] = s30, s31


@njit(**JIT_OPTIONS)
def online_softmax(scores, n_keys, log2_scale, m, l, acc):
    """One online-softmax step over a tile of unscaled scores S = Q Kᵀ, in place.

    scores (rows, TILE_K) becomes P = 2**((S - m_new) · log2_scale) on the first
    n_keys[r] columns of row r (the keys row r sees; the rest is left untouched).
    m, l (rows,) are the running max and sum, acc (rows, d_v) is rescaled.
    Scaling after the max subtraction keeps large logits accurate: S - m is exact
    for the scores that matter, and only that small difference is rounded again.
    """
    neg_inf = scores.dtype.type(-np.inf)
    zero = scores.dtype.type(0.0)
    for r in range(scores.shape[0]):
        n = n_keys[r]
        if n == 0:
            continue
        row = scores[r]
        # m = rowmax(S); a NaN score is skipped here and poisons the row through P.
        m_new = m[r]
        for j in range(n):
            m_new = row[j] if row[j] > m_new else m_new
        # While every score seen is -inf (m_new = -inf) shift by 0, so that P = 0
        # rather than exp(-inf + inf) = NaN.
        shift = zero if m_new == neg_inf else m_new
        # alpha rescales what earlier tiles summed; before any finite score there is
        # nothing to rescale, and (-inf - shift) · 0 would be NaN when scale = 0.
        alpha = zero if m[r] == neg_inf else exp2((m[r] - shift) * log2_scale)
        row_sum = zero
        for j in range(n):
            p = exp2((row[j] - shift) * log2_scale)
            row[j] = p
            row_sum += p
        l[r] = l[r] * alpha + row_sum
        m[r] = m_new
        if alpha != 1:
            acc_row = acc[r]
            for c in range(acc_row.size):
                acc_row[c] *= alpha


@njit(**JIT_OPTIONS)
def pv_tile(p, v_tile_t, n_keys, acc):
    """acc += P @ V_tile, row r summing over exactly its n_keys[r] visible keys.

    p (rows, TILE_K), v_tile_t (d_v rounded up to 2, TILE_K) = V_tileᵀ,
    acc (rows, d_v rounded up to 2), rows a multiple of 4.  n_keys is non-decreasing down the tile, so a
    block of rows shares the keys of its first row; the few extra keys of the later
    rows on a diagonal tile are added one row at a time.  A key is never skipped for
    a small weight: 0 * NaN in V must still give NaN.
    """
    tile_q, width = acc.shape
    for row in range(0, tile_q, 4):
        shared = n_keys[row]
        if shared > 0:
            p0, p1, p2, p3 = p[row], p[row + 1], p[row + 2], p[row + 3]
            for col in range(0, width, 2):
                s00, s01, s10, s11, s20, s21, s30, s31 = dot_4x2(
                    p0, p1, p2, p3, v_tile_t[col], v_tile_t[col + 1], shared)
                acc[row, col] += s00
                acc[row, col + 1] += s01
                acc[row + 1, col] += s10
                acc[row + 1, col + 1] += s11
                acc[row + 2, col] += s20
                acc[row + 2, col + 1] += s21
                acc[row + 3, col] += s30
                acc[row + 3, col + 1] += s31
        for r in range(row, row + 4):
            acc_row = acc[r]
            for j in range(shared, n_keys[r]):
                weight = p[r, j]
                for c in range(width):
                    acc_row[c] += weight * v_tile_t[c, j]


@njit(inline="always", **JIT_OPTIONS)  # inlined into the caller's IR: one compile less
def pack_values(v, j0, n_valid, v_tile_t):
    """v_tile_t[:d_v, :n_valid] = v[j0 : j0 + n_valid]ᵀ, so that P @ V contracts over
    contiguous memory.  v_tile_t (d_v rounded up to 2, TILE_K); columns past n_valid
    are never read, and the padding row stays as allocated (zeros)."""
    for c in range(v.shape[1]):
        v_row = v_tile_t[c]
        for j in range(n_valid):
            v_row[j] = v[j0 + j, c]


@njit(inline="always", **JIT_OPTIONS)  # inlined into the caller's IR: one compile less
def task_order(task, n_heads, n_query_tiles, causal):
    """(head, query tile) of a flattened parallel task.  Causal tiles grow with the
    query index, so consecutive tasks pair a light tile with a heavy one and every
    contiguous chunk of the prange gets about the same amount of work."""
    head = task // n_query_tiles
    tile = task % n_query_tiles
    if causal:
        tile = tile // 2 if tile % 2 == 0 else n_query_tiles - 1 - tile // 2
    return head, tile


@njit(**JIT_OPTIONS)
def attend_query_tile(q, k, v, out, i0, offset, q_sign, log2_scale):
    """out[i0 : i0 + TILE_Q] for one head: q (n_q, d), k (n_k, d), v (n_k, d_v),
    out (n_q, d_v).  Query i sees keys j < i + 1 + offset.  All scratch is tile-sized;
    the tile helpers take their row count from it."""
    n_q, d = q.shape
    n_k, d_v = v.shape
    width = d_v + d_v % 2  # pv_tile works on pairs of value columns
    dtype = q.dtype
    n_rows = min(TILE_Q, n_q - i0)
    # The last tile is cut to n_rows rounded up to the 4-row blocks, so a short
    # query (decoding, n_q = 1) does not pay for a whole tile.
    rows = (n_rows + 3) // 4 * 4
    q_tile = np.zeros((rows, d), dtype)
    v_tile_t = np.zeros((width, TILE_K), dtype)
    scores = np.empty((rows, TILE_K), dtype)
    acc = np.zeros((rows, width), dtype)
    m = np.full(rows, -np.inf, dtype)
    l = np.zeros(rows, dtype)
    n_keys = np.empty(rows, np.int64)
    for r in range(n_rows):
        for c in range(d):
            q_tile[r, c] = q[i0 + r, c] * q_sign
    # Key tiles past the last row's horizon are never visited (causal skipping).
    keys_seen_by_last = min(n_k, max(0, i0 + n_rows + offset))
    for j0 in range(0, keys_seen_by_last, TILE_K):
        n_valid = min(TILE_K, n_k - j0)
        # Padding rows past n_q follow the same formula, which keeps n_keys sorted.
        for r in range(rows):
            n_keys[r] = min(n_valid, max(0, i0 + r + 1 + offset - j0))
        qk_tile(q_tile, k, j0, scores)
        pack_values(v, j0, n_valid, v_tile_t)
        online_softmax(scores, n_keys, log2_scale, m, l, acc)
        pv_tile(scores, v_tile_t, n_keys, acc)
    for r in range(n_rows):
        # A row that sees no key has acc = 0 and gets zeros; one whose scores
        # were all -inf has l = 0 and gets 0 * inf = NaN, as the reference does.
        sees_a_key = i0 + r + 1 + offset > 0
        inv_l = 1 / l[r] if sees_a_key else dtype.type(0.0)
        for c in range(d_v):
            out[i0 + r, c] = acc[r, c] * inv_l


@njit(parallel=True, **JIT_OPTIONS)
def attention(q, k, v, out, causal, scale):
    """out = softmax(scale · q kᵀ) v; q (B, n_q, d), k (B, n_k, d), v (B, n_k, d_v),
    out (B, n_q, d_v).  One parallel task per (head, query tile)."""
    n_heads, n_q = q.shape[0], q.shape[1]
    n_k = k.shape[1]
    offset = n_k - n_q if causal else n_k  # query i sees keys j < i + 1 + offset
    n_query_tiles = (n_q + TILE_Q - 1) // TILE_Q
    # The running max is taken over unscaled scores, so a negative scale is moved
    # into the (exact) sign of q.
    q_sign = q.dtype.type(-1.0 if scale < 0 else 1.0)
    log2_scale = q.dtype.type(abs(scale) * LOG2_E)
    for task in prange(n_heads * n_query_tiles):
        head, tile = task_order(task, n_heads, n_query_tiles, causal)
        attend_query_tile(q[head], k[head], v[head], out[head], tile * TILE_Q, offset, q_sign, log2_scale)


def run(q, k, v, out, causal, scale):
    """q (B, n_q, d), k (B, n_k, d), v (B, n_k, d_v), out (B, n_q, d_v): C-contiguous,
    same dtype (float32 or float64), already validated.  Writes every element of out."""
    numba.set_num_threads(min(budget(), numba.config.NUMBA_NUM_THREADS))
    attention(q, k, v, out, bool(causal), float(scale))
