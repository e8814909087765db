"""One thread budget for every kernel: BLAS, Numba and the C kernel's OpenMP.

The budget defaults to the CPUs this process may run on, or to the environment
variable ``ATTNBENCH_THREADS``.  The BLAS pools are limited through threadpoolctl
when the budget is first read and whenever it changes; the Numba and C rungs read
``budget()`` on every call (Numba's ``set_num_threads``, OpenMP's ``num_threads``
clause), so nothing depends on ``OMP_NUM_THREADS`` or on import order.
"""
import contextlib
import os

_budget = None


def available_cpus():
    """CPUs this process may run on (respects taskset/cgroup affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def budget():
    """The current thread budget (an int >= 1)."""
    global _budget
    if _budget is None:
        env = os.environ.get("ATTNBENCH_THREADS")
        _budget = int(env) if env else available_cpus()
        if _budget < 1:
            raise ValueError(f"ATTNBENCH_THREADS must be >= 1, got {env!r}")
        _limit_blas(_budget)
    return _budget


def set_budget(n_threads):
    """Set the budget for BLAS, Numba and OpenMP alike; returns the previous one."""
    global _budget
    n_threads = int(n_threads)
    if n_threads < 1:
        raise ValueError(f"thread budget must be >= 1, got {n_threads}")
    previous = budget()
    _budget = n_threads
    _limit_blas(n_threads)
    return previous


@contextlib.contextmanager
def thread_budget(n_threads):
    """Context manager: run the body under a budget of ``n_threads``."""
    previous = set_budget(n_threads)
    try:
        yield n_threads
    finally:
        set_budget(previous)


def _limit_blas(n_threads):
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=n_threads, user_api="blas")
