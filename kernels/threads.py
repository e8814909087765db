"""One thread budget for every kernel, and the one thread pool our tiled rungs run on.

The budget
----------
It defaults to the environment variable ``ATTNBENCH_THREADS`` when it is set, else to
``OMP_NUM_THREADS`` (its first entry, as OpenMP reads a nesting list such as ``4,2``), as
NumPy's BLAS and PyTorch users expect, else to the CPUs this process may run on.  A value
that is not a whole number >= 1 is a ValueError naming the variable.  A budget above the
CPU count is allowed (``oversubscribed()`` says so, and ``describe()`` puts it beside the
budget wherever it is reported).  The BLAS pools are limited through threadpoolctl when
the budget is first read and whenever it changes; the pool and the peers read
``budget()`` on every call, so nothing depends on import order.

The pool: a call never waits for a thread that has not started
---------------------------------------------------------------
Where a user runs attention, the other cores are rarely idle: inside a model, NumPy's
OpenBLAS leaves its workers spinning for ~2^28 cycles (about 0.1 s) after every product;
beside other work, another process holds a core.  A fork-join team (OpenMP, Numba's
threading layers) ends each call at a barrier every thread must reach, so a call lasts
as long as its most descheduled thread: on 2 cores a woken worker waited for the
scheduler's next tick (4 ms here), and a 20 µs call took 3.8 ms between two matmuls;
MiniLM's forward pass ran 3-6x slower on our kernels than on NumPy's.  So both tiled
rungs run on one small pool of our own (``csrc/pool.c``), whose rules are:

1. The caller works.  Tasks (c_tiled: (head, query tile) or (head, key chunk);
   numba_tiled: the same, compiled as ``cfunc`` callbacks) are claimed from one atomic
   counter, the calling thread first, heaviest first.
2. Helpers help when they are awake.  Up to budget - 1 helper threads are woken (futex)
   and claim tasks once they run; the caller waits only for tasks a helper has started.
   A call is never slower than one thread plus a wake-up; when the other core is taken,
   it runs at one thread's speed instead of stalling.
3. Small calls stay on the caller: below ``POOL_MIN_FLOPS`` (2e5 flops) waking a helper
   costs more than it saves (``threads_for``).
4. Nobody spins for long.  A helper polls for the next call for 0.1 ms, yielding its
   core at each poll, then sleeps; a caller waiting for a helper's last task polls for
   20 µs, then sleeps, so that its core goes idle and the scheduler can move a
   preempted helper there.
5. One call holds the helpers at a time; a concurrent call (another Python thread) runs
   on its own thread, so no call runs more threads than the budget.

What the BLAS pool is asked: only its thread count (threadpoolctl), the budget.  Its
spinning is the user's to shorten, and worth it inside a model: with
``OPENBLAS_THREAD_TIMEOUT=20`` (``BLAS_SPIN_VARIABLE``) in the environment before NumPy loads (2^20 cycles,
~0.4 ms), a call between two matmuls gets both cores again (README, Threads).
"""
import contextlib
import functools
import numbers
import os

BUDGET_VARIABLES = ("ATTNBENCH_THREADS", "OMP_NUM_THREADS")  # read in this order
# How many cycles (2^value) OpenBLAS's workers spin after a call; read once, when it loads
BLAS_SPIN_VARIABLE = "OPENBLAS_THREAD_TIMEOUT"

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
    """Set the budget for BLAS and the pool alike; returns the previous one.
    ValueError unless ``n_threads`` is a whole number >= 1."""
    global _budget
    n_threads = _positive(n_threads, f"thread budget {n_threads!r}")
    previous = budget()
    _budget = n_threads
    _limit_blas(n_threads)
    return previous


@contextlib.contextmanager
def using_budget(n_threads):
    """Context manager: run the body under a budget of ``n_threads``, then restore the one
    before (``kernels.thread_budget()`` reads the budget, ``set_thread_budget`` sets it)."""
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


def threads_for(flops):
    """The threads worth using for a call of ``flops`` under the budget: the pool's rule
    (1 below the size at which waking a helper costs more than it saves)."""
    return _pool().lib.pool_threads_for(budget(), flops)


def address(array):
    """Where ``array``'s data starts, as an int (for a record a compiled task reads); any
    layout (a strided view's first element).  A C-contiguous array's through cffi's view of
    its buffer, a fraction of a microsecond; any other's from NumPy's array interface, a
    dictionary built per call (a microsecond, several after a call that swept the caches:
    a call's fixed cost)."""
    ffi = _pool().ffi
    try:
        return int(ffi.cast("uintptr_t", ffi.from_buffer(array)))
    except (TypeError, ValueError, BufferError):   # not C-contiguous (a view with a head stride)
        return array.__array_interface__["data"][0]


def parallel_for(n_tasks, threads, task, call, in_shares=False):
    """Run a compiled ``task`` for every index in [0, n_tasks) on the pool: the calling
    thread and up to ``threads - 1`` helpers, returning when every task has run.
    ``task`` is a Numba ``cfunc`` of the pool's signature void(void *call, int64 index,
    int32 worker); ``call`` is the NumPy array whose memory it reads (the caller keeps it
    and every array it points to alive).  The GIL is released meanwhile.  ``in_shares``:
    each thread claims a contiguous share of the indices first, the same share each call
    (for loops repeated over the same data, as a decode step's chunks of one cache);
    otherwise the threads claim from one queue in index order (csrc/attention.h,
    enum pool_order)."""
    ffi, lib = _pool().ffi, _pool().lib
    lib.pool_run(n_tasks, threads, lib.POOL_IN_SHARES if in_shares else lib.POOL_IN_ORDER,
                 ffi.cast("pool_task_fn", task.address), ffi.from_buffer(call))


def helpers_started():
    """Helper threads the pool has started so far in this process."""
    return _pool().lib.pool_helpers_started()


@functools.cache
@functools.cache
def _pool():
    """The C extension that holds the pool (built with c_tiled)."""
    try:
        from . import _attention_c
    except ImportError as missing:
        from .api import ExtensionNotBuilt

        raise ExtensionNotBuilt(missing) from missing
    return _attention_c


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
