"""External peer ``openvino_sdpa``: OpenVINO's ``ScaledDotProductAttention`` (opset 13) on
its CPU plugin.

Not a rung of ours: a baseline the fastest rung is measured against.  Registered only
when ``openvino`` is installed (``make peers``).  The model is one node over static
shapes (the CPU plugin compiles its best code for a known shape), compiled once per
(shape, dtype, scale, causal, thread budget) and kept with its infer request.

Inputs and output are ``ov.Tensor``s sharing NumPy's memory (read-only float32 inputs
are copied: it shares writable float32 memory only), so a call times the inference
alone.  The plugin's defaults are changed where they would break the contract: for
float32 ``INFERENCE_PRECISION_HINT`` is f32 (on a CPU with bf16 units it would otherwise
compute in bfloat16, errors ~4e-3), and denormals are left alone (its
denormal optimisation sets flush-to-zero on the threads it runs on).  Causal attention
with n_q == n_k uses the node's ``causal`` attribute; otherwise (it aligns top-left) a
constant bottom-right boolean mask.  Rows that see no key are zeroed afterwards.

Half precision: a bfloat16 or float16 call builds the model in that type (its
parameters and output bf16 or f16; the arrays are handed over as their 16-bit bits with
that element type) and asks for ``INFERENCE_PRECISION_HINT`` bf16 or f16, so the plugin
does what it does with a half-precision model; its half output is widened into ``out``.
The node takes its mask and scale in q's type only ("Mixed input types are not
supported"): the mask is boolean, and the scale a constant of the inputs' type, rounded
to nearest by NumPy (relative error up to 2^-9 in bfloat16, 2^-12 in float16: a change
of temperature, not of the inputs).  Left out, the default 1/√d is worse: the plugin
computes it in the half type with the conversion below (d = 65 in bfloat16 gave 1/8,
0.8% off).

What the CPU plugin computes in, on a CPU without AVX512-BF16, AMX or AVX512-FP16 (this
one: AMD EPYC, Zen 3, AVX2 and F16C only), OpenVINO 2026.4: it reports
``OPTIMIZATION_CAPABILITIES`` FP32, INT8, BIN (no BF16, no FP16) and ignores the hint
(the compiled model reads back ``INFERENCE_PRECISION_HINT`` f32).  Its runtime graph
(``get_runtime_model()``: each node's ``runtimePrecision`` and ``outputPrecisions``)
is a Convert bf16→f32 (f16→f32) of each input, then the attention in f32 (MatMul,
Softmax, MatMul: brgemm_avx2_f32 nodes, or one f32 Snippets subgraph at n = 4,096),
then one Convert f32→bf16 (f16) of the output.  So float32 throughout, the output
rounded once, like our own rungs: its outputs equal, in 99.7-100% of elements, the
exact attention (with the rounded scale) rounded once.  One flaw, in bfloat16: the
plugin's f32→bf16 conversion on this CPU is not round-to-nearest: it truncates when the
last bit kept is even and rounds to nearest when it is odd (a lone Convert node turns
1.005859375 into 1.0, not 1.0078125), so the output's rounding error reaches one ulp
(2 u) instead of half.  The harness's budget holds it (at most 0.62 u of bfloat16 on
its cases, 0.31 u for float16, whose conversion is correct).  On a CPU with bf16 or fp16
units the plugin would honour the hint and run the attention in that type (not
measured here).

Declared limits (``kernels.registry``): float32, bfloat16 and float16; not float64: the
plugin computes float64 inputs in float32 (errors ~6e-7 against the reference).
"""
import functools
import threading

import numpy as np
import openvino
import openvino.opset13 as ops

from ..reference import causal_mask, first_seeing_row
from ..threads import budget

_CORE = openvino.Core()
# NumPy dtype name -> (OpenVINO element type, INFERENCE_PRECISION_HINT)
_TYPES = {"float32": (openvino.Type.f32, "f32"), "bfloat16": (openvino.Type.bf16, "bf16"),
          "float16": (openvino.Type.f16, "f16")}


def _scale_constant(scale, element_type, dtype):
    """The node's scale input: float32 as given, or rounded to the 16-bit type (its rule:
    the scale shares q's type)."""
    if element_type == openvino.Type.f32:
        return ops.constant(np.float32(scale))
    # A tensor of OpenVINO's own memory, the bits written into it: a constant made from a
    # tensor shares that tensor's memory, and one sharing a NumPy temporary's read freed
    # memory once it was gone (wrong results when other threads reused it).
    tensor = openvino.Tensor(element_type, openvino.Shape([]))
    tensor.data.view(np.uint16)[...] = np.array(scale, dtype=dtype).view(np.uint16)
    return ops.constant(tensor)


@functools.lru_cache(maxsize=8)
def _request(shape_q, shape_k, shape_v, dtype_name, scale, causal, threads):
    """(infer request, its lock) for q, k, v of these (B, n, d) shapes and dtype ->
    (B, n_q, d_v) of that dtype.  A request runs one inference at a time (concurrent use fails or
    corrupts memory), so callers on several threads take turns through the lock; a new
    request per call would add ~20 µs to each (a tiny call takes ~150 µs)."""
    element_type, hint = _TYPES[dtype_name]
    q, k, v = (ops.parameter(shape, element_type, name=name)
               for name, shape in (("q", shape_q), ("k", shape_k), ("v", shape_v)))
    n_q, n_k = shape_q[1], shape_k[1]
    if element_type == openvino.Type.f32:
        if causal and n_q != n_k:
            mask, is_causal = ops.constant(causal_mask(n_q, n_k)), False
        else:
            # a mask must come before the scale input: a zero bias, ignored when causal
            mask, is_causal = ops.constant(np.float32(0.0)), causal
        inputs = [q, k, v, mask, _scale_constant(scale, element_type, None)]
    else:
        # half: the mask boolean (a float mask would have to be of q's type: its -inf is
        # fine, but booleans say it plainly); the scale always given, rounded to nearest
        # by NumPy (left out, the plugin computes 1/√d in the half type itself, worse)
        bottom_right = causal and n_q != n_k
        mask = ops.constant(causal_mask(n_q, n_k) if bottom_right else np.array(True))
        is_causal = causal and not bottom_right
        inputs = [q, k, v, mask, _scale_constant(scale, element_type, np.dtype(dtype_name))]
    node = ops.scaled_dot_product_attention(*inputs, causal=is_causal)
    model = openvino.Model([node], [q, k, v], "attention")
    compiled = _CORE.compile_model(model, "CPU", {
        "INFERENCE_NUM_THREADS": threads,
        "INFERENCE_PRECISION_HINT": hint,
        "CPU_DENORMALS_OPTIMIZATION": False,
        "PERFORMANCE_HINT": "LATENCY",
    })
    return compiled.create_infer_request(), threading.Lock()


def _tensor(array, element_type):
    """``array`` as an ov.Tensor sharing its memory.  float32: a read-only array (a
    KVCache's view) is copied by OpenVINO, which shares writable memory only.  A 16-bit
    array: its bits, typed, always shared (the typed constructor takes read-only memory;
    the plugin only reads its inputs); the caller keeps ``array`` alive while it is used."""
    if element_type == openvino.Type.f32:
        return openvino.Tensor(array, shared_memory=array.flags.writeable)
    return openvino.Tensor(array.view(np.uint16), list(array.shape), element_type)


def run(q, k, v, out, causal, scale):
    element_type, _ = _TYPES[q.dtype.name]
    request, lock = _request(q.shape, k.shape, v.shape, q.dtype.name, scale, causal, budget())
    half = None if element_type == openvino.Type.f32 else np.empty(out.shape, q.dtype)
    with lock:
        for index, array in enumerate((q, k, v)):
            request.set_input_tensor(index, _tensor(array, element_type))
        request.set_output_tensor(0, _tensor(out if half is None else half, element_type))
        request.infer()
    if half is not None:
        out[...] = half  # widened exactly
    out[:, : first_seeing_row(q.shape[1], k.shape[1], causal)] = 0.0


def version():
    return openvino.__version__
