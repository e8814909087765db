"""The formats a KV cache keeps its keys and values in: fewer bytes per cached token.

Decoding one token reads the whole cache, so its time is the cache's bytes over the
memory bandwidth: the way down is fewer bytes per token.  One row per format:

    float32, float64   the values as given (4 or 8 bytes per element)
    float16, bfloat16  rounded to nearest even (2 bytes; unit roundoff 2**-11 and 2**-8)
    int8               symmetric 8-bit codes with one float32 scale per token and head
                       (1 byte per element, plus 4 bytes per row of d): the row x is kept
                       as scale = max|x| / 127 and codes round(x / scale) in [-127, 127];
                       an element's error is at most scale / 2 = max|x| / 254

Why per token for the keys too (KIVI quantises keys per channel, values per token):
``kernels.decode.fidelity.key_granularity`` measures both.  Per-channel scales suit keys
whose channels differ in range (a few outlier channels in large language models), but a
channel's scale spans many tokens, so an appended token either waits in float (KIVI keeps
a float residual of up to 128 tokens) or is stuck with a range fixed before it came; a
per-token scale is fixed when the token is appended and never revisited, and a kernel
reads a row's codes and its one scale together.  The price: where channels differ in
range, per token loses accuracy (the report's table: on keys with a few wide channels,
per channel was several times more accurate; on even keys the two were of one order).

A row holding NaN or ±Inf gets the scale NaN: every element of it reads back as NaN, so
the queries that see the token give NaN, where float64 gives NaN (a NaN or infinite key
makes the score NaN or ±Inf) or ±Inf (an infinite value).
"""
from dataclasses import dataclass

import numpy as np

from . import dtypes

INT8_LEVELS = 127  # codes in [-127, 127]: symmetric, so -x is stored as exactly -codes(x)


@dataclass(frozen=True)
class CacheFormat:
    name: str
    bits: int                  # per stored element
    scaled: bool = False       # one float32 scale per cached row (token and head)

    @property
    def dtype(self):
        """The stored element type (ml_dtypes' bfloat16 imported on first use)."""
        return np.dtype(np.int8) if self.scaled else dtypes.float_type(self.name).dtype

    def row_bytes(self, width):
        """Bytes one cached row of ``width`` elements takes, its scale included."""
        return width * self.bits // 8 + (4 if self.scaled else 0)

    def encode(self, x):
        """(codes, scales) of x (..., width): x in the stored type (scales None), or int8
        codes and float32 scales (...,).  New arrays; x is never modified."""
        if not self.scaled:
            return x.astype(self.dtype), None
        return quantise_int8(x)

    def decode(self, codes, scales, dtype=np.float32):
        """The values a kernel reads: codes widened (exactly) to ``dtype``, times their row's
        scale for int8, each product rounded once to ``dtype``, as the kernels round it."""
        wide = codes.astype(dtype)
        if self.scaled:
            wide *= scales[..., None].astype(dtype)
        return wide


FORMATS = {row.name: row for row in (
    CacheFormat("float64", 64), CacheFormat("float32", 32), CacheFormat("float16", 16),
    CacheFormat("bfloat16", 16), CacheFormat("int8", 8, scaled=True),
)}
NARROW = ("float16", "bfloat16", "int8")  # the formats narrower than float32


def cache_format(name):
    """The row of ``name`` (a format name or a dtype); ValueError listing them otherwise."""
    key = name if isinstance(name, str) else getattr(np.dtype(name), "name", None)
    if key not in FORMATS:
        raise ValueError(f"unknown KV cache format {name!r}; known: {', '.join(FORMATS)}")
    return FORMATS[key]


@np.errstate(invalid="ignore", divide="ignore")
def quantise_int8(x, axis=-1):
    """Symmetric int8 codes of x and one float32 scale per slice along ``axis`` (the
    reduced axis: -1, per token, for a cache's rows (..., n, d); -2 per channel):
    scale = max|x| / 127, codes = round(x / scale).  An all-zero slice gets scale 0 and
    codes 0; one holding NaN or ±Inf, scale NaN and codes 0 (it reads back as NaN).
    Returns codes (x's shape, int8) and scales (x's shape without ``axis``)."""
    x = np.asarray(x, np.float32)
    top = np.max(np.abs(x), axis=axis, keepdims=True)
    finite = np.isfinite(top)
    scales = np.where(finite, top / INT8_LEVELS, np.nan).astype(np.float32)
    ratio = np.where(finite & (scales > 0), x / np.where(scales > 0, scales, 1), 0)
    codes = np.clip(np.rint(ratio), -INT8_LEVELS, INT8_LEVELS).astype(np.int8)
    return codes, np.squeeze(scales, axis)


def query_levels(d):
    """The largest query code a decode step on an int8 cache uses for rows of d: 32767
    (int16), fewer where d · 127 · 32767 would pass 2^31 − 1 (d > 516), so that a score's
    int32 sum never overflows (csrc/tile_ops.h)."""
    return min(32767, (2**31 - 1) // (127 * d))


@np.errstate(invalid="ignore", divide="ignore")
def decode_query_codes(q):
    """(codes, steps): the queries (..., d) as c_tiled's decode step on an int8 cache
    quantises them before multiplying the keys as integers (csrc/int8_dot.c), bit for bit:
    L = query_levels(d), step = max|q_row| / L (float32), codes = round(q / step) in ±L
    (int32 here, int16 in the kernel); a zero row step 0, a row holding NaN or ±Inf step NaN
    and codes 0."""
    q = np.asarray(q, np.float32)
    levels = query_levels(q.shape[-1])
    top = np.max(np.abs(q), axis=-1, keepdims=True)
    finite = np.isfinite(top)
    steps = np.where(finite, top / np.float32(levels), np.nan).astype(np.float32)
    ratio = np.where(finite & (steps > 0), q / np.where(steps > 0, steps, 1), 0)
    codes = np.clip(np.rint(ratio), -levels, levels).astype(np.int32)
    return codes, np.squeeze(steps, -1)


def decode_queries(q):
    """The queries (..., d) as a decode step on an int8 cache multiplies its keys with them,
    float64: each row's codes times its step (``decode_query_codes``, exact in float64).
    c_tiled quantises a step's query rows once, to int16, and computes Q·Kᵀ as integer dot
    products (csrc/int8_dot.c); that moves a query element by at most step / 2 =
    max|q_row| / 65534 (d <= 516), and a score by at most |scale| · step / 2 · Σ_c |k_jc|."""
    codes, steps = decode_query_codes(q)
    return codes.astype(np.float64) * steps.astype(np.float64)[..., None]
