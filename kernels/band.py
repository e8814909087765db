"""Which keys each query sees: full, causal, a sliding window, attention sinks.

One ``Band`` says it for every kernel, the reference and the KV cache.  The convention is
FlashAttention's ``window_size``, aligned bottom-right as ``causal`` is: query i of n_q
stands at position p_i = i + (n_k - n_q) among the n_k keys (the last query beside the last
key, as when decoding with a KV cache), and sees key j when

    p_i - left <= j <= p_i + right         (a side that is None is unbounded)
    or j < sinks and j <= p_i + right      (attention sinks: never a future key)

``causal=True`` is right = 0 (folded in: right = min(right, 0)).  Full attention is
left = right = None; sinks then add nothing and are normalised to 0.

Cost: a query sees at most left + right + 1 + sinks keys, so a tiled kernel that skips the
key tiles outside the band does O(n_q · (left + right + sinks) · (d + d_v)) work, not
O(n_q · n_k · (d + d_v)).  What a query sees is two runs of keys, each a contiguous range
whose ends never decrease with i: the sinks [0, min(sinks, hi_i)) and the window
[lo_i, hi_i) (``rows``).
"""
import numbers
from dataclasses import dataclass
from typing import Optional

import numpy as np


@dataclass(frozen=True)
class Band:
    """The keys each query sees (module docstring): ``left``, ``right`` keys before and after
    its aligned position (None: unbounded), and the first ``sinks`` keys."""

    left: Optional[int] = None
    right: Optional[int] = None
    sinks: int = 0

    def __post_init__(self):
        object.__setattr__(self, "_hash", hash((self.left, self.right, self.sinks)))

    def __hash__(self):
        """Kept from construction: a band is part of every call's plan key
        (``kernels.api``), and a dataclass hashes its fields anew each time."""
        return self._hash

    @classmethod
    def of(cls, causal=False, window=None, sinks=0):
        """The band of a call's ``causal``, ``window`` and ``sinks`` arguments, checked:
        TypeError or ValueError naming the argument otherwise."""
        if window is None and sinks.__class__ is int and sinks == 0 and causal.__class__ is bool:
            return CAUSAL if causal else FULL   # the commonest calls, at once (a call's fixed cost)
        if not isinstance(causal, (bool, np.bool_)):
            raise TypeError(f"causal must be a bool, got {causal!r}")
        left, right = _window(window)
        sinks = _count("sinks", sinks)
        if causal:
            right = 0 if right is None else min(right, 0)
        if left is None:
            sinks = 0  # every key before the query is seen already
        return cls(left, right, sinks)

    @property
    def causal(self):
        """Whether no query sees a key after its own position."""
        return self.right == 0

    @property
    def full(self):
        """Whether every query sees every key."""
        return self.left is None and self.right is None

    @property
    def windowed(self):
        """Whether the band has a left edge: the part a tiled kernel skips grows with n."""
        return self.left is not None

    def rows(self, n_q, n_k):
        """(lo, hi), int64 (n_q,): query i's window is keys [lo_i, hi_i) (empty when lo_i >=
        hi_i); its sinks are [0, min(sinks, hi_i)).  Both never decrease with i.  O(n_q)."""
        position = np.arange(n_q, dtype=np.int64) + (n_k - n_q)
        hi = np.full(n_q, n_k, np.int64) if self.right is None else np.clip(position + 1 + self.right, 0, n_k)
        lo = np.zeros(n_q, np.int64) if self.left is None else np.clip(position - self.left, 0, n_k)
        return lo, hi

    def first_row(self, n_q, n_k):
        """The first query that sees a key; the rows before it (a causal or right-bounded
        band with n_q > n_k) give zeros."""
        if self.right is None:
            return 0
        return int(min(n_q, max(0, n_q - n_k - self.right)))

    def mask(self, n_q, n_k):
        """Boolean (n_q, n_k), True where query i sees key j.  O(n_q · n_k) memory (two such
        arrays while it is built): for the reference and the materialising rung only."""
        lo, hi = self.rows(n_q, n_k)
        keys = np.arange(n_k)
        seen = keys >= lo[:, None]
        np.logical_and(seen, keys < hi[:, None], out=seen)  # in place: two n_q × n_k at most
        if self.sinks:
            np.logical_or(seen, keys < np.minimum(self.sinks, hi)[:, None], out=seen)
        return seen

    def seen_keys(self, n_q, n_k):
        """How many keys each query sees, int64 (n_q,).  O(n_q)."""
        lo, hi = self.rows(n_q, n_k)
        window = np.maximum(hi - lo, 0)
        sinks = np.maximum(np.minimum(self.sinks, np.minimum(hi, lo)), 0)
        return window + sinks

    def library_form(self, n_q, n_k):
        """How a library that takes a causal flag (aligned top-left, as PyTorch's
        ``is_causal``) and a boolean mask is given this band: "none" when every query sees
        every key, "causal" for causal attention of a square call, else "mask" (``mask``:
        n_q × n_k, O(n²) memory and time, whatever the band saves).  O(n_q)."""
        lo, hi = self.rows(n_q, n_k)
        if not lo.any() and (hi == n_k).all():
            return "none"
        return "causal" if self == CAUSAL and n_q == n_k else "mask"

    def arguments(self):
        """The keywords of ``kernels.attention`` that give this band: {} (full),
        {"causal": True}, or {"window": (left, right), "sinks": sinks}."""
        if self.full:
            return {}
        if self == CAUSAL:
            return {"causal": True}
        return {"window": (self.left, self.right), "sinks": self.sinks}

    def describe(self):
        """A short name: "full", "causal", "window (128, 0) + 4 sinks", ..."""
        if self.full:
            return "full"
        if self.left is None:
            return "causal" if self.causal else f"window (None, {self.right})"
        sinks = f" + {self.sinks} sink{'s' if self.sinks > 1 else ''}" if self.sinks else ""
        return f"window ({self.left}, {self.right}){sinks}"


FULL = Band()
CAUSAL = Band(right=0)


def _window(window):
    """(left, right) of a ``window`` argument: None, or a pair of None or ints >= 0."""
    if window is None:
        return None, None
    if isinstance(window, (str, bytes)) or not hasattr(window, "__len__") or len(window) != 2:
        raise TypeError(f"window must be None or a pair (left, right), got {window!r}")
    return tuple(None if side is None else _count(f"window[{i}] ({name})", side, " or None",
                                                    " (an unbounded side is None here, where FlashAttention's "
                                                    "window_size writes -1)")
                 for i, (name, side) in enumerate(zip(("left", "right"), window)))


def _count(name, value, alternative="", negative=""):
    """``value`` as an int >= 0; TypeError or ValueError naming ``name`` otherwise (a
    negative one's message followed by ``negative``)."""
    if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int >= 0{alternative}, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}{negative}")
    return int(value)
