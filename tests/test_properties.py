"""Properties drawn by hypothesis: every registered kernel through ``kernels.attention``,
``kernels.multi_head_attention`` and ``kernels.KVCache``, held to the float64 reference.

An example draws shapes (a few queries for the split-KV decoding paths, causal with
n_q > n_k, tile remainders, batch and head axes, k and v with a half or a third of q's
heads: grouped-query attention), a dtype the kernel takes, a scale
(default, 0, negative, 1e-3 to 10 in size), a magnitude per input from 1e-30 to 1e4, a
layout per input (``LAYOUTS``) and NaN or ±inf at random places (our rungs only: a peer's
NaN/Inf semantics are its own, as in the harness).  Every output must keep the contract
of kernels.attention (``assert_attention_contract``):
  - its shape and dtype; the inputs unchanged;
  - NaN exactly where the reference has NaN (element by element), the same infinities;
  - within the harness's error budget everywhere else (``error_budget``);
  - zeros, exactly, on the rows that see no key;
  - each row a convex combination of the value rows it sees: what still holds where the
    budget does not (float32 logits near 1e8, see ``error_budget``).
How many examples: the hypothesis profile (tests/conftest.py; HYPOTHESIS_PROFILE=long).
"""
import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import kernels
from kernels import harness
from kernels.dtypes import FLOATS, WIDE, float_type
from kernels.reference import expand_kv, first_seeing_row, reference_attention
from test_layers import mha_reference

UNIT_ROUNDOFF = {row.dtype: row.unit_roundoff for row in FLOATS.values()}
OWN_KERNELS = [name for name, record in kernels.KERNELS.items() if not record.external]
# without a peer installed, one parameter that skips saying so (an empty list would skip
# with pytest's "got empty parameter set")
PEERS = ([name for name, record in kernels.KERNELS.items() if record.external]
         or [pytest.param("peer", marks=pytest.mark.skip(reason="no peer installed (make peers)"))])
# A peer compiles per new shape (XLA: ~0.3 s each) and is not ours to fix: the peers take
# a tenth of the profile's examples (at least 5).
FEWER_FOR_PEERS = settings(max_examples=max(5, settings().max_examples // 10))

# NaN and ±inf are drawn on purpose: NumPy's warnings about them (from the reference, the
# numpy rung and the projections) say nothing here.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning",
                                        "ignore:overflow encountered:RuntimeWarning")


# -- layouts ------------------------------------------------------------------------------

def unaligned(array):
    """A C-ordered copy of ``array`` one byte into a bytes buffer: not aligned to its itemsize."""
    buffer = bytearray(array.nbytes + 1)
    copy = np.frombuffer(buffer, array.dtype, array.size, offset=1).reshape(array.shape)
    copy[...] = array
    return copy


# Each takes a C-ordered array (..., n, d) and gives one with the same values (but for
# "broadcast batch") in another memory layout.
LAYOUTS = {
    "C": lambda a: a,
    "Fortran": np.asfortranarray,
    "reversed rows": lambda a: np.ascontiguousarray(a[..., ::-1, :])[..., ::-1, :],  # negative stride on n
    "reversed columns": lambda a: np.ascontiguousarray(a[..., ::-1])[..., ::-1],     # negative stride on d
    "every other row": lambda a: np.repeat(a, 2, axis=-2)[..., ::2, :],
    "unaligned": unaligned,
    # stride 0 and read-only: every entry of the first axis is its first one
    "broadcast batch": lambda a: np.broadcast_to(a[:1], a.shape),
}


# -- what is drawn ------------------------------------------------------------------------

@dataclass(frozen=True)
class Sizes:
    """Upper bounds of a drawn problem: each of up to two batch axes, n_q, n_k, d and d_v."""

    batch: int
    n_q: int
    n_k: int
    d: int

    def fit(self, record):
        """These sizes, or small ones when the kernel's cap (the naive loops) is below them."""
        return self if record.fits(self.batch**2, self.n_q, self.n_k) else SMALL_SIZES


# 150 queries: more than one query tile (numba_tiled.TILE_Q); 300 keys: two split-KV chunks (256)
SIZES = Sizes(batch=3, n_q=150, n_k=300, d=72)
SMALL_SIZES = Sizes(batch=2, n_q=12, n_k=16, d=8)
POISONS = (math.nan, math.inf, -math.inf)

# 1 (the usual case), large logits (0.1 ... 1e4), or anywhere in 1e-30 ... 1e4 (tiny inputs
# whose float32 scores underflow to 0)
magnitudes = st.one_of(st.just(0.0), st.floats(-1, 4), st.floats(-30, 4)).map(lambda exponent: 10.0**exponent)
scales = st.one_of(
    st.none(),
    st.just(0.0),
    st.tuples(st.sampled_from((1.0, -1.0)), st.floats(-3, 1)).map(lambda s: s[0] * 10.0 ** s[1]),
)
layouts = st.sampled_from(list(LAYOUTS))


def poisons(record, targets):
    """Up to three (array name, flat index, NaN or ±inf); none for an external peer."""
    if record.external:
        return st.just([])
    return st.lists(st.tuples(st.sampled_from(targets), st.integers(0, 2**20), st.sampled_from(POISONS)),
                    max_size=3)


def dtypes(record, taken=tuple(FLOATS)):
    """A dtype of ``taken`` (default: every type of the table) that the kernel takes."""
    return st.sampled_from([FLOATS[name].dtype.type for name in taken if record.refusal(name) is None])


def random_array(rng, shape, dtype, magnitude):
    return (rng.standard_normal(shape) * magnitude).astype(dtype)


def poison(arrays, placed):
    """Write each (name, flat index, value) of ``placed`` into ``arrays[name]`` (C-ordered)."""
    for name, index, value in placed:
        flat = arrays[name].reshape(-1)
        if flat.size:
            flat[index % flat.size] = value


def logit_bound(q, k, scale):
    """M = |scale| · max_ij Σ_c |q_ic| |k_jc| over the finite parts: no logit is larger."""
    q_abs, k_abs = (np.abs(np.nan_to_num(a.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0))
                    for a in (q, k))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else abs(scale)
    return scale * float((q_abs @ np.swapaxes(expand_kv(q_abs, k_abs), -1, -2)).max(initial=0.0))


def cap_logits_under_infinite_values(q, k, v, scale):
    """q scaled down so that no logit passes ±40 when v holds an infinity.

    An output element over a value of ±inf is p · inf: ±inf where its weight p > 0, but
    0 · inf = NaN where p underflowed to 0, which happens past a logit gap of ~87 in
    float32 (~708 in float64) and sooner with flush-to-zero.  Exact arithmetic has every
    weight > 0; where a finite precision's exp underflows is not the contract's business,
    so values hold infinities only with gaps below 80, where nothing underflows.
    """
    bound = logit_bound(q, k, scale)
    if np.isinf(v).any() and bound > 40:
        q = q * q.dtype.type(40 / bound)  # inf and NaN stay as they are
    return q


@dataclass(frozen=True)
class AttentionCall:
    """One drawn call of kernels.attention: what was drawn (printed when an example fails)
    and the inputs made from it."""

    shapes: dict
    dtype: str
    causal: bool
    scale: Optional[float]
    magnitudes: dict
    layouts: dict
    poisons: list
    seed: int
    inputs: tuple = field(repr=False, compare=False)


@st.composite
def attention_calls(draw, record):
    sizes = SIZES.fit(record)
    dtype = draw(dtypes(record))
    batch_shape = tuple(draw(st.lists(st.integers(1, sizes.batch), min_size=1, max_size=2)))
    # grouped-query attention: k and v with the last batch axis's heads, q with group times as many
    group = draw(st.sampled_from((1, 1, 2, 3)))
    q_batch = batch_shape[:-1] + (batch_shape[-1] * group,)
    n_q = draw(st.integers(1, 4) | st.integers(1, sizes.n_q))  # a few queries: split-KV paths
    n_k = draw(st.integers(1, n_q) | st.integers(1, sizes.n_k))  # n_k <= n_q: causal rows that see no key
    d, d_v = draw(st.integers(1, sizes.d)), draw(st.integers(1, sizes.d))
    causal, scale = draw(st.booleans()), draw(scales)
    magnitude = {name: draw(magnitudes) for name in "qkv"}
    layout = {name: draw(layouts) for name in "qkv"}
    placed = draw(poisons(record, "qkv"))
    seed = draw(st.integers(0, 2**32 - 1))

    rng = np.random.default_rng(seed)
    shapes = {"q": q_batch + (n_q, d), "k": batch_shape + (n_k, d), "v": batch_shape + (n_k, d_v)}
    arrays = {name: random_array(rng, shape, dtype, magnitude[name]) for name, shape in shapes.items()}
    poison(arrays, placed)
    arrays["q"] = cap_logits_under_infinite_values(arrays["q"], arrays["k"], arrays["v"], scale)
    inputs = tuple(LAYOUTS[layout[name]](arrays[name]) for name in "qkv")
    return AttentionCall(dict(batch=q_batch, kv_batch=batch_shape, n_q=n_q, n_k=n_k, d=d, d_v=d_v),
                         np.dtype(dtype).name, causal,
                         scale, magnitude, layout, placed, seed, inputs)


# -- what every output must satisfy ---------------------------------------------------------

def error_budget(q, k, v, ref, causal, scale):
    """The harness's budget rule (kernels.harness) for a call with its own scale.

    float32: the largest of twice the error of the reference evaluated plainly in float32,
    8 u, and 2 u · M, M the logit bound (``logit_bound``): the harness's three terms.
    bfloat16, float16: float32's rule (u that of float32, the type they are computed in),
    plus the 2 u of the 16-bit type that a kernel may round (P and the output).
    float64: the harness's 1e-10, or 4 u · M where that is larger: a score of size M
    rounds by about u · M, which moves the output by up to 2 u · M (harness docstring), in
    the kernel and in the float64 reference alike; 1e-10 alone cannot hold for logits past
    ~1e5 (q and k of 1e4 and more).
    Where the budget passes 2 (float32 logits past ~1e7) it says nothing: no two convex
    combinations of the same values differ by more; the softmax picks among keys whose
    scores tie within their rounding, and the NaN pattern and the convexity of each row
    (``assert_convex_rows``) are what the contract still promises there.
    """
    dtype = q.dtype
    magnitude_term = UNIT_ROUNDOFF[float_type(dtype).compute] * logit_bound(q, k, scale)
    if dtype == np.float64:
        return max(harness.REFERENCE_BUDGET, 4 * magnitude_term)
    plain = reference_attention(q, k, v, causal=causal, scale=scale, compute_dtype=np.float32)
    plain_error = harness.compare(plain, ref, v, np.inf).error
    assert math.isfinite(plain_error), "plain float32 puts NaN elsewhere than the reference: ill-conditioned example"
    return harness.half_roundings(dtype) + max(2 * plain_error, harness.budget_floor(np.float32),
                                               2 * magnitude_term)


def assert_convex_rows(out, ref, v, causal):
    """Each output element lies between the least and the greatest value its query sees in
    that column, give or take the rounding of a weighted sum of n_k terms and one division,
    2 (n_k + 2) u max|v|.  Columns whose values hold NaN or ±inf are the NaN check's."""
    n_q, n_k = out.shape[-2], v.shape[-2]
    last = np.arange(n_q) + (n_k - n_q) if causal else np.full(n_q, n_k - 1)  # last key each query sees
    rows = last >= 0
    values = expand_kv(out, v).astype(np.float64)   # each query head's own K/V head
    low = np.minimum.accumulate(values, axis=-2)[..., last[rows], :]
    high = np.maximum.accumulate(values, axis=-2)[..., last[rows], :]
    seen = out[..., rows, :].astype(np.float64)
    finite = np.abs(values[np.isfinite(values)])
    slack = 2 * (n_k + 2) * UNIT_ROUNDOFF[out.dtype] * finite.max(initial=0.0)
    checked = np.isfinite(low) & np.isfinite(high) & ~np.isnan(ref[..., rows, :])
    outside = checked & ~((seen >= low - slack) & (seen <= high + slack))
    if outside.any():
        index = tuple(int(i) for i in np.argwhere(outside)[0])
        pytest.fail(f"output {seen[index]!r} at {index} (rows that see a key) is outside the values "
                    f"its query sees, [{low[index]!r}, {high[index]!r}] ± {slack:.1e}")


def assert_attention_contract(out, q, k, v, causal, scale, label):
    """``out`` keeps kernels.attention's contract for q, k, v (see the module docstring)."""
    ref = reference_attention(q, k, v, causal=causal, scale=scale)
    assert out.shape == ref.shape and out.dtype == q.dtype, f"{label}: {out.shape} {out.dtype}"
    budget = error_budget(q, k, v, ref, causal, scale)
    first = first_seeing_row(q.shape[-2], k.shape[-2], causal)
    # what the examples covered (pytest --hypothesis-show-statistics)
    event(f"{q.dtype}, budget {'binding' if budget < 2 else 'says nothing'}")
    event(f"rows that see no key: {first > 0}")
    event(f"reference has NaN: {bool(np.isnan(ref).any())}, ±inf: {bool(np.isinf(ref).any())}")
    comparison = harness.compare(out, ref, v, budget)
    print(f"{label}: error {comparison.error:.2e} (budget {comparison.budget:.2e})")
    assert comparison.ok, (f"{label}: error {comparison.error:.3e} > budget {comparison.budget:.3e}, "
                           f"first bad index {comparison.first_bad}: {out[comparison.first_bad]!r} "
                           f"against the reference's {ref[comparison.first_bad]!r}")
    assert not np.any(out[..., :first, :]), f"{label}: the {first} rows that see no key must be zeros"
    assert_convex_rows(out, ref, v, causal)


def assert_unchanged(arrays, copies):
    for array, copy in zip(arrays, copies):
        np.testing.assert_array_equal(array, copy, err_msg="an input was modified")


# -- kernels.attention -------------------------------------------------------------------

def check_attention_call(name, call):
    copies = [a.copy() for a in call.inputs]
    out = kernels.attention(*call.inputs, kernel=name, causal=call.causal, scale=call.scale)
    assert_unchanged(call.inputs, copies)
    assert_attention_contract(out, *call.inputs, call.causal, call.scale, f"{name} {call.dtype}")


@pytest.mark.parametrize("name", OWN_KERNELS)
@given(data=st.data())
def test_attention_keeps_its_contract(name, data):
    check_attention_call(name, data.draw(attention_calls(kernels.KERNELS[name]), label="call"))


@pytest.mark.parametrize("name", PEERS)
@FEWER_FOR_PEERS
@given(data=st.data())
def test_attention_on_a_peer_keeps_its_contract(name, data):
    check_attention_call(name, data.draw(attention_calls(kernels.KERNELS[name]), label="call"))


# -- kernels.multi_head_attention ----------------------------------------------------------

@dataclass(frozen=True)
class MultiHeadCall:
    lead: tuple
    n: int
    heads: int
    d_head: int
    dtype: str
    causal: bool
    biases: bool
    magnitude: float
    layout: str
    poisons: list
    seed: int
    x: np.ndarray = field(repr=False, compare=False)
    weights: tuple = field(repr=False, compare=False)
    bias: Optional[list] = field(repr=False, compare=False)


@st.composite
def multi_head_calls(draw, record):
    small = SIZES.fit(record) is SMALL_SIZES
    dtype = draw(dtypes(record, WIDE))   # the layer computes in float32 or float64
    lead = tuple(draw(st.lists(st.integers(1, 2), max_size=1)))
    n = draw(st.integers(1, 10 if small else 40))
    heads, d_head = draw(st.integers(1, 2 if small else 4)), draw(st.integers(1, 12))
    causal, with_biases = draw(st.booleans()), draw(st.booleans())
    magnitude, layout = draw(magnitudes), draw(layouts)
    placed = draw(poisons(record, "x"))
    seed = draw(st.integers(0, 2**32 - 1))

    rng = np.random.default_rng(seed)
    d_model = heads * d_head
    x = random_array(rng, lead + (n, d_model), dtype, magnitude)
    poison({"x": x}, placed)
    weights = tuple(random_array(rng, (d_model, d_model), dtype, 1 / math.sqrt(d_model)) for _ in range(4))
    bias = [random_array(rng, d_model, dtype, 1.0) for _ in range(4)] if with_biases else None
    return MultiHeadCall(lead, n, heads, d_head, np.dtype(dtype).name, causal, with_biases, magnitude, layout,
                         placed, seed, LAYOUTS[layout](x), weights, bias)


def multi_head_budget(call, ref, output_scale):
    """``error_budget``'s rule for the whole layer, M from each head's float64 projected
    queries and keys (the largest logit bound of any head), the plain float32 error
    measured on the layer (it holds the projections' rounding as well)."""
    x64 = np.nan_to_num(call.x.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    q, k = (x64 @ w.astype(np.float64) + (0.0 if call.bias is None else call.bias[i])
            for i, w in enumerate(call.weights[:2]))
    columns = [slice(h * call.d_head, (h + 1) * call.d_head) for h in range(call.heads)]
    bound = max(logit_bound(q[..., c], k[..., c], None) for c in columns)
    u = UNIT_ROUNDOFF[call.x.dtype]
    if call.x.dtype == np.float64:
        return max(harness.REFERENCE_BUDGET, 4 * u * bound)
    plain = mha_reference(call.x, *call.weights, call.heads, call.causal, call.bias, compute_dtype=np.float32)
    plain_error = harness.compare(plain, ref, output_scale, np.inf).error
    assert math.isfinite(plain_error), "plain float32 puts NaN elsewhere than the reference: ill-conditioned example"
    return max(2 * plain_error, harness.budget_floor(np.float32), 2 * u * bound)


def check_multi_head_call(name, call):
    """The layer's output against mha_reference (float64, head by head), compared on the
    scale of what its output projection can make of the heads' outputs:
    max|V| · max_j Σ_c |w_o[c, j]| + max|b_o| stands in for the harness's max|v|."""
    copy = call.x.copy()
    out = kernels.multi_head_attention(call.x, *call.weights, heads=call.heads, kernel=name, causal=call.causal,
                                       biases=call.bias)
    assert_unchanged([call.x], [copy])
    ref = mha_reference(call.x, *call.weights, call.heads, call.causal, call.bias)
    assert out.shape == call.x.shape and out.dtype == call.x.dtype
    values = call.x.astype(np.float64) @ call.weights[2].astype(np.float64)
    if call.bias is not None:
        values = values + call.bias[2]
    w_o = np.abs(call.weights[3].astype(np.float64))
    b_o = 0.0 if call.bias is None else float(np.abs(call.bias[3]).max())
    v_max = np.abs(values[np.isfinite(values)]).max(initial=0.0)
    output_scale = np.array([v_max * w_o.sum(axis=0).max() + b_o])
    comparison = harness.compare(out, ref, output_scale, multi_head_budget(call, ref, output_scale))
    print(f"{name} {call.dtype}: error {comparison.error:.2e} (budget {comparison.budget:.2e})")
    assert comparison.ok, (f"{name}: error {comparison.error:.3e} > budget {comparison.budget:.3e}, "
                           f"first bad index {comparison.first_bad}")


@pytest.mark.parametrize("name", OWN_KERNELS)
@given(data=st.data())
def test_multi_head_attention_matches_the_reference(name, data):
    check_multi_head_call(name, data.draw(multi_head_calls(kernels.KERNELS[name]), label="call"))


@pytest.mark.parametrize("name", PEERS)
@FEWER_FOR_PEERS
@given(data=st.data())
def test_multi_head_attention_on_a_peer_matches_the_reference(name, data):
    check_multi_head_call(name, data.draw(multi_head_calls(kernels.KERNELS[name]), label="call"))


# -- kernels.KVCache -----------------------------------------------------------------------

@dataclass(frozen=True)
class CacheSession:
    """Tokens appended step by step (the cache growing from ``capacity``), each step's new
    queries attending over everything cached so far."""

    heads: int
    head_dim: int
    head_dim_v: int
    dtype: str
    capacity: int
    steps: list  # (new tokens, new queries) per step
    scale: Optional[float]
    magnitudes: dict
    query_layout: str
    poisons: list
    seed: int


@st.composite
def cache_sessions(draw, record):
    small = SIZES.fit(record) is SMALL_SIZES
    dtype = draw(dtypes(record, WIDE))   # the cache holds float32 or float64
    heads, head_dim, head_dim_v = draw(st.integers(1, 3)), draw(st.integers(1, 16)), draw(st.integers(1, 16))
    capacity = draw(st.integers(1, 8))
    tokens = st.integers(0, 6) if small else st.integers(0, 6) | st.integers(0, 120)  # few: t_q > n
    steps = draw(st.lists(st.tuples(tokens, st.integers(1, 6)), min_size=1, max_size=4))
    scale, magnitude = draw(scales), {name: draw(magnitudes) for name in "qkv"}
    query_layout = draw(layouts)
    placed = draw(poisons(record, "qkv"))
    return CacheSession(heads, head_dim, head_dim_v, np.dtype(dtype).name, capacity, steps, scale, magnitude,
                        query_layout, placed, draw(st.integers(0, 2**32 - 1)))


def check_cache_session(name, session):
    """Each step's attend against the reference over the tokens cached so far (causal,
    bottom-right); at the end the cache holds every token appended."""
    rng = np.random.default_rng(session.seed)
    cache = kernels.KVCache(session.heads, session.head_dim, dtype=session.dtype, capacity=session.capacity,
                            head_dim_v=session.head_dim_v)
    widths = {"q": session.head_dim, "k": session.head_dim, "v": session.head_dim_v}
    keys, values = (np.empty((session.heads, 0, widths[name]), session.dtype) for name in "kv")
    for step, (new, t_q) in enumerate(session.steps):
        rows = {"q": t_q, "k": new, "v": new}
        drawn = {name: random_array(rng, (session.heads, rows[name], widths[name]), session.dtype,
                                    session.magnitudes[name]) for name in "qkv"}
        # a poison lands in one step's queries or new tokens: the newest keys, which that
        # step's earlier queries do not see
        n_steps = len(session.steps)
        poison(drawn, [(name, index // n_steps, value) for name, index, value in session.poisons
                       if index % n_steps == step])
        cache.append(drawn["k"], drawn["v"])
        keys, values = np.concatenate((keys, drawn["k"]), axis=1), np.concatenate((values, drawn["v"]), axis=1)
        if not len(cache):
            continue  # nothing cached yet: attend would raise, as kernels.attention does for n_k = 0
        q = LAYOUTS[session.query_layout](cap_logits_under_infinite_values(drawn["q"], keys, values, session.scale))
        out = cache.attend(q, kernel=name, scale=session.scale)
        assert_attention_contract(out, q, keys, values, True, session.scale,
                                  f"{name} {session.dtype} step {step} ({len(cache)} tokens)")
    np.testing.assert_array_equal(cache.keys, keys)
    np.testing.assert_array_equal(cache.values, values)


@pytest.mark.parametrize("name", OWN_KERNELS)
@given(data=st.data())
def test_kv_cache_attends_as_the_reference_at_every_step(name, data):
    check_cache_session(name, data.draw(cache_sessions(kernels.KERNELS[name]), label="session"))


@pytest.mark.parametrize("name", PEERS)
@FEWER_FOR_PEERS
@given(data=st.data())
def test_kv_cache_on_a_peer_attends_as_the_reference_at_every_step(name, data):
    check_cache_session(name, data.draw(cache_sessions(kernels.KERNELS[name]), label="session"))
