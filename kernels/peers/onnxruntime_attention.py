"""External peer ``onnxruntime_attention``: ONNX Runtime's ``Attention`` operator (opset 23)
on its CPU execution provider.

Not a rung of ours: a baseline the fastest rung is measured against.  Registered only
when ``onnxruntime`` and ``onnx`` (which builds the model) are installed (``make peers``).
The model is one ``Attention`` node with symbolic sizes, built in memory.  A session
fixes its thread count and the node its scale and causal flag, so sessions are cached
per (scale, causal form, thread budget).

The (B, n, d) arrays are wrapped as 4-D (1, B, n, d) ``OrtValue``s ("B heads") sharing
NumPy's memory, and the output is bound straight to ``out``: a call times the operator
and ONNX Runtime's binding, no conversion.  Causal attention with n_q == n_k uses the
operator's ``is_causal`` flag; otherwise (the flag aligns top-left) an explicit
bottom-right boolean mask.  Rows that see no key are zeroed afterwards.

Declared limits (``kernels.registry``): float32 only.  The operator accepts float64 but
computes it no better than float32 here (errors ~5e-8 against the reference, where the
float64 budget is 1e-10).  Half precision, measured with ONNX Runtime 1.32 on this CPU
(AVX2, no fp16 arithmetic) and the same one-node model typed float16 or bfloat16:

- float16: the CPU provider has a float16 kernel (the session places the one Attention
  node on it), but it rounds the scores to float16: ``core/providers/cpu/llm/
  attention.cc`` writes scale·q·kᵀ into a float16 buffer (without fp16 GEMM hardware it
  widens q and k, runs SGEMM and rounds the product back to float16), and the softmax
  and P·V read it from there.  On the harness's "large logits x30 n=700" case its error
  is 0.21 (434 unit roundoffs of float16; budget 2.0e-3), exactly the error of the same
  computation with the scores rounded to float16, where an exact float32 softmax rounded
  once errs 0.31 u.  The ``softmax_precision`` attribute (1, float32) changes nothing.
- bfloat16: no kernel.  Lacking one, ONNX Runtime expands the operator into its ONNX
  function body, and the session fails to load: "NOT_IMPLEMENTED: Could not find an
  implementation for Expand(13)".

So both are refused rather than measured through Cast nodes of our own, which would time
a float32 computation with conversions around it.
"""
import functools

import onnx
import onnxruntime
from onnx import TensorProto, helper

from ..reference import causal_mask, first_seeing_row
from ..threads import budget

OPSET = 23  # the first opset with the Attention operator


def _model(scale, is_causal, masked):
    """One float32 Attention node: q (1, B, n_q, d), k (1, B, n_k, d), v (1, B, n_k, d_v)
    [, mask (n_q, n_k), True where a query sees a key] -> y (1, B, n_q, d_v)."""
    dims = {"q": ["n_q", "d"], "k": ["n_k", "d"], "v": ["n_k", "d_v"]}
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, "B", *shape])
              for name, shape in dims.items()]
    if masked:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, ["n_q", "n_k"]))
    names, nodes, initializers = [value.name for value in inputs], [], []
    if scale <= 0:
        # the operator takes scale > 0 only: q is multiplied by it first, an O(n·d) pass
        initializers.append(helper.make_tensor("scale", TensorProto.FLOAT, [], [scale]))
        nodes.append(helper.make_node("Mul", ["q", "scale"], ["q_scaled"]))
        names[0], scale = "q_scaled", 1.0
    nodes.append(helper.make_node("Attention", names, ["y"], scale=scale, is_causal=int(is_causal)))
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "B", "n_q", "d_v"])
    graph = helper.make_graph(nodes, "attention", inputs, [output], initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


@functools.lru_cache(maxsize=16)
def _session(scale, is_causal, masked, threads):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads  # the calling thread counts as one of them
    options.inter_op_num_threads = 1        # one node: nothing runs beside it
    return onnxruntime.InferenceSession(_model(scale, is_causal, masked), options,
                                        providers=["CPUExecutionProvider"])


def run(q, k, v, out, causal, scale):
    n_q, n_k = q.shape[1], k.shape[1]
    is_causal, masked = causal and n_q == n_k, causal and n_q != n_k
    session = _session(scale, is_causal, masked, budget())
    binding = session.io_binding()
    wrap = onnxruntime.OrtValue.ortvalue_from_numpy
    for name, array in (("q", q), ("k", k), ("v", v)):
        binding.bind_ortvalue_input(name, wrap(array[None]))
    if masked:
        binding.bind_ortvalue_input("mask", wrap(causal_mask(n_q, n_k)))
    binding.bind_ortvalue_output("y", wrap(out[None]))
    session.run_with_iobinding(binding)
    out[:, : first_seeing_row(n_q, n_k, causal)] = 0.0


def version():
    return onnxruntime.__version__
