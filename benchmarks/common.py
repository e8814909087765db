"""Shared pieces of the asv suite: seeded inputs, the skip rules, one warm-up, timing.

Grids and fixed configurations come from ``kernels.bench_spec``, which the report
reads too.  The thread budget (``ATTNBENCH_THREADS``, default: every CPU) is read once
by ``kernels.threads`` and applies to BLAS, Numba and OpenMP alike; ``Machine``
records it with the results.
"""
import time

import numpy as np

import kernels
from kernels.api import check_resources, validate
from kernels.bench_spec import HEAD_DIM

KERNEL_NAMES = list(kernels.KERNELS)
THREAD_COUNTS = sorted({1, kernels.threads.available_cpus()})  # one thread, and every CPU


def make_inputs(batch, seq_len, dtype, head_dim=HEAD_DIM, seed=0):
    """Seeded q, k, v of shape (batch, seq_len, head_dim), standard normal."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((batch, seq_len, head_dim), dtype=np.dtype(dtype)) for _ in range(3))


def prepare(kernel, batch, seq_len, dtype, causal=False, warm_up=True):
    """Inputs for one benchmark; NotImplementedError (asv: skip) if the kernel cannot run it.

    The warm-up call compiles Numba, loads the C extension and faults in pages, so
    none of that lands inside the timed body.
    """
    q, k, v = make_inputs(batch, seq_len, dtype)
    check_runs(kernel, q, k, v, causal)
    if warm_up:
        kernels.attention(q, k, v, kernel=kernel, causal=causal)
    return q, k, v


def check_runs(kernel, q, k, v, causal=False):
    """NotImplementedError (asv: skip) when ``kernel`` cannot run attention on q, k, v here:
    above the naive rung's size cap, or beyond the memory available."""
    try:
        check_resources(kernels.KERNELS[kernel], validate(q, k, v, causal))
    except (ValueError, MemoryError) as reason:
        raise NotImplementedError(str(reason)) from None


def speedup_side_by_side(baseline, candidate, rounds):
    """Median over ``rounds`` of (baseline's time ÷ candidate's time), the two calls made
    back to back, first one and then the other going first.  On a shared machine the load
    comes and goes within seconds; timed side by side, both calls see the same load, while
    a ratio of two separately benchmarked times compares two different moments."""
    calls = [("baseline", baseline), ("candidate", candidate)]
    ratios = []
    for round_ in range(rounds):
        seconds = {}
        for name, call in calls if round_ % 2 == 0 else calls[::-1]:
            start = time.perf_counter()
            call()
            seconds[name] = time.perf_counter() - start
        ratios.append(seconds["baseline"] / seconds["candidate"])
    return float(np.median(ratios))


def median_seconds_each(calls, repeats):
    """{name: median wall time} of the ``calls`` ({name: call}), called in turn ``repeats``
    times, so that a shared machine's changing load falls on all of them alike."""
    seconds = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            seconds[name].append(time.perf_counter() - start)
    return {name: float(np.median(times)) for name, times in seconds.items()}


def median_seconds(call, repeats=3):
    """Median wall time of ``repeats`` calls of ``call()`` (for track_ benchmarks)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times))
