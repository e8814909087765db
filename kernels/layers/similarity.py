"""Similarity functions for attention (the seed's exercise 5), and the weights themselves.

Attention scores a query against a key and turns the scores into weights with a
softmax.  Three ways to score, each a transform of q or k in front of the ordinary
scaled dot product, so that every kernel of the ladder runs all three:

    "dot"       s = scale · q·k                 scale defaults to 1/√d
    "cosine"    s = scale · q·k / (|q| |k|)     rows of q and k normalised first, so a
                                                vector's length cannot change its weight;
                                                scale is an inverse temperature, default √d
                                                (for random vectors this gives the scores
                                                the spread that 1/√d gives dot products)
    "bilinear"  s = scale · q A kᵀ              q replaced by q A (A of shape (d_q, d_k));
                                                scale defaults to 1/√d_k

Extra cost over "dot": cosine O((n_q + n_k)·d) for the norms and one normalised copy of
q and of k; bilinear O(n_q·d_q·d_k) for q A and one copy of it.  A zero row stays zero
under cosine (its scores are 0).

    attention_weights(q, k, similarity="cosine")            (..., n_q, n_k) weights
    similarity_attention(q, k, v, similarity="bilinear", bilinear=A, kernel="c_tiled")
"""
import math

import numpy as np

from ..api import attention, require_memory, validate
from ..memory import format_bytes

SIMILARITIES = ("dot", "cosine", "bilinear")
ROW_BLOCK_BYTES = 16 * 2**20  # scores computed a block of query rows at a time


def similarity_inputs(q, k, similarity="dot", bilinear=None, scale=None):
    """(q', k', scale') whose scaled dot product is the chosen similarity's score.

    q (..., n_q, d_q), k (..., n_k, d_k) -> q' (..., n_q, d), k' (..., n_k, d).
    Raises ValueError for an unknown similarity or a ``bilinear`` of the wrong shape,
    TypeError for one of the wrong type; q and k themselves are checked by the caller's
    ``validate``.
    """
    if similarity not in SIMILARITIES:
        raise ValueError(f"unknown similarity {similarity!r}; expected one of {', '.join(SIMILARITIES)}")
    if similarity == "bilinear" and bilinear is None:
        raise ValueError("similarity='bilinear' needs its matrix: bilinear=A of shape (d_q, d_k)")
    if similarity != "bilinear" and bilinear is not None:
        raise ValueError(f"a bilinear matrix goes with similarity='bilinear', not {similarity!r}")
    if similarity == "dot":
        return q, k, scale
    if similarity == "cosine":
        d = _last_dim(q)
        return _unit_rows(q), _unit_rows(k), math.sqrt(d) if scale is None else scale
    _check_bilinear(q, k, bilinear)
    return np.matmul(q, bilinear), k, scale


def attention_weights(q, k, *, similarity="dot", bilinear=None, causal=False, scale=None):
    """The attention weights softmax(s(q, k)): (..., n_q, d), (..., n_k, d) -> (..., n_q, n_k).

    Rows sum to 1; with ``causal`` query i sees keys j <= i + (n_k - n_q) (aligned
    bottom-right), its other weights are 0, and a row that sees no key is all 0.  NaN
    or Inf in a row's scores make that row NaN, as in ``kernels.attention``.  Computed
    in the inputs' dtype, a block of query rows at a time, so that beyond the n_q × n_k
    result only one block of scores exists; MemoryError before allocating when the
    result would not fit.  Time O(n_q·n_k·d) per head.
    """
    q, k, scale = similarity_inputs(q, k, similarity, bilinear, scale)
    problem = validate(q, k, k, causal, scale)
    shape = problem.batch_shape + (problem.n_q, problem.n_k)
    needed = math.prod(shape) * problem.dtype.itemsize
    require_memory(needed, lambda needed, available: (
        f"attention weights of shape {shape} need {format_bytes(needed)}, but only "
        f"{format_bytes(available)} is available: pass fewer queries or heads at a time"))
    weights = np.empty(shape, problem.dtype)
    for row0, block in weight_blocks(q, k, causal=problem.causal, scale=problem.scale):
        weights[..., row0 : row0 + block.shape[-2], :] = block
    return weights


def weight_blocks(q, k, *, causal, scale, block_rows=None):
    """Yield (first row, weights of a block of query rows): q (..., n_q, d), k (..., n_k, d)
    already validated -> blocks (..., rows, n_k), rows chosen so that a block takes about
    ROW_BLOCK_BYTES (or ``block_rows``).  The causal mask keeps its alignment to the whole
    of q: query i sees keys j <= i + (n_k - n_q).  At most two blocks exist at a time: the
    one the caller still holds while the next is computed."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    batch = math.prod(q.shape[:-2])
    if block_rows is None:
        block_rows = max(1, ROW_BLOCK_BYTES // max(1, batch * n_k * q.dtype.itemsize))
    keys_t = np.swapaxes(k, -1, -2)
    for row0 in range(0, n_q, block_rows):
        rows = np.arange(row0, min(n_q, row0 + block_rows))
        # S = scale · Q Kᵀ for this block: (..., rows, n_k)
        scores = np.matmul(q[..., rows, :], keys_t)
        scores *= scale
        last_key = rows + (n_k - n_q) if causal else np.full(rows.size, n_k - 1)
        if causal:
            np.copyto(scores, -np.inf, where=np.arange(n_k) > last_key[:, None])
        # P = exp(S - rowmax S) / rowsum P.  A row that sees no key is all 0; NaN or +inf
        # scores make their row NaN (inf - inf), as in the reference.
        sees_none = (last_key < 0)[:, None]
        with np.errstate(invalid="ignore"):
            scores -= np.where(sees_none, 0, scores.max(axis=-1, keepdims=True))
            np.exp(scores, out=scores)
            scores /= np.where(sees_none, 1, scores.sum(axis=-1, keepdims=True))
        yield row0, scores


def similarity_attention(q, k, v, *, similarity="dot", bilinear=None, kernel="c_tiled",
                         causal=False, scale=None):
    """softmax(s(q, k)) v by any registered kernel, s the chosen similarity: q (..., n_q, d_q),
    k (..., n_k, d_k), v (..., n_k, d_v) -> (..., n_q, d_v).  The transform (module
    docstring) runs first, then the ordinary kernel; "dot" is ``kernels.attention``."""
    q, k, scale = similarity_inputs(q, k, similarity, bilinear, scale)
    return attention(q, k, v, kernel=kernel, causal=causal, scale=scale)


def _last_dim(array):
    if not isinstance(array, np.ndarray) or array.ndim < 2:
        return 1  # validate() names the problem
    return array.shape[-1]


def _unit_rows(x):
    """x with each row divided by its length; zero rows stay zero; non-arrays pass through
    to validate(), which names them."""
    if not isinstance(x, np.ndarray) or x.dtype.kind != "f":
        return x
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms == 0, 1, norms).astype(x.dtype)


def _check_bilinear(q, k, bilinear):
    for name, array in (("q", q), ("k", k), ("bilinear", bilinear)):
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name} must be a NumPy array, got {type(array).__name__}")
    if q.ndim < 2 or k.ndim < 2:
        raise ValueError(f"q and k must have at least 2 dimensions (..., n, d), got q {q.shape}, k {k.shape}")
    expected = (q.shape[-1], k.shape[-1])
    if bilinear.shape != expected:
        raise ValueError(f"bilinear must have shape (d_q, d_k) = {expected} for q {q.shape} and "
                         f"k {k.shape}, got {bilinear.shape}")
    if bilinear.dtype != q.dtype:
        raise TypeError(f"bilinear has dtype {bilinear.dtype}, q has {q.dtype}: they must match")
