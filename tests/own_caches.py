"""What the tests of the peers' own KV caches (test_peer_cache_decoders_ort.py,
test_peer_ggml.py) share: seeded caches and queries, and float64 attention over them."""
import numpy as np

N = 2048  # cached tokens


def cache(kv_heads, d, seed=0, n=N):
    """keys, values (kv_heads, n, d) float32, standard normal."""
    rng = np.random.default_rng([seed, kv_heads, d])
    return (rng.standard_normal((kv_heads, n, d)).astype(np.float32),
            rng.standard_normal((kv_heads, n, d)).astype(np.float32))


def query(heads, t, d, seed=1):
    return np.random.default_rng([seed, heads, t, d]).standard_normal((heads, t, d)).astype(np.float32)


def attention64(q, keys, values, scale):
    """Float64 (output (heads, t, d_v), weights (heads, t, n)): query head h reads K/V head
    h // (heads / kv_heads); query i sees keys j <= i + n - t (bottom-right causal)."""
    group = q.shape[0] // keys.shape[0]
    k, v = (np.repeat(x.astype(np.float64), group, axis=0) for x in (keys, values))
    t, n = q.shape[1], k.shape[1]
    scores = scale * q.astype(np.float64) @ k.transpose(0, 2, 1)
    scores[:, np.arange(t)[:, None] + n - t < np.arange(n)] = -np.inf
    weights = np.exp(scores - scores.max(axis=2, keepdims=True))
    weights /= weights.sum(axis=2, keepdims=True)
    return weights @ v, weights


def relative_errors(out, ref):
    """||o - o*|| / ||o*|| of each head."""
    return np.linalg.norm(out - ref, axis=(1, 2)) / np.linalg.norm(ref, axis=(1, 2))
