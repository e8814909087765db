/* attnbench's thread pool: the caller works, helpers join when they are awake.

   Why not OpenMP (or any fork-join team): a parallel region ends at a barrier that every
   thread of the team must reach, so a call lasts as long as its most descheduled thread.
   Inside a model that thread is often not running: after every matrix product OpenBLAS's
   worker spins on the other core for about 2^28 cycles (~0.1 s), and on a 2-core machine
   a woken OpenMP worker then waits for the scheduler's next tick (4 ms) to get a core, so a
   20 µs attention call took 3.8 ms between two matmuls; beside another busy process, the
   same.  Here nothing waits for a thread that has not started:

   - The caller claims tasks from the first moment, so a call whose helpers never get a
     core runs at one thread's speed, no slower.
   - A helper is woken (futex) and, when it runs, claims tasks too; the caller waits at the
     end only for tasks a helper has already started.  While it waits it first polls
     briefly (a microsecond and a half without yielding, then yielding), then sleeps, so
     that its core goes idle and the scheduler can move a preempted helper there to finish.
   - A helper that finds itself on the caller's core yields instead of claiming: there it
     would only take turns with the caller, and could hold a task the caller then waits for.
   - After a loop, a helper polls for the next one for HELPER_SPIN_NS only, yielding its
     core at each poll, then sleeps: long enough to serve calls made back to back, short
     enough to give the core back to the BLAS pool before the next product needs it.

   Claims come from shares: one counter of the next task index per share, each on its own
   cache line, and a worker claims from its own share first, then from the others' in turn.
   A loop in order (attention.h's enum pool_order) has one share, which every worker claims
   from; a loop in shares one per worker, each a contiguous run of task indices, so that a
   loop repeated over the same data (a decode step over one cache) gives each core the bytes
   it read last time (measured, one query over 1,024 cached float32 tokens of 8 heads, 2
   threads, 2-core Xeon: 58-59 us -> 51-53 us a step; 56-57 us with the shares interleaved
   instead, worker w taking w, w + 2, ...).

   A late helper can never run a task of another loop: each claim counter carries the
   loop's generation beside the next task index, and a claim is one compare-and-swap of
   both.  The loop's fields (task, context, n_tasks, shares) are written only while no claim
   can succeed (every share's index reads CLOSED), and what a helper read of them counts only
   if its next claim succeeds, which the caller cannot outlive: it returns after every
   claimed task has finished.

   One loop holds the helpers at a time: a call that finds them taken (another Python
   thread's call, or a task that calls in again) runs all its tasks on its own thread, so
   a call never runs more than `threads` threads.  Linux only (futex). */
#define _GNU_SOURCE
#include "attention.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_HELPERS 255
#define CLOSED 0xFFFFFFFFu               /* claim index: no loop is open */
#define MAX_POOLED_TASKS 0xFFFFFFFEu     /* loops with more tasks run on the caller alone */
/* Poll windows.  A helper woken from sleep joined a loop 6-35 µs after the caller opened
   it (2-core VM); one still polling joins at once, so 0.1 ms of polling serves calls made
   back to back (a decode loop, a layer's heads) without a wake-up, and every poll yields,
   so a thread that needs the core meanwhile (the caller, a BLAS worker) gets it. */
#ifndef HELPER_SPIN_NS
#define HELPER_SPIN_NS 100000
#endif
/* A call below this many flops runs on the caller: a helper's wake-up costs about what it
   saves.  Measured with this pool (c_tiled.run, one head, d = d_v = 64, float32, medians of
   600 calls, 1 thread against 2 in turn, 2-core AMD EPYC VM): n_q = 1, n_k = 256 (6.6e4
   flops) 7.9 vs 8.0 µs; n_k = 1024 (2.6e5) 17.6 vs 15.4 µs; n_q = n_k = 32 (2.6e5) 21.6
   vs 18.5 µs; n_q = n_k = 64 (1.0e6) 41.6 vs 31.6 µs. */
#ifndef POOL_MIN_FLOPS
#define POOL_MIN_FLOPS 2e5
#endif
/* How long a caller whose own claims are done polls (yielding) for the helpers' last tasks
   before it sleeps: a task that is running ends within this, a preempted one does not. */
#ifndef CALLER_SPIN_NS
#define CALLER_SPIN_NS 20000
#endif
/* The first of it without yielding: a helper's last task usually ends within a microsecond
   of the caller's (it joined a third of a microsecond late), and a poll that yields sees
   the end up to a sched_yield late (0.16 us here).  Measured, one head, n = 64, float32,
   2 threads, the C entry point, in-process A/B (2-core Xeon VM): 1.007-1.023x.  Not the
   helpers' polls: the caller's and theirs both without yielding for 2-5 us ran 0.91x. */
#ifndef CALLER_BUSY_NS
#define CALLER_BUSY_NS 1500
#endif

/* A worker's share of a loop's tasks: its claim word, alone on its cache line (claims from
   one share by one thread then stay in that thread's cache).  A joining helper's reads of
   the caller's CPU, the loop's fields and share 0's claim word do not depend on one another,
   so they can overlap.  Tried and not taken: share 0's claim word on one line with the fields,
   that line taken for ownership before its reads (a lock xadd of 0, sparing the claim's
   second fetch): the helper's first claim came 280-370 TSC cycles later (rdtsc; a locked
   instruction is a barrier the reads after it wait for), one head, n = 64: 0.95-0.98x. */
struct share {
    _Alignas(64) _Atomic uint64_t claim;   /* generation << 32 | next task index (CLOSED between loops) */
};

static struct {
    struct share share[MAX_HELPERS + 1];   /* the open loop's shares */
    _Atomic int32_t shares;          /* how many (relaxed: published by the claims) */
    _Atomic int64_t finished;        /* tasks of the open loop that have run */
    _Atomic(pool_task_fn) task;      /* the open loop (relaxed: published by claim) */
    _Atomic(void *) context;
    _Atomic int64_t n_tasks;
    _Atomic int32_t caller_cpu;      /* where the caller of the open loop started it */
    _Atomic uint32_t caller_sleeping;   /* futex: the caller sleeps until the last task ends */
    atomic_flag taken;               /* a loop holds the helpers */
    uint32_t generation;             /* of the last loop; written by the holder only */
    /* per helper: the generation it is invited to (futex) and whether it sleeps on it */
    _Atomic uint32_t invitation[MAX_HELPERS];
    _Atomic uint32_t sleeping[MAX_HELPERS];
    pthread_mutex_t start_lock;
    _Atomic int32_t started;
} pool = {
    .taken = ATOMIC_FLAG_INIT,
    .start_lock = PTHREAD_MUTEX_INITIALIZER,
};

static long futex(_Atomic uint32_t *word, int op, uint32_t value)
{
    return syscall(SYS_futex, (uint32_t *)word, op | FUTEX_PRIVATE_FLAG, value, NULL, NULL, 0);
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Polls until *word != value or ns have passed; returns whether it changed.  Each poll
   yields the core: a thread that shares it (the caller, a BLAS worker) runs meanwhile, and
   on an idle core the yield returns at once. */
static int poll_change(_Atomic uint32_t *word, uint32_t value, int64_t ns)
{
    const int64_t until = now_ns() + ns;
    while (atomic_load(word) == value) {
        if (now_ns() >= until)
            return 0;
        sched_yield();
    }
    return 1;
}

static int loop_open(uint32_t generation)
{
    const uint64_t claim = atomic_load(&pool.share[0].claim);
    return (uint32_t)(claim >> 32) == generation && (uint32_t)claim != CLOSED;
}

/* Claims and runs tasks of loop `generation` until none is left: from its own share first
   (worker modulo shares), then from the others' in turn; the caller is worker 0. */
static void work(uint32_t generation, int32_t worker)
{
    /* Read before the claims: if one succeeds, the loop was open at it, so these are the
       loop's (its fields change only while every share's index reads CLOSED). */
    const int32_t shares = atomic_load_explicit(&pool.shares, memory_order_relaxed);
    const int64_t n_tasks = atomic_load(&pool.n_tasks);
    for (int32_t i = 0; i < shares; i++) {
        const int32_t p = (worker + i) % shares;
        _Atomic uint64_t *word = &pool.share[p].claim;
        const int64_t end = n_tasks * (p + 1) / shares;
        uint64_t claim = atomic_load(word);
        for (;;) {
            const uint32_t index = (uint32_t)claim;
            if ((uint32_t)(claim >> 32) != generation || index == CLOSED)
                return;
            if ((int64_t)index >= end)
                break;
            if (!atomic_compare_exchange_weak(word, &claim, claim + 1))
                continue;   /* claim now holds the current value */
            pool_task_fn task = atomic_load_explicit(&pool.task, memory_order_relaxed);
            task(atomic_load_explicit(&pool.context, memory_order_relaxed), index, worker);
            if (atomic_fetch_add(&pool.finished, 1) + 1 == n_tasks
                && atomic_exchange(&pool.caller_sleeping, 0))
                futex(&pool.caller_sleeping, FUTEX_WAKE, 1);
            claim = atomic_load(word);
        }
    }
}

static void *helper_main(void *arg)
{
    const int32_t id = (int32_t)(intptr_t)arg;   /* worker index id + 1 */
    uint32_t seen = 0;   /* a loop that invited it before it ran is still joined */
    for (;;) {
        if (!poll_change(&pool.invitation[id], seen, HELPER_SPIN_NS)) {
            atomic_store(&pool.sleeping[id], 1);
            while (atomic_load(&pool.invitation[id]) == seen)
                futex(&pool.invitation[id], FUTEX_WAIT, seen);
            atomic_store(&pool.sleeping[id], 0);
        }
        seen = atomic_load(&pool.invitation[id]);
        /* On the caller's core a helper would only take turns with it (and could hold a task
           the caller then waits for): let the caller run until the scheduler moves it. */
        while (sched_getcpu() == atomic_load(&pool.caller_cpu) && loop_open(seen))
            sched_yield();
        work(seen, id + 1);
    }
    return NULL;
}

/* Starts helpers until `wanted` exist (or thread creation fails: the loop then has fewer). */
static int32_t start_helpers(int32_t wanted)
{
    if (wanted > MAX_HELPERS)
        wanted = MAX_HELPERS;
    if (atomic_load(&pool.started) >= wanted)
        return wanted;
    pthread_mutex_lock(&pool.start_lock);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    for (int32_t id = atomic_load(&pool.started); id < wanted; id++) {
        pthread_t thread;
        if (pthread_create(&thread, &attr, helper_main, (void *)(intptr_t)id) != 0)
            break;
        atomic_store(&pool.started, id + 1);
    }
    pthread_attr_destroy(&attr);
    pthread_mutex_unlock(&pool.start_lock);
    const int32_t started = atomic_load(&pool.started);
    return started < wanted ? started : wanted;
}

/* A child of fork() has none of its parent's helpers: start its own when first needed. */
static void forget_helpers_in_child(void)
{
    atomic_store(&pool.started, 0);
    atomic_flag_clear(&pool.taken);
    for (int32_t p = 0; p <= MAX_HELPERS; p++)
        atomic_store(&pool.share[p].claim, CLOSED);
    pthread_mutex_init(&pool.start_lock, NULL);
}

__attribute__((constructor)) static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, forget_helpers_in_child);
}

int32_t pool_threads_for(int32_t threads, double flops)
{
    return flops < POOL_MIN_FLOPS || threads < 1 ? 1 : threads;
}

void pool_run(int64_t n_tasks, int32_t threads, enum pool_order order, pool_task_fn task, void *context)
{
    if (n_tasks <= 0)
        return;
    const int alone = threads <= 1 || n_tasks == 1 || (uint64_t)n_tasks > MAX_POOLED_TASKS
                      || atomic_flag_test_and_set(&pool.taken);
    if (alone) {
        for (int64_t t = 0; t < n_tasks; t++)
            task(context, t, 0);
        return;
    }
    const int32_t helpers = start_helpers((int32_t)(threads - 1 < n_tasks - 1 ? threads - 1 : n_tasks - 1));

    /* Open the loop: its fields first, then the claim counters that publish them. */
    const uint32_t generation = ++pool.generation;
    atomic_store_explicit(&pool.task, task, memory_order_relaxed);
    atomic_store_explicit(&pool.context, context, memory_order_relaxed);
    atomic_store(&pool.n_tasks, n_tasks);
    atomic_store(&pool.finished, 0);
    atomic_store(&pool.caller_cpu, sched_getcpu());
    const int32_t shares = order == POOL_IN_SHARES ? helpers + 1 : 1;
    atomic_store_explicit(&pool.shares, shares, memory_order_relaxed);
    for (int32_t p = 0; p < shares; p++)
        atomic_store(&pool.share[p].claim, (uint64_t)generation << 32 | (uint64_t)(n_tasks * p / shares));
    for (int32_t id = 0; id < helpers; id++) {
        atomic_store(&pool.invitation[id], generation);
        if (atomic_load(&pool.sleeping[id]))
            futex(&pool.invitation[id], FUTEX_WAKE, 1);
    }

    work(generation, 0);
    /* Every task is claimed: close the loop, so that a helper that wakes from now on
       claims nothing, then wait for the tasks helpers are still running. */
    for (int32_t p = 0; p < shares; p++)
        atomic_store(&pool.share[p].claim, (uint64_t)generation << 32 | CLOSED);
    const int64_t busy_until = now_ns() + CALLER_BUSY_NS;
    while (atomic_load_explicit(&pool.finished, memory_order_relaxed) < n_tasks && now_ns() < busy_until)
        continue;
    const int64_t until = now_ns() + CALLER_SPIN_NS;
    while (atomic_load(&pool.finished) < n_tasks) {
        if (now_ns() < until) {
            sched_yield();
            continue;
        }
        atomic_store(&pool.caller_sleeping, 1);
        while (atomic_load(&pool.finished) < n_tasks) {
            futex(&pool.caller_sleeping, FUTEX_WAIT, 1);
            atomic_store(&pool.caller_sleeping, 1);
        }
        atomic_store(&pool.caller_sleeping, 0);
    }
    atomic_flag_clear(&pool.taken);
}

int32_t pool_helpers_started(void)
{
    return atomic_load(&pool.started);
}
