"""kernels.layers: multi-head attention on every kernel, similarity functions, entropy and
the attention analysis."""
import math

import numpy as np
import pytest

import kernels
from kernels import dtypes, harness
from kernels.layers.multi_head import merge_heads
from kernels.memory import peak_extra_bytes
from kernels.reference import reference_attention

DTYPES = [np.float32, np.float64]


def mha_reference(x, w_q, w_k, w_v, w_o, heads, causal=False, biases=None, compute_dtype=np.float64):
    """Multi-head attention written head by head: x (..., n, d_model) -> (..., n, d_model).

    Each head h takes columns [h·d_head, (h+1)·d_head) of the projections."""
    x, w_q, w_k, w_v, w_o = (np.asarray(a, compute_dtype) for a in (x, w_q, w_k, w_v, w_o))
    b_q, b_k, b_v, b_o = (np.zeros(x.shape[-1], compute_dtype) if biases is None
                          else np.asarray(b, compute_dtype) for b in (biases or [None] * 4))
    q, k, v = x @ w_q + b_q, x @ w_k + b_k, x @ w_v + b_v
    d_head = x.shape[-1] // heads
    outputs = []
    for h in range(heads):
        cols = slice(h * d_head, (h + 1) * d_head)
        outputs.append(reference_attention(q[..., cols], k[..., cols], v[..., cols], causal=causal,
                                           compute_dtype=compute_dtype))
    return np.concatenate(outputs, axis=-1) @ w_o + b_o


def mha_inputs(lead=(2,), n=37, d_model=24, dtype=np.float64, seed=0, biases=False):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((*lead, n, d_model)).astype(dtype)
    weights = [(rng.standard_normal((d_model, d_model)) / math.sqrt(d_model)).astype(dtype) for _ in range(4)]
    bias = [rng.standard_normal(d_model).astype(dtype) for _ in range(4)] if biases else None
    return x, weights, bias


def budget(dtype, plain_error):
    """The harness's rule: 1e-10 in float64; in float32 twice the error of the same
    computation done plainly in float32, and never below 8 u."""
    if dtype == np.float64:
        return harness.REFERENCE_BUDGET
    return max(2 * plain_error, harness.budget_floor(np.float32))


def relative_error(out, ref):
    """max |out - ref| / (|ref| + max |ref|), the harness's error with ref's scale for max|v|."""
    return float(np.max(np.abs(out - ref) / (np.abs(ref) + np.max(np.abs(ref)))))


# -- multi-head attention ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_matches_the_float64_reference(kernel_name, dtype, causal, skip_refused):
    skip_refused(kernel_name, dtype)
    n = 12 if kernel_name == "naive" else 37  # the naive rung's size cap
    x, (w_q, w_k, w_v, w_o), biases = mha_inputs(n=n, dtype=dtype, biases=True)
    heads = 4
    out = kernels.multi_head_attention(x, w_q, w_k, w_v, w_o, heads=heads, kernel=kernel_name,
                                       causal=causal, biases=biases)
    ref = mha_reference(x, w_q, w_k, w_v, w_o, heads, causal, biases)
    plain = mha_reference(x, w_q, w_k, w_v, w_o, heads, causal, biases, compute_dtype=np.float32)
    assert out.shape == x.shape and out.dtype == dtype
    error, allowed = relative_error(out, ref), budget(dtype, relative_error(plain, ref))
    print(f"{kernel_name} {np.dtype(dtype).name} causal={causal}: error {error:.2e}, budget {allowed:.2e}")
    assert error <= allowed


def test_heads_have_width_d_model_over_heads():
    """One head is ordinary attention on the full projections; h heads are h independent
    attentions on slices of d_model / h columns (not h full-width heads, as in the seed)."""
    x, (w_q, w_k, w_v, w_o), _ = mha_inputs(lead=(), n=9, d_model=12)
    one = kernels.multi_head_attention(x, w_q, w_k, w_v, w_o, heads=1, kernel="numpy")
    np.testing.assert_allclose(one, reference_attention(x @ w_q, x @ w_k, x @ w_v) @ w_o, rtol=1e-12)
    q, k, v = kernels.multi_head_projections(x, w_q, w_k, w_v, heads=3)
    assert q.shape == k.shape == v.shape == (3, 9, 4)
    np.testing.assert_array_equal(q[1], (x @ w_q)[:, 4:8])


def test_head_mask_silences_heads():
    x, (w_q, w_k, w_v, w_o), biases = mha_inputs(biases=True)
    args = (x, w_q, w_k, w_v, w_o)
    full = kernels.multi_head_attention(*args, heads=4, kernel="numpy", biases=biases)
    np.testing.assert_array_equal(
        kernels.multi_head_attention(*args, heads=4, kernel="numpy", biases=biases, head_mask=np.ones(4)), full)
    silent = kernels.multi_head_attention(*args, heads=4, kernel="numpy", biases=biases, head_mask=np.zeros(4))
    np.testing.assert_allclose(silent, np.broadcast_to(biases[3], x.shape), atol=1e-15)
    # masking head 2 removes exactly its share: its output columns times its rows of w_o
    q, k, v = kernels.multi_head_projections(x, w_q, w_k, w_v, heads=4, biases=biases)
    head_2 = kernels.attention(q[:, 2], k[:, 2], v[:, 2], kernel="numpy") @ w_o[12:18]
    masked = kernels.multi_head_attention(*args, heads=4, kernel="numpy", biases=biases,
                                          head_mask=[1, 1, 0, 1])
    np.testing.assert_allclose(full - masked, head_2, atol=1e-12)


@pytest.mark.parametrize("change, error, match", [
    (dict(heads=5), ValueError, r"d_model = 24 .* not divisible by heads = 5"),
    (dict(heads=0), ValueError, "heads must be a positive integer"),
    (dict(w_k=np.zeros((24, 12))), ValueError, r"w_k must have shape \(24, 24\)"),
    (dict(w_q=np.zeros((16, 16))), ValueError, r"w_q must have shape \(24, 24\) for x \(2, 37, 24\), got \(16, 16\)"),
    (dict(w_o=np.zeros((24, 24), np.float32)), TypeError, "w_o has dtype float32"),
    (dict(x=np.zeros(24)), ValueError, "at least 2 dimensions"),
    (dict(x=np.zeros((3, 24), int)), TypeError, "float32 or float64"),
    (dict(biases=[np.zeros(24)] * 3), ValueError, "four arrays"),
    (dict(biases=[np.zeros(24)] * 3 + [np.zeros(5)]), ValueError, r"b_o must have shape \(24,\)"),
    (dict(head_mask=np.ones(3)), ValueError, r"head_mask must have shape \(4,\)"),
])
def test_bad_multi_head_arguments_are_clear_errors(change, error, match):
    x, (w_q, w_k, w_v, w_o), _ = mha_inputs()
    args = dict(x=x, w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, heads=4, kernel="numpy")
    args.update(change)
    with pytest.raises(error, match=match):
        kernels.multi_head_attention(**args)


X_WIDTH_MISMATCH = (r"x's last dimension \(d_model\) is 16 \(x \(2, 37, 16\)\), but the weights' "
                    r"input width is 24 \(w_q \(24, 24\)\): they must match")


def test_x_of_another_width_than_the_weights_is_blamed_not_w_q():
    x, (w_q, w_k, w_v, w_o), biases = mha_inputs(biases=True)
    narrow = x[..., :16]  # d_model 16 (divisible by heads = 4), the weights agree on 24
    with pytest.raises(ValueError, match=X_WIDTH_MISMATCH):
        kernels.multi_head_attention(narrow, w_q, w_k, w_v, w_o, heads=4, kernel="numpy", biases=biases)
    with pytest.raises(ValueError, match=X_WIDTH_MISMATCH):
        kernels.multi_head_projections(narrow, w_q, w_k, w_v, heads=4)
    with pytest.raises(ValueError, match=r"x's last dimension \(d_model\) is 15 "):  # before divisibility
        kernels.multi_head_attention(x[..., :15], w_q, w_k, w_v, w_o, heads=4, kernel="numpy")


def test_x_of_another_width_is_refused_before_any_allocation():
    """An x of 10¹² tokens (a broadcast view: no memory) whose width is not the weights':
    the shape error comes first, not the MemoryError the call would meet."""
    _, (w_q, w_k, w_v, w_o), _ = mha_inputs()
    huge = np.broadcast_to(np.zeros(16), (10**6, 10**6, 16))
    with pytest.raises(ValueError, match=r"x's last dimension \(d_model\) is 16 \(x \(1000000, 1000000, 16\)\)"):
        kernels.multi_head_attention(huge, w_q, w_k, w_v, w_o, heads=4, kernel="numpy")
    with pytest.raises(MemoryError):  # the same x with matching weights is refused for its size
        kernels.multi_head_attention(huge, *(w[:16, :16] for w in (w_q, w_k, w_v, w_o)), heads=4,
                                     kernel="numpy")


# -- weights and similarity -------------------------------------------------------------

def qk(n_q=7, n_k=9, d=5, lead=(2,), seed=1, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((*lead, n, d)).astype(dtype) for n in (n_q, n_k))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_q, n_k", [(7, 9), (9, 4)])
def test_weights_are_the_softmax_the_kernels_apply(causal, n_q, n_k):
    q, k = qk(n_q, n_k)
    weights = kernels.attention_weights(q, k, causal=causal)
    v = np.random.default_rng(2).standard_normal(k.shape)
    np.testing.assert_allclose(weights @ v, reference_attention(q, k, v, causal=causal), atol=1e-13)
    sees = np.arange(n_q) + (n_k - n_q) >= 0 if causal else np.ones(n_q, bool)
    np.testing.assert_allclose(weights.sum(axis=-1), np.broadcast_to(sees.astype(float), weights.shape[:-1]),
                               atol=1e-14)
    if causal:  # zero above the bottom-right diagonal: key j > i + (n_k - n_q)
        hidden = np.arange(n_k)[None, :] > np.arange(n_q)[:, None] + (n_k - n_q)
        assert np.all(weights[..., hidden] == 0)


def test_weights_are_computed_in_blocks_of_rows_alike(monkeypatch):
    from kernels.layers import similarity

    q, k = qk(n_q=50, n_k=40)
    whole = kernels.attention_weights(q, k, causal=True)
    monkeypatch.setattr(similarity, "ROW_BLOCK_BYTES", 1)  # one row per block
    # BLAS may sum a one-row product (gemv) in another order than a block's (gemm): a
    # few ulp apart, no more
    np.testing.assert_allclose(kernels.attention_weights(q, k, causal=True), whole, rtol=1e-14, atol=1e-16)


def test_a_longer_key_changes_dot_weights_but_not_cosine_weights():
    q, k = qk()
    longer = k.copy()
    longer[..., 3, :] *= 100  # the same direction, 100 times the length
    dot, dot_longer = (kernels.attention_weights(q, keys) for keys in (k, longer))
    cos, cos_longer = (kernels.attention_weights(q, keys, similarity="cosine") for keys in (k, longer))
    assert np.abs(dot - dot_longer).max() > 0.1
    np.testing.assert_allclose(cos_longer, cos, rtol=1e-12)


def test_cosine_scores_are_cosines_times_the_scale():
    q, k = qk()
    cosines = (q / np.linalg.norm(q, axis=-1, keepdims=True)) @ np.swapaxes(
        k / np.linalg.norm(k, axis=-1, keepdims=True), -1, -2)
    expected = np.exp(3.0 * cosines)
    expected /= expected.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(kernels.attention_weights(q, k, similarity="cosine", scale=3.0), expected,
                               rtol=1e-12)
    default = kernels.attention_weights(q, k, similarity="cosine")
    np.testing.assert_allclose(default, kernels.attention_weights(q, k, similarity="cosine", scale=math.sqrt(5)))


def test_bilinear_is_dot_product_of_q_a_with_k():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 7, 5))
    k = rng.standard_normal((2, 9, 3))  # d_q = 5, d_k = 3
    a = rng.standard_normal((5, 3))
    np.testing.assert_allclose(kernels.attention_weights(q, k, similarity="bilinear", bilinear=a),
                               kernels.attention_weights(q @ a, k), rtol=1e-13)
    square_q, square_k = qk()
    np.testing.assert_allclose(
        kernels.attention_weights(square_q, square_k, similarity="bilinear", bilinear=np.eye(5)),
        kernels.attention_weights(square_q, square_k), rtol=1e-13)


@pytest.mark.parametrize("similarity", ["dot", "cosine", "bilinear"])
def test_every_kernel_runs_every_similarity(kernel_name, similarity, widest_dtype):
    q, k = qk(n_q=8, n_k=6, dtype=widest_dtype)
    v = np.random.default_rng(4).standard_normal((2, 6, 3)).astype(widest_dtype)
    bilinear = np.random.default_rng(5).standard_normal((5, 5)).astype(widest_dtype) if similarity == "bilinear" else None
    out = kernels.similarity_attention(q, k, v, similarity=similarity, bilinear=bilinear, kernel=kernel_name,
                                       causal=True)
    weights = kernels.attention_weights(q, k, similarity=similarity, bilinear=bilinear, causal=True)
    tolerance = 1e-10 if widest_dtype == np.float64 else 1e-6  # outputs O(1): float32's few ulp
    np.testing.assert_allclose(out, weights @ v, atol=tolerance)


@pytest.mark.parametrize("args, error, match", [
    (dict(similarity="euclid"), ValueError, "unknown similarity 'euclid'; expected one of dot, cosine, bilinear"),
    (dict(similarity="bilinear"), ValueError, "needs its matrix: bilinear=A"),
    (dict(similarity="bilinear", bilinear=[[1.0]]), TypeError, "bilinear must be a NumPy array"),
    (dict(bilinear=np.eye(5)), ValueError, "goes with similarity='bilinear', not 'dot'"),
    (dict(similarity="bilinear", bilinear=np.eye(4)), ValueError, r"bilinear must have shape \(d_q, d_k\) = \(5, 5\)"),
    (dict(similarity="bilinear", bilinear=np.eye(5, dtype=np.float32)), TypeError, "bilinear has dtype float32"),
])
def test_bad_similarity_arguments_are_clear_errors(args, error, match):
    q, k = qk()
    with pytest.raises(error, match=match):
        kernels.attention_weights(q, k, **args)


def test_weights_of_mismatched_q_and_k_name_the_shapes():
    q, k = qk(d=5)
    with pytest.raises(ValueError, match=r"q and k must share the head dimension d"):
        kernels.attention_weights(q, k[..., :4])


# -- entropy and analysis ---------------------------------------------------------------

def test_entropy_of_one_hot_uniform_zero_and_nan_rows():
    weights = np.array([[0.0, 1.0, 0.0, 0.0],     # one-hot: 0
                        [0.25, 0.25, 0.25, 0.25],  # uniform over 4: ln 4
                        [0.5, 0.5, 0.0, 0.0],      # uniform over the 2 it sees: ln 2
                        [0.0, 0.0, 0.0, 0.0],      # sees no key: 0
                        [np.nan, 0.5, 0.5, 0.0]])  # NaN stays NaN
    entropy = kernels.attention_entropy(weights)
    np.testing.assert_allclose(entropy[:4], [0.0, math.log(4), math.log(2), 0.0], atol=1e-15)
    assert np.isnan(entropy[4])


def test_analysis_finds_focus_and_flags_a_sink_but_not_a_diagonal():
    n = 8
    sink = np.zeros((n, n))
    sink[:, 0] = 0.9           # every query puts 0.9 on key 0: mass 7.2 against an even share of 1
    sink[:, 1:] = 0.1 / (n - 1)
    diagonal = np.eye(n)       # each key receives exactly one query: its even share
    stacked = np.stack([sink, diagonal])  # leading (head,) axis
    analysis = kernels.analyse_attention(stacked, top=3)
    np.testing.assert_array_equal(analysis.focus, [[0] * n, list(range(n))])
    np.testing.assert_allclose(analysis.focus_weight[0], 0.9)
    np.testing.assert_array_equal(analysis.even_mass, np.ones(n))
    np.testing.assert_allclose(analysis.column_mass[0, 0], 0.9 * n)
    assert analysis.anomalous[0].tolist() == [True] + [False] * (n - 1)
    assert not analysis.anomalous[1].any()
    assert analysis.anomalous_keys[0].tolist() == [0] and analysis.anomalous_keys[1].tolist() == [0]
    np.testing.assert_allclose(analysis.entropy[1], 0.0)
    assert analysis.focused_rows.shape == (2, 3)


@pytest.mark.parametrize("n_q, n_k", [(6, 6), (3, 8), (8, 3)])
def test_even_share_under_causal_masking_is_uniform_attention_mass(n_q, n_k):
    q, k = qk(n_q, n_k, lead=())
    uniform = kernels.attention_weights(q * 0, k, causal=True)  # all scores 0: even spreading
    analysis = kernels.analyse_attention(uniform, causal=True)
    np.testing.assert_allclose(analysis.even_mass, uniform.sum(axis=0), atol=1e-14)
    assert not analysis.anomalous.any()


def test_analysis_from_queries_and_keys_matches_the_weights_in_any_block_size():
    q, k = qk(n_q=33, n_k=21, lead=(2, 3))  # (layer, head) leading axes
    whole = kernels.analyse_attention(kernels.attention_weights(q, k, causal=True, similarity="cosine"),
                                      causal=True)
    for block_rows in (1, 5, 100):
        blocked = kernels.analyse_queries_and_keys(q, k, causal=True, similarity="cosine", block_rows=block_rows)
        for field in ("entropy", "focus_weight", "column_mass"):
            np.testing.assert_allclose(getattr(blocked, field), getattr(whole, field), rtol=1e-12, atol=1e-14)
        np.testing.assert_array_equal(blocked.focus, whole.focus)
        np.testing.assert_array_equal(blocked.anomalous, whole.anomalous)


def test_analysis_of_thousands_of_rows_never_holds_the_weights():
    n, d = 4096, 16
    q, k = qk(n, n, d, lead=())
    weights_bytes = n * n * 8  # 128 MiB in float64
    kernels.analyse_queries_and_keys(q[:64], k)  # warm-up: imports, first allocations
    extra = peak_extra_bytes(lambda: kernels.analyse_queries_and_keys(q, k, causal=True))
    assert extra < weights_bytes / 2, extra  # blocks of ~16 MiB plus their temporaries


def test_bad_weights_are_clear_errors():
    with pytest.raises(TypeError, match="weights must be a NumPy array"):
        kernels.attention_entropy([[1.0]])
    with pytest.raises(ValueError, match=r"\(\.\.\., n_q, n_k\)"):
        kernels.analyse_attention(np.ones(3))
    with pytest.raises(TypeError, match="float32 or float64"):
        kernels.attention_entropy(np.ones((2, 2), int))


def test_negative_weights_are_refused_naming_the_most_negative():
    weights = np.full((2, 3, 4), 0.25)
    weights[1, 2] = [0.5, -0.5, 1.5, -0.25]  # sums to 1, but no probabilities
    weights[0, 1] = [1.0, -0.125, 0.0, 0.125]
    message = r"weights must be non-negative .* the most negative is weights\[1, 2, 1\] = -0.5 \(weights \(2, 3, 4\)\)"
    for call in (kernels.attention_entropy, kernels.analyse_attention):
        with pytest.raises(ValueError, match=message):
            call(weights)
    weights[0, 0, 3] = -np.inf
    with pytest.raises(ValueError, match=r"weights\[0, 0, 3\] = -inf"):
        kernels.attention_entropy(weights.astype(np.float32))


def test_a_negative_weight_in_a_later_block_of_rows_has_its_own_index(monkeypatch):
    from kernels.layers import analysis

    monkeypatch.setattr(analysis, "ROW_BLOCK_BYTES", 1)  # one row per block
    weights = np.full((5, 2), 0.5)
    weights[3, 1] = -1e-3
    with pytest.raises(ValueError, match=r"weights\[3, 1\] = -0.001 "):
        kernels.attention_entropy(weights)


@pytest.mark.parametrize("half", dtypes.HALF)
def test_attention_dtype_rounds_q_k_v_and_widens_the_output(half):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 7, 24)).astype(np.float32)
    w_q, w_k, w_v, w_o = (rng.standard_normal((24, 24)).astype(np.float32) / 5 for _ in range(4))
    out = kernels.multi_head_attention(x, w_q, w_k, w_v, w_o, heads=3, kernel="numpy", attention_dtype=half)
    q, k, v = kernels.multi_head_projections(x, w_q, w_k, w_v, heads=3)
    core = kernels.attention(*(a.astype(half) for a in (q, k, v)), kernel="numpy")
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, merge_heads(core.astype(np.float32)) @ w_o)
    with pytest.raises(TypeError, match="attention_dtype has dtype float32; half-precision attention takes "
                                        "bfloat16 or float16"):
        kernels.multi_head_attention(x, w_q, w_k, w_v, w_o, heads=3, attention_dtype=np.float32)


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_grouped_heads_equal_full_heads_with_each_kv_projection_repeated(own_kernel_name, kv_heads):
    """kv_heads K/V projections serving 4 query heads = 4 full heads whose K/V weights are
    each group's one repeated (grouped-query attention by its definition)."""
    rng = np.random.default_rng(kv_heads)
    heads, d_head, d_model = 4, 3, 12
    x = rng.standard_normal((2, 7, d_model))
    w_q, w_o = (rng.standard_normal((d_model, d_model)) / 4 for _ in range(2))
    w_k, w_v = (rng.standard_normal((d_model, kv_heads * d_head)) / 4 for _ in range(2))
    b_k = rng.standard_normal(kv_heads * d_head)
    grouped = kernels.multi_head_attention(x, w_q, w_k, w_v, w_o, heads=heads, kv_heads=kv_heads, causal=True,
                                           kernel=own_kernel_name, biases=[None, b_k, None, None])
    repeat = lambda a: np.repeat(a.reshape(*a.shape[:-1], kv_heads, d_head), heads // kv_heads,  # noqa: E731
                                 axis=-2).reshape(*a.shape[:-1], d_model)
    full = kernels.multi_head_attention(x, w_q, repeat(w_k), repeat(w_v), w_o, heads=heads, causal=True,
                                        kernel=own_kernel_name, biases=[None, repeat(b_k), None, None])
    np.testing.assert_allclose(grouped, full, atol=1e-12)


@pytest.mark.parametrize("kv_heads, w_k_shape, match", [
    (3, (12, 9), "kv_heads must be a positive integer dividing heads = 4, got 3"),
    (2, (12, 12), r"w_k must have shape \(12, 6\) for x \(7, 12\), got \(12, 12\)"),
])
def test_bad_grouping_is_a_clear_error(kv_heads, w_k_shape, match):
    x = np.zeros((7, 12))
    w = np.zeros((12, 12))
    with pytest.raises(ValueError, match=match):
        kernels.multi_head_attention(x, w, np.zeros(w_k_shape), np.zeros((12, 6)), w, heads=4, kv_heads=kv_heads)
