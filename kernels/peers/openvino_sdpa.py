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
units the plugin honours the hint and runs the attention in that type: measured on a
Zen 4 (AVX512-BF16), 26 of the harness's 46 cases fail in float16 and bfloat16 (large
logits x30, n = 700: error 0.39 against a budget of 0.0089), so those types are not
declared once for every CPU but held to the harness where it runs.

Declared limits (``kernels.registry``): float32, and bfloat16 and float16 where the
harness's probe finds them within the budget on the CPU (``kernels.harness.probe``, at
the first call in each; on this one: 0.27 and 0.075 of it, on the large logits); not
float64: the plugin computes float64 inputs in float32 (errors ~6e-7 against the reference).

Grouped-query attention (k, v with B_kv = B / g heads, query head b reading K/V head
b // g): the node takes no separate K/V head count.  Its specification (opset 13,
"Dimensions") asks each batch dimension of q, k and v to be equal or broadcastable, and
its shape inference merges them with NumPy broadcasting: q (1, 8, n_q, d) against k
(1, 2, n_k, d) is refused ("Key input shape not compatible with other inputs").  So a
grouped call goes in as q (B_kv, g, n_q, d) against k (B_kv, 1, n_k, d) and v (B_kv, 1,
n_k, d_v) (views of the arrays: the g query heads of a K/V head are consecutive), out
(B_kv, g, n_q, d_v), and a causal mask (n_q, n_k) broadcasts over both batch
dimensions.  The CPU plugin does not copy K/V per query head for it: the compiled
graph is the same as for ungrouped inputs (a Snippets subgraph, a Transpose of K, a
second subgraph; no Broadcast or Tile node in ``get_runtime_model()``), and its
outputs equal those of the same call with K/V repeated g times (max difference 0).
Non-causal calls (and n_q == 1 ones, where causal changes nothing) with g·n_q ≤
``FOLD_ROWS`` = 256 go folded instead, as a plain 3-D model: q (B_kv, g·n_q, d) against
k (B_kv, n_k, d), each K/V head one product read once (8 query heads on 2, d = 64, 2
threads, on a busy machine: n_q = 1, n_k = 65,536: broadcast 160-300 ms, folded 80-230
ms, K/V repeated 250-880 ms; n_q = 40, n_k = 4,096: 13.6 / 12.8 ms; but n_q = n_k =
1,024: 49 / 75 ms, so larger calls stay broadcast).  The compiled models are cached by
the shapes the node sees, which carry the grouping ((B_kv, g, n_q, d) against (B_kv, 1,
n_k, d), or the folded 3-D shapes).

Its own KV cache (``cache_decoder``): for our int8, float16 and float32 caches the peer
decodes from the cache the CPU plugin keeps itself, ``CACHE_FORMATS``, as OpenVINO's own
text generation does.  The model is one
layer's attention as an LLM export builds it: per K and V a ReadValue of a variable
(1, B_kv, n, d), a Gather by a ``beam_idx`` input, a Concat with the step's new tokens
and an Assign of the result back; grouped K/V heads are then broadcast to the query
heads (Unsqueeze, bidirectional Broadcast, Reshape), and an SDPA node, causal, with our
scale.  The plugin fuses all of it (its StatefulSDPAFusion; without the Gather nothing
fuses) into one node that owns the cache: ``get_runtime_model()`` holds only inputs,
constants, two MemoryInput, one ScaledDotProductAttention (rt_info ``kv_cache_precision``
u8 or f16; "ScaledDotProductAttentionWithKVCache" in its errors) and two MemoryOutput,
no Concat, Gather or Broadcast, for 2 or 8 K/V heads; the compiled model reads back
``KV_CACHE_PRECISION`` as asked (u8 for int8, f16 for float16, f32 for float32).  In u8 it quantises each
token of each K/V head asymmetrically, one float32 scale (max - min) / 255 and zero
point -min / scale (not rounded) over the token's d channels (``KEY_CACHE_GROUP_SIZE`` 0),
elements within half a step: its own scales, not ours, from our cache's dequantised
contents.  In f16 our float16 cache's values are held exactly.  The cache is filled
through ``query_state()`` (``set_state`` quantises as an append does: the same bytes), then
one token is appended, since the first append after a ``set_state`` reallocates the cache
(doubling it) and copies it whole.  Drift: a step cannot attend the cache without
appending its t tokens to it, and the plugin cannot drop tokens short of re-encoding the
whole cache (``set_state``), so OpenVINO's cache is filled at the first step with the
first n - t tokens and each step appends its last t, then attends everything, bottom-right
causal: the first step attends exactly the n tokens, step s attends n + t_2 + ... + t_s
(copies of the newest), and when that drift would pass n / 32 tokens the cache is filled
anew, in that step (at n = 65,536 once in 2,048 steps).  Attending without appending is
not possible either: a step of zero new tokens reads uninitialised memory (errors ~1e36).  Refused: bfloat16 (ValueError naming it: the plugin on this CPU
keeps no bf16 cache).  The float32 cache is taken this way too, since the stateful model
decoded 5x faster than ``run``'s one node here (40 against 230 ms on 2 K/V heads, 135
against 654 ms on 8): measuring ``run`` would undersell OpenVINO's decode.  Figures, 8 query heads, n = 65,536,
d = 64, one token, 2 threads, AMD EPYC Zen 3 (AVX2), on a shared, busy machine (medians
of 12 interleaved steps, three runs): on 2 K/V heads u8 25-37 ms, f16 20-32 ms, f32
31-44 ms; on 8 K/V heads u8 22-59 ms, f16 25-81 ms, f32 56-161 ms.  Per run, u8 ran
1.2-1.3x as fast as f32 on 2 K/V heads and 2.0-2.7x on 8, f16 1.2-1.7x and 1.5-2.2x;
f16 about as fast as u8 on 2 K/V heads, u8 ahead on 8; and 8 K/V heads cost u8 only
0.9-1.9x the time of 2.
"""
import functools
import threading

import numpy as np
import openvino
import openvino.opset13 as ops
from openvino.op.util import Variable, VariableInfo

from ..band import FULL, Band
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
def _compiled(shape_q, shape_k, shape_v, dtype_name, scale, band, threads):
    """The model compiled for q, k, v of these (..., n, d) shapes (their batch dimensions
    equal or broadcastable) and dtype -> (..., n_q, d_v) of that dtype."""
    element_type, hint = _TYPES[dtype_name]
    q, k, v = (ops.parameter(shape, element_type, name=name)
               for name, shape in (("q", shape_q), ("k", shape_k), ("v", shape_v)))
    n_q, n_k = shape_q[-2], shape_k[-2]
    form = band.library_form(n_q, n_k)   # a band other than (square) causal: a mask
    is_causal = form == "causal"
    if element_type == openvino.Type.f32:
        # a mask must come before the scale input: a zero bias where there is none
        mask = ops.constant(band.mask(n_q, n_k) if form == "mask" else np.float32(0.0))
        inputs = [q, k, v, mask, _scale_constant(scale, element_type, None)]
    else:
        # half: the mask boolean (a float mask would have to be of q's type: its -inf is
        # fine, but booleans say it plainly); the scale always given, rounded to nearest
        # by NumPy (left out, the plugin computes 1/√d in the half type itself, worse)
        mask = ops.constant(band.mask(n_q, n_k) if form == "mask" else np.array(True))
        inputs = [q, k, v, mask, _scale_constant(scale, element_type, np.dtype(dtype_name))]
    node = ops.scaled_dot_product_attention(*inputs, causal=is_causal)
    model = openvino.Model([node], [q, k, v], "attention")
    return _CORE.compile_model(model, "CPU", {
        "INFERENCE_NUM_THREADS": threads,
        "INFERENCE_PRECISION_HINT": hint,
        "CPU_DENORMALS_OPTIMIZATION": False,
        "PERFORMANCE_HINT": "LATENCY",
    })


@functools.lru_cache(maxsize=8)
def _request(*form):
    """(infer request, its lock) of ``_compiled(*form)``, shared by ``run``'s calls.  A
    request runs one inference at a time (concurrent use fails or corrupts memory), so
    callers on several threads take turns through the lock; a new request per call would
    add ~20 µs to each (a tiny call takes ~150 µs)."""
    return _compiled(*form).create_infer_request(), threading.Lock()


def _tensor(array, element_type):
    """``array`` as an ov.Tensor sharing its memory.  float32: a read-only array (a
    KVCache's view) is copied by OpenVINO, which shares writable memory only.  A 16-bit
    array: its bits, typed, always shared (the typed constructor takes read-only memory;
    the plugin only reads its inputs); the caller keeps ``array`` alive while it is used."""
    if element_type == openvino.Type.f32:
        return openvino.Tensor(array, shared_memory=array.flags.writeable)
    return openvino.Tensor(array.view(np.uint16), list(array.shape), element_type)


FOLD_ROWS = 256  # stacked query rows per K/V head up to which a grouped call is folded


def _shaped(array, shape):
    """``array`` viewed as ``shape``, never copied (ValueError if it cannot be a view)."""
    view = array.view()
    view.shape = shape
    return view


def prepare(q, k, v, causal, scale, band=None):
    """call(): ``infer()`` of a request of its own, on the compiled model of this call's
    form, with q, k, v and a new output array of q's type set once as tensors sharing
    their memory -> that array (B, n_q, d_v), rows that see no key as OpenVINO leaves
    them.  What an OpenVINO user's call costs: the call times the request alone."""
    y = np.empty(q.shape[:2] + v.shape[2:], q.dtype)
    form, arrays = _set_up(q, k, v, y, band or Band.of(causal), scale)
    request = _compiled(*form).create_infer_request()
    _bind(request, arrays)

    def call():
        request.infer()
        return y

    call.arrays = arrays   # a 16-bit tensor shares its array's memory without keeping it alive
    return call


def run(q, k, v, out, causal, scale, band=None):
    """band: a window and sinks (``kernels.band``; None: full, or causal), as an explicit
    n_q × n_k mask where the operator's top-left causal flag does not say it."""
    band = band or Band.of(causal)
    half = None if q.dtype == out.dtype else np.empty(out.shape, q.dtype)
    form, arrays = _set_up(q, k, v, out if half is None else half, band, scale)
    request, lock = _request(*form)
    with lock:
        _bind(request, arrays)
        request.infer()
    if half is not None:
        out[...] = half  # widened exactly
    out[:, :band.first_row(q.shape[1], k.shape[1])] = 0.0


def _set_up(q, k, v, y, band, scale):
    """(the compiled model's form: ``_compiled``'s arguments, (q, k, v, y) shaped for it):
    grouped heads folded into rows of one head, or broadcast against their K/V head."""
    (batch, n_q, d), (batch_kv, n_k, d_v) = q.shape, v.shape
    group = batch // batch_kv
    if band.library_form(n_q, n_k) == "none":
        band = FULL  # the request sees the folded shapes: nothing about them is masked
    if group > 1 and band.full and group * n_q <= FOLD_ROWS:
        # folded: the g query heads of each K/V head as g·n_q rows of one head
        q, y = _shaped(q, (batch_kv, group * n_q, d)), _shaped(y, (batch_kv, group * n_q, d_v))
    elif group > 1:
        # broadcast: (B_kv, g, ·) queries against (B_kv, 1, ·) keys and values
        q, y = _shaped(q, (batch_kv, group, n_q, d)), _shaped(y, (batch_kv, group, n_q, d_v))
        k, v = _shaped(k, (batch_kv, 1, n_k, d)), _shaped(v, (batch_kv, 1, n_k, d_v))
    return (q.shape, k.shape, v.shape, q.dtype.name, scale, band, budget()), (q, k, v, y)


def _bind(request, arrays):
    """q, k, v and the output y set on ``request`` as tensors sharing their memory."""
    element_type, _ = _TYPES[arrays[0].dtype.name]
    for index, array in enumerate(arrays[:3]):
        request.set_input_tensor(index, _tensor(array, element_type))
    request.set_output_tensor(0, _tensor(arrays[3], element_type))


def version():
    return openvino.__version__


# Our cache format -> KV_CACHE_PRECISION of the CPU plugin's own cache
_CACHE_PRECISIONS = {"int8": "u8", "float16": "f16", "float32": "f32"}
CACHE_FORMATS = tuple(_CACHE_PRECISIONS)


@functools.lru_cache(maxsize=8)
def _stateful(precision, heads, kv_heads, d, d_v, scale, threads):
    """The compiled stateful decode model whose K/V cache the plugin keeps in
    ``precision``: q (1, heads, t, d), the t new tokens' k (1, kv_heads, t, d) and v
    (1, kv_heads, t, d_v), beam_idx (1,) -> (1, heads, t, d_v).  Built as an LLM export
    builds one layer's attention (ReadValue → Gather(beam_idx) → Concat → Assign, and the
    K/V heads broadcast to the query heads after the Concat), the pattern the plugin
    fuses into one node that owns the cache; without the Gather it is not fused."""
    group = heads // kv_heads
    q = ops.parameter([1, heads, -1, d], openvino.Type.f32, name="q")
    beam_idx = ops.parameter([-1], openvino.Type.i32, name="beam_idx")
    new, present, sinks = [], [], []
    for name, width in (("k", d), ("v", d_v)):
        tokens = ops.parameter([1, kv_heads, -1, width], openvino.Type.f32, name=name)
        info = VariableInfo()
        info.variable_id, info.data_type = f"past_{name}", openvino.Type.f32
        info.data_shape = openvino.PartialShape([-1, kv_heads, -1, width])
        variable = Variable(info)
        # a ReadValue without an initial value fails to compile ("less parent edges")
        past = ops.read_value(ops.constant(np.zeros((1, kv_heads, 0, width), np.float32)), variable)
        whole = ops.concat([ops.gather(past, beam_idx, ops.constant(np.int64(0))), tokens], 2)
        sinks.append(ops.assign(whole, variable))
        if group > 1:
            # (1, kv_heads, 1, n, ·) broadcast to (1, kv_heads, g, n, ·), read as heads
            wide = ops.broadcast(ops.unsqueeze(whole, ops.constant(np.int64([2]))),
                                 ops.constant(np.int64([1, 1, group, 1, 1])), broadcast_spec="bidirectional")
            whole = ops.reshape(wide, ops.constant(np.int64([0, heads, -1, width])), special_zero=True)
        new.append(tokens)
        present.append(whole)
    # causal: the fused node aligns it bottom-right (query i sees the cache up to i + n - t)
    node = ops.scaled_dot_product_attention(q, *present, ops.constant(np.float32(0.0)),
                                            _scale_constant(scale, openvino.Type.f32, None), causal=True)
    model = openvino.Model([node.output(0)], sinks, [q, *new, beam_idx], "decode")
    return _CORE.compile_model(model, "CPU", {
        "INFERENCE_NUM_THREADS": threads,
        "INFERENCE_PRECISION_HINT": "f32",
        "CPU_DENORMALS_OPTIMIZATION": False,
        "PERFORMANCE_HINT": "LATENCY",
        "KV_CACHE_PRECISION": precision,
    })


def cache_decoder(cache_format, keys, values, heads, scale):
    """keys (kv_heads, n, d) and values (kv_heads, n, d_v) float32, C-contiguous (a KV cache's
    contents as our kernels read them), heads a multiple of kv_heads (query head h reads K/V
    head h // (heads // kv_heads)), scale > 0: OpenVINO's own cache of ``cache_format``,
    built from them (its own quantisation, O(n·d)), and ``step(q)``: q (heads, t, d)
    float32 -> new (heads, t, d_v) float32 array, the t newest tokens' causal attention
    over the cached ones, aligned bottom-right, copying nothing of the cache.

    A step appends its t tokens to OpenVINO's cache (the plugin attends only what it has
    just appended to), so the cache is encoded at the first step with the first n - t
    tokens, and the first step attends exactly the n; each later step appends the last t
    again (step s attends n + t_2 + ... + t_s), until that drift would pass n / 32
    tokens and the cache is encoded anew (a step that pays O(n·d) once in n / 32 tokens)."""
    if cache_format not in _CACHE_PRECISIONS:
        raise ValueError(f"openvino_sdpa keeps no {cache_format!r} cache of its own "
                         f"(its own caches: {', '.join(CACHE_FORMATS)})")
    (kv_heads, n, d), d_v = keys.shape, values.shape[2]
    compiled = _stateful(_CACHE_PRECISIONS[cache_format], heads, kv_heads, d, d_v, float(scale), budget())
    request = compiled.create_infer_request()
    request.set_tensor("beam_idx", openvino.Tensor(np.zeros(1, np.int32)))
    sources = {"past_k": keys, "past_v": values}
    held = [0]  # tokens OpenVINO's cache holds; 0: not encoded yet
    lock = threading.Lock()  # a step appends to the request's state: one at a time

    def infer(q, first, last):
        """q against the cache with tokens [first, last) appended to it."""
        held[0] += last - first
        return request.infer({"q": q[None], "k": keys[None, :, first:last], "v": values[None, :, first:last]})[0]

    def encode(tokens):
        """OpenVINO's cache set to the first ``tokens`` tokens."""
        # set_state: the plugin encodes the tokens (u8 with its own scales, or f16) as it
        # encodes those a step appends (the same bytes), and keeps the float32 tensor it
        # was given alongside (its own copy: a shared one would outlive these arrays)
        for state in request.query_state():
            state.state = openvino.Tensor(np.ascontiguousarray(sources[state.name][None, :, :max(tokens - 1, 0)]))
        held[0] = max(tokens - 1, 0)
        if tokens >= 1:
            # the last token appended now: the append that outgrows a state set this way
            # reallocates the cache (doubling it) and copies all of it, here rather than
            # in the step
            infer(np.zeros((heads, 1, d), np.float32), tokens - 1, tokens)

    def step(q):
        t = q.shape[1]
        with lock:
            if held[0] == 0 or held[0] + t - n > n // 32:
                encode(n - t)
            return infer(q, n - t, n)[0]

    return step
