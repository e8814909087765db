"""A key-value cache: the keys and values of every token so far, kept for the next ones.

Generating a sequence one token at a time, the new token's query must attend to every
earlier token.  Recomputing the whole prefix's attention for each new token costs
O(n²·d) per token (O(n³·d) for n tokens); keeping the keys and values costs O(n·d) per
token (O(n²·d) in all) and 2·n·d·heads·itemsize bytes of memory, which the new query
reads once: decoding is bound by memory bandwidth, not by arithmetic.

    cache = KVCache(heads=8, head_dim=64)
    cache.append(k, v)                  # (heads, t, head_dim) each, t new tokens
    out = cache.attend(q, kernel="c_tiled")   # (heads, t_q, head_dim_v), causal

The buffers are preallocated and doubled when full, so appending costs amortised O(d)
per token and a head's cached keys stay one strided view.  The views are not contiguous
while the buffers have room to spare (a head's rows are ``capacity`` rows apart): the
kernels that need contiguous input copy them, O(n·d) per call, until they read a head
stride themselves.
"""
import numbers

import numpy as np

from .. import dtypes
from ..api import attention, require_memory
from ..memory import format_bytes

INITIAL_CAPACITY = 256  # tokens, when no capacity is given


class KVCache:
    """Keys (heads, n, head_dim) and values (heads, n, head_dim_v) of the n tokens so far.

    ``capacity``: tokens to preallocate (default 256); the buffers double when full.
    ``len(cache)`` is n; ``keys`` and ``values`` are read-only views of the cached part.
    """

    def __init__(self, heads, head_dim, *, dtype=np.float32, capacity=None, head_dim_v=None):
        head_dim_v = head_dim if head_dim_v is None else head_dim_v
        capacity = INITIAL_CAPACITY if capacity is None else capacity
        for name, value in (("heads", heads), ("head_dim", head_dim), ("head_dim_v", head_dim_v),
                            ("capacity", capacity)):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.dtype = dtypes.float_type(dtype, dtypes.WIDE).dtype
        self.heads, self.head_dim, self.head_dim_v = int(heads), int(head_dim), int(head_dim_v)
        self._length = 0
        self._keys, self._values = self._allocate(int(capacity))

    def __len__(self):
        return self._length

    def __repr__(self):
        values = "" if self.head_dim_v == self.head_dim else f", head_dim_v={self.head_dim_v}"
        return (f"KVCache(heads={self.heads}, head_dim={self.head_dim}{values}, dtype={self.dtype}, "
                f"tokens={self._length}, capacity={self.capacity})")

    @property
    def capacity(self):
        return self._keys.shape[1]

    @property
    def keys(self):
        """The cached keys, (heads, n, head_dim): a read-only view."""
        return self._view(self._keys)

    @property
    def values(self):
        """The cached values, (heads, n, head_dim_v): a read-only view."""
        return self._view(self._values)

    @property
    def nbytes(self):
        """Bytes the cached keys and values hold: n · heads · (head_dim + head_dim_v) · itemsize."""
        return self._length * self.heads * (self.head_dim + self.head_dim_v) * self.dtype.itemsize

    def append(self, k, v):
        """Add t new tokens: k (heads, t, head_dim), v (heads, t, head_dim_v), the cache's dtype.

        Everything is checked, and any larger buffer allocated, before the cache changes:
        a failed append leaves it as it was.  Amortised O(t · heads · d).
        """
        self._check("k", k, self.head_dim)
        self._check("v", v, self.head_dim_v)
        if k.shape[1] != v.shape[1]:
            raise ValueError(f"k and v must hold the same number of new tokens, got k {k.shape}, v {v.shape}")
        start, stop = self._length, self._length + k.shape[1]
        if stop > self.capacity:
            keys, values = self._allocate(max(stop, 2 * self.capacity))
            keys[:, :start], values[:, :start] = self._keys[:, :start], self._values[:, :start]
            self._keys, self._values = keys, values
        self._keys[:, start:stop] = k
        self._values[:, start:stop] = v
        self._length = stop

    def attend(self, q, *, kernel="c_tiled", scale=None):
        """The new queries' attention over every cached token: q (heads, t_q, head_dim) ->
        (heads, t_q, head_dim_v), causal and aligned bottom-right, so that the last query
        is the newest token and sees them all (query i sees keys j <= i + n - t_q).
        ValueError on an empty cache; the other checks and errors are ``kernels.attention``'s."""
        if self._length == 0:
            raise ValueError("the cache is empty: append at least one token's key and value "
                             "(cache.append(k, v)) before attend")
        return attention(q, self.keys, self.values, kernel=kernel, causal=True, scale=scale)

    def _check(self, name, array, width):
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name} must be a NumPy array, got {type(array).__name__}")
        if array.dtype != self.dtype:
            raise TypeError(f"{name} has dtype {array.dtype}; this cache holds {self.dtype}")
        if array.ndim != 3 or array.shape[0] != self.heads or array.shape[2] != width:
            raise ValueError(f"{name} must have shape (heads, t, {'head_dim' if name == 'k' else 'head_dim_v'}) "
                             f"= ({self.heads}, t, {width}), got {array.shape}")

    def _allocate(self, capacity):
        """Empty key and value buffers for ``capacity`` tokens; MemoryError before allocating
        when they would not fit."""
        needed = capacity * self.heads * (self.head_dim + self.head_dim_v) * self.dtype.itemsize
        require_memory(needed, lambda needed, available: (
            f"a KV cache of {capacity:,} tokens × {self.heads} heads needs {format_bytes(needed)}, "
            f"but only {format_bytes(available)} is available"))
        return (np.empty((self.heads, capacity, self.head_dim), self.dtype),
                np.empty((self.heads, capacity, self.head_dim_v), self.dtype))

    def _view(self, buffer):
        view = buffer[:, :self._length]
        view.flags.writeable = False
        return view
