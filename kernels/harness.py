"""The verification harness: one case list, one comparison, one budget rule.

Every registered kernel is run through the same ``CASES`` in every type of
``kernels.dtypes`` (float32, float64, bfloat16, float16) and compared with
``reference_attention`` in float64 of the same inputs (a 16-bit input widens to float64
exactly).  The error of one element is

    |out - ref| / (|ref| + max|v|)

max|v| bounds |out| (each output row is a convex combination of value rows), so
this is a relative error that does not blow up where the output is near zero.
NaN must appear exactly where the reference has NaN; equal infinities count as exact.

Budgets, from the dtype's row of ``kernels.dtypes``:
  float64 (the reference's own type): 1e-10, about 10^6 roundings of float64's 1.1e-16
  (n_k-term sums, exp).
  float32: the largest of three terms, u being its unit roundoff (2^-24):
    - twice the error of a plain NumPy computation of the same case (the reference
      evaluated in float32): no worse than the obvious float32 program;
    - 8 u ≈ 4.8e-7, so that cases the plain path happens to get exactly (n = 1) do not
      demand better than rounding the result;
    - 2 u · max_ij |scale| Σ_c |q_ic| |k_jc|: what rounding every score once costs.  A
      score error δs_ij moves out_i by Σ_j p_ij δs_ij (v_j - out_i), at most 2 max|v|
      max_j |δs_ij|, and a float32 dot product cannot promise |δs_ij| below u times its
      magnitude sum.  With large logits a different (tiled) summation order is as
      accurate as plain float32 on average but, by the luck of the roundings, can land
      3-4x above it on one seed; this first-order bound holds on every seed (measured:
      the kernels reach at most 0.82 u · max Σ|q||k| over 320 seeded cases, logits x1-x30).
  bfloat16, float16 (computed in float32, their row's ``compute``): the float32 budget of
  the same inputs (widened exactly), plus 2 u of the 16-bit type (bfloat16 2^-8, float16
  2^-11: 7.8e-3 and 9.8e-4 in all) for the two roundings a kernel may make in it: the
  output (at most u/2 of max|v|, the error's denominator) and the probabilities P before
  P·V, as PyTorch's bfloat16 kernel does (each weight within u of its value, so out_i
  within u · max|v| of Σ_j p_ij v_j / l_i).  A kernel that rounds its scores to the
  16-bit type fails the large-logit cases, and one that drops a key of 50 fails too
  (both held in tests/test_harness.py).
Used by the tests and by ``python -m kernels verify``.

The probe (``probe``): a peer's 16-bit types (``Kernel.probed``) are held to this harness
on the CPU it runs on, since what its library computes them in depends on the CPU.  At
the first question of whether it takes such a type (``Kernel.refusal``), in a process,
the peer runs ``PROBE_CASES`` in that type and each is compared with the reference within
its budget; the verdict is kept for the process, and a peer that fails is refused that
type with what was measured.  Cost, on this project's 2-core AMD EPYC (Zen 3): the two
cases' float64 references and budgets, once per type for every peer (0.5-1 s), and the
peer's two calls (up to 2 × 700² scores), mostly its first compile of those shapes:
PyTorch 0.15 s, ONNX Runtime 0.35 s, ggml 0.35 s, OpenVINO 0.3-0.45 s, JAX 2.1 s in
bfloat16 and 3.9 s in float16 (run eagerly, op by op).  Nothing is probed at ``import
kernels``, nor for our rungs, nor for a type a peer declares once for every CPU.
"""
import functools
import threading
import zlib
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from .api import attention_unheld
from .band import Band
from .dtypes import FLOATS, float_type, type_name
from .machine_id import machine_name
from .reference import expand_kv, reference_attention
from .registry import KERNELS

DTYPES = tuple(row.dtype.type for row in FLOATS.values())
REFERENCE_BUDGET = 1e-10   # a kernel computing in the reference's own precision (float64)
FLOOR_ROUNDINGS = 8        # the budget's floor, in unit roundoffs of the type computed in
HALF_ROUNDINGS = 2         # what a kernel may round in a 16-bit type: P and the output


@dataclass(frozen=True)
class Case:
    """One verification input: q (*batch, n_q, d), k (*batch, n_k, d), v (*batch, n_k, d_v).

    layout: "C" contiguous, "F" Fortran-ordered arrays, "strided" every-other-row views.
    logit_scale multiplies q and k (large logits overflow a softmax without max subtraction).
    poison puts NaN or Inf into one row of an input: "nan_q", "nan_k", "nan_v", "inf_q".
    kv_heads: k and v have this many heads (the last axis of batch_shape is q's): grouped-
    query attention.
    window, sinks: the band each query sees (``kernels.band``), beside ``causal``.
    """

    name: str
    batch_shape: tuple
    n_q: int
    n_k: int
    d: int
    d_v: int
    causal: bool = False
    layout: str = "C"
    logit_scale: float = 1.0
    poison: Optional[str] = None
    kv_heads: Optional[int] = None
    window: Optional[tuple] = None
    sinks: int = 0

    @property
    def label(self):
        return f"{self.name}{' causal' if self.causal else ''}"

    @property
    def band(self):
        return Band.of(self.causal, self.window, self.sinks)

    @property
    def batch(self):
        return int(np.prod(self.batch_shape, dtype=np.int64))

    def inputs(self, dtype):
        """Seeded (q, k, v) of this case in ``dtype`` and in the case's layout."""
        rng = np.random.default_rng(zlib.crc32(self.name.encode()))
        kv_batch = self.batch_shape if self.kv_heads is None else self.batch_shape[:-1] + (self.kv_heads,)
        shapes = [self.batch_shape + (self.n_q, self.d), kv_batch + (self.n_k, self.d), kv_batch + (self.n_k, self.d_v)]
        q, k, v = (rng.standard_normal(s).astype(dtype) for s in shapes)
        q *= dtype(self.logit_scale)
        k *= dtype(self.logit_scale)
        if self.poison:
            value, target = self.poison.split("_")
            array = {"q": q, "k": k, "v": v}[target]
            array[..., min(3, array.shape[-2] - 1), 1 % array.shape[-1]] = np.nan if value == "nan" else np.inf
        return tuple(_in_layout(a, self.layout) for a in (q, k, v))


def _in_layout(array, layout):
    if layout == "F":
        return np.asfortranarray(array)
    if layout == "strided":
        # every other row of a twice-as-tall array: a non-contiguous view
        tall = np.repeat(array, 2, axis=-2)
        return tall[..., ::2, :]
    return array


def _cases():
    shapes = [
        Case("n=1", (1,), 1, 1, 8, 8),
        Case("n=2 d=1", (1,), 2, 2, 1, 1),
        Case("odd d=33", (1,), 37, 37, 33, 33),
        Case("d_v=40 != d=16", (1,), 50, 50, 16, 40),
        Case("n_q=7 < n_k=90", (2,), 7, 90, 64, 64),
        Case("n_q=90 > n_k=7", (2,), 90, 7, 32, 32),
        Case("heads (2,3) n=41", (2, 3), 41, 41, 64, 64),
        Case("n=193 prime", (1,), 193, 193, 64, 64),
        Case("fortran order", (2,), 60, 60, 16, 16, layout="F"),
        Case("strided views", (2,), 60, 60, 16, 24, layout="strided"),
        Case("large logits x30", (1,), 64, 64, 64, 64, logit_scale=30.0),
        Case("NaN in q", (2,), 20, 20, 8, 8, poison="nan_q"),
        Case("NaN in k", (2,), 20, 20, 8, 8, poison="nan_k"),
        Case("NaN in v", (2,), 20, 20, 8, 8, poison="nan_v"),
        Case("Inf in q", (2,), 20, 20, 8, 8, poison="inf_q"),
        # above the naive cap: tile remainders at scale, many heads, long rows
        Case("n=1031 prime d=65", (1,), 1031, 1031, 65, 65),
        Case("heads (2,4) n=517", (2, 4), 517, 517, 64, 48),
        Case("n_q=300 n_k=1100 d=127", (3,), 300, 1100, 127, 64),
        Case("large logits x30 n=700", (2,), 700, 700, 64, 64, logit_scale=30.0),
        # grouped-query attention: K/V heads each serving a group of query heads
        Case("grouped 8 on 2 heads", (2, 8), 33, 33, 16, 16, kv_heads=2),
        Case("grouped decode 8 on 2 n_k=300", (8,), 1, 300, 64, 64, kv_heads=2),
        Case("grouped 4 on 1 n_q=3 d_v=48", (4,), 3, 517, 64, 48, kv_heads=1),
        Case("grouped 6 on 3 n=600", (6,), 600, 600, 64, 64, kv_heads=3),
    ]
    # Bands (kernels.band): a window of 0 and 1 key, one wider than n, windows whose edges
    # cross the tiles (numba_tiled: 96 queries × 64 keys; c_tiled: csrc/tiles.h), one side
    # unbounded, sinks inside and beyond the window and across a key tile, a NaN value that
    # only the queries whose window holds it may see, decoding (too few queries to split).
    bands = [
        Case("window (0,0) n=70", (2,), 70, 70, 16, 16, window=(0, 0)),
        Case("window (1,0) n=70", (2,), 70, 70, 16, 16, window=(1, 0)),
        Case("window (500,500) > n=200", (1,), 200, 200, 32, 32, window=(500, 500)),
        Case("window (8,8) n=300", (2,), 300, 300, 32, 24, window=(8, 8)),
        Case("window (64,0) n=333 d=64", (2,), 333, 333, 64, 64, window=(64, 0)),
        Case("window (None,3) n_q=50 n_k=80", (2,), 50, 80, 16, 16, window=(None, 3)),
        Case("window (5,None) n_q=80 n_k=50", (2,), 80, 50, 16, 16, window=(5, None)),
        Case("window (2,1) n_q=120 n_k=40", (1,), 120, 40, 16, 16, window=(2, 1)),
        Case("window (37,0) + 4 sinks n=400", (2,), 400, 400, 64, 64, window=(37, 0), sinks=4),
        Case("window (3,0) + 70 sinks n=300", (1,), 300, 300, 32, 32, window=(3, 0), sinks=70),
        Case("window (16,2) + 1 sink grouped 4 on 2", (4,), 200, 200, 32, 32, kv_heads=2, window=(16, 2), sinks=1),
        Case("window (2,0) + 2 sinks NaN in v", (2,), 40, 40, 8, 8, poison="nan_v", window=(2, 0), sinks=2),
        Case("window (20,0) decode n_k=300", (4,), 1, 300, 64, 64, window=(20, 0), sinks=4),
        Case("window (20,0) n_q=3 n_k=300", (4,), 3, 300, 64, 64, window=(20, 0)),
        Case("window (100,0) + 4 sinks n=1100", (2,), 1100, 1100, 64, 64, window=(100, 0), sinks=4),
    ]
    return [replace(case, causal=causal) for case in shapes for causal in (False, True)] + bands


CASES = _cases()


@dataclass(frozen=True)
class Comparison:
    """How far ``out`` is from ``ref``: the harness's one verdict."""

    max_abs: float
    max_rel: float
    error: float  # max of |out - ref| / (|ref| + max|v|), inf on a NaN mismatch
    budget: float
    first_bad: Optional[tuple]

    @property
    def ok(self):
        return self.first_bad is None


def compare(out, ref, v, budget):
    """Compare a kernel's ``out`` with the reference ``ref`` (inputs' value ``v``)."""
    out = np.asarray(out, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf where both hold the same infinity
        return _compare(out, ref, v, budget)


def _compare(out, ref, v, budget):
    same = (out == ref) | (np.isnan(out) & np.isnan(ref))
    nan_mismatch = np.isnan(out) != np.isnan(ref)
    diff = np.where(same, 0.0, np.abs(out - ref))
    diff = np.where(nan_mismatch | np.isnan(diff), np.inf, diff)
    finite_v = np.abs(np.asarray(v, dtype=np.float64))
    v_scale = np.max(finite_v, where=np.isfinite(finite_v), initial=0.0)
    error = diff / (np.abs(np.where(np.isfinite(ref), ref, 0.0)) + v_scale + np.finfo(np.float64).tiny)
    bad = np.flatnonzero(error > budget)
    rel = np.where(same, 0.0, diff / np.where(ref != 0, np.abs(ref), np.inf))
    return Comparison(
        max_abs=float(diff.max(initial=0.0)),
        max_rel=float(rel.max(initial=0.0)),
        error=float(error.max(initial=0.0)),
        budget=budget,
        first_bad=tuple(int(i) for i in np.unravel_index(bad[0], out.shape)) if bad.size else None,
    )


def error_budget(case, dtype, inputs, ref):
    """The tolerance of ``case`` at ``dtype``; see the module docstring for why.  Each
    term comes from the dtype table: the unit roundoff of the type computed in (float32
    for the 16-bit types), plus, for a 16-bit type, its own roundings."""
    row = float_type(dtype)
    if row.is_reference:
        return REFERENCE_BUDGET
    q, k, v = inputs
    computed = float_type(row.compute)
    plain = reference_attention(q, k, v, causal=case.causal, compute_dtype=computed.dtype.type,
                                window=case.window, sinks=case.sinks)
    plain_error = compare(plain, ref, v, np.inf).error
    # magnitude sums of the finite parts (a NaN or Inf input is judged by where NaN lands),
    # times the default scale 1/√d that check() runs every case with
    q_abs, k_abs = (np.abs(np.nan_to_num(a.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0))
                    for a in (q, k))
    magnitude = (q_abs @ np.swapaxes(expand_kv(q_abs, k_abs), -1, -2)).max(initial=0.0) / np.sqrt(q.shape[-1])
    return half_roundings(dtype) + max(2 * plain_error, FLOOR_ROUNDINGS * computed.unit_roundoff,
                                       2 * computed.unit_roundoff * magnitude)


def half_roundings(dtype):
    """What a kernel may lose rounding in a 16-bit ``dtype`` (P and the output: 2 u); 0 for
    a type that is its own compute type."""
    row = float_type(dtype)
    return HALF_ROUNDINGS * row.unit_roundoff if row.is_half else 0.0


def budget_floor(dtype):
    """The least budget of a type other than the reference's: FLOOR_ROUNDINGS roundings of
    the type it is computed in, plus its own 16-bit roundings."""
    row = float_type(dtype)
    return FLOOR_ROUNDINGS * float_type(row.compute).unit_roundoff + half_roundings(dtype)


@dataclass(frozen=True)
class Outcome:
    kernel: str
    case: Case
    dtype: str
    comparison: Optional[Comparison]  # None when skipped
    note: str = ""

    @property
    def status(self):
        if self.comparison is None:
            return "skip"
        return "ok" if self.comparison.ok else "FAIL"


def check(kernel_name, case, dtype, held=True):
    """Run one kernel on one case at one dtype and compare with the reference.  ``held``:
    a peer's probed type is skipped where it fell below the budget on this CPU (False:
    run anyway, as the probe does)."""
    kernel = KERNELS[kernel_name]
    if not kernel.fits(case.batch, case.n_q, case.n_k):
        return Outcome(kernel_name, case, np.dtype(dtype).name, None, f"above cap {kernel.cap}")
    refusal = kernel.refusal(dtype, held) or kernel.band_refusal(case.band)
    if refusal:
        return Outcome(kernel_name, case, np.dtype(dtype).name, None, refusal)
    if kernel.external and case.poison:
        # e.g. PyTorch lets a NaN value behind the causal mask through as 0 · NaN
        return Outcome(kernel_name, case, np.dtype(dtype).name, None, "external peer: NaN/Inf semantics are its own")
    inputs = case.inputs(dtype)  # fresh arrays each time: a kernel never sees another's
    ref, budget = _expected(case, np.dtype(dtype).type)
    # the refusal was asked above, held or not
    out = attention_unheld(*inputs, kernel=kernel_name, causal=case.causal, window=case.window, sinks=case.sinks)
    return Outcome(kernel_name, case, np.dtype(dtype).name, compare(out, ref, inputs[2], budget))


@functools.lru_cache(maxsize=None)
def _expected(case, dtype):
    """The reference output and error budget of one case, computed once for all kernels."""
    inputs = case.inputs(dtype)
    ref = reference_attention(*inputs, causal=case.causal, window=case.window, sinks=case.sinks)
    return ref, error_budget(case, dtype, inputs, ref)


# The probe's cases: of the harness's own, the two where a kernel that computes part of the
# work in a 16-bit type fails furthest over the budget, non-causal (causal fails them
# alike).  Scores rounded to the type: "large logits x30 n=700" (scores up to ~3,000,
# whose rounding reorders near ties of the softmax: 46x the budget in bfloat16, 104x in
# float16; no other case reaches 1x).  l and P·V summed in the type, key by key: the long
# rows of "n=1031 prime d=65" (3.3x and 1.3x).  tests/test_harness.py holds both.
PROBE_CASES = tuple(case for case in CASES
                    if not case.causal and case.name in ("large logits x30 n=700", "n=1031 prime d=65"))


@dataclass(frozen=True)
class Probe:
    """The harness's verdict on one kernel in one type on one CPU (``machine_id``'s name
    of it): its ``Outcome`` on each of ``PROBE_CASES``."""

    kernel: str
    dtype: str
    outcomes: tuple
    cpu: str

    @property
    def worst(self):
        """The outcome furthest over its budget (or nearest to it)."""
        return max(self.outcomes, key=lambda outcome: outcome.comparison.error / outcome.comparison.budget)

    @property
    def over_budget(self):
        """The worst case's error ÷ its budget: above 1, the kernel fails the harness here."""
        comparison = self.worst.comparison
        return comparison.error / comparison.budget

    @property
    def refusal(self):
        """Why the kernel is refused this type here, with what was measured; None when it
        passes every case."""
        if all(outcome.comparison.ok for outcome in self.outcomes):
            return None
        comparison = self.worst.comparison
        return (f"{self.kernel} computes {self.dtype} below the harness's budget on this CPU "
                f"({self.cpu}): error {comparison.error:.2g} against a budget of {comparison.budget:.2g} "
                f"on the case '{self.worst.case.label}' (measured at its first {self.dtype} call in this process)")


_PROBES = {}                   # (kernel name, dtype name) -> Probe, for this process
_PROBING = threading.Lock()    # one probe at a time: a verdict is measured once


def probe(kernel_name, dtype):
    """The ``Probe`` of kernel ``kernel_name`` in ``dtype`` (one of its ``probed`` types that
    it takes; ValueError otherwise) on this CPU: measured at the first call in a process
    (the kernel run on ``PROBE_CASES``, not held to the budget while it is measured), kept
    afterwards."""
    key = (kernel_name, type_name(dtype))
    record = KERNELS[kernel_name]
    held_types = [taken for taken in record.dtypes if taken in record.probed]
    if key[1] not in held_types:
        raise ValueError(f"{kernel_name} is not held to the harness in {key[1]} "
                         f"(only in the types it takes of its probed ones: {', '.join(held_types) or 'none'})")
    with _PROBING:
        if key not in _PROBES:
            dtype = FLOATS[key[1]].dtype.type
            outcomes = tuple(check(kernel_name, case, dtype, held=False) for case in PROBE_CASES)
            _PROBES[key] = Probe(*key, outcomes, machine_name())
        return _PROBES[key]


def verify(kernel_names=None, cases=CASES, dtypes=DTYPES):
    """Yield one ``Outcome`` per kernel × case × dtype."""
    for name in kernel_names or KERNELS:
        for case in cases:
            for dtype in dtypes:
                yield check(name, case, dtype)
