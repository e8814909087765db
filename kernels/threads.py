"""One thread budget for every kernel: BLAS, Numba and the C kernel's OpenMP.

The budget defaults to the environment variable ``ATTNBENCH_THREADS`` when it is set,
else to ``OMP_NUM_THREADS`` (its first entry, as OpenMP reads a nesting list such as
``4,2``), as NumPy's BLAS, Numba and PyTorch users expect, else to the CPUs this process
may run on.  A value that is not a whole number >= 1 is a ValueError naming the
variable.  A budget above the CPU count is allowed (``oversubscribed()`` says so, and
``describe()`` puts it beside the budget wherever it is reported).

The BLAS pools are limited through threadpoolctl when the budget is first read and
whenever it changes; the Numba and C rungs read ``budget()`` on every call (Numba's
``set_num_threads``, OpenMP's ``num_threads`` clause), so nothing depends on import order.
"""
import contextlib
import numbers
import os

BUDGET_VARIABLES = ("ATTNBENCH_THREADS", "OMP_NUM_THREADS")  # read in this order

_budget = None


def available_cpus():
    """CPUs this process may run on (respects taskset/cgroup affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_budget():
    """The budget the environment asks for: ``ATTNBENCH_THREADS``, else the first entry of
    ``OMP_NUM_THREADS``, else ``available_cpus()``; an empty variable counts as unset.
    ValueError, naming the variable and its value, when it is not a whole number >= 1."""
    for variable in BUDGET_VARIABLES:
        value = os.environ.get(variable, "").strip()
        if value:
            first = value.split(",")[0].strip() if variable == "OMP_NUM_THREADS" else value
            return _positive(first, f"{variable}={os.environ[variable]!r}")
    return available_cpus()


def budget():
    """The current thread budget (an int >= 1)."""
    global _budget
    if _budget is None:
        _budget = default_budget()
        _limit_blas(_budget)
    return _budget


def set_budget(n_threads):
    """Set the budget for BLAS, Numba and OpenMP alike; returns the previous one.
    ValueError unless ``n_threads`` is a whole number >= 1."""
    global _budget
    n_threads = _positive(n_threads, f"thread budget {n_threads!r}")
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


def oversubscribed():
    """True when the budget asks for more threads than this process has CPUs."""
    return budget() > available_cpus()


def describe():
    """The budget as results record it: '2 threads', or '8 threads, oversubscribed: 2 CPUs'."""
    n_threads = budget()
    text = f"{n_threads} thread{'s' if n_threads != 1 else ''}"
    return f"{text}, oversubscribed: {available_cpus()} CPUs" if oversubscribed() else text


def _positive(value, what):
    """``value`` (an int or its decimal text) as an int >= 1; ValueError naming ``what``."""
    if isinstance(value, str) and value.strip().isdecimal():
        value = int(value)
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{what}: a thread budget must be a whole number >= 1")
    return int(value)


def _limit_blas(n_threads):
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=n_threads, user_api="blas")
