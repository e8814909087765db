"""The external peers on grouped-query attention: each peer module's ``run`` called
directly (not through ``kernels.attention``) with k and v of B_kv = B / g heads, query
head b reading K/V head b // g, for groups 1, 2, 4 and 8 (not every shape with each), causal and not (rows that see
no key give zeros), in float32 and each half type the peer takes, against the float64
reference of the same call with K/V repeated g times, held to the harness's budget.
A peer whose package is not installed skips (the peers are optional: ``make peers``)."""
import numpy as np
import pytest

from kernels import harness, registry
from kernels.dtypes import FLOATS, HALF
from kernels.reference import first_seeing_row, reference_attention

PEERS = {peer.name: (peer, packages) for peer, packages in registry._peers()}
# 1 (plain heads) and 4; the square and d_v tests add 2 and 8 (each new shape costs a
# compile in XLA and OpenVINO, so the grid stays small enough for CI)
GROUPS = (1, 4)
KV_HEADS = 3     # B_kv: odd, so that a wrong head mapping cannot land on the right head
D, D_V = 16, 16
# float32 and the half types: each type a peer takes, grouped
TYPES = ("float32",) + HALF


def installed(name):
    """The peer's module; skips the test when its packages are not installed."""
    peer, packages = PEERS[name]
    for package in packages:
        pytest.importorskip(package, reason=f"{name} needs {package} (make peers)")
    return peer.implementation


def takes(name, dtype_name):
    """Skips the test when the peer's registry record refuses the dtype (its reason)."""
    peer = PEERS[name][0]
    if peer.refusal(dtype_name):
        pytest.skip(peer.refusal(dtype_name))


def grouped_call(name, group, n_q, n_k, causal, dtype_name, d=D, d_v=D_V, seed=0):
    """Runs the peer's ``run`` on one grouped call; returns (out rounded as the API
    rounds it, reference, budget, q, k, v)."""
    module = installed(name)
    takes(name, dtype_name)
    dtype = FLOATS[dtype_name].dtype
    rng = np.random.default_rng([seed, group, n_q, n_k, int(causal)])
    batch = KV_HEADS * group
    q = rng.standard_normal((batch, n_q, d)).astype(dtype)
    k = rng.standard_normal((KV_HEADS, n_k, d)).astype(dtype)
    v = rng.standard_normal((KV_HEADS, n_k, d_v)).astype(dtype)
    for array in (q, k, v):
        array.flags.writeable = False  # as a KVCache hands them out; the peers only read
    scale = 1.0 / np.sqrt(d)
    out = np.full((batch, n_q, d_v), np.nan, dtype=FLOATS[dtype_name].compute)
    module.run(q, k, v, out, causal, scale)
    assert not np.isnan(out).any(), "the peer left part of out unwritten (or wrote NaN)"
    # the API rounds a 16-bit call's float32 result to the inputs' type
    rounded = out.astype(dtype) if FLOATS[dtype_name].is_half else out
    k_rep, v_rep = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
    ref = reference_attention(q, k_rep, v_rep, causal=causal, scale=scale)
    case = harness.Case(f"grouped g={group}", (batch,), n_q, n_k, d, d_v, causal=causal)
    budget = harness.error_budget(case, dtype.type, (q, k_rep, v_rep), ref)
    return rounded, ref, budget, q, k, v


def check(name, group, n_q, n_k, causal, dtype_name, **shape):
    out, ref, budget, q, k, v = grouped_call(name, group, n_q, n_k, causal, dtype_name, **shape)
    comparison = harness.compare(out, ref, v, budget)
    assert comparison.ok, (f"{name} {dtype_name} g={group} n_q={n_q} n_k={n_k} causal={causal}: "
                           f"error {comparison.error:.3g} > budget {budget:.3g} at {comparison.first_bad}")
    first = first_seeing_row(n_q, n_k, causal)
    assert (np.asarray(out[:, :first], dtype=np.float64) == 0.0).all()  # rows that see no key


@pytest.mark.parametrize("dtype_name", TYPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n_k", [1, 300], ids=lambda n: f"n_k={n}")
@pytest.mark.parametrize("n_q", [1, 3, 40], ids=lambda n: f"n_q={n}")
@pytest.mark.parametrize("group", GROUPS, ids=lambda g: f"g={g}")
@pytest.mark.parametrize("name", sorted(PEERS))
def test_a_grouped_call_matches_the_reference_with_kv_repeated(name, group, n_q, n_k, causal, dtype_name):
    check(name, group, n_q, n_k, causal, dtype_name)


@pytest.mark.parametrize("dtype_name", TYPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n", [37, 300], ids=lambda n: f"n={n}")
@pytest.mark.parametrize("group", [2, 8], ids=lambda g: f"g={g}")
@pytest.mark.parametrize("name", sorted(PEERS))
def test_a_square_grouped_call_matches(name, group, n, causal, dtype_name):
    # n_q == n_k: the peers' is_causal flags, not a mask
    check(name, group, n, n, causal, dtype_name)


@pytest.mark.parametrize("dtype_name", TYPES)
@pytest.mark.parametrize("shape", [(40, 300, False), (40, 300, True), (300, 300, True), (1, 300, True)],
                         ids=lambda s: f"n_q={s[0]} n_k={s[1]}{' causal' if s[2] else ''}")
@pytest.mark.parametrize("group", [1, 4], ids=lambda g: f"g={g}")
@pytest.mark.parametrize("name", sorted(PEERS))
def test_a_grouped_call_with_d_v_other_than_d(name, group, shape, dtype_name):
    # d != d_v: PyTorch's math path, JAX's zero padding
    n_q, n_k, causal = shape
    check(name, group, n_q, n_k, causal, dtype_name, d=24, d_v=40)


@pytest.mark.parametrize("name", sorted(PEERS))
def test_a_grouped_call_reads_each_query_heads_own_kv_head(name):
    # every K/V head different (values of head j all equal j): each output row is
    # exactly its K/V head's value, so a wrong b -> b // g mapping shows at once
    module = installed(name)
    group, n_q, n_k = 4, 3, 5
    q = np.random.default_rng(1).standard_normal((KV_HEADS * group, n_q, D)).astype(np.float32)
    k = np.random.default_rng(2).standard_normal((KV_HEADS, n_k, D)).astype(np.float32)
    v = np.broadcast_to(np.arange(KV_HEADS, dtype=np.float32)[:, None, None], (KV_HEADS, n_k, D_V)).copy()
    out = np.full((KV_HEADS * group, n_q, D_V), np.nan, dtype=np.float32)
    module.run(q, k, v, out, False, 0.25)
    expected = np.repeat(np.arange(KV_HEADS, dtype=np.float32), group)[:, None, None]
    np.testing.assert_allclose(out, np.broadcast_to(expected, out.shape), atol=1e-6)
