"""What one attention call costs, by formula: its flops, and how large an n fits in memory.

    attention_flops(n_q, n_k, head_dim, batch=8, causal=True)
    gflops(seconds, n_q, n_k, head_dim, batch=8)
    largest_fitting_seq_len("numpy", itemsize=4, memory_bytes=2**34, head_dim=64)

The benchmarks, the report and the CLI all count with these, so that a GFLOP/s figure
means the same thing wherever it is printed.
"""
from .registry import KERNELS
from .spread import quotient


def attention_flops(n_q, n_k, head_dim, head_dim_v=None, batch=1, causal=False):
    """Floating-point operations of one call: 2·n_q·n_k·d for S = Q Kᵀ plus 2·n_q·n_k·d_v
    for P V, per (batch·head); d_v defaults to d, which gives the usual 4·n_q·n_k·d.

    Causal counts half, by convention (a square causal call computes n(n+1)/2 scores);
    the exp and the other softmax work are not counted (a window's: ``band_flops``).
    """
    head_dim_v = head_dim if head_dim_v is None else head_dim_v
    flops = 2 * n_q * n_k * (head_dim + head_dim_v) * batch
    return flops / 2 if causal else flops


def band_flops(band, n_q, n_k, head_dim, head_dim_v=None, batch=1):
    """Floating-point operations of the scores a ``kernels.band.Band`` keeps: 2·(d + d_v)
    per key each query sees (``Band.seen_keys``), per (batch·head), so 4·d·Σ seen keys for
    d_v = d.  What a kernel that skips the tiles outside the band must do; O(n_q)."""
    head_dim_v = head_dim if head_dim_v is None else head_dim_v
    return 2 * int(band.seen_keys(n_q, n_k).sum()) * (head_dim + head_dim_v) * batch


def gflops(seconds, n_q, n_k, head_dim, head_dim_v=None, batch=1, causal=False):
    """Throughput of a call that took ``seconds`` (NaN in, NaN out; a ``spread.Measured``
    time gives a Measured throughput, its quartiles swapped over)."""
    return quotient(attention_flops(n_q, n_k, head_dim, head_dim_v, batch, causal) / 1e9, seconds)


def largest_fitting_seq_len(kernel, itemsize, memory_bytes, head_dim, causal=False):
    """The largest n whose one-head workspace (exact, from the kernel's own
    ``workspace_bytes``) fits in ``memory_bytes``; by bisection, since the formula is
    monotone in n.  ValueError for a tiled kernel: its workspace does not grow with n."""
    if not KERNELS[kernel].materialises:
        raise ValueError(f"{kernel} does not materialise n × n buffers: no n is too large for it")

    def need(n):
        return KERNELS[kernel].workspace_bytes(1, n, n, head_dim, head_dim, itemsize, causal)

    low, high = 1, 2
    while need(high) <= memory_bytes:
        low, high = high, high * 2
    while high - low > 1:  # need(low) fits, need(high) does not
        middle = (low + high) // 2
        low, high = (middle, high) if need(middle) <= memory_bytes else (low, middle)
    return low
