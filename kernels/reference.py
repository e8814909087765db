"""The float64 truth every rung is held to, written for clarity, not speed.

Separate from the ``numpy`` rung under test.  The same function evaluated in
float32 (``compute_dtype=np.float32``) is the "plain float32 NumPy computation"
that sets the float32 error budget in ``kernels.harness``.
"""
import numpy as np

from .band import Band


def first_seeing_row(n_q, n_k, causal):
    """Index of the first query row that sees at least one key.

    Causal attention is aligned bottom-right: query i sees keys j <= i + (n_k - n_q),
    so when n_q > n_k the first n_q - n_k rows see none (their output is zero).
    """
    return Band.of(causal).first_row(n_q, n_k)


def causal_mask(n_q, n_k):
    """Boolean (n_q, n_k), True where query i sees key j: j <= i + (n_k - n_q)."""
    return np.tri(n_q, n_k, k=n_k - n_q, dtype=bool)


def expand_kv(q, kv):
    """k or v (..., H_kv, n_k, ·) with each head repeated for the H / H_kv query heads of
    its group, as q (..., H, n_q, d) has them: grouped-query attention by its definition
    (a copy; the kernels read each K/V head in place).  kv itself when H_kv = H."""
    if q.ndim < 3 or kv.shape[-3] == q.shape[-3]:
        return kv
    return np.repeat(kv, q.shape[-3] // kv.shape[-3], axis=-3)


def reference_attention(q, k, v, causal=False, scale=None, compute_dtype=np.float64, *, window=None, sinks=0):
    """softmax(scale · q kᵀ) v, max-subtracted, in ``compute_dtype``, each query over the keys
    its band sees (``kernels.band``: ``causal``, ``window`` = (left, right), ``sinks``).

    q (..., H, n_q, d), k (..., H_kv, n_k, d), v (..., H_kv, n_k, d_v) -> (..., H, n_q, d_v);
    H_kv divides H (grouped-query attention: by definition, each K/V head repeated for the
    H / H_kv query heads of its group, head h reading K/V head h // (H / H_kv)).
    A query that sees no key gives zeros.
    Time O(n_q·n_k·(d + d_v)) per head; memory O(n_q·n_k) per head (the scores).
    """
    band = Band.of(causal, window, sinks)
    q, k, v = (np.asarray(a, dtype=compute_dtype) for a in (q, k, v))
    k, v = (expand_kv(q, x) for x in (k, v))
    n_q, d = q.shape[-2:]
    n_k = k.shape[-2]
    scale = compute_dtype(1.0 / np.sqrt(d) if scale is None else scale)

    # pass 1: scores S = scale · Q Kᵀ, shape (..., n_q, n_k)
    scores = (q @ np.swapaxes(k, -1, -2)) * scale
    # pass 2: the band's mask: a key a query does not see scores -inf
    seen = band.mask(n_q, n_k)
    scores = np.where(seen, scores, -np.inf)
    # pass 3: P = exp(S - rowmax(S)), l = rowsum(P); rows that see no key give zeros.
    # A NaN or +inf score makes its row NaN here (inf - inf): the behaviour kernels copy.
    out = np.zeros(q.shape[:-1] + (v.shape[-1],), dtype=compute_dtype)
    for row in np.flatnonzero(seen.any(axis=1)):
        # pass 4: y_i = sum over the keys i sees of P_ij V_j / l_i.  A masked key takes no
        # part at all: its weight is 0, but 0 · NaN would still be NaN, so the sum runs
        # over the seen keys only and a NaN or Inf in a value row reaches only the queries
        # that see it.
        keys = np.flatnonzero(seen[row])
        row_scores = scores[..., row, keys]
        with np.errstate(invalid="ignore"):
            p = np.exp(row_scores - row_scores.max(axis=-1, keepdims=True))
        out[..., row, :] = (p[..., None, :] @ v[..., keys, :])[..., 0, :] / p.sum(axis=-1, keepdims=True)
    return out
