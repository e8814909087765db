"""The external peers: other libraries' CPU attention, measured beside the ladder, each
registered only when its package is installed (``make peers``).

    torch_sdpa.py             PyTorch's scaled_dot_product_attention
    onnxruntime_attention.py  ONNX Runtime's Attention operator (opset 23)
    openvino_sdpa.py          OpenVINO's ScaledDotProductAttention (opset 13)
    jax_attention.py          JAX's dot_product_attention, compiled by XLA
    ggml_flash_attn.py        ggml's flash_attn_ext, llama.cpp's attention

Each has the rungs' ``run(q, k, v, out, causal, scale)``, and ``prepare(q, k, v, causal,
scale, band)`` -> ``call()``, the library's own call on tensors of its own, made once (how
the benchmarks time a peer: as its users call it); its registry entry says which
dtypes it computes at their precision (its 16-bit ones where the harness's probe finds them
within the budget on the CPU it runs on) and how it takes the thread budget.
"""
