/* The compute roof: how many fused multiply-adds per second this CPU retires, per ISA and
   precision, on one thread or on the pool's threads, and where it has AVX512-BF16 how many
   bfloat16 dot products.

   Each loop keeps FMA_CHAINS accumulators, each its own dependency chain acc = acc · m + c,
   so the core always has an independent FMA ready: a chain issues one FMA per latency
   (4-5 cycles on Haswell, Zen and Skylake) and the CPU has up to 2 FMA ports, so 12 chains
   cover latency × ports with room to spare, and 12 accumulators + 2 operands still fit in
   AVX2's 16 ymm registers.  Nothing is loaded or stored inside the loop.  The chains start
   at different values (identical chains could be merged into one) and converge to
   c / (1 - m) = 1, far from overflow and denormals, which would slow some CPUs down.
   Their sum is written where the caller reads it, so the loop cannot be discarded.

   As in attention.c, the file is compiled for the baseline ISA and only the AVX2 and
   AVX-512 loops carry a target attribute; attn_fma_peak runs one only on a CPU that has its
   features (__builtin_cpu_supports).  The generic loop is portable C on 16-byte vectors
   (GCC/Clang vector extensions: SSE2 on baseline x86-64, NEON on ARM), a multiply and an
   add, 2 flops all the same (the baseline x86-64 ISA has no FMA, and -std=c11 does not
   contract them).  Scalar chains would not do: the compiler packs 12 of them into 3 SSE2
   vectors, 3 chains too few to hide a multiply-then-add latency.

   bfloat16 has a loop of its own where the CPU has AVX512-BF16, under the name of
   c_tiled's bf16 path, "avx512-bf16" (whose float32 and float64 loops are AVX-512's):
   chains of vdpbf16ps, acc = acc + a₀·b₀ + a₁·b₁ in each float32 lane from a pair of
   bfloat16 lanes of each operand, so 32 products per 512-bit instruction, counted as 2
   flops each as for an FMA: 64 flops.  It runs on the FMA units with a latency of the same
   few cycles, so the same 12 chains keep them busy.  Its chains cannot converge as the FMA
   chains do: vdpbf16ps has no multiplier for the accumulator, and one that grows by a
   constant would lose its addend to rounding (and stop changing) once large.  So each
   pair's products cancel: a = (1, 1), b = (1, −1), and acc + 1 − 1 returns acc exactly in
   either order of the two additions: every operand and partial sum is a small integer (the
   chains start at 0 … 11), so nothing is rounded, nothing is denormal (vdpbf16ps would
   flush it) and nothing grows.  The instruction still performs both products and both
   additions; its timing does not depend on the values. */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attention.h"

#define FMA_CHAINS 12
#define CHAIN_FACTOR 0.9375    /* m = 1 - 1/16 and c = 1/16: exact in both precisions */
#define CHAIN_ADDEND 0.0625

/* One thread's loop: FMA_CHAINS chains of `iterations` steps acc = step(acc, a, b) on
   accumulators that are `vec`s of `real` (a and b: `operand`s), returning the sum of every
   lane of every chain. */
#define CHAIN_LOOP(name, attributes, real, vec, set1, operand, a_value, b_value, step)     \
    static attributes double name(int64_t iterations)                                     \
    {                                                                                     \
        const operand a = a_value, b = b_value;                                           \
        vec acc[FMA_CHAINS];                                                              \
        for (int chain = 0; chain < FMA_CHAINS; chain++)                                  \
            acc[chain] = set1((real)chain);                                               \
        for (int64_t i = 0; i < iterations; i++)                                          \
            for (int chain = 0; chain < FMA_CHAINS; chain++)                              \
                acc[chain] = step(acc[chain], a, b);                                      \
        real lanes[sizeof(vec) / sizeof(real)];                                           \
        double sum = 0.0;                                                                 \
        for (int chain = 0; chain < FMA_CHAINS; chain++) {                                \
            memcpy(lanes, &acc[chain], sizeof lanes);                                     \
            for (size_t lane = 0; lane < sizeof lanes / sizeof lanes[0]; lane++)          \
                sum += lanes[lane];                                                       \
        }                                                                                 \
        return sum;                                                                       \
    }

/* The FMA chains acc = acc · m + c. */
#define FMA_LOOP(name, attributes, real, vec, set1, fmadd)                                 \
    CHAIN_LOOP(name, attributes, real, vec, set1, vec, set1((real)CHAIN_FACTOR),           \
               set1((real)CHAIN_ADDEND), fmadd)

#define AVX512 __attribute__((target("avx512f")))
#define AVX512_BF16 __attribute__((target("avx512f,avx512bf16")))
#define AVX2_FMA __attribute__((target("avx2,fma")))
typedef float generic_f32 __attribute__((vector_size(16)));
typedef double generic_f64 __attribute__((vector_size(16)));
#define GENERIC_SET1_F32(x) ((generic_f32){0} + (x))   /* a scalar operand is broadcast */
#define GENERIC_SET1_F64(x) ((generic_f64){0} + (x))
#define GENERIC_FMADD(a, b, c) ((a) * (b) + (c))

FMA_LOOP(fma_avx512_f32, AVX512, float, __m512, _mm512_set1_ps, _mm512_fmadd_ps)
FMA_LOOP(fma_avx512_f64, AVX512, double, __m512d, _mm512_set1_pd, _mm512_fmadd_pd)
FMA_LOOP(fma_avx2_f32, AVX2_FMA, float, __m256, _mm256_set1_ps, _mm256_fmadd_ps)
FMA_LOOP(fma_avx2_f64, AVX2_FMA, double, __m256d, _mm256_set1_pd, _mm256_fmadd_pd)
FMA_LOOP(fma_generic_f32, , float, generic_f32, GENERIC_SET1_F32, GENERIC_FMADD)
FMA_LOOP(fma_generic_f64, , double, generic_f64, GENERIC_SET1_F64, GENERIC_FMADD)

/* Every pair of bfloat16 lanes (2i, 2i + 1) of a 512-bit operand holding (first, second),
   given as their bits: the even lane is the low half of each 32-bit lane. */
#define BF16_PAIRS(first, second) \
    ((__m512bh)_mm512_set1_epi32((int)((uint32_t)(second) << 16 | (uint32_t)(first))))
#define BF16_ONE 0x3F80u
#define BF16_MINUS_ONE 0xBF80u
CHAIN_LOOP(dot_avx512_bf16, AVX512_BF16, float, __m512, _mm512_set1_ps, __m512bh,
           BF16_PAIRS(BF16_ONE, BF16_ONE), BF16_PAIRS(BF16_ONE, BF16_MINUS_ONE), _mm512_dpbf16_ps)

static int cpu_has_avx512f(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

static int cpu_has_avx512_bf16(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

static int cpu_has_avx2_fma(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static int cpu_has_any(void) { return 1; }

typedef double (*fma_loop)(int64_t iterations);

/* Best first, by the names attn_active_isa reports (AVX-512 needs only F here: the loops
   use no VL instruction).  A loop per precision, by its elements' bits; NULL where the ISA
   has none.  Each step of a chain is one instruction on vector_bits / bits elements, one
   product each. */
static const struct fma_isa {
    const char *name;
    int (*cpu_runs)(void);
    int vector_bits;
    fma_loop f32, f64, bf16;
} fma_isas[] = {
    {"avx512-bf16", cpu_has_avx512_bf16, 512, fma_avx512_f32, fma_avx512_f64, dot_avx512_bf16},
    {"avx512", cpu_has_avx512f, 512, fma_avx512_f32, fma_avx512_f64, NULL},
    {"avx2-fma", cpu_has_avx2_fma, 256, fma_avx2_f32, fma_avx2_f64, NULL},
    {"generic", cpu_has_any, 128, fma_generic_f32, fma_generic_f64, NULL},
};
#define N_FMA_ISAS (int32_t)(sizeof fma_isas / sizeof fma_isas[0])

const char *attn_fma_isa(int32_t index)
{
    for (int32_t i = 0, found = 0; i < N_FMA_ISAS; i++)
        if (fma_isas[i].cpu_runs() && found++ == index)
            return fma_isas[i].name;
    return NULL;
}

struct fma_run {
    fma_loop loop;
    int64_t iterations;
    double *sums;   /* one per task */
};

static void fma_task(void *context, int64_t task, int32_t worker)
{
    (void)worker;
    const struct fma_run *run = context;
    run->sums[task] = run->loop(run->iterations);
}

/* Read by nobody: a store the compiler must make, of a value that needs every chain. */
static volatile double fma_sink;

double attn_fma_peak(const char *isa, int32_t bits, int32_t threads, int64_t iterations)
{
    const struct fma_isa *path = NULL;
    for (int32_t i = 0; i < N_FMA_ISAS; i++)
        if (strcmp(isa, fma_isas[i].name) == 0)
            path = &fma_isas[i];
    if (path == NULL || !path->cpu_runs())
        return -1.0;
    const fma_loop loop = bits == 32 ? path->f32 : bits == 64 ? path->f64 : bits == 16 ? path->bf16 : NULL;
    if (loop == NULL)
        return -1.0;
    if (threads < 1)
        threads = 1;
    if (iterations < 0)
        iterations = 0;

    struct fma_run run = {loop, iterations, calloc((size_t)threads, sizeof(double))};
    if (run.sums == NULL)
        return -1.0;
    /* one task per thread, each its own chains: the caller runs task 0 at once, each helper
       one of the others once it is awake */
    pool_run(threads, threads, POOL_IN_SHARES, fma_task, &run);
    double total = 0.0;
    for (int32_t t = 0; t < threads; t++)
        total += run.sums[t];
    fma_sink = total;
    free(run.sums);

    return 2.0 * FMA_CHAINS * (path->vector_bits / bits) * (double)iterations * threads;
}

/* Whether bfloat16 is multiplied faster by AVX512-BF16's dot products than widened to
   float32 and multiplied by AVX-512's FMAs.  The feature flag does not say: a vdpbf16ps
   does twice an FMA's flops, but at the FMA's rate on one CPU (Zen 4) and at half it on
   another (Sapphire Rapids: one thread's chains of vdpbf16ps retire 100 GFLOP/s where
   float32's FMAs retire 199, and c_tiled's bfloat16 runs 1.7x faster widened).  So the
   CPU is asked: each loop timed on this thread BF16_TRIALS times, the two alternating, and
   the best time of each kept (a preempted or slow-clocked trial only lengthens); about
   half a millisecond, once per process.  0 on a CPU without the unit. */
#define BF16_TRIALS 5
#define BF16_ITERATIONS 16384   /* ~40 µs of float32 FMAs, ~80-160 µs of vdpbf16ps */

static double seconds_of(fma_loop loop)
{
    struct timespec start, end;
    timespec_get(&start, TIME_UTC);
    fma_sink = loop(BF16_ITERATIONS);
    timespec_get(&end, TIME_UTC);
    return (double)(end.tv_sec - start.tv_sec) + 1e-9 * (double)(end.tv_nsec - start.tv_nsec);
}

int attn_bf16_dot_pays(void)
{
    static int pays = -1;   /* measured on the first call (attn_select_isa's, at load) */
    if (pays < 0) {
        pays = 0;
        if (cpu_has_avx512_bf16()) {
            double dot = 1e30, fma = 1e30;
            for (int trial = 0; trial <= BF16_TRIALS; trial++) {   /* trial 0 warms up */
                const double d = seconds_of(dot_avx512_bf16), f = seconds_of(fma_avx512_f32);
                if (trial > 0) {
                    dot = d < dot ? d : dot;
                    fma = f < fma ? f : fma;
                }
            }
            /* the same iterations: a dot product's step has twice an FMA step's flops */
            pays = 2.0 * fma > dot;
        }
    }
    return pays;
}
