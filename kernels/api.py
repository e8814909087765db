"""``attention()``: the one validation path in front of every kernel.

Kernels assume clean input; everything a user can get wrong is caught here, before
any large allocation, with a message that names the shapes or values involved.
"""
import importlib.machinery
import math
import numbers
import pathlib
import sys
from dataclasses import dataclass

import numpy as np

from . import dtypes
from .band import CAUSAL, FULL, Band
from .memory import available_bytes, format_bytes
from .registry import KERNELS, get_kernel

SMALL_ALLOCATION = 64 * 2**20  # bytes; below this a failed allocation is NumPy's own MemoryError


@dataclass(frozen=True)
class Problem:
    """The validated shape of one call: q (*batch_shape, n_q, d), k (*kv_shape, n_k, d),
    v (*kv_shape, n_k, d_v), where kv_shape is batch_shape with its last (head) axis
    divided by ``group`` (grouped-query attention; group 1: plain multi-head)."""

    batch_shape: tuple
    n_q: int
    n_k: int
    d: int
    d_v: int
    dtype: np.dtype
    causal: bool
    scale: float
    group: int = 1
    band: Band = FULL  # the keys each query sees (causal folded in: band.causal == causal)

    @property
    def batch(self):
        """Query heads: the leading dimensions of q flattened."""
        return math.prod(self.batch_shape)

    @property
    def kv_batch(self):
        """K/V heads: the leading dimensions of k and v flattened."""
        return self.batch // self.group

    @property
    def out_shape(self):
        return self.batch_shape + (self.n_q, self.d_v)

    @property
    def input_bytes(self):
        """Bytes of q, k and v together."""
        return (self.batch * self.n_q * self.d + self.kv_batch * self.n_k * (self.d + self.d_v)) * self.dtype.itemsize

    def output_bytes(self, kernel=None):
        """Bytes of the output, and of the float32 buffer a kernel writes a 16-bit type's
        output to first when it does not round each row itself as it stores it
        (``Kernel.writes_half``; with no kernel named, the buffer is counted)."""
        compute = dtypes.float_type(self.dtype).compute
        wider = compute.itemsize if compute != self.dtype and not (kernel and kernel.writes_half) else 0
        return self.batch * self.n_q * self.d_v * (self.dtype.itemsize + wider)

    @property
    def widened_input_bytes(self):
        """Bytes of q, k and v as whole copies in the compute type, for a kernel that widens
        16-bit inputs so (0 when the inputs are of the compute type already)."""
        compute = dtypes.float_type(self.dtype).compute
        if compute == self.dtype:
            return 0
        return self.input_bytes // self.dtype.itemsize * compute.itemsize


class ExtensionNotBuilt(ImportError):
    """The C extension ``kernels._attention_c`` is missing or was built for another
    interpreter; the message says how to rebuild it."""

    def __init__(self, cause):
        module = "kernels._attention_c"
        builds = sorted(path.name for path in pathlib.Path(__file__).parent.glob("_attention_c.*"))
        loadable = {"_attention_c" + suffix for suffix in importlib.machinery.EXTENSION_SUFFIXES}
        foreign = builds and not loadable.intersection(builds)
        found = f"; found only {', '.join(builds)}, built for another Python" if foreign else ""
        super().__init__(
            f"the C extension {module} cannot be imported ({cause}{found}): rebuild it with "
            f"`make install`, or `python csrc/build_attention.py` run by this Python ({sys.executable})",
            name=module,
        )


# What a user can get wrong (a value, a path, a size, the build): a command says it in one
# line and exits with status 1.  Anything else is a bug and keeps its traceback.
USER_ERRORS = (ValueError, OSError, MemoryError, ExtensionNotBuilt)


def planned(batch_shape, n_q, n_k, d, d_v, dtype, causal=False, group=1, *, window=None, sinks=0):
    """The ``Problem`` of a call whose inputs are yet to be made, so that ``check_resources``
    can refuse it before they are (sizes already known to be >= 1; default scale)."""
    band = Band.of(causal, window, sinks)
    return Problem(tuple(batch_shape), n_q, n_k, d, d_v, np.dtype(dtype), band.causal, 1.0 / math.sqrt(d), group,
                   band)


def validate(q, k, v, causal=False, scale=None, *, window=None, sinks=0):
    """Check shapes, dtypes, scale and band (``kernels.band``: causal, window, sinks) of one
    call; return its ``Problem``.

    q (..., H, n_q, d), k (..., H_kv, n_k, d), v (..., H_kv, n_k, d_v): identical leading
    dims, except that k and v may have fewer heads (axis -3) than q when H_kv divides H
    (grouped-query attention: query head h reads K/V head h // (H / H_kv)).
    Raises ValueError (shapes, sizes, scale, a negative window side or sinks) or TypeError
    (dtypes, a causal, window or sinks of the wrong type).
    """
    arrays = {"q": q, "k": k, "v": v}
    for name, array in arrays.items():
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name} must be a NumPy array, got {type(array).__name__}")
    for name, array in arrays.items():
        dtypes.require(array.dtype, name, "attention")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    for name, array in arrays.items():
        if array.ndim < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., n, d), got shape {array.shape}")
    shapes = f"q {q.shape}, k {k.shape}, v {v.shape}"
    if not q.ndim == k.ndim == v.ndim:
        raise ValueError(f"q, k, v must have the same number of dimensions, got {shapes}")
    if k.shape[:-2] != v.shape[:-2]:
        raise ValueError(f"k and v must share their leading (batch, head) dimensions, got {shapes}")
    group = _group(q.shape[:-2], k.shape[:-2], shapes)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the head dimension d (last axis), got {shapes}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of keys n_k (axis -2), got {shapes}")
    n_q, d = q.shape[-2:]
    n_k, d_v = v.shape[-2:]
    for label, size in (("n_q", n_q), ("n_k", n_k), ("d", d), ("d_v", d_v)):
        if size == 0:
            raise ValueError(f"{label} must be at least 1, got 0 ({shapes})")
    band = Band.of(causal, window, sinks)
    return Problem(q.shape[:-2], n_q, n_k, d, d_v, q.dtype, band.causal, checked_scale(scale, d), group, band)


def checked_scale(scale, d):
    """The scale of a call with head dimension d: 1/sqrt(d) for None, else ``scale`` as a
    float; TypeError unless it is a real number, ValueError unless finite."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    if not isinstance(scale, numbers.Real) or isinstance(scale, (bool, np.bool_)):
        raise TypeError(f"scale must be a real number or None, got {scale!r}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale!r}")
    return float(scale)


def _group(q_lead, kv_lead, shapes):
    """Query heads per K/V head: 1 when the leading dimensions match, H / H_kv when only
    the head axes differ and H_kv divides H; ValueError otherwise."""
    if q_lead == kv_lead:
        return 1
    if q_lead[:-1] != kv_lead[:-1] or not q_lead:
        raise ValueError(f"q, k, v must share their leading (batch, head) dimensions, except that k and v "
                         f"may have fewer heads (axis -3) than q, got {shapes}")
    heads, kv_heads = q_lead[-1], kv_lead[-1]
    if kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"grouped-query attention needs the K/V heads (axis -3 of k and v: {kv_heads}) to "
                         f"divide the query heads ({heads}), got {shapes}")
    return heads // kv_heads


def check_resources(kernel, problem, extra_bytes=0, *, headroom_bytes=0, held=True):
    """Raise before allocating if ``kernel`` cannot run ``problem`` here.

    ValueError for a dtype the kernel (a peer) declares it does not take, or computes below
    the harness's budget on this CPU (``Kernel.refusal``; not asked when ``held`` is
    False), for a band (a window, sinks) it does not take (``Kernel.band_refusal``), or
    above its size cap; MemoryError when the output, the kernel's
    n×n workspace and ``extra_bytes`` (what the caller allocates besides: contiguous
    copies of the inputs, or the inputs themselves when they are yet to be made) would
    not fit in available memory, less ``headroom_bytes`` kept free for other work.
    Returns those bytes (without the headroom).
    """
    refusal = kernel.refusal(problem.dtype, held) or kernel.band_refusal(problem.band)
    if refusal:
        raise ValueError(f"kernel {kernel.name!r} does not take this call: {refusal}")
    if not kernel.fits(problem.batch, problem.n_q, problem.n_k):
        scores = problem.batch * problem.n_q * problem.n_k
        raise ValueError(
            f"kernel {kernel.name!r} is capped at {kernel.cap} (pure-Python loops); this call "
            f"has {problem.batch}·{problem.n_q}·{problem.n_k} = {scores:,} scores; "
            f"use 'numpy', 'numba_tiled' or 'c_tiled'"
        )
    workspace = kernel.workspace_bytes(
        problem.batch, problem.n_q, problem.n_k, problem.d, problem.d_v,
        dtypes.float_type(problem.dtype).compute.itemsize, not problem.band.full,
    ) + (problem.widened_input_bytes if kernel.widens_inputs else 0)

    def shortfall(needed, available):
        tiled = ", ".join(
            name for name, k in KERNELS.items() if not k.materialises and k.max_scores is None and not k.external
        )
        advice = (
            f"its working buffers (the {problem.n_q}×{problem.n_k} scores or mask it holds, and "
            f"copies) alone take {format_bytes(workspace)}; the tiled kernels ({tiled}) hold none"
            if workspace
            else "reduce the batch or sequence length"
        )
        return (
            f"kernel {kernel.name!r} needs {format_bytes(needed)} ({needed:,} bytes) for "
            f"batch {problem.batch_shape}, n_q={problem.n_q}, n_k={problem.n_k}, d={problem.d}, "
            f"d_v={problem.d_v}, {problem.dtype}, but only {format_bytes(available)} is available: {advice}"
        )

    needed = problem.output_bytes(kernel) + extra_bytes + workspace
    require_memory(needed, shortfall, headroom_bytes=headroom_bytes)
    return needed


def require_memory(needed, shortfall, *, headroom_bytes=0):
    """MemoryError, raised before anything is allocated, when ``needed`` bytes (plus
    ``headroom_bytes`` kept free for other work) exceed the memory available now; its
    message is ``shortfall(needed + headroom_bytes, available)``, plus the headroom."""
    total = needed + headroom_bytes
    if total < SMALL_ALLOCATION:
        return  # not worth reading /proc/meminfo (~50 µs) on every small call
    available = available_bytes()
    if total > available:
        kept = f" ({format_bytes(headroom_bytes)} of it headroom kept free for other work)" if headroom_bytes else ""
        raise MemoryError(shortfall(total, available) + kept)


def _entry_point(rounded, held):
    """A public call (``attention`` and its two variants below): the call, its output in the
    inputs' type (``rounded``) or in the type it is computed in.  A kernel that writes a
    16-bit type's rows itself (``Kernel.writes_half``) is given an output of that type; for
    the others the float32 result is rounded here, in one pass.  ``held``: whether a peer's
    probed type must have met the harness's budget here.

    What the checks decide depends only on the call's signature (the arrays' dtypes,
    shapes and strides, the kernel, band, scale and flags), so a small call's ``Plan`` is
    kept by its signature and a repeated call pays a dictionary lookup, not the checks
    (tens of microseconds of Python, a third of a small model's decode step).  A large call
    (its bytes at least ``SMALL_ALLOCATION``) is checked every time: the memory it needs
    must still be available.

    Every Python frame and lookup between the user and the C call is a call's fixed cost (a
    tenth of a microsecond or more each once a call has run through the caches), so a kept
    plan is found and called in the entry point's own frame, its fields in slots, and the
    commonest bands are taken as ``Band.of`` takes them first, without calling it: c_tiled's
    tiny call (one head, n = 64, float32, 2 threads, the 2-core Xeon), timed side by side
    with the lookup in a frame of its own after a call of ``Band.of``, 1.02-1.04x."""

    def call(q, k, v, *, kernel="c_tiled", causal=False, scale=None, window=None, sinks=0):
        if window is None and sinks.__class__ is int and sinks == 0 and causal.__class__ is bool:
            band = CAUSAL if causal else FULL
        else:
            band = Band.of(causal, window, sinks)
        # The signature, a dictionary key; None for a call whose checks are made every time:
        # inputs not plain NumPy arrays, a kernel not named by a str, or a scale other than
        # None or a float.
        signature = None
        if (type(q) is type(k) is type(v) is np.ndarray and type(kernel) is str
                and (scale is None or type(scale) is float)):
            signature = (kernel, band, scale, rounded, held, q.dtype, q.shape, q.strides, k.dtype, k.shape,
                         k.strides, v.dtype, v.shape, v.strides)
            plan = _PLANS.get(signature)
            if plan is not None and plan.kernel is KERNELS.get(kernel):   # (else registered anew, or gone)
                step = plan.step
                if step is not None and plan.rung.run is plan.stepped_run:
                    return step(q, k, v)
                return plan(q, k, v)
        return _planned_call(q, k, v, kernel, band, scale, rounded, held, signature)

    return call


attention = _entry_point(rounded=True, held=True)
attention.__name__ = attention.__qualname__ = "attention"
attention.__doc__ = """softmax(scale · q kᵀ) v over the last two axes, by the kernel named ``kernel``.

    q (..., H, n_q, d), k (..., H_kv, n_k, d), v (..., H_kv, n_k, d_v) -> (..., H, n_q, d_v),
    same dtype; H_kv = H, or a divisor of it (grouped-query attention: each K/V head serves
    H / H_kv query heads, read once for them, never copied per query head); dtype
    float32, float64, bfloat16 or float16.  The 16-bit types are computed in float32 (the
    scores, softmax and sums) and the result rounded once to the inputs' type.
    ``causal``: query i sees keys j <= i + (n_k - n_q); a query that sees none gives 0.
    ``window=(left, right)``: query i, at position p = i + (n_k - n_q), sees keys
    p - left <= j <= p + right (FlashAttention's convention; None: that side unbounded;
    causal is right = 0); ``sinks=s``: the first s keys stay visible too, never a future
    key (``kernels.band``).  The tiled kernels skip the keys outside the band: a window
    costs O(n_q · (left + right + sinks)), not O(n_q · n_k).
    ``scale`` defaults to 1/sqrt(d).  Inputs are never modified.
    """

attention_unrounded = _entry_point(rounded=False, held=True)
attention_unrounded.__name__ = attention_unrounded.__qualname__ = "attention_unrounded"
attention_unrounded.__doc__ = """``attention``, its result left in the type it was computed in: the inputs' own, or
    float32 for 16-bit inputs (what a 16-bit KV cache's attention returns)."""

attention_unheld = _entry_point(rounded=True, held=False)
attention_unheld.__name__ = attention_unheld.__qualname__ = "attention_unheld"
attention_unheld.__doc__ = """``attention``, but a peer is not held to the harness on this CPU (``Kernel.probed``):
    a call in a type it computes below the harness's budget here is made rather than
    refused.  Every other check is ``attention``'s.  For the harness's probe itself, and for
    the benchmarks, which time such a peer anyway so that what its rounding buys is seen
    (the report marks those rows); not for results anyone should use."""


def _planned_call(q, k, v, kernel, band, scale, rounded, held, signature):
    """A call whose signature has no plan kept (or ``signature`` None: checked every time):
    its checks, the plan kept when the call is small, and the call."""
    plan = _plan(q, k, v, get_kernel(kernel), band, scale, rounded, held)
    if signature and plan.needed_bytes < SMALL_ALLOCATION:
        if len(_PLANS) >= MAX_PLANS:  # a loop over ever new shapes: keep the newest only
            _PLANS.pop(next(iter(_PLANS), None), None)
        _PLANS[signature] = plan
    return plan(q, k, v)


MAX_PLANS = 256   # call signatures whose plans are kept (the oldest goes first)
_PLANS = {}


@dataclass(frozen=True, slots=True)
class Plan:
    """What the checks decided for one call signature: the flattened shapes (B, n, ·) of
    q, k and v, which of them the kernel needs copied, the output's buffer type, the
    bytes the call needs (output, copies, workspace), and for a rung with ``call_step``
    (c_tiled) on arrays it reads as they are, its step: the whole call, its output made and
    every argument but the arrays' addresses worked out once, which the entry points call
    for the signature's later calls."""

    problem: Problem
    kernel: object          # the registry's Kernel
    rung: object            # its module, whose run is looked up at each call (tests replace it)
    options: dict           # run's keywords: band= (Kernel.windows), n_k= (whole K/V buffers)
    shapes: tuple           # (q, k, v) as (heads, n, width)
    copied: tuple           # (q, k, v): copied to C order first
    written: np.dtype       # the output buffer's type: the compute type, or a 16-bit input's own
    out_dtype: np.dtype     # the result's type
    needed_bytes: int
    out_buffer: tuple       # the output as the rung writes it, (heads, n_q, d_v)
    out_shape: tuple        # and as it is returned (problem.out_shape)
    step: object = None     # the rung's call_step for this signature, or None ...
    stepped_run: object = None   # ... while its run is this one (a test's replacement takes over)

    def __call__(self, q, k, v):
        """The call through the rung's ``run`` (a kept plan's step is the entry points' own)."""
        problem = self.problem
        if problem.batch == 0:
            return np.zeros(self.out_shape, self.out_dtype)
        if any(self.copied):
            q, k, v = (np.ascontiguousarray(a.reshape(shape)) if copy else a.reshape(shape)
                       for a, shape, copy in zip((q, k, v), self.shapes, self.copied))
        elif q.ndim != 3 or k.ndim != 3:   # (heads, n, width) already: no reshape (a call's fixed cost)
            q, k, v = q.reshape(self.shapes[0]), k.reshape(self.shapes[1]), v.reshape(self.shapes[2])
        out = np.empty(self.out_buffer, self.written)
        self.rung.run(q, k, v, out, problem.causal, problem.scale, **self.options)
        if out.dtype != self.out_dtype:
            out = out.astype(self.out_dtype)
        return out if len(self.out_shape) == 3 else out.reshape(self.out_shape)


def _plan(q, k, v, record, band, scale, rounded, held):
    """Every check of a call (``validate``, ``check_resources``), and the rung imported
    (``ExtensionNotBuilt``, say), before anything is allocated; -> its ``Plan``."""
    problem = validate(q, k, v, band.causal, scale, window=(band.left, band.right), sinks=band.sinks)
    compute = dtypes.float_type(problem.dtype).compute
    out_dtype = problem.dtype if rounded else compute
    shapes = ((problem.batch,) + q.shape[-2:], (problem.kv_batch,) + k.shape[-2:], (problem.kv_batch,) + v.shape[-2:])
    out_buffer = (problem.batch, problem.n_q, problem.d_v)
    if problem.batch == 0:
        return Plan(problem, record, None, {}, shapes, (False,) * 3, compute, out_dtype, 0, out_buffer,
                    problem.out_shape)
    copied = [_needs_copy(a, shape, record.contiguous) for a, shape in zip((q, k, v), shapes)]
    if record.strided_kv:  # k and v read in place with any (common) head stride
        copied[1:] = 2 * [_kv_needs_copy((k, shapes[1]), (v, shapes[2]))]
    extra = sum(a.nbytes for a, copy in zip((q, k, v), copied) if copy)
    needed = check_resources(record, problem, extra, held=held)
    rung = record.implementation  # imported (ExtensionNotBuilt, say) before anything is allocated
    written = problem.dtype if rounded and record.writes_half else compute
    options = {"band": problem.band} if record.windows else {}   # else full or causal: band_refusal
    if record.strided_kv and (copied[1] or _head_rows(k.reshape(shapes[1])) == problem.n_k):
        # K and V reach run C-contiguous: whole buffers of n_k rows a head, read in place
        # without working out their layout again at every call
        options["n_k"] = problem.n_k
    step = None
    if hasattr(rung, "call_step") and "n_k" in options and not any(copied) and written == out_dtype:
        # all of them C-contiguous as given: the rung's step for the signature (c_tiled's)
        step = rung.call_step(q, k, v, problem.band, problem.scale, problem.out_shape)
    return Plan(problem, record, rung, options, shapes, tuple(copied), written, out_dtype, needed,
                out_buffer, problem.out_shape, step, rung.run if step is not None else None)


def kv_layout(k, v):
    """(k, v, kv_rows) for a kernel that reads each K/V head's rows in place: k (B_kv, n_k, d)
    and v (B_kv, n_k, d_v) with C-contiguous rows and heads kv_rows rows apart, the same
    for both (a KV cache's buffers (B_kv, capacity, ·) viewed as [:, :n_k], say); either
    copied to C order when they are not so.  O(1), or O(n_k · (d + d_v)) for the copies."""
    rows = _head_rows(k), _head_rows(v)
    if rows[0] is None or rows[0] != rows[1]:
        k, v = np.ascontiguousarray(k), np.ascontiguousarray(v)
        return k, v, k.shape[1]
    return k, v, rows[0]


def _head_rows(x):
    """Rows from one head of x (B, n, w) to the next, when its rows are C-contiguous and
    the heads a whole number (>= n) of rows apart; None otherwise."""
    heads, n, width = x.shape
    row = width * x.itemsize
    if (width > 1 and x.strides[2] != x.itemsize) or (n > 1 and x.strides[1] != row):
        return None
    if heads == 1:
        return n
    step, rest = divmod(x.strides[0], row)
    return step if rest == 0 and step >= n else None


def _kv_needs_copy(k_flat, v_flat):
    """Whether k and v, flattened to (B_kv, n_k, ·), must be copied for a kernel that reads
    them with a head stride (``kv_layout``): unless both are views with C-contiguous rows
    and one row count between heads."""
    (k, k_shape), (v, v_shape) = k_flat, v_flat
    if not (_reshapes_as_view(k, k_shape) and _reshapes_as_view(v, v_shape)):
        return True
    rows = _head_rows(k.reshape(k_shape))
    return rows is None or rows != _head_rows(v.reshape(v_shape))


def _needs_copy(array, shape, contiguous):
    if contiguous:
        return not array.flags.c_contiguous
    return not _reshapes_as_view(array, shape)


def _reshapes_as_view(array, shape):
    view = array.view()
    try:
        view.shape = shape  # raises instead of copying when no view exists
    except AttributeError:
        return False
    return True


def unable_calls(names, calls):
    """{(key, kernel): why} for every call (key, ``Problem``) of ``calls`` that a kernel of
    ``names`` cannot run (dtype, size cap, memory for the inputs, output and workspace:
    ``check_resources``), found before anything is made: what a command checks first."""
    unable = {}
    for key, problem in calls:
        for name in names:
            try:
                check_resources(KERNELS[name], problem, problem.input_bytes)
            except (ValueError, MemoryError) as reason:
                unable[key, name] = reason
    return unable
