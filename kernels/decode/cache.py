"""A key-value cache: the keys and values of every token so far, kept for the next ones.

Generating a sequence one token at a time, the new token's query must attend to every
earlier token.  Recomputing the whole prefix's attention for each new token costs
O(n²·d) per token (O(n³·d) for n tokens); keeping the keys and values costs O(n·d) per
token (O(n²·d) in all) and n · kv_heads · (d + d_v) · bytes-per-element of memory, which
the new query reads once: decoding is bound by memory bandwidth, not by arithmetic, and
the ways down are fewer bytes per cached token (§11.2):

- fewer K/V heads than query heads (grouped-query attention, ``kv_heads``): each K/V head
  serves heads / kv_heads query heads and is read once for all of them;
- a narrower format (``cache_dtype``, ``kernels.cache_formats``): float16 or bfloat16
  (2 bytes per element), int8 codes with one float32 scale per token and head (1 byte,
  plus 4 per row), or int4 codes, two to a byte, with a float32 scale per 32 elements of
  a row (half a byte, plus 4 per group).

    cache = KVCache(heads=8, head_dim=64, kv_heads=2, cache_dtype="int8")
    cache.append(k, v)                  # (kv_heads, t, head_dim) each, t new tokens
    out = cache.attend(q, kernel="c_tiled")   # q (heads, t_q, head_dim) -> (heads, t_q, head_dim_v)

What each format costs in accuracy (``kernels.decode.fidelity``; the report's fidelity
table has the figures of a 65,536-token cache and of a 1,000-step decode): the error of
the output against float64 on the float32 values is that of the stored values, so a step
reads errors of the order of float16's 2**-11, bfloat16's 2**-8, int8's max|x| / 254 and
int4's max|x_group| / 14 per element, averaged by the softmax; the entries, once stored,
never change, so the error does not grow with the steps (it tracks the cache's contents,
not their number).

How the kernels read it: ``c_tiled`` and ``numba_tiled`` read every format in place,
widening (or dequantising) a block of rows at a time inside their inner loops, never a
widened copy of the cache; a 16-bit cache is attended by the kernels' 16-bit path, its
new queries rounded to the cache's type too (as engines with such caches do: one type
in, float32 accumulation inside), the result left in float32.  On an int8 cache
``c_tiled`` quantises a step's queries to int16 (per row) and multiplies them with the
keys as integers (``kernels.cache_formats.decode_queries``): a score moves by at most
|scale| · max|q_row| / 65534 · Σ_c |k_jc| more, a 256th of the keys' own rounding; on an
int4 cache likewise, a group of 32 values at a time, each key byte's two nibbles
multiplied in place.  ``numpy`` and ``naive`` widen every scaled cache whole first
(O(n·d) more bytes, which their times show; ``Kernel.quantised_caches`` says which formats
a kernel reads in place).

The buffers are preallocated and doubled when full, so appending costs amortised O(d)
per token and a head's cached rows stay one strided view, which ``numba_tiled`` and
``c_tiled`` read in place (``api.kv_layout``); the other kernels copy it.

A bounded cache (``window=W, sinks=S``; StreamingLLM's, Xiao et al. 2023) attends to less
instead: it keeps the first S tokens (the attention sinks, which soak up the weight a
softmax must put somewhere) and the newest W, in S + W rows that never grow, the newest W
in a ring (token p >= S in row S + (p - S) % W), so that a step reads S + W rows however
long the generation: time and memory per token are constant.  A new token's query sees
exactly the stored rows, the band ``window=(W - 1, 0), sinks=S`` of ``kernels.attention``;
attention needs no order among the keys (a softmax over a set), so the ring is read in
place, every format and grouping included.  Several queries at once (a prompt's chunk)
are attended with that band while nothing has been evicted; afterwards an earlier query
of the chunk would need a token the later ones evicted, so only one query a step is
taken.  Positions: our kernels take no positional encoding; a model with rotary
embeddings would rotate each key by its position within the cache, not in the text
(StreamingLLM re-indexes them so: the sinks 0..S-1, then the ring's tokens in order),
which ``positions`` (the text position of every stored row) lets a caller do.
"""
import numbers

import numpy as np

from .. import dtypes
from ..api import MAX_PLANS, SMALL_ALLOCATION, attention, attention_unrounded, checked_scale, require_memory
from ..band import CAUSAL, Band
from ..registry import get_kernel
from ..cache_formats import NARROW, cache_format
from ..memory import format_bytes

INITIAL_CAPACITY = 256  # tokens, when no capacity is given


def _step_key(kernel, scale, q):
    """What ``KVCache.attend``'s checks of a call decide by, besides the cache's state: the
    kernel, the scale as given (and its type: True == 1), q's type, shape, strides and dtype."""
    return kernel, scale, type(scale), type(q), q.shape, q.strides, q.dtype


class KVCache:
    """Keys (kv_heads, n, head_dim) and values (kv_heads, n, head_dim_v) of the n tokens so far.

    ``heads``: query heads; ``kv_heads`` (default ``heads``) must divide it.  ``dtype``
    (float32 or float64): what append takes and attend returns.  ``cache_dtype`` (default
    ``dtype``): the stored format, ``dtype`` itself or, for float32, "float16", "bfloat16",
    "int8" or "int4".  ``capacity``: tokens to preallocate (default 256); the buffers
    double when full.  ``len(cache)`` is n; ``keys`` and ``values`` are read-only views of
    the stored part (int8 codes for an int8 cache, whose ``key_scales`` and
    ``value_scales`` (kv_heads, n) hold the scales; for int4, (kv_heads, n, ceil(head_dim
    / 2)) bytes of two codes each and scales (kv_heads, n, groups)); ``dequantised()``
    gives them back in ``dtype``.

    ``window`` (an int >= 1) and ``sinks`` (default 0): a bounded cache (module docstring),
    its capacity fixed at sinks + window rows; ``len(cache)`` is then the tokens stored,
    ``seen`` those appended, ``evicted`` the difference, and ``positions`` the text
    position of each stored row (the ring's rows are not in order).
    """

    def __init__(self, heads, head_dim, *, dtype=np.float32, capacity=None, head_dim_v=None,
                 kv_heads=None, cache_dtype=None, window=None, sinks=0):
        head_dim_v = head_dim if head_dim_v is None else head_dim_v
        kv_heads = heads if kv_heads is None else kv_heads
        if window is None and sinks:
            raise ValueError(f"sinks = {sinks!r} needs a window: the sinks are what a bounded cache "
                             f"keeps besides its newest `window` tokens (KVCache(..., window=W, sinks=S))")
        if window is not None and capacity is not None:
            raise ValueError(f"a bounded cache's capacity is sinks + window ({sinks!r} + {window!r}); "
                             f"give window and sinks, or capacity, not both")
        for name, value, least in (("heads", heads, 1), ("head_dim", head_dim, 1), ("head_dim_v", head_dim_v, 1),
                                   ("capacity", capacity, 1), ("kv_heads", kv_heads, 1),
                                   ("window", window, 1), ("sinks", sinks, 0)):
            if value is None and name in ("capacity", "window"):
                continue
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < least:
                kind = " positive integer" if least else "n integer >= 0"
                raise ValueError(f"{name} must be a{kind}, got {value!r}")
        if heads % kv_heads:
            raise ValueError(f"kv_heads = {kv_heads} must divide heads = {heads} "
                             f"(each K/V head serves heads / kv_heads query heads)")
        self.dtype = dtypes.float_type(dtype, dtypes.WIDE).dtype
        self.format = cache_format(self.dtype.name if cache_dtype is None else cache_dtype)
        if self.format.name != self.dtype.name and (self.dtype != np.float32 or self.format.name not in NARROW):
            raise ValueError(f"a {self.dtype} cache is stored as {self.dtype} only; cache_dtype "
                             f"{', '.join(NARROW)} are for float32 caches, got {self.format.name!r}")
        self.heads, self.kv_heads = int(heads), int(kv_heads)
        self.head_dim, self.head_dim_v = int(head_dim), int(head_dim_v)
        self.window, self.sinks = (None, 0) if window is None else (int(window), int(sinks))
        self._length = 0   # rows stored
        self._seen = 0     # tokens appended
        if capacity is None:
            capacity = INITIAL_CAPACITY if window is None else self.sinks + self.window
        self._buffers = self._allocate(int(capacity))
        self._steps = {}   # attend's steps by call signature (_step)

    def __len__(self):
        return self._length

    def __repr__(self):
        values = "" if self.head_dim_v == self.head_dim else f", head_dim_v={self.head_dim_v}"
        kv_heads = "" if self.kv_heads == self.heads else f", kv_heads={self.kv_heads}"
        stored = "" if self.format.name == self.dtype.name else f", cache_dtype={self.format.name}"
        bounded = f", window={self.window}, sinks={self.sinks}, seen={self._seen}" if self.bounded else ""
        return (f"KVCache(heads={self.heads}{kv_heads}, head_dim={self.head_dim}{values}, dtype={self.dtype}"
                f"{stored}{bounded}, tokens={self._length}, capacity={self.capacity})")

    @property
    def bounded(self):
        """Whether the cache keeps its sinks and newest ``window`` tokens only."""
        return self.window is not None

    @property
    def seen(self):
        """Tokens appended so far (``len(cache)`` of them are stored)."""
        return self._seen

    @property
    def evicted(self):
        """Tokens appended and no longer stored (0 for an unbounded cache)."""
        return self._seen - self._length

    @property
    def positions(self):
        """int64 (len(cache),): the text position (0-based, in append order) of the token in
        each stored row; 0, 1, ..., n - 1 for an unbounded cache.  In a bounded cache the
        ring's row S + m holds the latest token p = S + m (mod window) appended."""
        rows = np.arange(self._length, dtype=np.int64)
        if not self.evicted:
            return rows
        ring = rows[self.sinks:] - self.sinks
        rows[self.sinks:] += (self._seen - 1 - self.sinks - ring) // self.window * self.window
        return rows

    @property
    def capacity(self):
        return self._buffers[0].shape[1]

    @property
    def cache_dtype(self):
        """The stored element type: float32, float64, float16, bfloat16, int8 or (int4's
        bytes of two codes) uint8."""
        return self.format.dtype

    @property
    def keys(self):
        """The cached keys as stored, (kv_heads, n, head_dim) (int4: ceil(head_dim / 2)
        bytes): a read-only view."""
        return self._view(self._buffers[0])

    @property
    def values(self):
        """The cached values as stored, (kv_heads, n, head_dim_v) (int4: ceil(head_dim_v
        / 2) bytes): a read-only view."""
        return self._view(self._buffers[1])

    @property
    def key_scales(self):
        """A scaled cache's key scales, float32, a read-only view: int8's (kv_heads, n),
        int4's (kv_heads, n, groups); else None."""
        return self._view(self._buffers[2]) if self.format.scaled else None

    @property
    def value_scales(self):
        """A scaled cache's value scales, as ``key_scales``; else None."""
        return self._view(self._buffers[3]) if self.format.scaled else None

    @property
    def nbytes(self):
        """Bytes the cached keys and values hold, scales included: what one new token's
        attention reads, n · kv_heads · (row_bytes(head_dim) + row_bytes(head_dim_v))."""
        return self._length * self.kv_heads * self._token_bytes()

    def dequantised(self):
        """(keys, values) as a kernel reads them, in ``dtype``: new arrays, O(n · d)."""
        return (self.format.decode(self.keys, self.key_scales, self.dtype, self.head_dim),
                self.format.decode(self.values, self.value_scales, self.dtype, self.head_dim_v))

    def append(self, k, v):
        """Add t new tokens: k (kv_heads, t, head_dim), v (kv_heads, t, head_dim_v), of
        ``dtype``; stored in the cache's format (rounded, or quantised per token or group).

        Everything is checked, encoded and any larger buffer allocated before the cache
        changes: a failed append leaves it as it was.  Amortised O(t · kv_heads · d).
        """
        self._check("k", k, self.kv_heads, self.head_dim)
        self._check("v", v, self.kv_heads, self.head_dim_v)
        if k.shape[1] != v.shape[1]:
            raise ValueError(f"k and v must hold the same number of new tokens, got k {k.shape}, v {v.shape}")
        (k_codes, k_scales), (v_codes, v_scales) = self.format.encode(k), self.format.encode(v)
        if self.bounded:
            self._append_bounded((k_codes, v_codes, k_scales, v_scales))
            return
        start, stop = self._length, self._length + k.shape[1]
        if stop > self.capacity:
            buffers = self._allocate(max(stop, 2 * self.capacity))
            for new, old in zip(buffers, self._buffers):
                new[:, :start] = old[:, :start]
            self._buffers = buffers
            self._steps = {}   # they hold the old buffers
        for buffer, rows in zip(self._buffers, (k_codes, v_codes, k_scales, v_scales)):
            buffer[:, start:stop] = rows
        self._length = self._seen = stop

    def _append_bounded(self, encoded):
        """Store t encoded tokens (keys, values and their scales or None, (kv_heads, t, ·)) in
        a bounded cache: the sinks' rows while they are not full, then the ring, of which
        only the newest window tokens survive (so each row is written once).  O(t · d)."""
        t = encoded[0].shape[1]
        position = self._seen + np.arange(t)
        kept = (position < self.sinks) | (position >= self._seen + t - self.window)
        position = position[kept]
        rows = np.where(position < self.sinks, position, self.sinks + (position - self.sinks) % self.window)
        for buffer, stored in zip(self._buffers, encoded):   # scales: for a scaled format only
            buffer[:, rows] = stored[:, kept]
        self._seen += t
        self._length = min(self._seen, self.capacity)

    def attend(self, q, *, kernel="c_tiled", scale=None):
        """The new queries' attention over every cached token: q (heads, t_q, head_dim) of
        ``dtype`` -> (heads, t_q, head_dim_v) of ``dtype``, causal and aligned bottom-right,
        so that the last query is the newest token and sees them all (query i sees keys
        j <= i + n - t_q).  A bounded cache's queries see the band window=(window - 1, 0),
        sinks=sinks (its stored rows, for the newest token); after an eviction it takes one
        query a step only (ValueError otherwise: the module docstring says why).  A peer that keeps this format in its own layout encodes it first,
        every call (``decoder`` encodes once).  ValueError on an empty cache, or for a kernel
        that does not take the cache's format (a peer, which says why), TypeError or
        ValueError for a q of another dtype or shape; the other checks and errors are
        ``kernels.attention``'s.

        A signature's first call makes every check; the calls after it with the same kernel,
        scale, and q's type, shape, strides and dtype repeat none that cannot change (a
        decoder's steps: ``_step``), until the cache's buffers are reallocated."""
        try:
            record, step = self._steps[_step_key(kernel, scale, q)]
        except (AttributeError, KeyError, TypeError):   # a new signature, q not an array, an unhashable argument
            return self._attend_checked(q, kernel, scale)
        if get_kernel(kernel) is not record:   # a kernel registered anew under its name
            return self._attend_checked(q, kernel, scale)
        return step(q)

    def _attend_checked(self, q, kernel, scale):
        """``attend`` with every check made."""
        if self._length == 0:
            raise ValueError("the cache is empty: append at least one token's key and value "
                             "(cache.append(k, v)) before attend")
        record = get_kernel(kernel)
        self._check("q", q, self.heads, self.head_dim)
        band = self._band(q)
        if self.format.name in record.own_caches and band == CAUSAL:
            return self.decoder(kernel, scale=scale)(q)
        if not self.format.scaled:  # float32, float64, or 16-bit: the kernels' 16-bit path, float32 out
            stored = self.format.dtype
            q = q if stored == self.dtype else q.astype(stored)
            if record.strided_kv and not record.materialises:
                return self._run_in_place(record, q, scale, band, (kernel, scale, stored == self.dtype))
            keywords = dict(kernel=kernel, causal=True, scale=scale, window=(band.left, band.right), sinks=band.sinks)
            return (attention(q, self.keys, self.values, **keywords) if stored == self.dtype
                    else attention_unrounded(q, self.keys, self.values, **keywords))
        refusal = record.cache_refusal(self.format.name)
        if refusal:
            raise ValueError(f"kernel {kernel!r} does not take this cache: {refusal}")
        if self.format.name not in record.quantised_caches or band != CAUSAL:  # widened first, whole
            keys, values = self.dequantised()
            return attention(q, keys, values, kernel=kernel, causal=True, scale=scale,
                             window=(band.left, band.right), sinks=band.sinks)
        scale = checked_scale(scale, self.head_dim)
        if q.shape[1] == 0:
            raise ValueError(f"q must hold at least one query, got shape {q.shape}")
        out = np.empty((self.heads, q.shape[1], self.head_dim_v), np.float32)
        run = getattr(record.implementation, f"run_{self.format.name}")
        run(np.ascontiguousarray(q), self.keys, self.key_scales, self.values, self.value_scales, out, True, scale)
        return out

    def _run_in_place(self, record, q, given, band, signature):
        """The rung's ``run`` on the stored rows where they lie, for a kernel that reads K and V
        with a head stride (``Kernel.strided_kv``): q (heads, t_q, head_dim) of the stored
        float type -> (heads, t_q, head_dim_v) of its compute type.  What ``kernels.attention``
        would check is known here (the cache's types, shapes and layout), so a step pays the
        kernel and q's own checks only.  signature: (kernel, scale as given, whether q is
        the caller's own array): ``_step`` makes the step of such calls to come."""
        scale = checked_scale(given, self.head_dim)
        t_q = q.shape[1]
        if t_q == 0:
            raise ValueError(f"q must hold at least one query, got shape {q.shape}")
        out_bytes = self.heads * t_q * self.head_dim_v * self.dtype.itemsize
        require_memory(out_bytes, lambda needed, available: (
            f"the attention of {t_q:,} queries needs {format_bytes(needed)} for its output, but only "
            f"{format_bytes(available)} is available"))
        out = np.empty((self.heads, t_q, self.head_dim_v), self.dtype)
        keys, values = self._buffers[:2]   # whole, their first len(self) rows stored
        record.implementation.run(np.ascontiguousarray(q), keys, values, out, True, scale, band=band,
                                  n_k=self._length)
        self._step(record, q, scale, band, out_bytes, signature)
        return out

    def _step(self, record, q, scale, band, out_bytes, signature):
        """Keep a step for the calls to come like this one (``attend``), which has passed every
        check: q the caller's own C-contiguous array of the cache's type, a band that stays
        causal (an unbounded cache's, or one query's), an output below the size worth a
        memory check, and an argument list that can be looked up.  The step reads the cache's
        length at each call; a new buffer (``append``) drops the steps.  With the rung's
        ``cache_step`` (c_tiled) the buffers' pointers are worked out here, once."""
        kernel, given, own_q = signature
        stays_causal = band == CAUSAL and (not self.bounded or q.shape[1] == 1)
        if not (own_q and q.flags.c_contiguous and stays_causal and out_bytes < SMALL_ALLOCATION):
            return
        keys, values = self._buffers[:2]
        rung = record.implementation
        if hasattr(rung, "cache_step"):
            run = rung.cache_step(keys, values, band, scale)
        else:
            def run(q, out, n_k):
                rung.run(q, keys, values, out, True, scale, band=band, n_k=n_k)
        shape, dtype = (self.heads, q.shape[1], self.head_dim_v), self.dtype

        def step(q):
            out = np.empty(shape, dtype)
            run(q, out, self._length)
            return out

        try:
            key = _step_key(kernel, given, q)
            if len(self._steps) >= MAX_PLANS:   # ever new shapes (a prompt's chunks): the newest only
                self._steps.pop(next(iter(self._steps)))
            self._steps[key] = record, step
        except TypeError:   # an unhashable kernel or scale: checked every call
            pass

    def decoder(self, kernel="c_tiled", *, scale=None):
        """``step(q)``: ``attend(q, kernel=kernel, scale=scale)`` over the cache's present
        contents.  For a peer that keeps this format in its own library's layout
        (``Kernel.own_caches``: ONNX Runtime's int8 cache with its own scales, say), the
        peer's cache is encoded here, once, from ``dequantised()`` (O(n · d)), and each step
        reads it (so a step times the library's decode, and ``attend`` with such a peer pays
        the encoding every call); appending afterwards does not reach it."""
        record = get_kernel(kernel)
        if self.format.name not in record.own_caches:
            return lambda q: self.attend(q, kernel=kernel, scale=scale)
        if self._length == 0:
            raise ValueError("the cache is empty: append at least one token's key and value "
                             "(cache.append(k, v)) before attend")
        widened = self._length * self.kv_heads * (self.head_dim + self.head_dim_v) * 4
        require_memory(widened, lambda needed, available: (
            f"{kernel} keeps this cache in its own layout, built from a float32 copy of "
            f"{format_bytes(needed)}, but only {format_bytes(available)} is available"))
        keys, values = (np.ascontiguousarray(x, np.float32) for x in self.dequantised())
        scale = checked_scale(scale, self.head_dim)
        # the engines take a scale > 0 only (ONNX Runtime and OpenVINO read 0 as "the
        # default", 1/√d): any other goes into q, rounded once, and theirs is 1
        q_factor = None if scale > 0 else np.float32(scale)
        step = record.implementation.cache_decoder(self.format.name, keys, values, self.heads,
                                                   scale if q_factor is None else 1.0)

        def checked_step(q):
            self._check("q", q, self.heads, self.head_dim)
            if q.shape[1] == 0:
                raise ValueError(f"q must hold at least one query, got shape {q.shape}")
            if q_factor is not None:
                q = q * q_factor
            # more queries than cached tokens: the first see no key (zeros, as attention has
            # them), the last n are a step of n
            unseeing = max(q.shape[1] - keys.shape[1], 0)
            if not unseeing:
                return step(q)
            out = np.zeros((self.heads, q.shape[1], self.head_dim_v), self.dtype)
            out[:, unseeing:] = step(np.ascontiguousarray(q[:, unseeing:]))
            return out

        return checked_step

    def _band(self, q):
        """The keys the queries q (heads, t_q, ·) see (``kernels.band``): causal for an
        unbounded cache, or a single query (the newest token sees every stored row), or while
        no query's window has yet passed a token; window=(W - 1, 0), sinks=S while nothing has
        been evicted; ValueError afterwards, for several queries."""
        t_q = q.shape[1]
        if not self.bounded or t_q == 1 or self._seen <= self.window:
            return CAUSAL
        if self.evicted:
            raise ValueError(
                f"this bounded cache has evicted {self.evicted:,} tokens, which {t_q} queries at once "
                f"would need (each query sees its own {self.window} newest tokens): attend one query a "
                f"step, or a chunk's own keys with kernels.attention(q, k, v, "
                f"window=({self.window - 1}, 0), sinks={self.sinks})")
        return Band.of(True, (self.window - 1, 0), self.sinks)

    def _token_bytes(self):
        return self.format.row_bytes(self.head_dim) + self.format.row_bytes(self.head_dim_v)

    def _check(self, name, array, heads, width):
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name} must be a NumPy array, got {type(array).__name__}")
        if array.dtype != self.dtype:
            raise TypeError(f"{name} has dtype {array.dtype}; this cache takes {self.dtype}")
        heads_name = "heads" if name == "q" else "kv_heads"
        width_name = "head_dim_v" if name == "v" else "head_dim"
        if array.ndim != 3 or array.shape[0] != heads or array.shape[2] != width:
            raise ValueError(f"{name} must have shape ({heads_name}, t, {width_name}) "
                             f"= ({heads}, t, {width}), got {array.shape}")

    def _allocate(self, capacity):
        """Empty key and value buffers (and their scales) for ``capacity`` tokens;
        MemoryError before allocating when they would not fit."""
        needed = capacity * self.kv_heads * self._token_bytes()
        require_memory(needed, lambda needed, available: (
            f"a KV cache of {capacity:,} tokens × {self.kv_heads} K/V heads ({self.format.name}) needs "
            f"{format_bytes(needed)}, but only {format_bytes(available)} is available"))
        fmt, widths = self.format, (self.head_dim, self.head_dim_v)
        buffers = [np.empty((self.kv_heads, capacity, fmt.stored_width(width)), fmt.dtype) for width in widths]
        if fmt.scaled:
            buffers += [np.empty((self.kv_heads, capacity, *fmt.scales_shape(width)), np.float32)
                        for width in widths]
        return buffers

    def _view(self, buffer):
        view = buffer[:, :self._length]
        view.flags.writeable = False
        return view
