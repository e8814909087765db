"""attnbench: self-attention, softmax(Q Kᵀ/√d) V, as a ladder of CPU kernels.

    import kernels
    kernels.KERNELS                      # name -> Kernel record, in ladder order
    kernels.attention(q, k, v, kernel="c_tiled", causal=False, scale=None)

Rungs: ``naive`` (pure Python, the algorithm definition), ``numpy`` (vectorised,
n×n scores), ``numba_tiled`` (compiled, tiled online softmax), ``c_tiled`` (C SIMD
micro-kernels); both tiled rungs share one thread pool (``kernels.threads``).  External peers, registered when installed (``make peers``):
``torch_sdpa``, ``onnxruntime_attention``, ``openvino_sdpa``, ``jax_attention``.

Built on them (``kernels.layers``): ``multi_head_attention``, ``attention_weights`` and
``similarity_attention`` (dot, cosine, bilinear), ``attention_entropy`` and
``analyse_attention``; ``KVCache`` (``kernels.decode``) for decoding a token at a time.
"""
from .api import attention, validate
from .decode import KVCache
from .layers import (analyse_attention, analyse_queries_and_keys, attention_entropy, attention_weights,
                     multi_head_attention, multi_head_projections, similarity_attention)
from .registry import KERNELS, Kernel, get_kernel
from .threads import budget as thread_budget, set_budget as set_thread_budget

__all__ = ["KERNELS", "KVCache", "Kernel", "analyse_attention", "analyse_queries_and_keys", "attention",
           "attention_entropy", "attention_weights", "get_kernel", "multi_head_attention",
           "multi_head_projections", "set_thread_budget", "similarity_attention", "thread_budget",
           "validate"]
__version__ = "0.1.0"
