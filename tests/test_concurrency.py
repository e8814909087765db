"""Every kernel called from several Python threads at once, while another thread changes the
thread budget: each result is held to the harness's reference and budget, and the process
never aborts or hangs.  Our tiled rungs share one thread pool (kernels.threads): calls that
find its helpers taken run on their own thread, and this is where that is exercised.

The calls run in a child process (this file run as a script), so that an abort or a hang
fails a test instead of killing pytest.  The child prints one JSON line: what ran, what
failed.
"""
import argparse
import json
import subprocess
import sys
import threading
import time

import pytest

import kernels

CALLER_THREADS = 6
CALLS_PER_KERNEL = 6  # per thread: the threads take the kernels one after another, together
CHILD_TIMEOUT = 300  # seconds: a child still running then has hung
PAIR_WAIT = 1.0  # seconds a kernel's run waits for a second run to start with it


def run_child(kernel_names):
    """Run this file as a script over ``kernel_names``; its JSON report (or a failure that
    says how the child ended)."""
    command = [sys.executable, __file__, "--kernels", ",".join(kernel_names),
               "--threads", str(CALLER_THREADS), "--calls", str(CALLS_PER_KERNEL)]
    try:
        child = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child calling {kernel_names} from {CALLER_THREADS} threads hung (> {CHILD_TIMEOUT} s)")
    assert child.returncode == 0, (f"the child calling {kernel_names} from {CALLER_THREADS} threads ended with "
                                   f"status {child.returncode}:\n{child.stderr[-3000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def assert_all_calls_kept_the_contract(report):
    print(f"{report['calls']} calls from {CALLER_THREADS} threads in {report['seconds']:.1f} s, "
          f"{report['budget_changes']} budget changes; most runs of one kernel at once: {report['max_in_flight']}")
    assert not report["failures"], "\n".join(report["failures"])
    assert report["calls"] == CALLER_THREADS * CALLS_PER_KERNEL * len(report["max_in_flight"])
    overlapped = {name for name, most in report["max_in_flight"].items() if most >= 2}
    assert overlapped == set(report["max_in_flight"]), "some kernel never ran twice at once: nothing tested"
    assert report["budget_changes"] >= 2, "the budget never changed while calls ran"


def test_every_kernel_from_many_threads_while_the_budget_changes():
    """Every registered kernel, peers included."""
    report = run_child(list(kernels.KERNELS))
    assert_all_calls_kept_the_contract(report)
    assert set(report["max_in_flight"]) == set(kernels.KERNELS)


# -- the child --------------------------------------------------------------------------------

def work_items(kernel_names):
    """kernel -> the (case, dtype) of every harness check it takes, each run once here,
    which warms every JIT and peer graph and caches the references before the threads start;
    and the failures of those single-threaded runs."""
    from kernels import harness

    cases = [
        harness.Case("decode: 2 queries, 3 key chunks", (2,), 2, 600, 32, 32, causal=True),
        harness.Case("heads (2,2) n=130", (2, 2), 130, 130, 32, 32),
        harness.Case("n_q=40 > n_k=25", (3,), 40, 25, 16, 8, causal=True),
        harness.Case("NaN in v", (2,), 20, 40, 8, 8, causal=True, poison="nan_v"),
    ]
    items, failures = {}, []
    for name in kernel_names:
        items[name] = []
        for case in cases:
            for dtype in harness.DTYPES:
                outcome = harness.check(name, case, dtype)
                if outcome.status == "FAIL":
                    failures.append(f"one thread: {name} {case.label} {outcome.dtype}: {outcome.comparison}")
                if outcome.status == "ok":
                    items[name].append((case, dtype))
    return items, failures


def child(kernel_names, n_threads, calls_per_kernel):
    """Every thread calls every kernel ``calls_per_kernel`` times, the kernels in the same
    order and each call started with the other threads' (a barrier), so that calls of one
    kernel overlap (a kernel's own shared state is what races), each thread on other cases
    and dtypes, while one more thread flips the thread budget between 1 and 2."""
    from kernels import harness

    items, failures = work_items(kernel_names)
    lock = threading.Lock()
    in_flight = dict.fromkeys(kernel_names, 0)
    most_in_flight = dict.fromkeys(kernel_names, 0)
    counts = {"calls": 0, "budget_changes": 0}

    arrived = threading.Condition(lock)

    def counted(name, run):
        """``run`` (a rung's), counting how many of the kernel's runs are under way at once.
        A run that finds itself alone waits (up to PAIR_WAIT) for a second one to arrive,
        so that two runs start together: on a loaded machine the barrier alone let a fast
        kernel's calls go one after another, and then nothing was tested."""
        def counted_run(*args, **kwargs):
            with arrived:
                in_flight[name] += 1
                most_in_flight[name] = max(most_in_flight[name], in_flight[name])
                arrived.notify_all()
                arrived.wait_for(lambda: in_flight[name] >= 2, timeout=PAIR_WAIT)
            try:
                return run(*args, **kwargs)
            finally:
                with lock:
                    in_flight[name] -= 1
        return counted_run

    for name in kernel_names:
        module = kernels.KERNELS[name].implementation  # Kernel.run reads module.run on each call
        module.run = counted(name, module.run)
    start_together = threading.Barrier(n_threads, timeout=CHILD_TIMEOUT / 2)
    done = threading.Event()

    def caller(index):
        for name in kernel_names:
            if index == 0:  # so that an abort's message ends with the kernel that was running
                print(f"calling {name} from {n_threads} threads", file=sys.stderr, flush=True)
            for call in range(calls_per_kernel):
                case, dtype = items[name][(call + index) % len(items[name])]
                try:
                    start_together.wait()
                    outcome = harness.check(name, case, dtype)
                    if outcome.status != "ok":
                        failures.append(f"thread {index}: {name} {case.label} {outcome.dtype}: {outcome.status} "
                                        f"{outcome.comparison or outcome.note}")
                except Exception as error:  # noqa: BLE001 -- any exception is a failure to report
                    failures.append(f"thread {index}: {name} {case.label}: {type(error).__name__}: {error}")
                with lock:
                    counts["calls"] += 1

    def budget_changer():
        while not done.is_set():
            kernels.threads.set_budget(1 + counts["budget_changes"] % 2)
            counts["budget_changes"] += 1
            time.sleep(0.002)

    start = time.perf_counter()
    changer = threading.Thread(target=budget_changer)
    callers = [threading.Thread(target=caller, args=(index,)) for index in range(n_threads)]
    changer.start()
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join()
    done.set()
    changer.join()
    return {"seconds": time.perf_counter() - start, "failures": failures,
            "calls": counts["calls"], "budget_changes": counts["budget_changes"], "max_in_flight": most_in_flight}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--calls", type=int, required=True, help="per thread and kernel")
    arguments = parser.parse_args()
    print(json.dumps(child(arguments.kernels.split(","), arguments.threads, arguments.calls)))
