"""External peer ``onnxruntime_attention``: ONNX Runtime's ``Attention`` operator (opset 23)
on its CPU execution provider.

Not a rung of ours: a baseline the fastest rung is measured against.  Registered only
when ``onnxruntime`` and ``onnx`` (which builds the model) are installed (``make peers``).
The model is one ``Attention`` node with symbolic sizes, built in memory.  A session
fixes its thread count and the node its type, scale and causal flag, so sessions are
cached per (scale, causal form, type, thread budget).

The (B, n, d) arrays are wrapped as 4-D (1, B, n, d) ``OrtValue``s ("B heads") sharing
NumPy's memory, and the output is bound straight to ``out``: a call times the operator
and ONNX Runtime's binding, no conversion (``prepare`` binds them once, and its call is
the session's run alone).  Causal attention with n_q == n_k uses the
operator's ``is_causal`` flag; otherwise (the flag aligns top-left) an explicit
bottom-right boolean mask.  Rows that see no key are zeroed afterwards.

Declared limits (``kernels.registry``): float32, and float16 where it meets the harness's
budget (``probed``), which it does not here.  The operator accepts float64 but computes it
no better than float32 (errors ~5e-8 against the reference, where the float64 budget is
1e-10).  Half precision, measured with ONNX Runtime 1.32 on this CPU (AVX2, no fp16
arithmetic) and the same one-node model typed float16 or bfloat16:

- float16: the CPU provider has a float16 kernel (the session places the one Attention
  node on it), but it rounds the scores to float16: ``core/providers/cpu/llm/
  attention.cc`` writes scale·q·kᵀ into a float16 buffer (without fp16 GEMM hardware it
  widens q and k, runs SGEMM and rounds the product back to float16), and the softmax
  and P·V read it from there.  On the harness's "large logits x30 n=700" case its error
  is 0.21 (434 unit roundoffs of float16; budget 2.0e-3), exactly the error of the same
  computation with the scores rounded to float16, where an exact float32 softmax rounded
  once errs 0.31 u.  The ``softmax_precision`` attribute (1, float32) changes nothing.
  ``run`` builds the float16 model (its output widened into ``out``), so the harness's
  probe measures this at the first float16 call and ``kernels.attention`` refuses the
  type with that error; the benchmarks still time it (``kernels.api.attention_unheld``):
  8 heads, n = 4,096, d = 64, 2 threads, 2.8 s full and 3.0 s causal, against 0.54 and
  1.4 s in float32 (widening, SGEMM and rounding back cost more than they save here).  A
  scale <= 0 goes in through a Mul node of q's type, so in float16 q·scale is rounded to
  float16 first.
- bfloat16: no kernel.  Lacking one, ONNX Runtime expands the operator into its ONNX
  function body, and the session fails to load: "NOT_IMPLEMENTED: Could not find an
  implementation for Expand(13)".  Refused, rather than measured through Cast nodes of our
  own, which would time a float32 computation with conversions around it.

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

Its own KV cache (``cache_decoder``): ONNX Runtime decodes over a cache with the
com.microsoft ``GroupQueryAttention`` contrib operator (schema: ``onnxruntime.capi.
onnxruntime_pybind11_state.get_all_operator_schema()``; CPU kernels:
``get_all_opkernel_def()``).  It takes past_key and past_value (1, kv_heads, capacity, d)
(BNSH) of the cache's type, the query (1, t, heads·d) and the t new tokens' key and value
(1, t, kv_heads·d), which it appends itself at seqlens_k + 1 - t (seqlens_k = total length
- 1, with total_sequence_length).  Bound through IO binding as both past and present, the
buffers are shared, so a step copies nothing.  Our (kv_heads, n, d) arrays are that layout
with batch 1: the cache is encoded once with capacity n, a step passes the first n - t
tokens as the past and the t newest as new (each step writes the same values back into
their slots, so repeated steps agree exactly).  The CPU provider pairs float32 queries with
float32, int8 or uint8 caches and float16 queries with float16, int8 or uint8 caches:

- float16: the cache is the float32 values rounded to float16 (to nearest, ties to even),
  the query is rounded to float16 and the output widened on return.  A float32 query on a
  float16 cache does load, but only because the session inserts Cast nodes
  (CastFloat16Transformer, 5 nodes instead of 1) that widen the whole cache to float32 at
  every step, an O(n) copy, so we do not use it.  Error against float64 on the float32
  values: about 1 unit roundoff (2^-11) of float16, norm-wise per head.
- int8: ``k_quant_type`` = ``v_quant_type`` = "PER_CHANNEL", ``kv_cache_bit_width`` = 8,
  inputs k_scale and v_scale (1, kv_heads, 1, d).  The operator takes one scale per tensor
  or per channel, not per token like our int8 cache.  We use per channel, symmetric:
  s = max_j |x_jc| / 127 for each K/V head and channel, codes rint(x / s) with ties to
  even.  ONNX Runtime rounds the tokens it appends the same way: a prefill through the
  operator wrote byte-identical codes, exact ties included.  So each stored value is off by
  at most max |x_c| / 254, and the output equals float64 attention over those codes to
  ~1e-6 relative.
- refused: bfloat16 (as the query's type or the cache's) and float8e4m3fn caches,
  "NOT_IMPLEMENTED : Could not find an implementation for GroupQueryAttention(1) node".

Measured with ONNX Runtime 1.32 on AMD EPYC (Zen 3, AVX2), 2 threads, n = 65,536, d = 64,
t = 1, the formats' steps interleaved, on a machine shared with other jobs (medians varied
up to 2x between runs; the ratios held).  Fastest step, 8 query heads on 2 K/V heads (on
8): float32 cache through the same operator 34 ms (34 ms), int8 14 ms (15 ms), float16
72 ms (69 ms).  Median ratios over four runs: int8 1.7-2.6x faster than float32 (a
quarter of the bytes), float16 2.2-2.8x slower than float32 (this CPU has no float16
arithmetic).  8 heads on 8 take as long as 8 on 2 (also with 1 thread: float32 26 and
28 ms, int8 11 and 12 ms), as if the CPU kernel streamed a K/V head once for each of its
query heads: grouping saves memory here, not time.
"""
import functools

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper

from ..band import Band
from ..threads import budget

OPSET = 23  # the first opset with the Attention operator


FOLD_ROWS = 256  # stacked query rows per K/V head up to which a grouped call is folded


def _model(scale, is_causal, masked, dtype_name):
    """One Attention node of NumPy type ``dtype_name`` (float32 or float16): q (1, B, n_q,
    d), k (1, B_kv, n_k, d), v (1, B_kv, n_k, d_v) (B_kv dividing B: grouped-query
    attention) [, mask (n_q, n_k), True where a query sees a key] -> y (1, B, n_q, d_v)."""
    element = helper.np_dtype_to_tensor_dtype(np.dtype(dtype_name))
    dims = {"q": ["B", "n_q", "d"], "k": ["B_kv", "n_k", "d"], "v": ["B_kv", "n_k", "d_v"]}
    inputs = [helper.make_tensor_value_info(name, element, [1, *shape])
              for name, shape in dims.items()]
    if masked:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, ["n_q", "n_k"]))
    names, nodes, initializers = [value.name for value in inputs], [], []
    if scale <= 0:
        # the operator takes scale > 0 only: q is multiplied by it first, an O(n·d) pass (in
        # float16 the product is rounded to float16)
        initializers.append(helper.make_tensor("scale", element, [], np.array([scale], dtype_name)))
        nodes.append(helper.make_node("Mul", ["q", "scale"], ["q_scaled"]))
        names[0], scale = "q_scaled", 1.0
    nodes.append(helper.make_node("Attention", names, ["y"], scale=scale, is_causal=int(is_causal)))
    output = helper.make_tensor_value_info("y", element, [1, "B", "n_q", "d_v"])
    graph = helper.make_graph(nodes, "attention", inputs, [output], initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _load(model, threads):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads  # the calling thread counts as one of them
    options.inter_op_num_threads = 1        # one node: nothing runs beside it
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


@functools.lru_cache(maxsize=16)
def _session(scale, is_causal, masked, dtype_name, threads):
    return _load(_model(scale, is_causal, masked, dtype_name), threads)


def _rows(array, shape):
    """``array`` viewed as ``shape``, never copied (ValueError if it cannot be a view)."""
    view = array.view()
    view.shape = shape
    return view


def prepare(q, k, v, causal, scale, band=None):
    """call(): the cached session's ``run_with_iobinding`` on q, k, v (and a mask, where
    ``band`` needs one) bound here, once, as OrtValues sharing their memory, its output
    bound to a new array of q's type -> that array (B, n_q, d_v), rows that see no key
    as ONNX Runtime leaves them.  What an ONNX Runtime user's call costs: the call times
    the session alone."""
    y = np.empty(q.shape[:2] + v.shape[2:], q.dtype)
    return _bound(q, k, v, y, band or Band.of(causal), scale)


def run(q, k, v, out, causal, scale, band=None):
    """band: a window and sinks (``kernels.band``; None: full, or causal), as an explicit
    n_q × n_k mask where the operator's top-left is_causal does not say it."""
    band = band or Band.of(causal)
    # float16: its own output, widened into out afterwards
    y = out if q.dtype == out.dtype else np.empty(out.shape, q.dtype)
    _bound(q, k, v, y, band, scale)()
    if y is not out:
        out[...] = y   # float16 -> float32: exact
    out[:, :band.first_row(q.shape[1], k.shape[1])] = 0.0


def _bound(q, k, v, y, band, scale):
    """call() -> y: the session of this call's form with q, k, v, its mask and the output y
    (B, n_q, d_v) bound, grouped heads folded into rows where that is faster."""
    (batch, n_q, d), (batch_kv, n_k) = q.shape, k.shape[:2]
    group = batch // batch_kv
    form = band.library_form(n_q, n_k)
    is_causal, masked = form == "causal", form == "mask"
    result = y
    if group > 1 and form == "none" and group * n_q <= FOLD_ROWS:
        # the g query heads of each K/V head as g·n_q rows of one head (views of q and y)
        q, y = _rows(q, (batch_kv, group * n_q, d)), _rows(y, (batch_kv, group * n_q, y.shape[2]))
    session = _session(scale, is_causal, masked, q.dtype.name, budget())
    binding = session.io_binding()
    arrays = {"q": q[None], "k": k[None], "v": v[None], **({"mask": band.mask(n_q, n_k)} if masked else {})}
    values = {name: onnxruntime.OrtValue.ortvalue_from_numpy(array) for name, array in arrays.items()}
    values["y"] = onnxruntime.OrtValue.ortvalue_from_numpy(y[None])
    for name, value in values.items():
        (binding.bind_ortvalue_output if name == "y" else binding.bind_ortvalue_input)(name, value)

    def call():
        session.run_with_iobinding(binding)
        return result

    # an OrtValue shares its array's memory and keeps the array alive, but the binding
    # keeps neither: the call does
    call.values = values
    return call


CACHE_FORMATS = ("float16", "int8")  # the caches ONNX Runtime keeps in its own layout here

# cache format -> (type of the query, the new tokens' key and value and the output; type
# of the cache): the CPU kernels pair a float16 cache with float16 activations only
_CACHE_TYPES = {"float16": (np.float16, np.float16), "int8": (np.float32, np.int8)}


def _cache_model(cache_format, heads, kv_heads, d, scale):
    """One com.microsoft GroupQueryAttention node over a cache of ``cache_format``:
    query (1, t, heads·d) and key, value (1, t, kv_heads·d), the t newest tokens (appended
    to the cache by the node), past_key and past_value (1, kv_heads, n, d) (BNSH), seqlens_k
    (1,) = n - 1 and total_sequence_length () = n [, int8: k_scale and v_scale
    (1, kv_heads, 1, d)] -> output (1, t, heads·d), present_key and present_value (bound
    to the past buffers: shared, so nothing is copied)."""
    io_type, cache_type = (helper.np_dtype_to_tensor_dtype(np.dtype(t))
                           for t in _CACHE_TYPES[cache_format])
    tensor = helper.make_tensor_value_info
    cache = [kv_heads, "n", d]
    inputs = [tensor("query", io_type, [1, "t", heads * d]),
              tensor("key", io_type, [1, "t", kv_heads * d]),
              tensor("value", io_type, [1, "t", kv_heads * d]),
              tensor("past_key", cache_type, [1, *cache]),
              tensor("past_value", cache_type, [1, *cache]),
              tensor("seqlens_k", TensorProto.INT32, [1]),
              tensor("total_sequence_length", TensorProto.INT32, [])]
    names = [value.name for value in inputs]
    attributes = {"num_heads": heads, "kv_num_heads": kv_heads, "scale": scale}
    if cache_format == "int8":
        inputs += [tensor(name, TensorProto.FLOAT, [1, kv_heads, 1, d]) for name in ("k_scale", "v_scale")]
        # the five optional inputs between (rotary caches, position ids, bias, head sink) absent
        names += [""] * 5 + ["k_scale", "v_scale"]
        attributes.update(k_quant_type="PER_CHANNEL", v_quant_type="PER_CHANNEL", kv_cache_bit_width=8)
    outputs = [tensor("output", io_type, [1, "t", heads * d]),
               tensor("present_key", cache_type, [1, *cache]),
               tensor("present_value", cache_type, [1, *cache])]
    node = helper.make_node("GroupQueryAttention", names, [value.name for value in outputs],
                            domain="com.microsoft", **attributes)
    graph = helper.make_graph([node], "cache_decode", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


@functools.lru_cache(maxsize=16)
def _cache_session(cache_format, heads, kv_heads, d, scale, threads):
    return _load(_cache_model(cache_format, heads, kv_heads, d, scale), threads)


def _int8_per_channel(x):
    """x (kv_heads, n, d) float32 -> (codes (1, kv_heads, n, d) int8, scales (1, kv_heads, 1, d)
    float32): symmetric, one scale per K/V head and channel, max |x| / 127 over the tokens,
    each value rounded to the nearest code, ties to even, as ONNX Runtime quantises the
    tokens it appends (so a step's rewrite of its newest slots leaves them as they were)."""
    scales = np.abs(x).max(axis=1, keepdims=True) / np.float32(127)
    scales[scales == 0] = 1  # an all-zero channel is encoded by any scale; 0 would give NaN
    return np.rint(x / scales).astype(np.int8)[None], scales[None]


def cache_decoder(cache_format, keys, values, heads, scale):
    """keys (kv_heads, n, d) and values (kv_heads, n, d) float32 (``GroupQueryAttention``
    takes value heads as wide as key heads), heads a multiple of kv_heads, scale > 0:
    ONNX Runtime's own cache of ``cache_format``, built once (O(n·d)), and ``step(q)``:
    q (heads, t, d) float32, 1 <= t <= n -> new (heads, t, d) float32 array, the t newest
    tokens' causal attention over the n cached ones, aligned bottom-right.

    The first n - t tokens are the node's past; the t newest go in as its new key and
    value (read from ``keys`` and ``values``, O(t·d)), which it writes into slots n - t ..
    n - 1 of the shared buffer, as they were: every step sees the same cache."""
    if cache_format not in CACHE_FORMATS:
        raise ValueError(f"ONNX Runtime keeps no {cache_format!r} KV cache here; "
                         f"its own caches: {', '.join(CACHE_FORMATS)}")
    (kv_heads, n, d), d_v = keys.shape, values.shape[2]
    if d_v != d:
        raise ValueError(f"GroupQueryAttention takes values as wide as the keys (d = {d}), got d_v = {d_v}")
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads do not divide among {kv_heads} K/V heads")
    io_type, cache_type = _CACHE_TYPES[cache_format]
    wrap = onnxruntime.OrtValue.ortvalue_from_numpy
    if cache_format == "int8":
        (past_key, k_scale), (past_value, v_scale) = (_int8_per_channel(x) for x in (keys, values))
        scales = {"k_scale": wrap(k_scale), "v_scale": wrap(v_scale)}
    else:
        past_key, past_value, scales = keys.astype(cache_type)[None], values.astype(cache_type)[None], {}
    # bound as past and as present: the node appends to the buffers it reads, copying nothing
    shared = {"key": wrap(past_key), "value": wrap(past_value)}
    inputs = {"past_key": shared["key"], "past_value": shared["value"], **scales,
              "seqlens_k": wrap(np.array([n - 1], np.int32)),
              "total_sequence_length": wrap(np.array(n, np.int32))}
    scale = float(scale)

    def tokens(x):
        """(h, t, d) -> (1, t, h·d) of the node's type: token-major, heads side by side."""
        return np.ascontiguousarray(x.transpose(1, 0, 2), dtype=io_type).reshape(1, x.shape[1], -1)

    def step(q):
        t = q.shape[1]
        if q.shape != (heads, t, d) or not 1 <= t <= n:
            raise ValueError(f"q must have shape ({heads}, t, {d}) with 1 <= t <= {n}, got {q.shape}")
        session = _cache_session(cache_format, heads, kv_heads, d, scale, budget())
        binding = session.io_binding()
        for name, value in inputs.items():
            binding.bind_ortvalue_input(name, value)
        for name, x in (("query", q), ("key", keys[:, n - t:]), ("value", values[:, n - t:])):
            binding.bind_ortvalue_input(name, wrap(tokens(x)))
        out = np.empty((1, t, heads * d), io_type)
        binding.bind_ortvalue_output("output", wrap(out))
        for name, value in shared.items():
            binding.bind_ortvalue_output(f"present_{name}", value)
        session.run_with_iobinding(binding)
        return np.ascontiguousarray(out.reshape(t, heads, d).transpose(1, 0, 2), dtype=np.float32)

    return step


def version():
    return onnxruntime.__version__
