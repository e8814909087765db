"""A peer timed as its users call it (``prepare`` of each peer module: the library's own
call on tensors of its own, made once): its result is the one ``run`` gives, for full,
causal, windowed and grouped calls and a decode step, in float32 and a 16-bit type the
peer takes; the call reads the tensors made at prepare time, so it can be called again
(and is, by the benchmarks) without anything of ours in between.  A peer whose package is
not installed skips (the peers are optional: ``make peers``)."""
import math

import numpy as np
import pytest

from kernels import registry
from kernels.band import Band
from kernels.dtypes import FLOATS

PEERS = {peer.name: (peer, packages) for peer, packages in registry._peers()}

# (B, B_kv, n_q, n_k, band): plain heads full and causal, grouped, a window with a sink, a
# decode step (one query over the cache)
CALLS = {
    "full": (2, 2, 24, 24, Band()),
    "causal": (2, 2, 24, 24, Band.of(True)),
    "grouped": (4, 2, 8, 30, Band()),
    "window": (2, 2, 40, 40, Band.of(True, (7, 0), 2)),
    "decode": (4, 2, 1, 50, Band.of(True)),
}


def installed(name):
    peer, packages = PEERS[name]
    for package in packages:
        pytest.importorskip(package, reason=f"{name} needs {package} (make peers)")
    return peer, peer.implementation


def as_array(name, result, shape):
    """The library's result as (B, n_q, d_v) float32: ggml's comes out (n_q, B, d_v)."""
    array = np.asarray(result if not hasattr(result, "numpy") else result.float().numpy(), dtype=np.float32)
    if name == "ggml_flash_attn":
        return array.transpose(1, 0, 2)
    return array.reshape(shape)


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", list(PEERS))
def test_a_prepared_call_gives_what_run_gives_and_can_be_called_again(name, dtype_name, call):
    peer, module = installed(name)
    if peer.refusal(dtype_name, held=False):
        pytest.skip(peer.refusal(dtype_name, held=False))
    batch, kv_heads, n_q, n_k, band = CALLS[call]
    d = 16
    dtype = FLOATS[dtype_name].dtype
    rng = np.random.default_rng([batch, n_q, n_k])
    q = rng.standard_normal((batch, n_q, d), np.float32).astype(dtype)
    k, v = (rng.standard_normal((kv_heads, n_k, d), np.float32).astype(dtype) for _ in range(2))
    scale = 1 / math.sqrt(d)
    expected = np.empty((batch, n_q, d), np.float32)
    module.run(q, k, v, expected, band.causal, scale, band)

    prepared = module.prepare(q, k, v, band.causal, scale, band)
    first = as_array(name, prepared(), expected.shape).copy()
    again = as_array(name, prepared(), expected.shape)
    # the same library call on the same inputs: the same result (16-bit: its own type's,
    # which run widens exactly)
    np.testing.assert_array_equal(first, expected)
    np.testing.assert_array_equal(again, expected)
