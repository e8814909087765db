"""OpenVINO's own KV cache (``openvino_sdpa.cache_decoder``): each step against float64
attention over the same float32 keys and values, computed here.

What a step attends: OpenVINO's cache starts with the first n - 1 tokens and every step
appends the cache's last t tokens again (the module's drift policy), so the reference is
taken over exactly those tokens, bottom-right causal; query head h reads K/V head h // g.

Tolerances are derived, not fitted.  A K/V element is stored with error at most δ: for
u8 half a step of its token's grid (OpenVINO quantises each token of each K/V head
asymmetrically, one scale (max - min) / 255 and a zero point over its d channels:
KEY_CACHE_GROUP_SIZE 0), for f16 half an ulp.  That moves the scores of query row i by
at most ε_i = scale · max_j Σ_c |q_ic| δk_jc, so every softmax weight by a factor within
e^{±2ε_i}; with o_i the exact row,

    ‖o'_i - o_i‖ ≤ e^{2ε_i} Σ_j p_ij ‖δv_j‖ + (e^{2ε_i} - 1) Σ_j p_ij ‖v_j - o_i‖

(the second term: Σ_j (p'_ij - p_ij) (v_j - o_i), the weights' change summing to 0),
held per head, norm-wise, with 1e-5 of slack for float32 arithmetic.  A worst case, it
lies far above the errors (u8: bound ~3, errors ~7e-3; the outputs average many values,
so ‖o‖ is small and the errors partly cancel).  So the errors are also held to the
first-order model with the storage errors independent and uniform in [-δ, δ]
(variance δ²/3): E‖δo_i‖² = Σ_j p_ij² (Σ_c δv_jc²/3 + scale² Σ_c q_ic² δk_jc²/3 ·
‖v_j - o_i‖²), which they meet within 0.6-1.4 here; the test allows 0.4-2.5.  Two more
checks pin the format down: the error is far above a float32 computation's (the narrow
cache is in use), and, for u8, a NumPy copy of OpenVINO's quantisation reproduces its
outputs over ten times closer than the exact attention (the cache is that quantisation)."""
import numpy as np
import pytest

ov = pytest.importorskip("openvino")

from kernels.peers import openvino_sdpa  # noqa: E402
from kernels.threads import budget  # noqa: E402

N = 1024
SHAPES = [(8, 2, 64), (8, 8, 64), (8, 2, 32)]  # (heads, kv_heads, d); d_v = d
STEPS = (1, 1, 3, 1)                           # t of each step, repeated steps included
F32_SLACK = 1e-5


def inputs(heads, kv_heads, d, seed=0):
    rng = np.random.default_rng([seed, heads, kv_heads, d])
    keys = rng.standard_normal((kv_heads, N, d)).astype(np.float32)
    values = rng.standard_normal((kv_heads, N, d)).astype(np.float32)
    queries = [rng.standard_normal((heads, t, d)).astype(np.float32) for t in STEPS]
    return keys, values, queries


def attention(q, keys, values, scale, dtype=np.float64):
    """Softmax(q·kᵀ·scale) v per query head, bottom-right causal, query head h reading
    K/V head h // g; with the weights p (heads, t, n) in ``dtype``."""
    heads, t, _ = q.shape
    group, n = heads // keys.shape[0], keys.shape[1]
    k, v = (np.repeat(x.astype(dtype), group, axis=0) for x in (keys, values))
    scores = np.einsum("htc,hnc->htn", q.astype(dtype), k) * dtype(scale)
    scores[:, np.arange(n)[None, :] > np.arange(t)[:, None] + n - t] = -np.inf
    p = np.exp(scores - scores.max(axis=2, keepdims=True))
    p /= p.sum(axis=2, keepdims=True)
    return p @ v, p


def attended(keys, ts):
    """The tokens OpenVINO's cache holds after steps of ``ts`` tokens (drift under n / 32):
    the first n - t_1, then each step's last t again."""
    n = keys.shape[1]
    return np.concatenate([keys[:, :n - ts[0]]] + [keys[:, n - t:] for t in ts], axis=1)


def head_errors(out, ref):
    """Norm-wise relative error of each query head."""
    norm = lambda x: np.linalg.norm(x.reshape(len(x), -1), axis=1)  # noqa: E731
    return norm(out - ref) / norm(ref)


def storage_error(x, cache_format):
    """Bound δ on |stored - x| of each element: half a u8 step of its token's grid, or
    half an f16 ulp."""
    if cache_format == "int8":
        span = x.max(axis=2, keepdims=True) - x.min(axis=2, keepdims=True)
        return np.broadcast_to(span.astype(np.float64) / 255 / 2, x.shape)
    return np.spacing(np.abs(x.astype(np.float16))).astype(np.float64) / 2


def bound(q, keys, values, scale, cache_format):
    """The module docstring's bound on each head's relative error."""
    group = q.shape[0] // keys.shape[0]
    ref, p = attention(q, keys, values, scale)
    dk, dv = (np.repeat(storage_error(x, cache_format), group, axis=0) for x in (keys, values))
    v = np.repeat(values.astype(np.float64), group, axis=0)
    eps = scale * np.einsum("htc,hnc->htn", np.abs(q.astype(np.float64)), dk).max(axis=2)
    grow = np.exp(2 * eps)
    spread = np.linalg.norm(v[:, None, :, :] - ref[:, :, None, :], axis=3)   # ‖v_j - o_i‖
    rows = grow * (p @ np.linalg.norm(dv, axis=2)[:, :, None])[..., 0] + (grow - 1) * (p * spread).sum(axis=2)
    return np.linalg.norm(rows, axis=1) / np.linalg.norm(ref.reshape(len(ref), -1), axis=1) + F32_SLACK


def expected(q, keys, values, scale, cache_format):
    """The first-order model's RMS relative error of each head (module docstring)."""
    group = q.shape[0] // keys.shape[0]
    ref, p = attention(q, keys, values, scale)
    var_k, var_v = (np.repeat(storage_error(x, cache_format), group, axis=0) ** 2 / 3 for x in (keys, values))
    v = np.repeat(values.astype(np.float64), group, axis=0)
    var_scores = scale ** 2 * np.einsum("htc,hnc->htn", q.astype(np.float64) ** 2, var_k)
    spread = ((v[:, None, :, :] - ref[:, :, None, :]) ** 2).sum(axis=3)   # ‖v_j - o_i‖²
    rows = (p ** 2 * (var_v.sum(axis=2)[:, None, :] + var_scores * spread)).sum(axis=2)
    return np.sqrt(rows.sum(axis=1)) / np.linalg.norm(ref.reshape(len(ref), -1), axis=1)


def u8_emulated(x):
    """OpenVINO's u8 round trip of each token (its CPU plugin's quant_u8/dequant, in
    float32): scale (max - min) / 255, zero point -min / scale, not rounded."""
    low, high = x.min(axis=2, keepdims=True), x.max(axis=2, keepdims=True)
    step = (high - low) / np.float32(255)
    zero = -low / step
    codes = np.clip(np.rint(x * (np.float32(1) / step) + zero), 0, 255)
    return (codes - zero) * step


@pytest.mark.parametrize("cache_format", ["int8", "float16"])
@pytest.mark.parametrize("heads,kv_heads,d", SHAPES, ids=lambda x: str(x))
def test_each_step_is_the_attention_over_what_the_cache_holds(cache_format, heads, kv_heads, d):
    keys, values, queries = inputs(heads, kv_heads, d)
    scale = 1.0 / np.sqrt(d)
    step = openvino_sdpa.cache_decoder(cache_format, keys, values, heads, scale)
    for index, q in enumerate(queries):
        out = step(q)
        assert out.shape == (heads, q.shape[1], d) and out.dtype == np.float32
        held_k, held_v = attended(keys, STEPS[:index + 1]), attended(values, STEPS[:index + 1])
        if index == 0:
            assert held_k.shape[1] == N  # the first one-token step: exactly the n tokens
        ref, _ = attention(q, held_k, held_v, scale)
        error = head_errors(out, ref)
        limit = bound(q, held_k, held_v, scale, cache_format)
        assert (error <= limit).all(), f"step {index}: errors {error} over bounds {limit}"
        ratio = error / expected(q, held_k, held_v, scale, cache_format)
        assert ((0.4 <= ratio) & (ratio <= 2.5)).all(), f"step {index}: errors / expected {ratio}"
        # a float32 computation's error, to show the narrow cache is what was read
        f32, _ = attention(q, held_k, held_v, scale, dtype=np.float32)
        floor = head_errors(f32, ref).max()
        assert error.min() > 30 * floor, f"step {index}: errors {error} near float32's {floor:.2g}"
        if cache_format == "int8":
            emulated, _ = attention(q, u8_emulated(held_k), u8_emulated(held_v), scale)
            assert head_errors(out, emulated).max() < 0.1 * error.min()


def test_an_f16_cache_holds_f16_values_exactly():
    """Keys and values that float16 represents are stored as they are: errors of a float32
    computation (the f16 cache's own rounding is what the test above sees)."""
    heads, kv_heads, d = 8, 2, 64
    keys, values, queries = inputs(heads, kv_heads, d, seed=1)
    keys, values = (x.astype(np.float16).astype(np.float32) for x in (keys, values))
    scale = 1.0 / np.sqrt(d)
    step = openvino_sdpa.cache_decoder("float16", keys, values, heads, scale)
    for index, q in enumerate(queries):
        ref, _ = attention(q, attended(keys, STEPS[:index + 1]), attended(values, STEPS[:index + 1]), scale)
        assert head_errors(step(q), ref).max() < F32_SLACK


@pytest.mark.parametrize("heads,kv_heads,d", SHAPES, ids=lambda x: str(x))
def test_an_f32_cache_is_float32_attention(heads, kv_heads, d):
    """The float32 cache (taken statefully too, OpenVINO's way of decoding): the errors
    of a float32 computation, drift included."""
    keys, values, queries = inputs(heads, kv_heads, d, seed=2)
    scale = 1.0 / np.sqrt(d)
    step = openvino_sdpa.cache_decoder("float32", keys, values, heads, scale)
    for index, q in enumerate(queries):
        ref, _ = attention(q, attended(keys, STEPS[:index + 1]), attended(values, STEPS[:index + 1]), scale)
        assert head_errors(step(q), ref).max() < F32_SLACK


@pytest.mark.parametrize("cache_format,precision",
                         [("int8", ov.Type.u8), ("float16", ov.Type.f16), ("float32", ov.Type.f32)])
@pytest.mark.parametrize("kv_heads", [2, 8])
def test_the_plugin_fuses_the_model_into_one_node_owning_the_cache(cache_format, precision, kv_heads):
    """The ReadValue/Gather/Concat/Assign pattern (and the K/V heads' broadcast) becomes
    one attention node whose cache is of the precision asked."""
    name = openvino_sdpa._CACHE_PRECISIONS[cache_format]
    compiled = openvino_sdpa._stateful(name, 8, kv_heads, 64, 64, 0.125, budget())
    assert compiled.get_property("KV_CACHE_PRECISION") == precision
    layers = [op.get_rt_info() for op in compiled.get_runtime_model().get_ordered_ops()]
    kinds = [info["layerType"].astype(str) for info in layers]
    assert set(kinds) == {"Input", "Const", "MemoryInput", "ScaledDotProductAttention", "MemoryOutput", "Output"}
    assert kinds.count("ScaledDotProductAttention") == 1
    fused = layers[kinds.index("ScaledDotProductAttention")]
    assert fused["kv_cache_precision"].astype(str) == name


@pytest.mark.parametrize("cache_format", ["bfloat16", "int4"])
def test_a_format_it_keeps_no_cache_of_is_refused(cache_format):
    keys = np.zeros((2, 4, 8), np.float32)
    with pytest.raises(ValueError, match=cache_format):
        openvino_sdpa.cache_decoder(cache_format, keys, keys, 8, 0.5)


def test_the_cache_is_filled_anew_before_its_drift_passes_n_over_32():
    """n = 64: the cache may hold 2 tokens beyond the n; the fourth one-token step finds it
    at 66 and fills it anew, so it attends exactly the n tokens again, as the first did."""
    heads, kv_heads, d = 8, 2, 16
    rng = np.random.default_rng(3)
    keys, values = (rng.standard_normal((kv_heads, 64, d)).astype(np.float32) for _ in range(2))
    q = rng.standard_normal((heads, 1, d)).astype(np.float32)
    step = openvino_sdpa.cache_decoder("float32", keys, values, heads, 0.25)
    outs = [step(q) for _ in range(4)]
    for index, out in enumerate(outs):
        held = attended(keys, (1,) * (index % 3 + 1))
        ref, _ = attention(q, held, attended(values, (1,) * (index % 3 + 1)), 0.25)
        assert head_errors(out, ref).max() < F32_SLACK, f"step {index}"
    assert not np.allclose(outs[1], outs[0], rtol=1e-6, atol=0)   # the drift is real
