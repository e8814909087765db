"""Shared pieces of the asv suite: seeded inputs, the skip rules, one warm-up, timing.

Grids and fixed configurations come from ``kernels.bench_spec``, which the report
reads too.  The thread budget (``ATTNBENCH_THREADS``, default: every CPU) is read once
by ``kernels.threads`` and applies to BLAS and our thread pool alike; ``Machine``
records it with the results.
"""
import math
import statistics
import time

import numpy as np

import kernels
from kernels import ceilings
from kernels.api import attention_unheld, check_resources, validate
from kernels.band import Band
from kernels.bench_spec import HEAD_DIM, QUICK
from kernels.dtypes import float_type
from kernels.spread import asv_samples

KERNEL_NAMES = list(kernels.KERNELS)
THREAD_COUNTS = sorted({1, kernels.threads.available_cpus()})  # one thread, and every CPU
PEER_THREAD_COUNTS = THREAD_COUNTS[-1:] if QUICK else THREAD_COUNTS  # a quick run: every CPU only


class ThreadBudget:
    """For benchmarks that set the thread budget: ``use_threads`` in setup, and teardown
    puts back the budget it replaced."""

    previous_budget = None  # set once setup has changed the budget

    def use_threads(self, threads, *names):
        """Set the budget to ``threads`` for kernels ``names``; NotImplementedError (asv:
        skip) when one of them (a peer sizing its own threads) would not honour it."""
        for name in names:
            record = kernels.KERNELS.get(name)
            if record and not record.honours_budget and threads < kernels.threads.available_cpus():
                raise NotImplementedError(f"{name} at {threads} thread(s): {record.threading}")
        self.previous_budget = kernels.threads.set_budget(threads)

    def teardown(self, *params):
        # asv calls teardown after a setup that skipped (NotImplementedError) too, so
        # it restores only what setup got as far as changing.
        if self.previous_budget is not None:
            kernels.threads.set_budget(self.previous_budget)


def make_inputs(batch, seq_len, dtype, head_dim=HEAD_DIM, seed=0):
    """Seeded q, k, v of shape (batch, seq_len, head_dim), standard normal (a 16-bit type's
    drawn in float32 and rounded)."""
    rng = np.random.default_rng(seed)
    row = float_type(dtype)
    return tuple(rng.standard_normal((batch, seq_len, head_dim), dtype=row.compute).astype(row.dtype, copy=False)
                 for _ in range(3))


def prepare(kernel, batch, seq_len, dtype, causal=False, warm_up=True, **band):
    """Inputs for one benchmark; NotImplementedError (asv: skip) if the kernel cannot run it
    (``band``: a window and sinks, as ``kernels.attention`` takes them).

    The warm-up call compiles Numba, loads the C extension and faults in pages, so
    none of that lands inside the timed body.
    """
    q, k, v = make_inputs(batch, seq_len, dtype)
    check_runs(kernel, q, k, v, causal, **band)
    if warm_up:
        attention_unheld(q, k, v, kernel=kernel, causal=causal, **band)
    return q, k, v


def peer_call(peer, q, k, v, causal=False, **band):
    """A peer's call as its own users make it: its library's API on tensors of its own,
    made here (``prepare`` of the peer's module: torch tensors, an ONNX Runtime session
    with its inputs bound, a compiled OpenVINO request, device arrays and a jitted JAX
    function, a built ggml graph), called once to warm up; the call times the library
    alone.  q, k, v (B, n, d) of a type the peer takes; ``band``: a window and sinks, as
    ``kernels.attention`` takes them."""
    band = Band.of(causal, **band)
    call = kernels.KERNELS[peer].implementation.prepare(q, k, v, band.causal, 1.0 / math.sqrt(q.shape[-1]), band)
    call()  # warm-up: compilation, pages
    return call


HEADROOM_BYTES = 2 * 2**30  # kept free while a benchmark runs: the machine's other work


def check_fits(kernel, problem, extra_bytes=0):
    """NotImplementedError (asv: skip), with the reason, when ``kernel`` cannot run
    ``problem`` here: not installed, a dtype it does not take, above its size cap, or more
    memory (output, workspace and ``extra_bytes``) than is available less HEADROOM_BYTES.

    A type a peer computes below the harness's budget on this CPU is no reason: the suite
    times such a call all the same (through ``kernels.api.attention_unheld``, as every
    kernel's call here), so that what its rounding buys is measured; ``PeerAccuracy``
    records that it fails, and the report marks its rows so."""
    if kernel not in kernels.KERNELS:
        raise NotImplementedError(f"{kernel} is not installed (make peers)")
    try:
        check_resources(kernels.KERNELS[kernel], problem, extra_bytes, headroom_bytes=HEADROOM_BYTES, held=False)
    except (ValueError, MemoryError) as reason:
        raise NotImplementedError(str(reason)) from None


def check_runs(kernel, q, k, v, causal=False, **band):
    """``check_fits`` for attention on the inputs q, k, v, which exist already (``band``: a
    window and sinks, which a kernel may not take)."""
    check_fits(kernel, validate(q, k, v, causal, **band))


def side_by_side(baseline, candidate, rounds, work_ratio=1.0, settle=0.0):
    """``asv_samples`` of (baseline's time ÷ candidate's time) × ``work_ratio`` in each of
    ``rounds`` rounds, the two calls made back to back, first one and then the other going
    first.  On a shared machine the load comes and goes within seconds; timed side by side,
    both calls see the same load, while a ratio of two separately benchmarked times
    compares two different moments.  asv records the rounds' median and spread.
    ``work_ratio``, the candidate's flops ÷ the baseline's, makes it a ratio of rates for
    calls of different work (a kernel's GFLOP/s over a peak loop's).  ``settle``: seconds
    each side is first called untimed, every round, and then called for as long again
    (at least once), its time in the round the median of those calls; so each is timed in
    its own steady state, as its users calling it in a loop see it, not in the other's
    wake (``PEER_SETTLE_SECONDS``: a peer's threads spin on after its call)."""
    calls = [("baseline", baseline), ("candidate", candidate)]
    ratios = []
    for round_ in range(rounds):
        seconds = {}
        for name, call in calls if round_ % 2 == 0 else calls[::-1]:
            until = time.perf_counter() + settle
            while time.perf_counter() < until:
                call()
            times, until = [], time.perf_counter() + settle
            while not times or time.perf_counter() < until:
                start = time.perf_counter()
                call()
                times.append(time.perf_counter() - start)
            seconds[name] = statistics.median(times)
        ratios.append(seconds["baseline"] / seconds["candidate"] * work_ratio)
    return asv_samples(ratios)


def read_fraction(step, nbytes, rounds):
    """``side_by_side`` of the streaming read (``ceilings.read_loop``, the memory roof) and
    ``step``, a call reading ``nbytes`` once: per round, the step's read rate ÷ the streaming
    read's, the two timed back to back, so that a disturbed minute moves both.  The read
    reads as many bytes as the step, so that both find their data in the same level of the
    memory hierarchy (a 256 MiB cache sits in the L3 of a Xeon with 480 MiB of it, where a
    read of 2 GiB runs at the memory's rate)."""
    read, read_bytes = ceilings.read_loop(nbytes)
    return side_by_side(read, step, rounds, nbytes / read_bytes)


def seconds_each(calls, repeats):
    """{name: wall times} of the ``calls`` ({name: call}), called in turn ``repeats``
    times, so that a shared machine's changing load falls on all of them alike."""
    seconds = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def rate_samples(amount, call, repeats=5):
    """``asv_samples`` of ``amount`` ÷ seconds ÷ 10⁹ (GFLOP/s, GB/s) over ``repeats`` timed
    calls of ``call()`` (for track_ benchmarks: asv records their median and spread)."""
    return asv_samples(amount / seconds / 1e9 for seconds in seconds_each({"call": call}, repeats)["call"])
