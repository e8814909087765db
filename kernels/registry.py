"""The one registry of attention kernels: name -> ``Kernel`` record.

Every rung lives in its own module exposing

    run(q, k, v, out, causal, scale)
        q (B, n_q, d), k (B_kv, n_k, d), v (B_kv, n_k, d_v) of one dtype of
        ``kernels.dtypes``, already validated by ``kernels.api``; B_kv divides B: query
        head b reads K/V head b // (B / B_kv) (grouped-query attention; B_kv = B is plain
        multi-head); out (B, n_q, d_v) of the type that dtype is computed in (its row's
        ``compute``: the dtype itself, float32 for the 16-bit types, whose result the API
        then rounds to the inputs' dtype), or, for a kernel marked ``writes_half``, of the
        16-bit type itself, each row rounded to nearest even as it is stored (float32 out is
        still taken: a 16-bit KV cache's attention returns it).  Writes all of out.

and, for each scaled KV cache format it reads in place (``quantised_caches``,
``kernels.decode``), ``run_int8(q, k, k_scales, v, v_scales, out, causal, scale)``: q
float32, k and v int8 with one float32 scale per cached row, k_scales (B_kv, n_k); and
``run_int4`` alike on int4's bytes (B_kv, n_k, ceil(d / 2)) and group scales (B_kv, n_k,
groups).

and, for a peer that keeps a KV cache in a format of its own library's layout (``own_caches``),
``cache_decoder(cache_format, keys, values, heads, scale)``: keys (B_kv, n, d) and values
(B_kv, n, d_v) float32 (a cache's contents as our kernels read them), encoded once into the
library's cache; it returns ``step(q)``, q (heads, t, d) float32 -> (heads, t, d_v) float32,
the newest t tokens' causal attention, without re-encoding the cache.

and, if it materialises n×n buffers, ``workspace_bytes(batch, n_q, n_k, d, d_v,
itemsize, masked)`` (itemsize: of the compute type), which the validation path checks
against available memory before anything large is allocated.  Modules are imported on
first use, so that ``import kernels`` does not pay for Numba, the C extension or a peer's
package.

External peers (other libraries' CPU attention, the baselines our rungs are measured
against) are registered the same way, marked ``external``, only when their packages are
installed.  A peer's module also has ``prepare(q, k, v, causal, scale, band)`` -> ``call()``:
its library's own call as that library's users make it, on tensors of its own made there
once (torch tensors, a session with its inputs bound, a compiled request, device arrays
and a jitted function, a built graph), returning the library's result; the benchmarks time
a peer by it, so that no conversion or check of ours is in a peer's time.  What a peer computes a type in is its library's choice, and for the 16-bit
types that choice depends on the CPU (OpenVINO's CPU plugin honours its bf16 and f16
hint only where the CPU has bf16 or fp16 units, and then rounds the scores), so a peer
declares two things: the types it takes (``dtypes``; ``dtype_note`` says why the others
are refused: computed below their precision on every CPU, or not run at all), and, of
those, the ones held to the harness on the CPU it runs on (``probed``; the others it
computes at their precision everywhere): the first call in such a type in a process
runs ``kernels.harness.probe`` (the peer on the harness's hardest cases against float64,
within their budget or not), and where it falls below the budget the call is refused
with what was measured.  The validation path and the harness refuse those calls with the
reason; the benchmarks time them anyway, outside that check
(``kernels.api.attention_unheld``), and the report marks their rows as failing the
budget, so that what the rounding buys is still seen.
"""
import importlib
import importlib.util
from dataclasses import dataclass
from typing import Optional

from . import dtypes as float_types
from .band import CAUSAL
from .cache_formats import FORMATS


@dataclass(frozen=True)
class Kernel:
    name: str
    description: str
    memory_class: str
    module: str
    materialises: bool = False        # holds n_q x n_k buffers: checked against RAM
    max_scores: Optional[int] = None  # cap on batch * n_q * n_k (the naive loops)
    contiguous: bool = True           # needs C-contiguous inputs (copies otherwise)
    strided_kv: bool = False          # but reads k and v with any head stride (kv_layout),
                                      # and run(..., n_k=) their whole buffers (a KV cache's)
    quantised_caches: tuple = ()      # scaled KV cache formats read in place (run_int8, run_int4)
    int8_query_rows: int = 0          # and quantises the queries of calls of up to this many
                                      # rows per head (decode steps) to int16 for integer Q·Kᵀ
                                      # on the quantised caches (int4: per group of 32 values)
    own_caches: tuple = ()            # cache formats a peer keeps in its own layout (cache_decoder)
    external: bool = False            # a peer baseline, not one of our rungs
    dtypes: tuple = float_types.NAMES  # taken: computed at their own precision (``probed`` ones: where measured so)
    probed: tuple = ()                 # of dtypes, those held to the harness on this CPU at first use
    widens_inputs: bool = False        # takes 16-bit inputs as whole float32 copies (counted)
    writes_half: bool = False          # writes a 16-bit output itself, each row rounded as stored
    dtype_note: str = ""              # why any other dtype is refused
    threading: str = "the budget"     # how the thread budget reaches it
    honours_budget: bool = True       # False: it sizes its own threads, whatever the budget
    windows: bool = False             # takes any band (window, sinks: run(..., band=)), not
                                      # only full and causal attention
    window_form: str = ""             # how: what a window saves it (the report says it)

    @property
    def implementation(self):
        """The rung's module, imported on first use."""
        return importlib.import_module(self.module)

    @property
    def run(self):
        return self.implementation.run

    def workspace_bytes(self, batch, n_q, n_k, d, d_v, itemsize, masked):
        """Extra bytes a call allocates beyond its output (0 for tiled kernels); ``masked``:
        a call that is not full attention (causal, a window), whose mask a kernel may hold."""
        if not self.materialises:
            return 0
        return self.implementation.workspace_bytes(batch, n_q, n_k, d, d_v, itemsize, masked)

    def band_refusal(self, band):
        """Why this kernel does not take ``band`` (a ``kernels.band.Band``), or None when it
        does: every kernel takes full and causal attention, those marked ``windows`` any band."""
        if self.windows or band.full or band == CAUSAL:
            return None
        takers = ", ".join(name for name, kernel in KERNELS.items() if kernel.windows)
        return (f"{self.name} takes full and causal attention only, not {band.describe()} "
                f"(kernels that take a window and sinks: {takers})")

    def fits(self, batch, n_q, n_k):
        """False when the problem is above this kernel's size cap."""
        return self.max_scores is None or batch * n_q * n_k <= self.max_scores

    def refusal(self, dtype, held=True):
        """Why this kernel does not take inputs of ``dtype``, or None when it does.  A type of
        ``probed`` is taken where the harness's probe finds it within the budget on this CPU
        (``kernels.harness.probe``: it runs at the first such question in a process, and its
        verdict is kept); ``held=False`` leaves that question out (asked by the probe itself,
        and by the benchmarks, which time a call that falls below the budget anyway)."""
        name = float_types.type_name(dtype)
        if name not in self.dtypes:
            held_types = [taken for taken in self.dtypes if taken in self.probed]
            where = f" ({', '.join(held_types)} where within the harness's budget on this CPU)" if held_types else ""
            return f"{self.name} takes {', '.join(self.dtypes)} only{where}: {self.dtype_note}"
        if held and name in self.probed:
            from . import harness  # here, not at the top: the harness imports the registry
            return harness.probe(self.name, name).refusal
        return None

    def cache_refusal(self, cache_format):
        """Why this kernel does not attend a KV cache stored as ``cache_format`` (a name of
        ``kernels.cache_formats``), or None when it does: a 16-bit cache through its 16-bit
        path, an int8 or int4 one read in place (``quantised_caches``), one a peer keeps in its
        library's own layout (``own_caches``), or widened first by a rung of ours."""
        if cache_format in self.own_caches:
            return None
        if not FORMATS[cache_format].scaled:
            return self.refusal(cache_format)
        if cache_format in self.quantised_caches or not self.external:
            return None
        return (f"{self.name} takes no {cache_format} KV cache (its library has no attention over "
                f"{cache_format} keys and values)")

    @property
    def cap(self):
        return "-" if self.max_scores is None else f"B·n_q·n_k ≤ {self.max_scores:,}"


def _build():
    kernels = [
        Kernel(
            "naive",
            "self-attention as an algorithm (each query: scores, softmax, weighted sum), in pure Python loops",
            "O(n) per query row",
            "kernels.rungs.rung1_naive",
            windows=True,
            window_form="loops over the keys each query sees",
            max_scores=256 * 256,
            contiguous=False,
        ),
        Kernel(
            "numpy",
            "vectorised NumPy: BLAS products, stable softmax over the n×n scores",
            "O(n²)",
            "kernels.rungs.rung2_numpy",
            windows=True,
            window_form="masks its n×n scores: O(n²) whatever the window",
            materialises=True,
            contiguous=False,
            widens_inputs=True,
        ),
        Kernel(
            "numba_tiled",
            "Numba JIT: query × key tiles, online softmax, heads × tiles on our thread pool",
            "O(n·d)",
            "kernels.rungs.rung3_numba_tiled",
            windows=True,
            window_form="skips the key tiles outside the band: O(n·window)",
            strided_kv=True,
            quantised_caches=("int8", "int4"),
            writes_half=True,
        ),
        Kernel(
            "c_tiled",
            "C via cffi: SIMD micro-kernels, online softmax, our thread pool, GIL released",
            "O(n·d)",
            "kernels.rungs.rung4_c_tiled",
            windows=True,
            window_form="skips the key tiles outside the band: O(n·window)",
            strided_kv=True,
            quantised_caches=("int8", "int4"),
            int8_query_rows=4,  # csrc/tiles.h DECODE_MAX_QUERIES (rung4_c_tiled.DECODE_MAX_QUERIES)
            writes_half=True,
        ),
    ]
    # The peers are optional: each registered only when its packages are installed
    # (find_spec does not import them, so `import kernels` stays fast).
    kernels += [peer for peer, packages in _peers() if all(map(importlib.util.find_spec, packages))]
    return {kernel.name: kernel for kernel in kernels}


def _peers():
    """(Kernel, packages it needs) of every external peer (``make peers`` installs them).
    ``dtypes``: what each computes at (at least) the inputs' own precision, measured by the
    harness (the half types in float32, rounding P and the output at most, as our rungs),
    or, for a 16-bit type, runs at all; ``dtype_note``: why the others are refused (each
    peer's module docstring has the evidence).  Every peer's 16-bit types are ``probed``:
    what its library computes them in may change with the CPU, so each is held to the
    harness where it runs (ONNX Runtime's float16 fails it on every CPU: its kernel rounds
    the scores to float16 by its source; it is measured all the same)."""
    probed = dict(probed=float_types.HALF)
    float32_and_half = dict(dtypes=("float32",) + float_types.HALF, **probed)
    return [
        (Kernel("torch_sdpa", "external peer: PyTorch's scaled_dot_product_attention on the CPU",
                "O(n·d)", "kernels.peers.torch_sdpa", external=True, dtypes=float_types.NAMES, **probed,
                threading="torch.set_num_threads(budget)",
                windows=True, window_form="an explicit n×n attn_mask: O(n²)"), ["torch"]),
        (Kernel("onnxruntime_attention", "external peer: ONNX Runtime's Attention operator (opset 23), CPU provider",
                "O(n·d)", "kernels.peers.onnxruntime_attention", external=True, dtypes=("float32", "float16"),
                **probed,
                dtype_note="it accepts float64 but computes it at float32 precision (errors ~5e-8); "
                           "for bfloat16 its CPU provider has no kernel (NOT_IMPLEMENTED)",
                threading="session intra_op_num_threads = budget",
                windows=True, window_form="an explicit n×n mask (the Attention operator has no window): O(n²)",
                own_caches=("float16", "int8")),
         ["onnxruntime", "onnx"]),
        (Kernel("openvino_sdpa", "external peer: OpenVINO's ScaledDotProductAttention (opset 13), CPU plugin",
                "O(n·d)", "kernels.peers.openvino_sdpa", external=True, **float32_and_half,
                dtype_note="its CPU plugin computes float64 inputs in float32 (errors ~6e-7)",
                threading="INFERENCE_NUM_THREADS = budget", own_caches=("int8", "float16", "float32"),
                windows=True, window_form="an explicit n×n attention mask: O(n²)"),
         ["openvino"]),
        (Kernel("jax_attention", "external peer: JAX's dot_product_attention, compiled by XLA for the CPU",
                "O(n²)", "kernels.peers.jax_attention", external=True, materialises=True, **float32_and_half,
                dtype_note="it computes float64 scores in float32 (errors ~1e-7)",
                threading="XLA's own CPU thread pool, sized when JAX starts: the budget is not honoured",
                honours_budget=False, windows=True,
                window_form="local_window_size (square, no sinks), else an explicit n×n mask"),
         ["jax"]),
        (Kernel("ggml_flash_attn", "external peer: ggml's flash_attn_ext (llama.cpp's attention), CPU backend",
                "O(n²) (a causal call's mask)", "kernels.peers.ggml_flash_attn", external=True, materialises=True,
                dtypes=("float32", "bfloat16"), **probed,
                dtype_note="in float16 its CPU kernel sums V·softmax in float16 when n_q < 64: on even "
                           "attention the sum stops at 2,048 weights (8,192 keys of value 1 give 0.25-0.5); "
                           "it has no float64",
                threading="ggml_graph_compute n_threads = budget (an OpenMP team)",
                windows=True, window_form="its float16 n×n mask: O(n²)",
                own_caches=("float32", "bfloat16", "int8", "int4")),
         ["ggml"]),
    ]


KERNELS = _build()
PEER_PACKAGES = {peer.name: packages for peer, packages in _peers()}  # every known peer, installed or not
PEER_NAMES = tuple(PEER_PACKAGES)


def get_kernel(name):
    """The record of ``name``; ValueError listing the known names otherwise."""
    try:
        return KERNELS[name]
    except (KeyError, TypeError):
        known = ", ".join(KERNELS)
        raise ValueError(f"unknown kernel {name!r}; known kernels: {known}") from None
