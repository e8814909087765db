"""Attention as a 16-bit kernel may compute it, within the harness's budget or with a bug
that fails it (tests/test_harness.py holds the budget and the probe's cases against
them), and a peer made of one: ``run``, registered by the tests as an external peer
(``tests/conftest.py``: ``rounding_peer``), computes like a library that rounds its scores
to the inputs' 16-bit type, as OpenVINO's CPU plugin does where the CPU has bf16 or fp16
units, so that the refusal of a peer falling below the budget is exercised on any CPU."""
import numpy as np

from kernels.band import Band
from kernels.reference import expand_kv

ROUNDING_BUGS = ("scores in half", "sums in half")  # what a library may compute in 16 bits
ROUNDS_SCORES = True  # run's bug; False: it computes in float32 as our rungs do (tests flip it)


def half_model(q, k, v, causal, dtype, bug=None, scale=None, band=None):
    """Attention as a 16-bit kernel may compute it: float32 throughout, P rounded to ``dtype``
    before P·V (l summed from the unrounded P, as PyTorch's bfloat16 kernel does) and the
    output rounded to ``dtype``: the two roundings the budget allows.  ``bug``: "scores in
    half" rounds the scores to ``dtype`` too; "sums in half" adds up l and P·V key by key in
    ``dtype``, rounding each partial sum (as ggml's float16 V·softmax does); "drops a key"
    leaves out every row's last key.  q (..., H, n_q, d), k (..., H_kv, n_k, d), v (..., H_kv,
    n_k, d_v) -> (..., H, n_q, d_v) of ``dtype``; ``scale`` defaults to 1/√d; ``band`` (a
    ``kernels.band.Band``) overrides ``causal``."""
    q, k, v = (x.astype(np.float32) for x in (q, k, v))
    k, v = expand_kv(q, k), expand_kv(q, v)   # grouped cases: each query head's K/V head
    scale = np.float32(1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if bug == "scores in half":
        scores = scores.astype(dtype).astype(np.float32)
    n_q, n_k = scores.shape[-2:]
    visible = (band or Band.of(causal)).mask(n_q, n_k)
    if bug == "drops a key":
        visible &= np.tri(n_q, n_k, k=n_k - n_q - 1, dtype=bool) if causal else np.arange(n_k) < n_k - 1
    scores = np.where(visible, scores, -np.inf)
    with np.errstate(invalid="ignore"):
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p = np.nan_to_num(p)   # rows that see no key: zero weights, zero output
    if bug == "sums in half":
        weighted = np.zeros(p.shape[:-1] + v.shape[-1:], np.float32)
        l = np.zeros(p.shape[:-1] + (1,), np.float32)
        for j in range(n_k):   # each partial sum rounded to dtype
            weighted = (weighted + p[..., j, None] * v[..., j, None, :]).astype(dtype).astype(np.float32)
            l = (l + p[..., j, None]).astype(dtype).astype(np.float32)
    else:
        weighted = p.astype(dtype).astype(np.float32) @ v
        l = p.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(l > 0, weighted / l, 0)
    return out.astype(dtype)


def run(q, k, v, out, causal, scale):
    """The registry's ``run`` of a peer that rounds its scores to the inputs' 16-bit type
    (while ``ROUNDS_SCORES``); float32 inputs it computes in float32."""
    bug = "scores in half" if ROUNDS_SCORES and q.dtype.itemsize == 2 else None
    out[...] = half_model(q, k, v, causal, q.dtype, bug, scale)   # a 16-bit result widens exactly


def prepare(q, k, v, causal, scale, band=None):
    """The peer's call on inputs made once (``peer_call``): its ``run`` into an output of its own."""
    out = np.empty(q.shape[:2] + v.shape[2:], np.float32)
    return lambda: run(q, k, v, out, causal, scale)
