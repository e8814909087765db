"""Rung 2, ``numpy``: the same operation vectorised, the n×n scores materialised.

What it adds over ``naive``: BLAS for the two products (Q Kᵀ and P V) and array-wide
softmax, so the interpreter no longer touches each score.  What it costs: the
scores of every head live in memory at once.

Shapes: q (B, n_q, d), k (B_kv, n_k, d), v (B_kv, n_k, d_v) -> out (B, n_q, d_v), B a
multiple of B_kv: grouped-query attention views q as (B_kv, group, n_q, d) against k and
v as (B_kv, 1, n_k, d), so that matmul broadcasts each K/V head over its group, never
copying it.
Time: O(B·n_q·n_k·(d + d_v)) flops in BLAS plus O(B·n_q·n_k) exp.
Memory: B·n_q·n_k·itemsize for the scores (plus 2·n_q·n_k bytes for the mask of a causal
or windowed call: a window saves this rung nothing),
declared by ``workspace_bytes`` so the API refuses with MemoryError before allocating.
16-bit inputs: BLAS has no bfloat16 or float16 product, so q, k and v are widened whole
to float32 (exactly) and the rung runs as in float32: its cost is the float32 cost plus
the widening, and the API's rounding of the output (both O(n·d)).
"""
import numpy as np

from ..band import Band


def workspace_bytes(batch, n_q, n_k, d, d_v, itemsize, masked):
    """Peak bytes allocated besides the output: scores, the mask of a causal or windowed
    call, row statistics."""
    scores = batch * n_q * n_k * itemsize
    mask = 2 * n_q * n_k if masked else 0  # Band.mask (two n_q × n_k while built), logical_not
    row_stats = 2 * batch * n_q * itemsize
    return scores + mask + row_stats


# NaN/Inf inputs make NaN rows (inf - inf, 0 · inf), as in the reference: that is the
# contract, not a warning.
@np.errstate(invalid="ignore")
def run(q, k, v, out, causal, scale, band=None):
    """band: the keys each query sees (``kernels.band``; None: full, or causal)."""
    band = band or Band.of(causal)
    q, k, v = (x.astype(out.dtype, copy=False) for x in (q, k, v))  # 16-bit: widened to float32
    (batch, n_q, d), (kv_batch, n_k, d_v) = q.shape, v.shape
    # (B_kv, group, n, ·): a K/V head broadcast over the query heads of its group
    q, k, v = q.reshape(kv_batch, batch // kv_batch, n_q, d), k[:, None], v[:, None]
    out = out.reshape(kv_batch, batch // kv_batch, n_q, d_v)
    first = band.first_row(n_q, n_k)
    out[..., :first, :] = 0.0
    q = q[..., first:, :]
    # S = scale · Q Kᵀ: (B_kv, group, n_q, n_k), the O(n²) buffer this rung is about
    scores = np.matmul(q, k.swapaxes(-1, -2))
    scores *= scale
    masked = not band.full
    if masked:
        visible = band.mask(n_q, n_k)[first:]  # row r: query first + r
        np.copyto(scores, -np.inf, where=np.logical_not(visible))
    # P = exp(S - rowmax(S)) in place; l = rowsum(P)
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    row_sums = scores.sum(axis=-1, keepdims=True)
    # Y = P V / l, written straight into the output
    seen_out = out[..., first:, :]
    if masked and not np.isfinite(v).all():
        # A masked key must take no part, but its weight 0 times a NaN/Inf value is
        # NaN: sum each row over exactly the keys it sees (rare input, O(n) products).
        for row in range(n_q - first):
            keys = np.flatnonzero(visible[row])
            weights = scores[..., row, :][..., None, keys]  # (B_kv, group, 1, keys)
            seen_out[..., row, :] = (weights @ v[..., keys, :])[..., 0, :]
    else:
        np.matmul(scores, v, out=seen_out)
    seen_out /= row_sums
