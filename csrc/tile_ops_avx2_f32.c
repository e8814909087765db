/* float32 tile operations with AVX2 + FMA, 8 queries per __m256: the vocabulary and the
   register plan of tile_ops_simd_template.h, which holds the algorithm.
   The file is compiled for the baseline ISA; only these functions carry
   target("avx2,fma,f16c") (F16C: the float16 rows of the row operations), and attention.c
   selects them only on CPUs with all three. */
#include <immintrin.h>
#include <math.h>
#include "tile_ops.h"

#define TARGET __attribute__((target("avx2,fma,f16c")))
#define INLINE_TARGET static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define ISA_NAME "avx2-fma"
#define TILE_OPS tile_ops_avx2_f32

#define real float
#define SUFFIX(name) name##_f32
#define vec __m256
#define LANES 8
#define V(op) _mm256_##op##_ps
#define V_BROADCAST _mm256_broadcast_ss

/* 4 × 3 accumulators, 3 loaded and 1 broadcast operand: all 16 ymm registers */
#define PANEL_VECS 3   /* 24 queries per panel */
#define MICRO_KEYS 4
#define MICRO_COLS 4
#define ROW_KEYS 8
#define ROW_VECS 8     /* 64 value columns per pv_rows pass of one row */

typedef __m256 lane_mask;   /* all-ones lanes */
#define NO_LANES _mm256_setzero_ps()
typedef __m256i tail_mask;

/* the lanes q where visible[q] > j, for 8 queries */
INLINE_TARGET lane_mask lanes_seeing(const int32_t *visible, int64_t j)
{
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_load_si256((const __m256i *)visible),
                                                  _mm256_set1_epi32((int)j)));
}

INLINE_TARGET lane_mask v_lt(__m256 a, __m256 b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
INLINE_TARGET lane_mask v_eq(__m256 a, __m256 b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
INLINE_TARGET __m256 v_zero_where(lane_mask mask, __m256 x) { return _mm256_andnot_ps(mask, x); }

/* fused, as the unmasked products are (a key's product has the same bits in a panel's
   masked part and in its shared one), and acc kept in the masked-off lanes, whose a · b
   (maybe 0 · NaN) is dropped */
INLINE_TARGET __m256 v_fmadd_where(lane_mask mask, __m256 a, __m256 b, __m256 acc)
{
    return _mm256_blendv_ps(acc, _mm256_fmadd_ps(a, b, acc), mask);
}

/* 2^k built from its bits: t's low bits, k + bias, shifted into the exponent field */
INLINE_TARGET __m256 v_mul_pow2(__m256 p, __m256 k, __m256 t, lane_mask zero)
{
    (void)k;
    const __m256 two_k = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23));
    return v_zero_where(zero, _mm256_mul_ps(p, two_k));
}

/* the lanes c < n, for a row's last n < 8 columns (n <= 0: none, n >= 8: all) */
INLINE_TARGET tail_mask lanes_below(int64_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)clamp_i64(n, 0, LANES)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

INLINE_TARGET __m256 v_load_first(const float *p, tail_mask mask) { return _mm256_maskload_ps(p, mask); }
INLINE_TARGET void v_store_first(float *p, tail_mask mask, __m256 x) { _mm256_maskstore_ps(p, mask, x); }

INLINE_TARGET float v_hsum(__m256 x)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* lane i: the sum of acc[i]'s lanes, for 8 vectors (qk_rows' scores, a transposed
   reduction: 9 shuffles and adds where 8 separate v_hsum take 40) */
INLINE_TARGET __m256 v_hsums(const __m256 *acc)
{
    /* [a0 a1 b0 b1 | a2 a3 b2 b3] in pair sums, then [a b c d | a b c d] in quarter sums */
    const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
    const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
#define V_HSUMS v_hsums

/* the largest lane, of lanes holding no NaN */
INLINE_TARGET float v_hmax(__m256 x)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

/* Rows of the other formats for the row operations (ROW_FORMATS, tile_ops_row_template.h),
   8 elements converted exactly: bfloat16 shifted into the upper half, float16 by F16C,
   int8 sign-extended and converted (the scale multiplies after) */
#define ROW_FORMATS
INLINE_TARGET __m256 load_row_bf16(const uint16_t *p)
{
    const __m256i bits = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16));
}
INLINE_TARGET __m256 load_row_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
INLINE_TARGET __m256 load_row_q8(const int8_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* the driver's transposes (tile_ops.h): 8 rows of 8 in three rounds of shuffles, each output
   row then times its scale; the edges by transpose_generic_f32 */
#define TRANSPOSE transpose_avx2_f32
TARGET void transpose_avx2_f32(const float *x, int64_t x_stride, int64_t rows, int64_t cols, const float *scale,
                               float *y, int64_t y_stride)
{
    int64_t r0 = 0;
    for (; r0 + 8 <= rows; r0 += 8) {
        int64_t c0 = 0;
        for (; c0 + 8 <= cols; c0 += 8) {
            __m256 a[8], t[8], u[8];
            for (int i = 0; i < 8; i++)
                a[i] = _mm256_loadu_ps(x + (r0 + i) * x_stride + c0);
            for (int i = 0; i < 8; i += 2) {   /* t[i] = rows i, i + 1 interleaved, in each half */
                t[i] = _mm256_unpacklo_ps(a[i], a[i + 1]);
                t[i + 1] = _mm256_unpackhi_ps(a[i], a[i + 1]);
            }
            for (int i = 0; i < 8; i += 4) {   /* u: one column of 4 rows in each half */
                u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
                u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
                u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
                u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
            }
            __m256 column[8];                 /* columns i and i + 4: the halves of rows 0-3 and 4-7 */
            for (int i = 0; i < 4; i++) {
                column[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
                column[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
            }
            for (int i = 0; i < 8; i++)
                _mm256_storeu_ps(y + (c0 + i) * y_stride + r0,
                                 scale ? _mm256_mul_ps(column[i], _mm256_set1_ps(scale[c0 + i])) : column[i]);
        }
        if (c0 < cols)
            transpose_generic_f32(x + r0 * x_stride + c0, x_stride, 8, cols - c0, scale ? scale + c0 : NULL,
                                  y + c0 * y_stride + r0, y_stride);
    }
    if (r0 < rows)
        transpose_generic_f32(x + r0 * x_stride, x_stride, rows - r0, cols, scale, y + r0, y_stride);
}

#include "tile_ops_simd_template.h"
