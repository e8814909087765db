"""What a narrower KV cache costs in accuracy: decode outputs against the float64 truth.

Every figure here is the error of an output row against float64 attention over the
*float32* keys and values the cache was given (``kernels.reference``), norm-wise,
    error = ‖o − o*‖₂ / ‖o*‖₂,  the largest over the query heads,
so that it measures the format (and the kernel reading it), not the data.

The data are synthetic, seeded: keys, values and queries standard normal, the queries
times QUERY_GAIN so that the softmax is peaked (scores of standard deviation 3 after the
1/√d scale: a head that retrieves a few tokens, as trained heads do, rather than the
uniform average of unit-scale random data, which would hide every error in the mean).

- ``step_errors``: one new token against a cache of n tokens, per format.
- ``decode_errors``: a 1,000-step decode after a prompt, the same tokens appended to a
  cache of each format and to the float32 truth (teacher-forced: the outputs do not feed
  back), the error of every step: does it accumulate?  It cannot by construction of the
  formats (a stored entry never changes; each step reads the same kind of errors over more
  entries), and the measured errors say whether anything else does.
- ``key_granularity``: int8 keys quantised per token (as the cache keeps them) or per
  channel in groups of KIVI_GROUP tokens (as KIVI does), values per token in both, on
  keys whose channels have one range and on keys with a few outlier channels (as the keys
  of large language models have); float64 attention over the dequantised values, so that
  only the quantisation differs; the mean over GRANULARITY_QUERIES new tokens' outputs,
  since one token's error is one draw of a wide distribution (on even keys one token gave
  per channel 0.59 of per token's error, the mean over 256 tokens 1.02 of it).
"""
import numpy as np

from ..reference import reference_attention
from .cache import KVCache
from ..cache_formats import FORMATS, quantise_int8

QUERY_GAIN = 3.0
KIVI_GROUP = 128  # tokens per per-channel key scale (KIVI's group size)
GRANULARITY_QUERIES = 256  # new tokens whose outputs' errors key_granularity averages
OUTLIER_CHANNELS, OUTLIER_GAIN = 4, 10.0  # channels of the "outlier" keys, and their range


def row_errors(out, truth):
    """‖o − o*‖ / ‖o*‖ of each output row, out and truth (..., d_v): an array (...)."""
    out, truth = np.asarray(out, np.float64), np.asarray(truth, np.float64)
    return np.linalg.norm(out - truth, axis=-1) / np.linalg.norm(truth, axis=-1)


def _tokens(rng, heads, kv_heads, n, d):
    """Seeded q (heads, n, d), k and v (kv_heads, n, d), float32."""
    q = QUERY_GAIN * rng.standard_normal((heads, n, d), dtype=np.float32)
    k, v = (rng.standard_normal((kv_heads, n, d), dtype=np.float32) for _ in range(2))
    return q, k, v


def step_errors(formats=tuple(FORMATS), *, n=4096, heads=8, kv_heads=8, d=64, kernel="c_tiled", seed=0):
    """{format: the error of one new token's output} against a cache of n tokens: the
    largest over heads.  float64 is skipped (the truth itself)."""
    rng = np.random.default_rng(seed)
    q, k, v = _tokens(rng, heads, kv_heads, n, d)
    query = q[:, -1:]
    truth = reference_attention(query, k, v, causal=True)
    errors = {}
    for name in formats:
        if name == "float64":
            continue
        cache = KVCache(heads, d, kv_heads=kv_heads, cache_dtype=name, capacity=n)
        cache.append(k, v)
        errors[name] = float(row_errors(cache.attend(query, kernel=kernel), truth).max())
    return errors


def decode_errors(formats=tuple(FORMATS), *, steps=1000, prompt=1024, heads=8, kv_heads=2, d=64,
                  kernel="c_tiled", seed=0):
    """{format: errors (steps,)}: after a prompt of ``prompt`` tokens, each step appends one
    token to every cache and attends its query; the error of each step's output (largest
    over heads) against float64 over the float32 tokens.  O(steps · (prompt + steps) · d ·
    heads) for the truth, a few seconds at the defaults."""
    rng = np.random.default_rng(seed)
    total = prompt + steps
    q, k, v = _tokens(rng, heads, kv_heads, total, d)
    names = [name for name in formats if name != "float64"]
    caches = {}
    for name in names:
        caches[name] = KVCache(heads, d, kv_heads=kv_heads, cache_dtype=name, capacity=total)
        caches[name].append(k[:, :prompt], v[:, :prompt])
    errors = {name: np.empty(steps) for name in names}
    for step in range(steps):
        t = prompt + step
        query = q[:, t:t + 1]
        truth = reference_attention(query, k[:, :t + 1], v[:, :t + 1], causal=True)
        for name in names:
            caches[name].append(k[:, t:t + 1], v[:, t:t + 1])
            errors[name][step] = row_errors(caches[name].attend(query, kernel=kernel), truth).max()
    return errors


def key_granularity(*, n=4096, heads=8, d=64, seed=0):
    """{keys: {granularity: error}} for keys "even" (standard normal) and "outliers"
    (OUTLIER_CHANNELS channels OUTLIER_GAIN times wider), granularity "per token" or "per
    channel" (int8 keys; values per token in both): the output error against float64 on
    the float32 values of GRANULARITY_QUERIES new tokens' queries, each seeing all n
    cached tokens, the mean over them and the heads."""
    rng = np.random.default_rng(seed)
    q, k, v = _tokens(rng, heads, heads, n, d)
    query = q[:, -GRANULARITY_QUERIES:]
    outliers = k.copy()
    outliers[..., :OUTLIER_CHANNELS] *= OUTLIER_GAIN
    values = _dequantised(*quantise_int8(v))
    results = {}
    for label, keys in (("even", k), ("outliers", outliers)):
        # the outlier keys' scores are wider: the same query gain would make one-hot heads
        truth = reference_attention(query, keys, v)
        results[label] = {
            granularity: float(row_errors(reference_attention(query, stored, values), truth).mean())
            for granularity, stored in (("per token", _dequantised(*quantise_int8(keys))),
                                        ("per channel", _per_channel(keys)))
        }
    return results


def _dequantised(codes, scales, axis=-1):
    return codes.astype(np.float64) * np.expand_dims(scales, axis)


def _per_channel(keys):
    """keys (heads, n, d) quantised per channel, one scale per channel per KIVI_GROUP
    tokens (a last, shorter group included), and dequantised."""
    out = np.empty(keys.shape)
    for start in range(0, keys.shape[1], KIVI_GROUP):
        block = keys[:, start:start + KIVI_GROUP]
        out[:, start:start + KIVI_GROUP] = _dequantised(*quantise_int8(block, axis=-2), axis=-2)
    return out
