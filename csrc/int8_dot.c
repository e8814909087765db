/* Q·Kᵀ on an int8 KV cache's keys as integer dot products (struct int8_dot_ops, tile_ops.h),
   one set per unit, chosen at run time beside the tile operations (attention.c).

   Why: a decode step's int8 keys, dequantised to float, cost per element a load, a sign
   extension, a conversion and a multiply by the row's scale before the FMA with each
   query row: the step reads a quarter of float32's bytes but runs more instructions per
   byte than float32, and with several query rows per K/V head it stops being bound by
   memory. Quantising the step's query rows once, to int16 (tile_ops.h,
   quantise_query_rows: fine enough that the scores move by a 256th of what int8 queries
   moved them), makes the inner loop a pure integer dot product, the key's and the query's
   scales applied once per score, after the sum.

   The units, best first, each over 16 elements of a row at a time (16 key bytes
   sign-extended to int16 once, vpmovsxbw, for all the query rows):
     avx512-vnni   vpdpwssd (AVX512-VNNI with VL, EVEX on ymm): 16 products summed in
                   pairs into 8 int32 lanes, added to them, in one instruction
     avx-vnni      the same instruction, VEX-encoded (AVX-VNNI, CPUs without AVX-512)
     avx2          vpmaddwd then vpaddd: the same sums in two
     generic       C, for CPUs without AVX2
   A pair of products is at most 2 · 127 · 32767 < 2^31 and a row's sum at most
   d · 127 · query_levels(d) <= 2^31 − 1, so no sum wraps: every unit gives the same scores,
   bit for bit, and the tests hold each the CPU runs to an exact model of the sums
   (tests/test_c_int8_dot.py). A row's last d % 16 bytes are copied into a zeroed vector
   (the query's codes are zero there), never read past the row.

   An int4 cache's keys (qk_rows_q4) go the same way a group of 32 values at a time, read
   in place: the group's 16 bytes zero-extended to int16 once (vpmovzxbw) hold its even
   values in their low nibbles and its odd ones in their high nibbles, met, masked and
   shifted, with the query codes stored in that order (quantise_query_groups); the
   nibbles' offset of 8 leaves as 8 · Σ codes from each group's sum. Unpacking a block's
   keys to int8 codes first and reading them back instead measured 1.18x slower (2
   threads, 8 query heads on 8 and on 2 K/V heads, n_k = 65536, d = 64; instructions per
   key and 4 rows 372 -> 316). */
#include <immintrin.h>
#include <string.h>
#include "tile_ops.h"

/* the generic unit: exact int32 sums in C */
static void qk_rows_generic(const int8_t *k, const float *k_scale, int64_t keys, int64_t d, const int16_t *q,
                            const float *q_scale, int64_t rows, float *s, int64_t s_stride,
                            struct read_ahead ahead)
{
    (void)ahead;
    const int64_t q_stride = round_up(d, INT8_DOT_PAD);
    for (int64_t j = 0; j < keys; j++)
        for (int64_t r = 0; r < rows; r++) {
            int32_t sum = 0;
            for (int64_t c = 0; c < d; c++)
                sum += (int32_t)q[r * q_stride + c] * (int32_t)k[j * d + c];
            s[r * s_stride + j] = ((float)sum * k_scale[j]) * q_scale[r];
        }
}

/* the generic unit on int4 keys: each group's exact int32 sum from the nibbles in C */
static void qk_rows_q4_generic(const uint8_t *k, const float *k_scale, int64_t scale_stride, int64_t keys, int64_t d,
                               const int16_t *q, const float *q_scale, const int32_t *q_sum, int64_t group_rows,
                               int64_t rows, float *s, int64_t s_stride, struct read_ahead ahead)
{
    (void)ahead;
    for (int64_t j = 0; j < keys; j++)
        for (int64_t r = 0; r < rows; r++) {
            float score = 0;
            for (int64_t g = 0; g * INT4_GROUP < d; g++) {
                const int16_t *codes = q + (g * group_rows + r) * INT4_GROUP;
                int32_t sum = -INT4_OFFSET * q_sum[g * group_rows + r];
                for (int64_t c = g * INT4_GROUP; c < d && c < (g + 1) * INT4_GROUP; c++)
                    sum += codes[c % INT4_GROUP / 2 + INT4_GROUP / 2 * (c % 2)] * (int4_code(k + j * int4_row_bytes(d), c) + INT4_OFFSET);
                score += ((float)sum * k_scale[g * scale_stride + j]) * q_scale[g * group_rows + r];
            }
            s[r * s_stride + j] = score;
        }
}

static int cpu_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

static int cpu_has_avx_vnni(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avxvnni");
}

static int cpu_has_avx512_vnni(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

static int cpu_has_any(void) { return 1; }

const struct int8_dot_ops int8_dot_generic = {"generic", cpu_has_any, qk_rows_generic, qk_rows_q4_generic};

/* vpdpwssd in AVX2: the pairs' sums by vpmaddwd, added */
#define AVX2_TARGET "avx2"
static inline __attribute__((always_inline, target(AVX2_TARGET))) __m256i dpwssd_avx2(__m256i acc, __m256i a,
                                                                                        __m256i b)
{
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
}

#define UNIT(name) name##_avx2
#define TARGET_ISA AVX2_TARGET
#define DPWSSD dpwssd_avx2
#include "int8_dot_template.h"
#undef UNIT
#undef TARGET_ISA
#undef DPWSSD
const struct int8_dot_ops int8_dot_avx2 = {"avx2", cpu_has_avx2, qk_rows_avx2, qk_rows_q4_avx2};

#define UNIT(name) name##_avx_vnni
#define TARGET_ISA "avx2,avxvnni"
#define DPWSSD _mm256_dpwssd_avx_epi32
#include "int8_dot_template.h"
#undef UNIT
#undef TARGET_ISA
#undef DPWSSD
const struct int8_dot_ops int8_dot_avx_vnni = {"avx-vnni", cpu_has_avx_vnni, qk_rows_avx_vnni, qk_rows_q4_avx_vnni};

#define UNIT(name) name##_avx512_vnni
#define TARGET_ISA "avx2,avx512f,avx512vl,avx512vnni"
#define DPWSSD _mm256_dpwssd_epi32
#include "int8_dot_template.h"
#undef UNIT
#undef TARGET_ISA
#undef DPWSSD
const struct int8_dot_ops int8_dot_avx512_vnni = {"avx512-vnni", cpu_has_avx512_vnni, qk_rows_avx512_vnni, qk_rows_q4_avx512_vnni};
