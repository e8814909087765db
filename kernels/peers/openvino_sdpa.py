"""External peer ``openvino_sdpa``: OpenVINO's ``ScaledDotProductAttention`` (opset 13) on
its CPU plugin.

Not a rung of ours: a baseline the fastest rung is measured against.  Registered only
when ``openvino`` is installed (``make peers``).  The model is one node over static
shapes (the CPU plugin compiles its best code for a known shape), compiled once per
(shape, scale, causal, thread budget) and kept with its infer request.

Inputs and output are ``ov.Tensor``s sharing NumPy's memory (read-only inputs are
copied: it shares writable memory only), so a call times the inference alone.  The plugin's defaults are changed where they would break the
contract: ``INFERENCE_PRECISION_HINT`` is f32 (on a CPU with bf16 units it would
otherwise compute in bfloat16, errors ~4e-3), and denormals are left alone (its
denormal optimisation sets flush-to-zero on the threads it runs on).  Causal attention
with n_q == n_k uses the node's ``causal`` attribute; otherwise (it aligns top-left) a
constant bottom-right boolean mask.  Rows that see no key are zeroed afterwards.

Declared limits (``kernels.registry``): float32 only: the plugin computes float64
inputs in float32 (errors ~6e-7 against the reference).
"""
import functools
import threading

import numpy as np
import openvino
import openvino.opset13 as ops

from ..reference import causal_mask, first_seeing_row
from ..threads import budget

_CORE = openvino.Core()


@functools.lru_cache(maxsize=8)
def _request(shape_q, shape_k, shape_v, scale, causal, threads):
    """(infer request, its lock) for q, k, v of these (B, n, d) float32 shapes ->
    (B, n_q, d_v).  A request runs one inference at a time (concurrent use fails or
    corrupts memory), so callers on several threads take turns through the lock; a new
    request per call would add ~20 µs to each (a tiny call takes ~150 µs)."""
    q, k, v = (ops.parameter(shape, openvino.Type.f32, name=name)
               for name, shape in (("q", shape_q), ("k", shape_k), ("v", shape_v)))
    n_q, n_k = shape_q[1], shape_k[1]
    if causal and n_q != n_k:
        mask, is_causal = ops.constant(causal_mask(n_q, n_k)), False
    else:
        # a mask must come before the scale input: a zero bias, ignored when causal
        mask, is_causal = ops.constant(np.float32(0.0)), causal
    node = ops.scaled_dot_product_attention(q, k, v, mask, ops.constant(np.float32(scale)),
                                            causal=is_causal)
    model = openvino.Model([node], [q, k, v], "attention")
    compiled = _CORE.compile_model(model, "CPU", {
        "INFERENCE_NUM_THREADS": threads,
        "INFERENCE_PRECISION_HINT": "f32",
        "CPU_DENORMALS_OPTIMIZATION": False,
        "PERFORMANCE_HINT": "LATENCY",
    })
    return compiled.create_infer_request(), threading.Lock()


def run(q, k, v, out, causal, scale):
    request, lock = _request(q.shape, k.shape, v.shape, scale, causal, budget())
    with lock:
        for index, array in enumerate((q, k, v)):
            # it shares only writable memory: a read-only input (a KVCache's view) is copied
            request.set_input_tensor(index, openvino.Tensor(array, shared_memory=array.flags.writeable))
        request.set_output_tensor(0, openvino.Tensor(out, shared_memory=True))
        request.infer()
    out[:, : first_seeing_row(q.shape[1], k.shape[1], causal)] = 0.0


def version():
    return openvino.__version__
