"""The formats a KV cache keeps its keys and values in: fewer bytes per cached token.

Decoding one token reads the whole cache, so its time is the cache's bytes over the
memory bandwidth: the way down is fewer bytes per token.  One row per format:

    float32, float64   the values as given (4 or 8 bytes per element)
    float16, bfloat16  rounded to nearest even (2 bytes; unit roundoff 2**-11 and 2**-8)
    int8               symmetric 8-bit codes with one float32 scale per token and head
                       (1 byte per element, plus 4 bytes per row of d): the row x is kept
                       as scale = max|x| / 127 and codes round(x / scale) in [-127, 127];
                       an element's error is at most scale / 2 = max|x| / 254
    int4               symmetric 4-bit codes in [-7, 7], two to a byte, with one float32
                       scale per group of INT4_GROUP = 32 elements of a row (as ggml's
                       Q4_0 and ONNX Runtime's 4-bit caches group them): half a byte per
                       element plus 4 bytes per group (d = 64: 40 bytes a row, against
                       68 for int8 and 256 for float32); an element's error is at most
                       scale / 2 = max|x_group| / 14, 18 times int8's

How a row is stored: the codes offset by 8 (so 1 to 15, 8 for 0) in the byte's nibbles,
element 2i in the low nibble of byte i and element 2i + 1 in the high one (a last odd
element's partner is 8: a zero), ceil(d / 2) bytes; the scales of its ceil(d / 32) groups,
the last one shorter when 32 does not divide d, beside them.

Why per token for the keys too (KIVI quantises keys per channel, values per token):
``kernels.decode.fidelity.key_granularity`` measures both.  Per-channel scales suit keys
whose channels differ in range (a few outlier channels in large language models), but a
channel's scale spans many tokens, so an appended token either waits in float (KIVI keeps
a float residual of up to 128 tokens) or is stuck with a range fixed before it came; a
per-token scale is fixed when the token is appended and never revisited, and a kernel
reads a row's codes and its one scale together.  The price: where channels differ in
range, per token loses accuracy (the report's table: on keys with a few wide channels,
per channel was several times more accurate; on even keys the two were equal).

A row (int4: a group) holding NaN or ±Inf gets the scale NaN: every element of it reads
back as NaN, so the queries that see the token give NaN, where float64 gives NaN (a NaN or
infinite key makes the score NaN or ±Inf) or ±Inf (an infinite value).
"""
from dataclasses import dataclass

import numpy as np

from . import dtypes

INT8_LEVELS = 127  # codes in [-127, 127]: symmetric, so -x is stored as exactly -codes(x)
INT4_LEVELS = 7    # codes in [-7, 7], likewise
INT4_GROUP = 32    # elements of a row per int4 scale
INT4_OFFSET = 8    # a nibble holds code + 8


@dataclass(frozen=True)
class CacheFormat:
    name: str
    bits: int                  # per stored element
    levels: int = 0            # symmetric integer codes in [-levels, levels]; 0: a float type
    group: int = 0             # elements per float32 scale along a row; 0: the whole row

    @property
    def scaled(self):
        """Whether the format keeps integer codes with float32 scales."""
        return self.levels > 0

    @property
    def dtype(self):
        """The stored element type: int8 codes, uint8 bytes of two int4 codes, or a float
        type (ml_dtypes' bfloat16 imported on first use)."""
        if self.scaled:
            return np.dtype(np.int8 if self.bits == 8 else np.uint8)
        return dtypes.float_type(self.name).dtype

    def stored_width(self, width):
        """Stored elements (bytes, for int4: ceil(width / 2)) of a row of ``width`` values."""
        return -(-width * self.bits // (8 * self.dtype.itemsize))

    def scales_per_row(self, width):
        """Float32 scales of a row of ``width`` values: 0, 1 (per row) or one per group."""
        if not self.scaled:
            return 0
        return -(-width // self.group) if self.group else 1

    def scales_shape(self, width):
        """The trailing shape of a row's scales: () for one a row, (groups,) for int4."""
        return (self.scales_per_row(width),) if self.group else ()

    def check_arrays(self, kernel, d, d_v, k, k_scale, v, v_scale):
        """ValueError naming the first of a call's cache arrays whose shape is not this
        format's for rows of d (K) and d_v (V) values: codes (B_kv, n_k, stored width) and
        scales (B_kv, n_k, *scales_shape), as a kernel reading them in place needs (it would
        read past their rows)."""
        for name, x, width, trailing in (("k", k, d, (self.stored_width(d),)),
                                         ("v", v, d_v, (self.stored_width(d_v),)),
                                         ("k_scale", k_scale, d, self.scales_shape(d)),
                                         ("v_scale", v_scale, d_v, self.scales_shape(d_v))):
            if x.ndim != 2 + len(trailing) or x.shape[2:] != trailing:
                raise ValueError(f"{kernel} {self.name} cache: {name} must be (B_kv, n_k{''.join(f', {t}' for t in trailing)}) "
                                 f"for d = {d}, d_v = {d_v}, got {x.shape}")

    def row_bytes(self, width):
        """Bytes one cached row of ``width`` elements takes, its scales included."""
        return self.stored_width(width) * self.dtype.itemsize + 4 * self.scales_per_row(width)

    def encode(self, x):
        """(codes, scales) of x (..., width): x in the stored type (scales None), or int8
        codes and float32 scales (...,), or int4 bytes (..., ceil(width / 2)) and scales
        (..., groups).  New arrays; x is never modified."""
        if not self.scaled:
            return x.astype(self.dtype), None
        return quantise_int4(x) if self.bits == 4 else quantise_int8(x)

    def decode(self, codes, scales, dtype=np.float32, width=None):
        """The values a kernel reads: codes widened (exactly) to ``dtype``, times their
        row's (int4: group's) scale, each product rounded once to ``dtype``, as the kernels
        round it.  ``width``: int4's row width (default: every nibble, 2 · the bytes)."""
        if self.bits == 4:
            codes = unpack_int4(codes, width)
            groups = np.repeat(scales, self.group, axis=-1)[..., :codes.shape[-1]]
            return codes.astype(dtype) * groups.astype(dtype)
        wide = codes.astype(dtype)
        if self.scaled:
            wide *= scales[..., None].astype(dtype)
        return wide


FORMATS = {row.name: row for row in (
    CacheFormat("float64", 64), CacheFormat("float32", 32), CacheFormat("float16", 16),
    CacheFormat("bfloat16", 16), CacheFormat("int8", 8, levels=INT8_LEVELS),
    CacheFormat("int4", 4, levels=INT4_LEVELS, group=INT4_GROUP),
)}
NARROW = ("float16", "bfloat16", "int8", "int4")  # the formats narrower than float32


def cache_format(name):
    """The row of ``name`` (a format name or a dtype); ValueError listing them otherwise."""
    key = name if isinstance(name, str) else getattr(np.dtype(name), "name", None)
    if key not in FORMATS:
        raise ValueError(f"unknown KV cache format {name!r}; known: {', '.join(FORMATS)}")
    return FORMATS[key]


@np.errstate(invalid="ignore", divide="ignore")
def quantise_int8(x, axis=-1, levels=INT8_LEVELS):
    """Symmetric int8 codes of x and one float32 scale per slice along ``axis`` (the
    reduced axis: -1, per token, for a cache's rows (..., n, d); -2 per channel):
    scale = max|x| / levels, codes = round(x / scale) in ±levels (127; int4's 7).  An
    all-zero slice gets scale 0 and codes 0; one holding NaN or ±Inf, scale NaN and codes
    0 (it reads back as NaN).  Returns codes (x's shape, int8) and scales (x's shape
    without ``axis``)."""
    x = np.asarray(x, np.float32)
    top = np.max(np.abs(x), axis=axis, keepdims=True)
    finite = np.isfinite(top)
    scales = np.where(finite, top / np.float32(levels), np.nan).astype(np.float32)
    ratio = np.where(finite & (scales > 0), x / np.where(scales > 0, scales, 1), 0)
    codes = np.clip(np.rint(ratio), -levels, levels).astype(np.int8)
    return codes, np.squeeze(scales, axis)


def quantise_int4(x):
    """int4 codes of the rows x (..., width) and their scales: each group of INT4_GROUP
    elements quantised as ``quantise_int8`` with 7 levels (scale = max|x_group| / 7; the
    last group shorter when 32 does not divide width), the codes packed two to a byte
    (``pack_int4``).  Returns bytes (..., ceil(width / 2)) uint8 and scales (..., groups)
    float32."""
    x = np.asarray(x, np.float32)
    width = x.shape[-1]
    groups = -(-width // INT4_GROUP)
    padded = np.zeros((*x.shape[:-1], groups * INT4_GROUP), np.float32)
    padded[..., :width] = x   # zeros change no group's max|x|
    codes, scales = quantise_int8(padded.reshape(*x.shape[:-1], groups, INT4_GROUP), levels=INT4_LEVELS)
    return pack_int4(codes.reshape(padded.shape)[..., :width]), scales


def pack_int4(codes):
    """Codes (..., width) in [-7, 7] packed two to a byte, each plus 8: element 2i in the
    low nibble of byte i, 2i + 1 in the high one (a last odd element's partner 8, a zero).
    Returns (..., ceil(width / 2)) uint8."""
    codes = np.asarray(codes, np.int16) + INT4_OFFSET
    if codes.shape[-1] % 2:
        codes = np.concatenate([codes, np.full((*codes.shape[:-1], 1), INT4_OFFSET, np.int16)], axis=-1)
    return (codes[..., 0::2] | codes[..., 1::2] << 4).astype(np.uint8)


def unpack_int4(packed, width=None):
    """The codes (..., width) int8 of bytes packed by ``pack_int4`` (width: default
    every nibble, 2 · bytes)."""
    packed = np.asarray(packed, np.uint8)
    codes = np.empty((*packed.shape[:-1], 2 * packed.shape[-1]), np.int8)
    codes[..., 0::2] = (packed & 15).astype(np.int8) - INT4_OFFSET
    codes[..., 1::2] = (packed >> 4).astype(np.int8) - INT4_OFFSET
    return codes[..., :codes.shape[-1] if width is None else width]


def query_levels(d):
    """The largest query code a decode step on an int8 cache uses for rows of d: 32767
    (int16), fewer where d · 127 · 32767 would pass 2^31 − 1 (d > 516), so that a score's
    int32 sum never overflows (csrc/tile_ops.h)."""
    return min(32767, (2**31 - 1) // (127 * d))


@np.errstate(invalid="ignore", divide="ignore")
def decode_query_codes(q, group=None):
    """(codes, steps): the queries (..., d) as c_tiled's decode step on an int8 cache
    quantises them before multiplying the keys as integers (csrc/int8_dot.c), bit for bit:
    L = query_levels(d), step = max|q_row| / L (float32), codes = round(q / step) in ±L
    (int32 here, int16 in the kernel); a zero row step 0, a row holding NaN or ±Inf step NaN
    and codes 0.  ``group`` (int4's INT4_GROUP): each group of that many values of a row
    quantised apart, as the key groups they multiply; steps (..., groups) then."""
    q = np.asarray(q, np.float32)
    if group is not None:
        parts = [decode_query_codes(q[..., c:c + group]) for c in range(0, q.shape[-1], group)]
        return np.concatenate([codes for codes, _ in parts], axis=-1), np.stack([steps for _, steps in parts], -1)
    levels = query_levels(q.shape[-1])
    top = np.max(np.abs(q), axis=-1, keepdims=True)
    finite = np.isfinite(top)
    steps = np.where(finite, top / np.float32(levels), np.nan).astype(np.float32)
    ratio = np.where(finite & (steps > 0), q / np.where(steps > 0, steps, 1), 0)
    codes = np.clip(np.rint(ratio), -levels, levels).astype(np.int32)
    return codes, np.squeeze(steps, -1)


def decode_queries(q, group=None):
    """The queries (..., d) as a decode step on an int8 (or, ``group`` = INT4_GROUP, int4)
    cache multiplies its keys with them, float64: each row's (group's) codes times its step
    (``decode_query_codes``, exact in float64).  c_tiled quantises a step's query rows once,
    to int16, and computes Q·Kᵀ as integer dot products (csrc/int8_dot.c); that moves a
    query element by at most step / 2 = max|q_row| / 65534 (d <= 516), and a score by at
    most |scale| · step / 2 · Σ_c |k_jc|."""
    codes, steps = decode_query_codes(q, group)
    steps = steps.astype(np.float64)
    if group is not None:
        steps = np.repeat(steps, group, axis=-1)[..., :codes.shape[-1]]
        return codes.astype(np.float64) * steps
    return codes.astype(np.float64) * steps[..., None]
