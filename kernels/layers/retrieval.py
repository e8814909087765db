"""Self-attention as soft retrieval (§11.1.1, knowledge card C11-01), as an experiment.

A key→value store of N items is queried three ways:

    exact match     a dict from the key's bytes to the item: O(d) to hash the query,
                    O(1) to probe; succeeds only on a bit-identical query
    nearest key     the item whose key has the largest q·k: O(N·d) per query
    soft            attention at temperature T: w = softmax(q·Kᵀ / T), output = w V,
                    a blend of every value: O(N·(d + d_v)) per query

The store: keys are N random unit vectors in R^d (so q·k of a key with itself is 1 and
of two different keys about ±1/√d); values are one-hot item ids, V = I (N × N).  One-hot
values make every two values the same distance √2 apart, so no pair of items is
accidentally easier to confuse, and the soft output *is* the weight vector: its distance
to an item's value measures exactly how much weight sits elsewhere,
|w − e_j|² = (1 − w_j)² + Σ_{i≠j} w_i².

Queries are noisy copies of stored keys: query = key_i + σ·ε, ε ~ N(0, I/d) (so |ε| ≈ 1
and σ is the noise's length relative to the key's); the target is item i.  The same
targets and the same ε serve every noise level, so curves differ only by σ.

An output *decodes to* item j when it lies within r = √2/2 of e_j, half the distance
between two values: the balls of radius r around the values do not overlap, so an output
decodes to at most one item, and it decodes to j only if w_j is its largest weight.

    soft accuracy   the output decodes to the target
    agreement       the output decodes to the nearest key's item: soft retrieval gives
                    the argmax lookup's answer.  (The argmax of the weights is the
                    argmax of the scores at every T > 0, so agreement is judged by the
                    output, not by the argmax.)

As T → 0 the weights become one-hot on the nearest key, so the error to the nearest
key's value → 0 and agreement → 1; as T → ∞ they become uniform, the output lies about
1 from every value, and nothing decodes.  Mean max weight and mean entropy move
monotonically between the two (exactly, per query: d H/d(1/T) = −Var_w(s)/T ≤ 0).

    result = soft_vs_hard(n_items=1000, dim=64, noise_levels=(0.0, 0.1, 0.5, 1.0, 2.0))
    cost = retrieval_cost(sizes=(1_000, 4_000, 16_000, 64_000))   # seconds per query
    cost.under_load                                               # True: not the cost, the load
"""
import math
import os
import time
from dataclasses import dataclass

import numpy as np

from ..api import attention
from ..costs import attention_flops
from ..spread import measured
from ..threads import budget as thread_budget
from .analysis import attention_entropy
from .similarity import ROW_BLOCK_BYTES, attention_weights

# q·k of unit vectors lies in [−1, 1]: T = 10 leaves the weights within e^{±0.2} of
# uniform, T = 1e-3 makes a score gap of 0.01 a weight ratio of e^10.  Ten per decade, so
# 10^-0.9 ≈ 0.126 sits beside 1/√64, the temperature of cosine attention at d = 64.
DEFAULT_TEMPERATURES = np.geomspace(10.0, 1e-3, 41)
DECODING_RADIUS = math.sqrt(2) / 2  # half the distance between two one-hot values
AGREEMENT_LEVEL = 0.99              # agreement_temperature: agreement on 99% of queries
# RetrievalCost.under_load: at some N the process's threads had a core for less than this
# share of the time they were ready to run: time on a CPU ÷ (time on a CPU + time queued for
# one), from Linux's per-thread schedstat.  On an idle machine a thread queues only while it
# wakes, microseconds against the milliseconds timed, so the share stays near 1; beside a
# benchmark and two test runs on this 2-core machine it read 0.26-0.34.  Below 0.9 more than
# a tenth of the ready time went to other work, and a call that waits for its slowest
# thread loses far more than a tenth: the figures are the load's, not the code's.  CPU time
# ÷ wall time would say the same only given the threads a call keeps busy, which the kernel
# decides (the pool's size threshold, its split-KV chunks, a BLAS); the share needs no count.
LOADED_BELOW = 0.9


@dataclass(frozen=True)
class SoftVsHard:
    """Exact match, nearest key and attention on one seeded store (module docstring)."""

    n_items: int
    dim: int
    n_queries: int
    seed: int
    noise_levels: np.ndarray           # (L,) σ, in the order given
    temperatures: np.ndarray           # (T,) descending: hot (near uniform) to cold (one-hot)
    exact_accuracy: np.ndarray         # (L,) dict lookup finds the target
    nearest_accuracy: np.ndarray       # (L,) argmax q·k is the target
    soft_accuracy: np.ndarray          # (L, T) output decodes to the target
    max_weight: np.ndarray             # (L, T) mean over queries of max_j w_j
    entropy: np.ndarray                # (L, T) mean over queries of −Σ w ln w, nats
    error_to_nearest: np.ndarray       # (L, T) mean |output − value of the nearest key|
    agreement: np.ndarray              # (L, T) fraction of outputs that decode to the nearest key's item
    agreement_temperature: np.ndarray  # (L,) largest T with agreement ≥ AGREEMENT_LEVEL, NaN if none


def soft_vs_hard(*, n_items=1000, dim=64, noise_levels=(0.0, 0.1, 0.5, 1.0, 2.0), temperatures=None,
                 n_queries=500, seed=0, kernel=None):
    """Run the three retrievals on a seeded store of ``n_items`` keys in R^``dim``.

    Each noise level asks ``n_queries`` queries; each temperature (default
    ``DEFAULT_TEMPERATURES``, any positive values, sorted descending here) blends with
    scale 1/T.  ``kernel`` None takes the output as the weights themselves (w V = w for
    V = I); a kernel name computes it with ``kernels.attention(q, K, I, scale=1/T)``
    instead, which holds the N × N identity and costs O(n_q·N²) per temperature.
    Queries are processed in blocks of about ROW_BLOCK_BYTES of weights.  Time
    O(L·T·n_q·N·d) (times N/d with a kernel); deterministic given ``seed``.
    Raises ValueError for sizes below 1 (n_items below 2), negative or non-finite noise,
    non-positive or non-finite temperatures.
    """
    noise_levels = _checked_levels("noise_levels", noise_levels, zero_allowed=True)
    temperatures = np.sort(_checked_levels("temperatures", DEFAULT_TEMPERATURES if temperatures is None
                                           else temperatures, zero_allowed=False))[::-1]
    if n_items < 2 or dim < 1 or n_queries < 1:
        raise ValueError(f"need n_items >= 2, dim >= 1, n_queries >= 1; got n_items={n_items}, "
                         f"dim={dim}, n_queries={n_queries}")
    rng = np.random.default_rng(seed)
    keys = random_unit_vectors(rng, n_items, dim)
    targets = rng.integers(n_items, size=n_queries)
    directions = rng.standard_normal((n_queries, dim)) / math.sqrt(dim)  # ε ~ N(0, I/d)
    store = {key.tobytes(): item for item, key in enumerate(keys)}
    values = None if kernel is None else np.eye(n_items)
    block_rows = max(1, ROW_BLOCK_BYTES // (n_items * keys.itemsize))

    shape = (noise_levels.size, temperatures.size)
    exact_accuracy, nearest_accuracy = np.empty(shape[0]), np.empty(shape[0])
    per_query = {name: np.empty(shape + (n_queries,))
                 for name in ("soft_correct", "max_weight", "entropy", "error_to_nearest", "agrees")}
    for level, noise in enumerate(noise_levels):
        queries = keys[targets] + noise * directions  # σ = 0 keeps the key's bits: x + (±0) = x
        exact_accuracy[level] = np.mean([store.get(query.tobytes()) == target
                                         for query, target in zip(queries, targets)])
        nearest = np.concatenate([np.argmax(queries[rows] @ keys.T, axis=1)
                                  for rows in _row_slices(n_queries, block_rows)])
        nearest_accuracy[level] = np.mean(nearest == targets)
        for t, temperature in enumerate(temperatures):
            for rows in _row_slices(n_queries, block_rows):
                weights = attention_weights(queries[rows], keys, scale=1 / temperature)
                outputs = weights if values is None else attention(
                    queries[rows], keys, values, kernel=kernel, scale=1 / temperature)
                error_to_nearest = distance_to_value(outputs, nearest[rows])
                cell = (level, t, rows)
                per_query["max_weight"][cell] = weights.max(axis=1)
                per_query["entropy"][cell] = attention_entropy(weights)
                per_query["error_to_nearest"][cell] = error_to_nearest
                per_query["agrees"][cell] = error_to_nearest < DECODING_RADIUS
                per_query["soft_correct"][cell] = distance_to_value(outputs, targets[rows]) < DECODING_RADIUS
    means = {name: array.mean(axis=-1) for name, array in per_query.items()}
    agreement_temperature = np.array([
        temperatures[agreeing].max() if agreeing.any() else np.nan
        for agreeing in means["agrees"] >= AGREEMENT_LEVEL])
    return SoftVsHard(n_items, dim, n_queries, seed, noise_levels, temperatures, exact_accuracy,
                      nearest_accuracy, means["soft_correct"], means["max_weight"], means["entropy"],
                      means["error_to_nearest"], means["agrees"], agreement_temperature)


@dataclass(frozen=True)
class RetrievalCost:
    """Seconds per query of a dict lookup and of attention against the store's size N, and
    whether the machine let the process run while they were timed."""

    sizes: np.ndarray              # (S,) N, number of stored items
    dim: int                       # d of keys and values
    n_queries: int                 # queries per timed batch
    repeats: int                   # timed batches per figure, after one warm-up
    kernel: str                    # the attention kernel timed
    threads: int                   # the thread budget the kernel ran under (the dict: one)
    seed: int
    hash_seconds: tuple            # (S,) spread.Measured per query over the repeats: hash the query's bytes, probe
    attention_seconds: tuple       # (S,) spread.Measured per query: one batched call / n_queries
    cpu_share: np.ndarray          # (S,) over N's timed repeats, the process's threads' time on a core ÷ time
                                   #   ready to run (on a core or queued for one); NaN where Linux does not say
    hashed_bytes: int              # bytes hashed per dict lookup, d·8: independent of N
    attention_flops: np.ndarray    # (S,) per query, 4·N·d (kernels.costs.attention_flops)

    @property
    def load_known(self):
        """True when every size's ``cpu_share`` was measured (Linux schedstats)."""
        return bool(np.all(np.isfinite(self.cpu_share)))

    @property
    def under_load(self):
        """True when at some N the threads had a core for less than LOADED_BELOW of the time
        they were ready to run: the figures are the machine's load, not the code's cost."""
        return bool(np.any(self.cpu_share < LOADED_BELOW))


def retrieval_cost(*, sizes=(1_000, 4_000, 16_000, 64_000), dim=64, n_queries=64, repeats=9, seed=0,
                   kernel="c_tiled"):
    """Time the two ends of §11.1.5's table: O(1) hash lookup against O(N) attention.

    For each N a seeded store of N unit keys in R^``dim`` with ``dim``-wide random values
    (a payload per item; one-hot values would make attention O(N²) per query), and
    ``n_queries`` queries that are copies of stored keys, so every lookup hits.  The dict
    lookup is timed query by query, each hashing a fresh bytes object (Python caches a
    bytes object's hash, so reused keys would time the probe alone); attention is one
    ``kernels.attention`` call on (1, n_queries, d) against (1, N, d), divided by
    n_queries.  One warm-up of each first, then ``repeats`` timed batches: each figure is
    their ``spread.Measured`` (median and quartiles), and ``cpu_share`` says how much of
    the time the process's threads were ready to run they had a core meanwhile.
    Measured, never asserted: the machine's other load shows in the numbers, and in
    ``under_load``.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    hash_seconds, attention_seconds, cpu_share = [], [], np.empty(sizes.size)
    rng = np.random.default_rng(seed)
    for index, n_items in enumerate(sizes):
        keys = random_unit_vectors(rng, n_items, dim)
        values = rng.standard_normal((n_items, dim))
        queries = keys[rng.integers(n_items, size=n_queries)]
        store = {key.tobytes(): item for item, key in enumerate(keys)}

        def look_up():
            start = time.perf_counter()
            for query in queries:
                store[query.tobytes()]
            return time.perf_counter() - start

        def attend():
            start = time.perf_counter()
            attention(queries[None], keys[None], values[None], kernel=kernel)
            return time.perf_counter() - start

        hash_batches, hash_running, hash_waiting = _timed_after_warm_up(look_up, repeats)
        attention_batches, attention_running, attention_waiting = _timed_after_warm_up(attend, repeats)
        hash_seconds.append(measured([seconds / n_queries for seconds in hash_batches]))
        attention_seconds.append(measured([seconds / n_queries for seconds in attention_batches]))
        running, waiting = hash_running + attention_running, hash_waiting + attention_waiting
        cpu_share[index] = running / (running + waiting) if running + waiting > 0 else math.nan
    return RetrievalCost(sizes, dim, n_queries, repeats, kernel, thread_budget(), seed, tuple(hash_seconds),
                         tuple(attention_seconds), cpu_share, dim * np.dtype(np.float64).itemsize,
                         np.array([attention_flops(1, int(n), dim) for n in sizes], dtype=float))


def random_unit_vectors(rng, count, dim):
    """(count, dim) float64 rows drawn uniformly from the unit sphere (normalised Gaussians)."""
    vectors = rng.standard_normal((count, dim))
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def distance_to_value(outputs, items):
    """|outputs[i] − e_items[i]| for outputs (m, N) and one-hot values: (m,).  Subtracts
    from a copy rather than expanding |o|² − 2o_j + 1, which cancels to ~1e-8 (the
    square root of rounding) where the output is nearly one-hot."""
    offsets = outputs.copy()
    offsets[np.arange(len(items)), items] -= 1.0
    return np.linalg.norm(offsets, axis=1)


def _timed_after_warm_up(timed, repeats):
    """One warm-up call of ``timed`` (it returns its own seconds), then ``repeats`` timed ones:
    -> (their seconds, ns the process's threads ran on a core and ns they queued for one
    meanwhile)."""
    timed()
    before = scheduled_times()
    seconds = [timed() for _ in range(repeats)]
    after = scheduled_times()
    running = waiting = 0
    for thread, (ran, queued) in after.items():  # a thread that started meanwhile counts from 0
        ran_before, queued_before = before.get(thread, (0, 0))
        running, waiting = running + ran - ran_before, waiting + queued - queued_before
    return seconds, running, waiting


def scheduled_times():
    """{thread id: (ns on a CPU, ns ready to run but queued for one)} of this process's
    threads so far, from Linux's /proc/self/task/<id>/schedstat; {} where there is none
    (another OS, or a kernel built without schedstats)."""
    times = {}
    try:
        threads = os.listdir("/proc/self/task")
    except OSError:
        return times
    for thread in threads:
        try:
            with open(f"/proc/self/task/{thread}/schedstat") as stat:
                running, waiting, _ = stat.read().split()
        except (OSError, ValueError):  # the thread ended, or no schedstats
            continue
        times[int(thread)] = (int(running), int(waiting))
    return times


def _row_slices(n_rows, block_rows):
    return [slice(row0, min(n_rows, row0 + block_rows)) for row0 in range(0, n_rows, block_rows)]


def _checked_levels(name, levels, zero_allowed):
    """``levels`` as a float (L,) array; ValueError unless finite and > 0 (>= 0 if zero_allowed)."""
    levels = np.asarray(levels, dtype=float)
    in_range = levels >= 0 if zero_allowed else levels > 0
    if levels.ndim != 1 or levels.size == 0 or not np.all(np.isfinite(levels) & in_range):
        raise ValueError(f"{name} must be a non-empty 1-D sequence of finite "
                         f"{'non-negative' if zero_allowed else 'positive'} numbers, got {levels!r}")
    return levels
