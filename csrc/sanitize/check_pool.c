/* The thread pool (csrc/pool.c) under ThreadSanitizer: `make sanitize` builds this driver with
   -fsanitize=thread and runs it.

   Every loop's tasks write plain (non-atomic) memory that the caller reads after pool_run
   returns, so a missing happens-before edge between a helper's task and the caller is a
   data race TSan reports.  Checked besides: every task runs exactly once, on a worker index
   below the loop's thread count; loops of 0, 1, 2, 7 and 1,000 tasks on 1, 2, 3 and 8
   threads, in order and in shares; loops started from several threads at once (one holds
   the helpers, the others run alone); a task that starts a loop itself (nested: it runs
   alone); and loops back to back, in order and in shares in turn, so that helpers join
   late, mid-loop, or after the loop has closed, and meet a loop of another order.

   Exit status 1 if a check fails; a TSan report aborts the run (halt_on_error=1). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "attention.h"

#define MAX_TASKS 1000
#define CONCURRENT_CALLERS 4
#define LOOPS_PER_CALLER 300

struct loop {
    int32_t threads;
    enum pool_order order;
    int64_t n_tasks;
    int64_t spin;                 /* busy work per task, so that helpers have time to join */
    int nested;                   /* each task starts a loop of its own */
    int32_t worker[MAX_TASKS];    /* plain writes, read by the caller after pool_run */
    int32_t runs[MAX_TASKS];
};

static atomic_int failures;

static void fail(const char *what, const struct loop *l, int64_t task)
{
    fprintf(stderr, "FAIL %s: %lld tasks on %d threads, task %lld\n", what, (long long)l->n_tasks,
            l->threads, (long long)task);
    atomic_fetch_add(&failures, 1);
}

static void run_loop(struct loop *l);

static void record(void *context, int64_t task, int32_t worker)
{
    struct loop *l = context;
    volatile int64_t sink = 0;
    for (int64_t i = 0; i < l->spin; i++)
        sink += i;
    l->worker[task] = worker;
    l->runs[task] += 1;
    if (l->nested) {
        struct loop inner = {.threads = 2, .order = POOL_IN_SHARES, .n_tasks = 5, .spin = 10};
        run_loop(&inner);
    }
}

/* Runs the loop and checks it: every task once, on a worker below the thread count. */
static void run_loop(struct loop *l)
{
    for (int64_t t = 0; t < l->n_tasks; t++)
        l->runs[t] = 0, l->worker[t] = -1;
    pool_run(l->n_tasks, l->threads, l->order, record, l);
    for (int64_t t = 0; t < l->n_tasks; t++) {
        if (l->runs[t] != 1)
            fail("a task did not run exactly once", l, t);
        if (l->worker[t] < 0 || l->worker[t] >= (l->threads > 1 ? l->threads : 1))
            fail("a task ran on a worker index outside [0, threads)", l, t);
    }
}

static void *caller(void *arg)
{
    const int index = (int)(intptr_t)arg;
    struct loop *l = malloc(sizeof *l);
    for (int i = 0; i < LOOPS_PER_CALLER; i++) {
        *l = (struct loop){.threads = 2 + (i + index) % 3, .order = (enum pool_order)(i % 2),
                           .n_tasks = 1 + (i * 37 + index) % 200,
                           .spin = (i % 4) * 200, .nested = i % 50 == 0};
        run_loop(l);
    }
    free(l);
    return NULL;
}

int main(void)
{
    static const int64_t task_counts[] = {0, 1, 2, 7, MAX_TASKS};
    static const int32_t thread_counts[] = {1, 2, 3, 8};
    static struct loop l;
    int loops = 0;
    for (size_t i = 0; i < sizeof task_counts / sizeof task_counts[0]; i++)
        for (size_t j = 0; j < sizeof thread_counts / sizeof thread_counts[0]; j++)
            for (int spin = 0; spin <= 1000; spin += 1000)
                for (int order = 0; order < 2; order++, loops++) {
                    l = (struct loop){.threads = thread_counts[j], .order = (enum pool_order)order,
                                      .n_tasks = task_counts[i], .spin = spin};
                    run_loop(&l);
                }
    for (int i = 0; i < 200; i++, loops++) {   /* back to back: helpers join late or not at all */
        l = (struct loop){.threads = 2, .order = (enum pool_order)(i % 2), .n_tasks = 3 + i % 20,
                          .nested = i % 40 == 0};
        run_loop(&l);
    }
    pthread_t callers[CONCURRENT_CALLERS];
    for (int i = 0; i < CONCURRENT_CALLERS; i++)
        pthread_create(&callers[i], NULL, caller, (void *)(intptr_t)i);
    for (int i = 0; i < CONCURRENT_CALLERS; i++)
        pthread_join(callers[i], NULL);
    loops += CONCURRENT_CALLERS * LOOPS_PER_CALLER;
    printf("%d loops, %d helper threads started: %s\n", loops, pool_helpers_started(),
           atomic_load(&failures) ? "FAILED" : "all passed");
    return atomic_load(&failures) ? 1 : 0;
}
