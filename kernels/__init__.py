"""attnbench: self-attention, softmax(Q Kᵀ/√d) V, as a ladder of CPU kernels.

    import kernels
    kernels.KERNELS                      # name -> Kernel record, in ladder order
    kernels.attention(q, k, v, kernel="c_tiled", causal=False, scale=None)

Rungs: ``naive`` (pure Python, the algorithm definition), ``numpy`` (vectorised,
n×n scores), ``numba_tiled`` (compiled, tiled online softmax), ``c_tiled`` (C SIMD
micro-kernels + OpenMP); ``torch_sdpa`` is an external peer when PyTorch is installed.
"""
from .api import attention, validate
from .registry import KERNELS, Kernel, get_kernel
from .threads import budget as thread_budget, set_budget as set_thread_budget

__all__ = ["KERNELS", "Kernel", "attention", "get_kernel", "set_thread_budget", "thread_budget", "validate"]
__version__ = "0.1.0"
