"""Rung 1, ``naive``: the seed's algorithm definition (§11.1.3), line by line.

For each query position i: score every key j, normalise the scores with a softmax,
and sum the values weighted by the result.  Pure Python floats (float64, so float32 and
16-bit inputs, widened exactly, accumulate in better than their compute type; the API
rounds the result to the inputs' type), no NumPy inside the loops: this is the
algorithm as a reader would trace it by hand.

Shapes: q (B, n_q, d), k (B_kv, n_k, d), v (B_kv, n_k, d_v) -> out (B, n_q, d_v); query
head b reads K/V head b // (B / B_kv) (grouped-query attention).
Time: O(B·n_q·n_k·(d + d_v)) interpreted operations (about a microsecond each), so
the registry caps it at B·n_q·n_k <= 65,536 scores.  Memory: the inputs as Python
lists plus one row of n_k scores at a time.
"""
import math

import numpy as np

from ..band import Band


def run(q, k, v, out, causal, scale, band=None):
    """band: the keys each query sees (``kernels.band``; None: full, or causal)."""
    band = band or Band.of(causal)
    n_q, n_k = q.shape[1], k.shape[1]
    lo, hi = band.rows(n_q, n_k)
    # the keys query i sees: its sinks, then its window
    seen = [list(range(min(band.sinks, hi[i], lo[i]))) + list(range(lo[i], hi[i])) for i in range(n_q)]
    group = q.shape[0] // k.shape[0]
    for b in range(q.shape[0]):
        queries, keys, values = (x.astype(np.float64).tolist() for x in (q[b], k[b // group], v[b // group]))
        for i, query in enumerate(queries):
            out[b, i] = _attend(query, keys, values, seen[i], scale) if seen[i] else 0.0


def _attend(query, keys, values, seen, scale):
    """y_i for one query that sees the keys ``seen``: steps 2-4 of the algorithm definition."""
    # step 2: visit every key position j the query may see, Score_ij = scale · <q_i, k_j>
    scores = [scale * sum(qc * kc for qc, kc in zip(query, keys[j])) for j in seen]
    # step 3: Attention_ij = softmax(Score_i*)[j], the max subtracted so exp cannot overflow
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    attention = [e / total for e in exps]
    # step 4: y_i = sum_j Attention_ij · Value_j
    y = [0.0] * len(values[0])
    for weight, value in zip(attention, (values[j] for j in seen)):
        for c, vc in enumerate(value):
            y[c] += weight * vc
    return y
