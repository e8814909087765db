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

Grouped-query attention (k, v with B_kv = B / g heads, query head b reading K/V head
b // g): the operator takes it on 4-D inputs, K and V having fewer heads than Q (the
model's k and v are (1, B_kv, n_k, ·), a symbolic dimension of their own, so the cached
sessions serve every grouping).  ONNX Runtime 1.32's CPU kernel accepts
kv_num_heads != q_num_heads there and reads K/V in place: ``core/providers/cpu/llm/
attention.cc`` computes each query head's GEMMs against the K/V head ``head_i *
kv_num_heads / q_num_heads`` (= head_i // g) by pointer offset, with no copy (it copies
K/V only to fill a ``present_key``/``present_value`` output, which this model has
not); it does stream each K/V head once per query head.  Its outputs equal those of
the same call with K/V repeated g times (max difference 0).  Non-causal calls (and
n_q == 1 ones, where causal changes nothing) with g·n_q ≤ ``FOLD_ROWS`` = 256 go
folded instead: q viewed as (1, B_kv, g·n_q, d), the g query heads of a K/V head
stacked as rows of one head, so each K/V head is one GEMM and read once (8 query heads
on 2, d = 64, 2 threads: n_q = 1, n_k = 65,536: 55 ms grouped, 32 ms folded; n_q = 40,
n_k = 4,096: 4.5 / 3.7 ms; but n_q = n_k = 1,024: 48 / 61 ms, the kernel parallelising
over heads only, so it stays grouped above the bound).
"""
import functools

import onnx
import onnxruntime
from onnx import TensorProto, helper

from ..reference import causal_mask, first_seeing_row
from ..threads import budget

OPSET = 23  # the first opset with the Attention operator


FOLD_ROWS = 256  # stacked query rows per K/V head up to which a grouped call is folded


def _model(scale, is_causal, masked):
    """One float32 Attention node: q (1, B, n_q, d), k (1, B_kv, n_k, d), v (1, B_kv, n_k,
    d_v) (B_kv dividing B: grouped-query attention) [, mask (n_q, n_k), True where a query
    sees a key] -> y (1, B, n_q, d_v)."""
    dims = {"q": ["B", "n_q", "d"], "k": ["B_kv", "n_k", "d"], "v": ["B_kv", "n_k", "d_v"]}
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, *shape])
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


def _rows(array, shape):
    """``array`` viewed as ``shape``, never copied (ValueError if it cannot be a view)."""
    view = array.view()
    view.shape = shape
    return view


def run(q, k, v, out, causal, scale):
    (batch, n_q, d), (batch_kv, n_k) = q.shape, k.shape[:2]
    group = batch // batch_kv
    first = first_seeing_row(n_q, n_k, causal)
    causal = causal and n_q > 1  # one query row sees every key: no mask at all
    is_causal, masked = causal and n_q == n_k, causal and n_q != n_k
    y = out
    if group > 1 and not causal and group * n_q <= FOLD_ROWS:
        # the g query heads of each K/V head as g·n_q rows of one head (views of q and out)
        q, y = _rows(q, (batch_kv, group * n_q, d)), _rows(out, (batch_kv, group * n_q, out.shape[2]))
    session = _session(scale, is_causal, masked, budget())
    binding = session.io_binding()
    wrap = onnxruntime.OrtValue.ortvalue_from_numpy
    for name, array in (("q", q), ("k", k), ("v", v)):
        binding.bind_ortvalue_input(name, wrap(array[None]))
    if masked:
        binding.bind_ortvalue_input("mask", wrap(causal_mask(n_q, n_k)))
    binding.bind_ortvalue_output("y", wrap(y[None]))
    session.run_with_iobinding(binding)
    out[:, :first] = 0.0


def version():
    return onnxruntime.__version__
