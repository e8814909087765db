"""Multi-head attention (§11.1.4): several retrieval strategies side by side.

Each head projects the tokens into its own, narrower query, key and value space, so
each can learn to look for something else; their outputs are concatenated and mixed
by one output projection:

    Q = x W_Q + b_Q, K = x W_K + b_K, V = x W_V + b_V          (..., n, d_model)
    split the last axis into ``heads`` heads of width d_head = d_model / heads
    head_h = softmax(Q_h K_hᵀ / √d_head) V_h                     any registered kernel
    out = concat_h(head_h) W_O + b_O                             (..., n, d_model)

The heads become a batch axis of one ``kernels.attention`` call, so the tiled kernels
run all of them in parallel.  Cost per call: 8·n·d_model² flops for the four
projections and 4·n²·d_model for attention (the same as one full-width head).

The seed's ``multi_head_attention`` has two mistakes, fixed here: it calls
``self_attention(Q_i, K_i, V_i)``, whose signature is (X, W_Q, W_K, W_V), and its
per-head matrices are d × d, so every head is full width and the concatenation is
h·d wide (h times the work and parameters); here each head has width d_model / heads.
"""
import numbers

import numpy as np

from .. import dtypes
from ..api import attention, check_resources, planned
from ..registry import get_kernel

_PROJECTIONS = ("w_q", "w_k", "w_v", "w_o")


def multi_head_attention(x, w_q, w_k, w_v, w_o, *, heads, kernel="c_tiled", causal=False,
                         biases=None, head_mask=None, attention_dtype=None, kv_heads=None, window=None, sinks=0):
    """Multi-head self-attention of x (..., n, d_model) -> (..., n, d_model).

    w_q, w_k, w_v, w_o (d_model, d_model), applied as ``x @ w``; ``biases`` None or four
    (d_model,) arrays (b_q, b_k, b_v, b_o), any of them None; ``heads`` divides d_model;
    ``kv_heads`` (default ``heads``) divides ``heads``: grouped-query attention, w_k and w_v
    (d_model, kv_heads · d_head) and b_k, b_v (kv_heads · d_head,), each K/V head serving
    heads / kv_heads query heads (its projections a fraction of the size, and the kernel
    reads it once for its group);
    ``kernel`` any registered kernel; ``causal``, ``window`` and ``sinks`` as in
    ``kernels.attention``.
    ``head_mask`` (heads,) multiplies each head's output before the output projection:
    0 silences a head (the seed's exercise 3: mask a head, see what changes).
    ``attention_dtype`` None, or "bfloat16" or "float16": q, k, v are rounded to it before
    the kernel and its output widened back to x's dtype, as a model keeping its weights in
    float32 and attending in half precision does (the projections stay in x's dtype).
    Raises ValueError (shapes, heads, kernel), TypeError (types, dtypes) or MemoryError
    (what the call would allocate does not fit) before any work.
    """
    kv_heads = _check(x, dict(w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o), heads, biases, head_mask, kv_heads)
    half = attention_type(attention_dtype)
    _check_memory(x, heads, kv_heads, kernel, causal, half, window, sinks)
    q, k, v = _projections(x, (w_q, w_k, w_v), heads, kv_heads, biases)
    if half is not None:
        q, k, v = (a.astype(half) for a in (q, k, v))
    heads_out = attention(q, k, v, kernel=kernel, causal=causal, window=window, sinks=sinks)  # (..., heads, n, d_head)
    heads_out = heads_out.astype(x.dtype, copy=False)
    if head_mask is not None:
        heads_out *= np.asarray(head_mask, x.dtype)[:, None, None]
    concat = merge_heads(heads_out)                                   # (..., n, d_model)
    out = concat @ w_o
    b_o = _bias(biases, 3)
    return out if b_o is None else out + b_o


def attention_type(attention_dtype):
    """The NumPy dtype of an ``attention_dtype`` argument: None for None, else bfloat16's or
    float16's; TypeError naming the types taken for any other."""
    if attention_dtype is None:
        return None
    return dtypes.require(attention_dtype, "attention_dtype", "half-precision attention", dtypes.HALF).dtype


def multi_head_projections(x, w_q, w_k, w_v, *, heads, biases=None, kv_heads=None):
    """The per-head queries, keys and values that ``multi_head_attention`` attends with:
    x (..., n, d_model) -> q (..., heads, n, d_head), k and v (..., kv_heads, n, d_head).
    For looking inside a layer, e.g. ``attention_weights(q, k)`` gives every head's weights."""
    kv_heads = _check(x, dict(w_q=w_q, w_k=w_k, w_v=w_v), heads, biases, None, kv_heads)
    return _projections(x, (w_q, w_k, w_v), heads, kv_heads, biases)


def _projections(x, weights, heads, kv_heads, biases):
    return tuple(split_heads(_project(x, w, _bias(biases, i)), heads if i == 0 else kv_heads)
                 for i, w in enumerate(weights))


def split_heads(x, heads):
    """(..., n, heads · d_head) -> (..., heads, n, d_head), a view."""
    *lead, n, width = x.shape
    return np.moveaxis(x.reshape(*lead, n, heads, width // heads), -2, -3)


def merge_heads(x):
    """(..., heads, n, d_head) -> (..., n, heads · d_head), the inverse of ``split_heads``."""
    *lead, heads, n, d_head = x.shape
    return np.moveaxis(x, -3, -2).reshape(*lead, n, heads * d_head)


def _project(x, w, b):
    projected = x @ w
    return projected if b is None else projected + b


def _bias(biases, index):
    return None if biases is None else biases[index]


def _check_memory(x, heads, kv_heads, kernel, causal, half, window=None, sinks=0):
    """MemoryError before the projections are made if the whole call cannot fit: the
    attention's output and workspace, and six more arrays the size of x at the peak
    (q, k, v and the contiguous copies a kernel makes of them; or q, k, v, the merged
    heads, the output projection and its bias sum); with ``half``, its copies of q, k, v
    and of the output too (less than two more)."""
    if x.size == 0:
        return  # nothing to allocate; attention() says what is wrong with the sizes
    *lead, n, d_model = x.shape
    d_head = d_model // heads
    problem = planned((*lead, heads), n, n, d_head, d_head, x.dtype if half is None else half, causal,
                      heads // kv_heads, window=window, sinks=sinks)
    check_resources(get_kernel(kernel), problem, (6 if half is None else 8) * x.nbytes)


def _check(x, weights, heads, biases, head_mask, kv_heads=None):
    """Everything about the arguments; returns kv_heads (``heads`` for None)."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a NumPy array, got {type(x).__name__}")
    dtypes.require(x.dtype, "x", "multi-head attention", dtypes.WIDE)
    if x.ndim < 2:
        raise ValueError(f"x must have at least 2 dimensions (..., n, d_model), got shape {x.shape}")
    d_model = x.shape[-1]
    if not isinstance(heads, numbers.Integral) or isinstance(heads, bool) or heads < 1:
        raise ValueError(f"heads must be a positive integer, got {heads!r}")
    _check_width(x, weights)
    if d_model % heads:
        raise ValueError(f"d_model = {d_model} (x {x.shape}) is not divisible by heads = {heads}")
    kv_heads = heads if kv_heads is None else kv_heads
    if not isinstance(kv_heads, numbers.Integral) or isinstance(kv_heads, bool) or kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"kv_heads must be a positive integer dividing heads = {heads}, got {kv_heads!r}")
    kv_width = kv_heads * (d_model // heads)
    arrays = dict(weights)
    if biases is not None:
        if len(biases) != 4:
            raise ValueError(f"biases must be four arrays or None (b_q, b_k, b_v, b_o), got {len(biases)}")
        arrays.update((f"b_{p[-1]}", b) for p, b in zip(_PROJECTIONS, biases) if b is not None)
    for name, array in arrays.items():
        width = kv_width if name[-1] in "kv" else d_model
        expected = (width,) if name.startswith("b_") else (d_model, width)
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name} must be a NumPy array, got {type(array).__name__}")
        if array.shape != expected:
            raise ValueError(f"{name} must have shape {expected} for x {x.shape}, got {array.shape}")
        if array.dtype != x.dtype:
            raise TypeError(f"{name} has dtype {array.dtype}, x has {x.dtype}: they must match")
    if head_mask is not None and np.shape(head_mask) != (heads,):
        raise ValueError(f"head_mask must have shape ({heads},), one factor per head, "
                         f"got {np.shape(head_mask)}")
    return kv_heads


def _check_width(x, weights):
    """Blame x, not w_q, when the weights agree on a width (all (d, d), one d) that is not
    x's last dimension; any other disagreement is left to the per-array checks."""
    w_q = weights["w_q"]
    shapes = {getattr(w, "shape", None) for name, w in weights.items() if name not in ("w_k", "w_v")}
    if (len(shapes) == 1 and isinstance(w_q, np.ndarray) and w_q.ndim == 2
            and w_q.shape[0] == w_q.shape[1] != x.shape[-1]):
        raise ValueError(f"x's last dimension (d_model) is {x.shape[-1]} (x {x.shape}), but the "
                         f"weights' input width is {w_q.shape[0]} (w_q {w_q.shape}): they must match")
