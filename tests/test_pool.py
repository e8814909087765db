"""The thread pool both tiled rungs run on (csrc/pool.c, kernels.threads.parallel_for):
every task runs once, on at most as many threads as the budget allows, and a call stays
correct while a foreign thread pool spins or another process keeps a core busy.

These are behaviour tests; how fast a call is in those contexts is measured by the
``InContext`` benchmarks, not here.
"""
import os
import subprocess
import sys

import numpy as np
import pytest
from numba import carray, cfunc, types

import kernels
from kernels import harness, threads
from kernels.rungs.rung3_numba_simd import address_as_voidptr

LOG = np.dtype([("log", np.intp), ("runs", np.intp), ("n_tasks", np.int64), ("spin", np.int64)])
MAX_THREADS = 8


@cfunc(types.void(types.voidptr, types.int64, types.int32))
def record_task(call_address, task, worker):
    """log[task] = (worker + 1, times run, the worker's how-manyth task this is, 1);
    ``spin`` steps of a floating-point recurrence first (which the compiler can neither
    vectorise nor fold), so that helpers have time to join."""
    call = carray(call_address, 1, LOG)[0]
    log = carray(address_as_voidptr(call.log), (call.n_tasks, 4), np.int64)
    runs = carray(address_as_voidptr(call.runs), MAX_THREADS, np.int64)  # a slot per worker
    x = 1.0
    for _ in range(call.spin):
        x = x * 1.0000001 + 1e-9
    runs[worker] += 1
    log[task, 0] = worker + 1
    log[task, 1] += 1
    log[task, 2] = runs[worker]
    log[task, 3] = x > 0  # keeps the recurrence


def run_logged(n_tasks, n_threads, spin=2_000, in_shares=False):
    """Run ``record_task`` over the pool; its log (n_tasks, 4): worker + 1, runs, the
    worker's sequence number, 1."""
    assert n_threads <= MAX_THREADS
    log, runs = np.zeros((n_tasks, 4), np.int64), np.zeros(MAX_THREADS, np.int64)
    call = np.zeros(1, LOG)
    call["log"], call["runs"], call["n_tasks"], call["spin"] = log.ctypes.data, runs.ctypes.data, n_tasks, spin
    threads.parallel_for(n_tasks, n_threads, record_task, call, in_shares=in_shares)
    return log


@pytest.mark.parametrize("in_shares", [False, True], ids=["in order", "in shares"])
@pytest.mark.parametrize("n_threads", [1, 2, 3, 8])
@pytest.mark.parametrize("n_tasks", [1, 2, 7, 1000])
def test_every_task_runs_once_on_a_worker_below_the_thread_count(n_tasks, n_threads, in_shares):
    log = run_logged(n_tasks, n_threads, in_shares=in_shares)
    assert (log[:, 1] == 1).all(), f"tasks run {sorted(set(log[:, 1]))} times"
    workers = log[:, 0] - 1
    assert workers.min() >= 0 and workers.max() < n_threads, f"workers {sorted(set(workers))}"
    if n_threads == 1:
        assert (workers == 0).all(), "one thread: the caller runs every task"


def test_no_task_for_an_empty_loop():
    assert run_logged(0, 2).shape == (0, 4)


@pytest.mark.parametrize("in_shares", [False, True], ids=["in order", "in shares"])
def test_each_thread_claims_in_index_order_from_its_own_share_first(in_shares):
    """In order, each thread's tasks rise (one queue); in shares, the caller's share is the
    first half of the indices and the helper's the second: each claims its own in rising
    order before any of the other's, so a helper's first task lies in the second half."""
    n_tasks = 200
    for attempt in range(8):
        log = run_logged(n_tasks, 2, spin=5_000 * 2**attempt, in_shares=in_shares)
        for worker in (1, 2):
            tasks = np.flatnonzero(log[:, 0] == worker)
            in_turn = tasks[np.argsort(log[tasks, 2])]  # as the worker ran them
            if in_shares:
                own = in_turn < n_tasks // 2 if worker == 1 else in_turn >= n_tasks // 2
            else:
                own = np.ones(len(in_turn), bool)  # one queue, every thread's own
            first_other = len(own) if own.all() else np.argmin(own)   # its first task not its own
            assert not own[first_other:].any(), f"worker {worker} went back to its own share after another's: {in_turn}"
            assert (np.diff(in_turn[:first_other]) > 0).all(), f"worker {worker} ran its share out of order"
            assert (np.diff(in_turn[first_other:]) > 0).all(), f"worker {worker} took another's out of order"
        if (log[:, 0] == 2).any():
            return  # a helper ran tasks: the claims of both were checked
    pytest.skip("no helper ran a task in 8 loops; the caller's claims were checked")


def test_helpers_never_outnumber_the_largest_budget_in_a_fresh_process():
    """A process whose budget was at most 2 started at most one helper thread, and its OS
    thread count grew by at most that: the budget limits how many threads run."""
    code = (
        "import os, numpy as np, kernels\n"
        "from kernels import threads\n"
        "tasks = lambda: len(os.listdir('/proc/self/task'))\n"
        "before = tasks()\n"
        "q = np.random.default_rng(0).standard_normal((8, 600, 32))\n"
        "for budget in (1, 2, 1, 2):\n"
        "    with threads.using_budget(budget):\n"
        "        for kernel in ('c_tiled', 'numba_tiled'):\n"
        "            kernels.attention(q, q, q, kernel=kernel)\n"
        "print(threads.helpers_started(), tasks() - before)\n"
    )
    env_run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                             env={**os.environ, "ATTNBENCH_THREADS": "1"})
    assert env_run.returncode == 0, env_run.stderr[-2000:]
    helpers, new_threads = map(int, env_run.stdout.split())
    assert helpers <= 1, f"{helpers} helpers under a budget of at most 2"
    # BLAS may start its own workers (one at a budget of 2); the pool adds at most one
    assert new_threads <= 2, f"{new_threads} new OS threads under a budget of at most 2"


def spin_matmul():
    """A matrix product on NumPy's BLAS pool: after it, OpenBLAS's workers spin on the other
    cores for a while (the foreign pool a call must not wait for)."""
    a = np.random.default_rng(1).standard_normal((256, 256))
    return a @ a


TILED = [name for name in ("numba_tiled", "c_tiled") if name in kernels.KERNELS]
CASES = [harness.Case("one head n=64", (1,), 64, 64, 64, 64),
         harness.Case("12 heads n=512 d=32", (12,), 512, 512, 32, 32),
         harness.Case("decode: 8 heads, 2 queries, 3,000 keys", (8,), 2, 3000, 64, 64, causal=True)]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.label)
@pytest.mark.parametrize("kernel", TILED)
def test_a_call_between_matmuls_is_correct(kernel, case):
    with threads.using_budget(2):
        for dtype in harness.DTYPES:
            spin_matmul()
            outcome = harness.check(kernel, case, dtype)
            spin_matmul()
            assert outcome.status == "ok", f"{kernel} {case.label} {outcome.dtype}: {outcome.comparison}"


@pytest.fixture
def busy_process():
    """Another process keeping one core busy for as long as the test runs."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield process
    process.kill()
    process.wait()


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.label)
@pytest.mark.parametrize("kernel", TILED)
def test_a_call_beside_a_busy_process_is_correct(kernel, case, busy_process):
    with threads.using_budget(2):
        for dtype in harness.DTYPES:
            outcome = harness.check(kernel, case, dtype)
            assert outcome.status == "ok", f"{kernel} {case.label} {outcome.dtype}: {outcome.comparison}"
    assert busy_process.poll() is None, "the busy process ended early: nothing was tested"


def test_helpers_do_take_tasks():
    """The pool is a pool: within a few tries of a long loop a helper runs some of it."""
    if threads.available_cpus() < 2:
        pytest.skip("one CPU: a helper would only take turns with the caller")
    # the first loop lasts ~20 ms, several scheduler ticks, and each next one twice as long
    # (to ~2.5 s): on a machine busy with other work a runnable helper still gets a core
    for attempt in range(8):
        if (run_logged(1000, 2, spin=5_000 * 2**attempt)[:, 0] == 2).any():
            return
    pytest.fail("no helper ran a task in 8 loops of 1,000 tasks, the last ~2.5 s long")
