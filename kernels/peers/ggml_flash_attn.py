"""External peer ``ggml_flash_attn``: ggml's ``ggml_flash_attn_ext`` on its CPU backend.

ggml is the tensor library under llama.cpp; ``ggml_flash_attn_ext`` is the attention
llama.cpp computes with when flash attention is on, over the KV cache it keeps in ggml's
own types.  Not a rung of ours: a baseline the fastest rung is measured against.
Registered only when the ``ggml-python`` binding is installed (``make peers``): ctypes
over the ggml it builds from its sdist with CMake (2 min 16 s here), ``import ggml``.
Measured with ggml-python 0.0.45 (ggml 0.15.3) built with OpenMP and ``-march=native``
on this CPU (AMD EPYC, Zen 3: AVX2, FMA, F16C; no AVX512).  The source lines cited are
its ``vendor/ggml/src/ggml-cpu/ops.cpp`` (``ggml_compute_forward_flash_attn_ext_f16``
and what it calls) unless named otherwise.

The call: ggml lists a tensor's sizes innermost first, so our (heads, t, d) query is q
ne = (d, t, heads), K/V heads are k ne = (d, n, kv_heads) and v ne = (d_v, n, kv_heads)
(v not transposed), and the result ne = (d_v, heads, t), i.e. (t, heads, d_v) in NumPy's
order.  ggml broadcasts K/V heads over query heads itself (query head h reads K/V head
h // (heads / kv_heads)), with no copy.  Causal attention, aligned bottom-right, is a
float16 mask (n_q, n_k) of 0 and -inf (the binding's ``GGML_KQ_MASK_PAD`` = 32 is stale:
this ggml pads no mask rows); a single query row sees every key, so it gets no mask.
``ggml_flash_attn_ext_set_prec(node, GGML_PREC_F32)`` is set, as llama.cpp does, but the
CPU backend ignores it: ``ggml_compute_forward_flash_attn_ext`` sends GGML_PREC_DEFAULT
and GGML_PREC_F32 to the same function.  The kernel runs on ``budget()`` threads
(``ggml_graph_plan``, ``ggml_graph_compute``), an OpenMP team in this build.

``run`` (float32 and bfloat16): q, k and v are read in place (tensors of a header-only
context pointing at NumPy's memory; bfloat16 q widened to float32, which ggml requires,
exactly), ggml writes its permuted result into an array of ours, copied into ``out``.
Rows that see no key (causal, n_q > n_k) come out 0 (the sum of weights is 0 and ggml
scales by 0 then).  It holds the n_q × n_k float16 mask of a causal call (2 bytes per
score: ``workspace_bytes``).  Errors against the reference: ~1e-6, float32 sums.

Its own KV cache (``cache_decoder``): the float32 keys and values are encoded once by
ggml's own ``ggml_quantize_chunk`` into two tensors of a context of their own:

- float32: GGML_TYPE_F32, the values as given.
- bfloat16: GGML_TYPE_BF16, rounded to nearest even.
- int8: GGML_TYPE_Q8_0, llama.cpp's 8-bit cache: blocks of 32 values along d, each with
  one float16 scale D = fp16(max|block| / 127) and codes roundf(x / (max|block| / 127))
  in [-127, 127] (``ggml-quants.c``: ``quantize_row_q8_0_ref``).  Rounding the scale to
  float16 moves a stored value by up to 127·|D - d| <= 127·2^-11·d beyond the code's
  d / 2: each element is within (1 + 127·2^-11)·max|block| / 254 of its value.  d and
  d_v must be multiples of 32 (whole blocks); other widths are refused.
- int4: GGML_TYPE_Q4_0, llama.cpp's 4-bit cache: blocks of 32 values along d, each with
  one float16 scale D = fp16(m / -8), m the block's value of largest magnitude, and codes
  min(15, trunc(x / (m / -8) + 8.5)) - 8 in [-8, 7], stored plus 8, value j of the block
  in the low nibble of byte j and value j + 16 in its high nibble
  (``quantize_row_q4_0_ref``).  So m itself is stored exactly as code -8; a value of the
  opposite sign near |m| is clipped to code 7, up to a whole step D from it; the others
  are within D / 2, plus 8 · |D - fp16(D)| for the scale's rounding.  The same widths as
  Q8_0.  (Ours, ``cache_dtype="int4"``, is symmetric: codes in ±7, max|x| / 7 a step.)

The graph (q, the mask, the one attention node and its result) is built once per number
of new tokens t, in a context of its own (O(t·d), and O(n·t) for the mask when t > 1); a
step copies q in (O(t·d)), runs the graph and copies the result out: it times ggml's
decode over the cache where ggml keeps it.

What it computes in, from the source, and measured (norm-wise relative error per head
against float64 attention on the same float32 values; 8 query heads on 2 and on 8,
d = 64 and 32, t = 1 and 3, standard normal values, scale 1/√d):

- Below 64 query rows (decoding) each row runs ``..._f16_one_chunk``: q is first converted
  to the key type's dot-product type (``q_to_vec_dot``: rounded to float16 for F16 keys,
  to bfloat16 for BF16, quantised to Q8_0 blocks for Q8_0 and Q4_0 keys, by ``quantize_row_q8_0``'s
  AVX2 code in ``arch/x86/quants.c``: codes rint(x · 127 / max|block|)), then an online
  softmax over the keys one at a time, scores and their sum in float32, V·softmax summed in
  float32 (``VKQ32``, values widened by ``v_to_float``) for every value type but F16.  A
  single query row over 512 keys or more of F32 or F16 splits the keys between the threads
  (``use_split_kv_path``), each chain summed so, then merged in float32; from 64 query rows
  on, F32 and F16 caches go through ``..._tiled`` (float32 GEMMs, q not rounded).
- float32: 13-21 unit roundoffs of float32 (~1e-6) at n = 2,048.
- bfloat16: 0.8-1.2 unit roundoffs of bfloat16 (2^-8) from n = 512 to 32,768: rounding
  the cache and q, nothing more.
- int8 (Q8_0): 15-40 unit roundoffs of float16 (~1%) from n = 512 to 32,768, all
  quantisation: the output equals float64 attention over the dequantised cache and query
  described above to within 30 unit roundoffs of float32.
- float16 (GGML_TYPE_F16) is refused (``REFUSED_FORMATS``; ``run`` takes no float16, for
  the same reason): for F16 values the running sum of V·softmax is a float16 vector
  (``VKQ16``), updated by ``ggml_vec_mad_f16`` and ``ggml_vec_scale_f16`` (``vec.h``),
  which widen, compute in float32 and round back to float16 at every key.  On random
  values its errors add up like a random walk, ~0.4·√n unit roundoffs of float16 (8 heads
  on 2, d = 64: 6-8 at n = 512, 11-15 at 2,048, 21-31 at 8,192, 45-57 at 32,768; 7-16 on
  the whole grid at 2,048), where rounding the cache costs about 1.  Worse, once the sum
  reaches 2,048 times a key's weight, adding that key's value rounds back to the same
  float16 (2,048 + 1 is a tie, kept even), so a chain of keys with even weights stops
  counting: attention spread evenly over 8,192 keys of value 1 gives 0.25 (0.5 with the
  keys split between 2 threads), over 65,536 keys 0.03 (0.06), where the answer is 1.
  Bias, not noise, on long caches: not a float16 cache's error.
  (The harness's cases, at most 1,100 keys, do not reach it: float16 passes them.)

Refused with a ValueError: the float16 cache and any format ggml does not keep, Q8_0 and
Q4_0 widths that are not multiples of 32, query heads not a multiple of the K/V heads, a q
of another shape or with t outside 1..n (ggml aborts the process on what it cannot take,
so these are checked first).

Measured with ggml 0.15.3 on AMD EPYC (Zen 3, AVX2), n = 65,536, d = 64, t = 1, the
formats' steps interleaved, median of 15, on a machine shared with other jobs.  With 2
threads the times fall on multiples of 4 ms (the scheduler's tick: ggml's OpenMP team
ends each step at a barrier, and a worker whose core another job holds waits for the
next tick): 32-48 ms per step in five runs of six, 13-19 ms (8 heads on 8) once, and
slower than 1 thread, so the times come from 1 thread.  8 query heads on 2 K/V heads (on
8), 1 thread: float32 33 ms (37 ms), bfloat16 31 ms (32 ms), int8 29 ms (31 ms), and the
refused float16 19 ms (24 ms).  int8 is only 1.15-1.2x faster than float32 for a quarter of the
bytes and bfloat16 1.1-1.2x for half: both dequantise each value row to float32 before
the multiply-add, and every query head reads its K/V head again (8 heads on 8 take
1.0-1.3x as long as 8 on 2: grouping saves memory here, not time).  With 2 threads,
float16 1.2-1.5x faster than float32, bfloat16 and int8 1.0-1.3x.  int4 (Q4_0), measured
later beside int8 (same shape, 1 thread, interleaved, median of 11, a disturbed machine):
42 ms (41 ms) against int8's 23 ms (23 ms), 1.8x slower for half the bytes, each value
unpacked from its nibble and scaled before the multiply-add.
"""
import ctypes

import numpy as np

import ggml

from ..band import CAUSAL, Band
from ..threads import budget

# cache format -> ggml's type for it
_GGML_TYPES = {"float32": ggml.GGML_TYPE_F32, "float16": ggml.GGML_TYPE_F16,
               "bfloat16": ggml.GGML_TYPE_BF16, "int8": ggml.GGML_TYPE_Q8_0, "int4": ggml.GGML_TYPE_Q4_0}
# ggml keeps these, but computes over them below their precision (evidence: the docstring)
REFUSED_FORMATS = {
    "float16": "its CPU kernel sums V·softmax in float16 when decoding (fewer than 64 query rows), "
               "so each chain of keys stops adding at 2,048 times the largest weight: attention spread "
               "evenly over 8,192 keys of value 1 gives 0.25-0.5 (1 or 2 threads), over 65,536 keys "
               "0.03-0.06, where the answer is 1",
}
CACHE_FORMATS = tuple(name for name in _GGML_TYPES if name not in REFUSED_FORMATS)

# run's dtypes -> ggml's type for k and v: the ones it computes at their own precision
_RUN_TYPES = {"float32": ggml.GGML_TYPE_F32, "bfloat16": ggml.GGML_TYPE_BF16}

Q8_0_BLOCK = 32  # values per Q8_0 block (QK8_0): one float16 scale each
Q4_0_BLOCK = 32  # values per Q4_0 block (QK4_0), likewise
_BLOCKS = {ggml.GGML_TYPE_Q8_0: ("int8", "Q8_0", Q8_0_BLOCK), ggml.GGML_TYPE_Q4_0: ("int4", "Q4_0", Q4_0_BLOCK)}
GRAPH_SIZE = 8   # room in a graph for its one node and its (up to 4) leaves: q, k, v, mask


class _Context:
    """A ggml context owning ``size`` bytes of tensors (no_alloc: of their headers only, their
    data set by the caller), freed with this object."""

    def __init__(self, size, no_alloc=False):
        pointer = ggml.ggml_init(ggml.ggml_init_params(mem_size=size, mem_buffer=None, no_alloc=no_alloc))
        if not pointer:
            raise MemoryError(f"ggml could not allocate a context of {size:,} bytes")
        self.pointer = pointer

    def __del__(self):
        ggml.ggml_free(self.pointer)

    def tensor(self, ggml_type, *ne):
        """A new tensor of sizes ``ne`` (innermost first)."""
        return ggml.ggml_new_tensor(self.pointer, ggml_type, len(ne), (ctypes.c_int64 * len(ne))(*ne))


def _context_size(*tensor_bytes, graph_nodes=0):
    """Bytes a context needs for tensors of these sizes (each padded to ggml's
    alignment) and a graph of room ``graph_nodes``."""
    padded = sum(-(-size // ggml.GGML_MEM_ALIGN) * ggml.GGML_MEM_ALIGN for size in tensor_bytes)
    graph = ggml.ggml_graph_overhead_custom(graph_nodes, False) if graph_nodes else 0
    return padded + len(tensor_bytes) * ggml.ggml_tensor_overhead() + graph


def _array(tensor, dtype, shape):
    """The tensor's data as a NumPy array of ``shape`` (a view: no copy)."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    memory = (ctypes.c_char * size).from_address(ggml.ggml_get_data(tensor))
    return np.frombuffer(memory, dtype).reshape(shape)


def _float_mask(seen):
    """ggml's float16 mask of a boolean (t, n) one: 0 where query i sees key j, else -inf."""
    return np.where(seen, np.float16(0), np.float16(-np.inf))


def _plan(graph):
    """(ggml's plan of ``graph`` for the thread budget, the work buffer it points at: keep it
    while the plan is used)."""
    plan = ggml.ggml_graph_plan(graph, budget(), None)
    work = np.empty(plan.work_size, np.uint8)  # the kernel's scratch: O(threads·(heads + tile)·d)
    plan.work_data = work.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
    return plan, work


def _compute(graph, planned=None):
    """Run ``graph`` on the CPU backend with the thread budget, by ``planned`` (``_plan``'s)
    or a plan made now."""
    plan, _work = planned or _plan(graph)   # (_work: the buffer the plan points at, kept)
    status = ggml.ggml_graph_compute(graph, ctypes.byref(plan))
    if status != ggml.GGML_STATUS_SUCCESS:
        raise RuntimeError(f"ggml_graph_compute failed with status {status}")


def _wrap(context, array, ggml_type, *ne):
    """A tensor of ``context`` (no_alloc) reading ``array``'s memory in place."""
    tensor = context.tensor(ggml_type, *ne)
    tensor.contents.data = array.ctypes.data
    return tensor


def prepare(q, k, v, causal, scale, band=None):
    """call(): ``ggml_graph_compute`` of the graph built here, once, over tensors reading q
    (in float32), k, v and the mask ``band`` needs in place, by a plan (and work buffer)
    made once -> the result (n_q, B, d_v) float32, in ggml's order.  What a ggml user's
    call costs: the call times ggml alone."""
    graph, result, kept = _built(q, k, v, band or Band.of(causal), scale)
    planned = _plan(graph)

    def call():
        _compute(graph, planned)
        return result

    call.kept = kept   # the tensors' data, and the context holding them
    return call


def run(q, k, v, out, causal, scale, band=None):
    """band: a window and sinks (``kernels.band``; None: full, or causal), as ggml's float16
    n_q × n_k mask (a causal call's too: ggml has no causal flag)."""
    graph, result, _kept = _built(q, k, v, band or Band.of(causal), scale)
    _compute(graph)
    out[...] = result.transpose(1, 0, 2)  # rows seeing no key (n_q > n_k) came out 0


def _built(q, k, v, band, scale):
    """(a graph of one flash_attn_ext node over q (widened to float32 where it is not),
    k, v and the float16 mask of ``band`` where it is not full, its result (n_q, B, d_v)
    float32 in ggml's order, what the graph reads: keep it while the graph is used)."""
    (batch, n_q, d), (batch_kv, n_k), d_v = q.shape, k.shape[:2], v.shape[2]
    kv_type = _RUN_TYPES[k.dtype.name]
    q32 = np.ascontiguousarray(q, np.float32)  # ggml takes q in float32 only (bfloat16: widened, exact)
    masked = band.library_form(n_q, n_k) != "none"
    result = np.empty((n_q, batch, d_v), np.float32)  # ggml's output order (permuted)
    # headers only (q, k, v, mask, result): their data is NumPy's
    context = _Context(_context_size(0, 0, 0, 0, 0, graph_nodes=GRAPH_SIZE), no_alloc=True)
    tensors = [_wrap(context, q32, ggml.GGML_TYPE_F32, d, n_q, batch),
               _wrap(context, k, kv_type, d, n_k, batch_kv), _wrap(context, v, kv_type, d_v, n_k, batch_kv)]
    allowed = _float_mask(band.mask(n_q, n_k)) if masked else None
    mask = _wrap(context, allowed, ggml.GGML_TYPE_F16, n_k, n_q) if masked else None
    node = ggml.ggml_flash_attn_ext(context.pointer, *tensors, mask, float(scale), 0.0, 0.0)
    node.contents.data = result.ctypes.data
    ggml.ggml_flash_attn_ext_set_prec(node, ggml.GGML_PREC_F32)
    graph = ggml.ggml_new_graph_custom(context.pointer, GRAPH_SIZE, False)
    ggml.ggml_build_forward_expand(graph, node)
    return graph, result, (context, q32, k, v, allowed)


def workspace_bytes(batch, n_q, n_k, d, d_v, itemsize, masked):
    """The float16 mask ggml reads (n_q × n_k) of a masked call, the boolean one it is made
    from, ggml's output before it is put in our order, and q widened to float32 (bfloat16
    inputs)."""
    mask = 3 * n_q * n_k if masked else 0
    return mask + 4 * batch * n_q * (d_v + d)


def cache_decoder(cache_format, keys, values, heads, scale):
    """keys (kv_heads, n, d) and values (kv_heads, n, d_v) float32, heads a multiple of
    kv_heads, scale > 0: ggml's own cache of ``cache_format``, encoded once by ggml
    (O(n·d)), and ``step(q)``: q (heads, t, d) float32, 1 <= t <= n -> new (heads, t, d_v)
    float32 array, the t newest tokens' causal attention over the n cached ones, aligned
    bottom-right (query i sees keys j <= i + n - t).  A step copies q in and the result
    out, and reads the cache where ggml keeps it."""
    if cache_format in REFUSED_FORMATS:
        raise ValueError(f"ggml's {cache_format!r} KV cache is refused: {REFUSED_FORMATS[cache_format]}")
    if cache_format not in CACHE_FORMATS:
        raise ValueError(f"ggml keeps no {cache_format!r} KV cache here; "
                         f"its own caches: {', '.join(CACHE_FORMATS)}")
    return _decoder(_GGML_TYPES[cache_format], keys, values, heads, scale)


def _decoder(ggml_type, keys, values, heads, scale):
    """``cache_decoder`` over a cache of ggml's ``ggml_type``, whether refused or not (the
    tests keep the evidence for a refusal up to date through it)."""
    (kv_heads, n, d), d_v = keys.shape, values.shape[2]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads do not divide among {kv_heads} K/V heads")
    if ggml_type in _BLOCKS:
        name, ggml_name, block = _BLOCKS[ggml_type]
        if d % block or d_v % block:
            raise ValueError(f"ggml's {name} cache ({ggml_name}) keeps blocks of {block} values along a row: "
                             f"d = {d} and d_v = {d_v} must be multiples of {block}")
    rows = kv_heads * n
    cache = _Context(_context_size(*(ggml.ggml_row_size(ggml_type, width) * rows for width in (d, d_v))))
    cache.k, cache.v = cache.tensor(ggml_type, d, n, kv_heads), cache.tensor(ggml_type, d_v, n, kv_heads)
    for tensor, x in ((cache.k, keys), (cache.v, values)):
        x = np.ascontiguousarray(x, np.float32)
        ggml.ggml_quantize_chunk(ggml_type, x.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                 ggml.ggml_get_data(tensor), 0, rows, x.shape[2], None)
    scale = float(scale)
    graphs = {}  # t -> (its context, graph, q's data, the result's data); they hold ``cache``

    def graph(t):
        masked = t > 1  # a single query row sees every key
        sizes = [4 * heads * t * d, 4 * heads * t * d_v] + ([2 * n * t] if masked else [])  # q, out, mask
        context = _Context(_context_size(*sizes, graph_nodes=GRAPH_SIZE))
        q = context.tensor(ggml.GGML_TYPE_F32, d, t, heads)
        mask = context.tensor(ggml.GGML_TYPE_F16, n, t) if masked else None
        if masked:
            _array(mask, np.float16, (t, n))[...] = _float_mask(CAUSAL.mask(t, n))
        node = ggml.ggml_flash_attn_ext(context.pointer, q, cache.k, cache.v, mask, scale, 0.0, 0.0)
        ggml.ggml_flash_attn_ext_set_prec(node, ggml.GGML_PREC_F32)
        cgraph = ggml.ggml_new_graph_custom(context.pointer, GRAPH_SIZE, False)
        ggml.ggml_build_forward_expand(cgraph, node)
        q_data, out = _array(q, np.float32, (heads, t, d)), _array(node, np.float32, (t, heads, d_v))
        return context, cgraph, q_data, out

    def step(q):
        t = q.shape[1]
        if q.shape != (heads, t, d) or not 1 <= t <= n:
            raise ValueError(f"q must have shape ({heads}, t, {d}) with 1 <= t <= {n}, got {q.shape}")
        if t not in graphs:
            graphs[t] = graph(t)
        _, cgraph, q_data, out = graphs[t]
        np.copyto(q_data, q)
        _compute(cgraph)
        return out.transpose(1, 0, 2).copy()

    return step


def version():
    return f"{ggml.__version__} (ggml {ggml.ggml_version().decode()})"
