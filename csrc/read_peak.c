/* The memory roof: how fast this CPU reads a buffer of doubles on the pool's threads, the
   ceiling a decode step (which reads its cache once) is read against.

   The buffer is cut into READ_TASKS_PER_THREAD contiguous parts per thread, claimed from
   the pool as a decode step's (K/V head, key chunk) tasks are, so a helper that wakes late
   leaves parts to the caller rather than a part the caller waits for.  Each part is summed
   in READ_CHAINS vector accumulators: the adds' latency (4 cycles) times 2 ports needs 8
   independent chains, so the loads, not the adds, set the pace, at every level of the
   memory hierarchy.  A sum rather than a plain read, so that nothing can be discarded; it
   is returned.  Part sums are added in part order: the result does not depend on which
   thread ran which part.

   As in fma_peak.c, the file is compiled for the baseline ISA, and the AVX2 and AVX-512
   loops carry a target attribute and run only where the CPU has the features; the generic
   loop is portable C on 16-byte vectors (SSE2 on baseline x86-64), two 16-byte loads a
   cycle, which reads faster than a core's share of L3 or memory bandwidth but not of L2. */

#include "attention.h"

#define READ_CHAINS 8
#define READ_TASKS_PER_THREAD 4
#define READ_MIN_PART 8192   /* doubles (64 KiB): a smaller part is not worth a claim */
#define READ_MAX_TASKS 1024

/* One part's sum: READ_CHAINS `vec`s of doubles (loaded from any 8-byte alignment), then
   the tail one by one. */
#define READ_LOOP(name, attributes, bytes)                                                  \
    static attributes double name(const double *x, int64_t n)                             \
    {                                                                                       \
        typedef double vec __attribute__((vector_size(bytes), aligned(8)));                 \
        enum { LANES = bytes / sizeof(double), STEP = READ_CHAINS * LANES };                \
        vec acc[READ_CHAINS] = {{0}};                                                       \
        int64_t i = 0;                                                                      \
        for (; i + STEP <= n; i += STEP)                                                    \
            for (int chain = 0; chain < READ_CHAINS; chain++)                               \
                acc[chain] += *(const vec *)(x + i + chain * LANES);                        \
        double sum = 0.0;                                                                   \
        for (int chain = 0; chain < READ_CHAINS; chain++)                                   \
            for (int lane = 0; lane < LANES; lane++)                                        \
                sum += acc[chain][lane];                                                    \
        for (; i < n; i++)                                                                  \
            sum += x[i];                                                                    \
        return sum;                                                                         \
    }

READ_LOOP(read_avx512, __attribute__((target("avx512f"))), 64)
READ_LOOP(read_avx2, __attribute__((target("avx2"))), 32)
READ_LOOP(read_generic, , 16)

typedef double (*read_fn)(const double *x, int64_t n);

struct read_run {
    read_fn loop;
    const double *x;
    int64_t n, tasks;
    double sums[READ_MAX_TASKS];
};

static void read_task(void *context, int64_t task, int32_t worker)
{
    (void)worker;
    struct read_run *run = context;
    const int64_t start = run->n * task / run->tasks, stop = run->n * (task + 1) / run->tasks;
    run->sums[task] = run->loop(run->x + start, stop - start);
}

double attn_read_sum(const double *x, int64_t n, int32_t threads)
{
    __builtin_cpu_init();
    struct read_run run = {
        .loop = __builtin_cpu_supports("avx512f") ? read_avx512
                : __builtin_cpu_supports("avx2") ? read_avx2 : read_generic,
        .x = x,
        .n = n > 0 ? n : 0,
    };
    if (threads < 1)
        threads = 1;
    const int64_t most = n / READ_MIN_PART, wanted = (int64_t)threads * READ_TASKS_PER_THREAD;
    run.tasks = most < 1 ? 1 : most < wanted ? most : wanted;
    if (run.tasks > READ_MAX_TASKS)
        run.tasks = READ_MAX_TASKS;
    pool_run(run.tasks, threads, POOL_IN_SHARES, read_task, &run);
    double total = 0.0;
    for (int64_t t = 0; t < run.tasks; t++)
        total += run.sums[t];
    return total;
}
