"""The external peers in half precision (bfloat16, float16): what each declares it takes and
which of those are held to the harness on the CPU it runs on (``Kernel.probed``), that what
it takes here passes the harness (causal and not), and that what it refuses, declared or
measured by the probe on this CPU, is refused, with its reason, before anything runs.  A
peer whose package is not installed skips (the peers are optional: ``make peers``).  The
probe's own mechanism is tested on any CPU with a peer made to fail (test_peer_probe.py)."""
import re

import numpy as np
import pytest

import kernels
from kernels import harness, registry
from kernels.dtypes import FLOATS, HALF
from kernels.reference import reference_attention

PEERS = {peer.name: (peer, packages) for peer, packages in registry._peers()}
# What each peer computes at (at least) the inputs' precision on this project's CPUs (module
# docstrings: the evidence), its 16-bit types where the probe finds them within the budget.
# ONNX Runtime rounds float16 scores and has no bfloat16 kernel on any CPU.
TAKES = {
    "torch_sdpa": ("float32", "float64", "bfloat16", "float16"),
    "onnxruntime_attention": ("float32", "float16"),
    "openvino_sdpa": ("float32", "bfloat16", "float16"),
    "jax_attention": ("float32", "bfloat16", "float16"),
    "ggml_flash_attn": ("float32", "bfloat16"),
}
# A few harness cases, each causal and not: square and not (both alignments, rows that
# see no key), d_v != d, a non-power-of-two d (its scale is no power of two), a batch of
# heads, large logits, and n = 1 (a degenerate dot some compilers rewrite).
CASE_NAMES = ("n=1", "odd d=33", "d_v=40 != d=16", "n_q=7 < n_k=90", "n_q=90 > n_k=7",
              "heads (2,3) n=41", "large logits x30")
CASES = [case for case in harness.CASES if case.name in CASE_NAMES]
HALF_TYPES = [FLOATS[name].dtype.type for name in HALF]


def installed(name):
    """The peer's registry record; skips the test when its packages are not installed."""
    for package in PEERS[name][1]:
        pytest.importorskip(package, reason=f"{name} needs {package} (make peers)")
    return kernels.KERNELS[name]


def qkv(dtype, shape_q=(2, 5, 8), n_k=6, d_v=None, seed=0):
    rng = np.random.default_rng(seed)
    *lead, n_q, d = shape_q
    shapes = (shape_q, (*lead, n_k, d), (*lead, n_k, d if d_v is None else d_v))
    return tuple(rng.standard_normal(shape).astype(dtype) for shape in shapes)


def test_the_cases_are_the_ones_named():
    assert sorted({case.name for case in CASES}) == sorted(CASE_NAMES)
    assert {case.causal for case in CASES} == {False, True}


@pytest.mark.parametrize("name", sorted(TAKES))
def test_each_peer_declares_what_it_computes_at_its_precision(name):
    peer = PEERS[name][0]  # installed or not: the declaration is the registry's
    assert peer.dtypes == TAKES[name]
    assert peer.probed == HALF   # what a library computes a 16-bit type in may change with the CPU
    refused = [dtype for dtype in FLOATS if dtype not in peer.dtypes]
    if refused:
        assert peer.dtype_note  # a refusal says why
    held = [dtype for dtype in TAKES[name] if dtype in HALF]
    where = f" ({', '.join(held)} where within the harness's budget on this CPU)" if held else ""
    for dtype in refused:
        assert peer.refusal(dtype) == f"{name} takes {', '.join(TAKES[name])} only{where}: {peer.dtype_note}"


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("name", sorted(TAKES))
def test_each_peer_is_held_to_the_harness_in_its_16_bit_types_on_this_cpu(name, dtype):
    """The probe's verdict and the refusal agree: refused, saying what was measured, exactly
    when some probe case is over its budget.  (Which way it goes is the CPU's.)"""
    peer = installed(name)
    if dtype not in peer.dtypes:
        pytest.skip(peer.refusal(dtype))
    probe = harness.probe(name, dtype)
    worst = probe.worst.comparison
    print(f"{name} {dtype}: error {worst.error:.2g}, budget {worst.budget:.2g} ({probe.worst.case.label}): "
          f"{probe.over_budget:.2g} of the budget")
    assert (peer.refusal(dtype) is None) == (probe.over_budget <= 1)
    if peer.refusal(dtype):
        assert f"error {worst.error:.2g} against a budget of {worst.budget:.2g}" in peer.refusal(dtype)


def test_onnxruntime_says_why_it_refuses_each_half_type():
    peer = PEERS["onnxruntime_attention"][0]
    assert "bfloat16" in peer.dtype_note and "no kernel" in peer.dtype_note
    installed("onnxruntime_attention")
    # its float16 kernel writes the scores into a float16 buffer on every CPU (its source,
    # core/providers/cpu/llm/attention.cc): the probe measures it far over the budget
    # (0.21 against 2e-3 on the large logits, here)
    assert harness.probe(peer.name, "float16").over_budget > 10
    assert "computes float16 below the harness's budget on this CPU" in peer.refusal("float16")


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=HALF)
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.label)
@pytest.mark.parametrize("name", sorted(TAKES))
def test_a_peer_passes_the_harness_in_each_half_type_it_takes(name, case, dtype):
    peer = installed(name)
    if peer.refusal(dtype):
        pytest.skip(peer.refusal(dtype))  # the refusal is tested below
    outcome = harness.check(name, case, dtype)
    assert outcome.status == "ok", (f"{name} {outcome.dtype} {case.label}: error "
                                    f"{outcome.comparison.error:.3g} > budget {outcome.comparison.budget:.3g}")


@pytest.mark.parametrize("name", sorted(TAKES))
def test_a_refused_half_type_raises_naming_the_reason(name):
    peer = installed(name)
    refused = [dtype for dtype in HALF_TYPES if peer.refusal(dtype)]
    if not refused:
        pytest.skip(f"{name} takes both half types")
    for dtype in refused:
        q, k, v = qkv(dtype)
        message = f"kernel '{name}' does not take this call: {peer.refusal(dtype)}"
        with pytest.raises(ValueError, match=re.escape(message)):
            kernels.attention(q, k, v, kernel=name)
        outcome = harness.check(name, harness.CASES[2], dtype)  # and the harness skips it
        assert outcome.status == "skip" and outcome.note == peer.refusal(dtype)


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=HALF)
@pytest.mark.parametrize("name", sorted(TAKES))
def test_a_half_call_returns_its_type_and_shape_from_read_only_inputs(name, dtype):
    peer = installed(name)
    if peer.refusal(dtype):
        pytest.skip(peer.refusal(dtype))
    q, k, v = qkv(dtype, shape_q=(2, 3, 5, 8), n_k=7, d_v=4)
    for array in (q, k, v):
        array.flags.writeable = False  # as a KVCache hands out its keys and values
    out = kernels.attention(q, k, v, kernel=name, causal=True)
    assert out.shape == (2, 3, 5, 4) and out.dtype == dtype
    # reference: the exact inputs in float64; the budget's floor (8 float32 roundings and
    # the two 16-bit ones) is above what these small O(1) logits cost
    ref = reference_attention(q, k, v, causal=True)
    comparison = harness.compare(out, ref, v, harness.budget_floor(dtype))
    assert comparison.ok, f"error {comparison.error:.3g} > {comparison.budget:.3g}"


@pytest.mark.parametrize("scale", [0.0, 0.3, -2.0], ids=lambda s: f"scale={s}")
@pytest.mark.parametrize("dtype", HALF_TYPES, ids=HALF)
@pytest.mark.parametrize("name", sorted(TAKES))
def test_a_half_call_takes_another_scale(name, dtype, scale):
    peer = installed(name)
    if peer.refusal(dtype):
        pytest.skip(peer.refusal(dtype))
    q, k, v = qkv(dtype, shape_q=(2, 9, 16), n_k=9)
    out = kernels.attention(q, k, v, kernel=name, scale=scale)
    ref = reference_attention(q, k, v, scale=scale)
    # OpenVINO takes the scale in the inputs' type: 0.3 rounded to it moves each score by
    # at most 2^-9 of itself, about 0.1 u here; the others scale in float32
    comparison = harness.compare(out, ref, v, harness.budget_floor(dtype))
    assert comparison.ok, f"error {comparison.error:.3g} > {comparison.budget:.3g}"
