/* float64 tile operations with AVX2 + FMA, 4 queries per __m256d: the vocabulary and the
   register plan of tile_ops_simd_template.h, which holds the algorithm.
   The file is compiled for the baseline ISA; only these functions carry
   target("avx2,fma"), and attention.c selects them only on CPUs with both features. */
#include <immintrin.h>
#include <math.h>
#include "tile_ops.h"

#define TARGET __attribute__((target("avx2,fma")))
#define INLINE_TARGET static inline __attribute__((always_inline, target("avx2,fma")))
#define ISA_NAME "avx2-fma"
#define TILE_OPS tile_ops_avx2_f64

#define real double
#define SUFFIX(name) name##_f64
#define vec __m256d
#define LANES 4
#define V(op) _mm256_##op##_pd
#define V_BROADCAST _mm256_broadcast_sd

/* 4 × 3 accumulators, 3 loaded and 1 broadcast operand: all 16 ymm registers */
#define PANEL_VECS 3   /* 12 queries per panel */
#define MICRO_KEYS 4
#define MICRO_COLS 4
#define ROW_KEYS 8
#define ROW_VECS 8     /* 32 value columns per pv_rows pass of one row */

typedef __m256d lane_mask;   /* all-ones lanes */
#define NO_LANES _mm256_setzero_pd()
typedef __m256i tail_mask;

/* the lanes q where visible[q] > j, for 4 queries (the int32 counts widened to 64 bits) */
INLINE_TARGET lane_mask lanes_seeing(const int32_t *visible, int64_t j)
{
    return _mm256_castsi256_pd(_mm256_cmpgt_epi64(
        _mm256_cvtepi32_epi64(_mm_load_si128((const __m128i *)visible)), _mm256_set1_epi64x(j)));
}

INLINE_TARGET lane_mask v_lt(__m256d a, __m256d b) { return _mm256_cmp_pd(a, b, _CMP_LT_OQ); }
INLINE_TARGET lane_mask v_eq(__m256d a, __m256d b) { return _mm256_cmp_pd(a, b, _CMP_EQ_OQ); }
INLINE_TARGET __m256d v_zero_where(lane_mask mask, __m256d x) { return _mm256_andnot_pd(mask, x); }

/* fused, as the unmasked products are (a key's product has the same bits in a panel's
   masked part and in its shared one), and acc kept in the masked-off lanes, whose a · b
   (maybe 0 · NaN) is dropped */
INLINE_TARGET __m256d v_fmadd_where(lane_mask mask, __m256d a, __m256d b, __m256d acc)
{
    return _mm256_blendv_pd(acc, _mm256_fmadd_pd(a, b, acc), mask);
}

/* 2^k built from its bits: t's low bits, k + bias, shifted into the exponent field */
INLINE_TARGET __m256d v_mul_pow2(__m256d p, __m256d k, __m256d t, lane_mask zero)
{
    (void)k;
    const __m256d two_k = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_castpd_si256(t), 52));
    return v_zero_where(zero, _mm256_mul_pd(p, two_k));
}

/* the lanes c < n, for a row's last n < 4 columns (n <= 0: none, n >= 4: all) */
INLINE_TARGET tail_mask lanes_below(int64_t n)
{
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(clamp_i64(n, 0, LANES)), _mm256_setr_epi64x(0, 1, 2, 3));
}

INLINE_TARGET __m256d v_load_first(const double *p, tail_mask mask) { return _mm256_maskload_pd(p, mask); }
INLINE_TARGET void v_store_first(double *p, tail_mask mask, __m256d x) { _mm256_maskstore_pd(p, mask, x); }

INLINE_TARGET double v_hsum(__m256d x)
{
    const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

/* the largest lane, of lanes holding no NaN */
INLINE_TARGET double v_hmax(__m256d x)
{
    const __m128d s = _mm_max_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
    return _mm_cvtsd_f64(_mm_max_sd(s, _mm_unpackhi_pd(s, s)));
}

/* the driver's transposes (tile_ops.h): 4 rows of 4 in two rounds of shuffles, each output
   row then times its scale; the edges by transpose_generic_f64 */
#define TRANSPOSE transpose_avx2_f64
TARGET void transpose_avx2_f64(const double *x, int64_t x_stride, int64_t rows, int64_t cols, const double *scale,
                               double *y, int64_t y_stride)
{
    int64_t r0 = 0;
    for (; r0 + 4 <= rows; r0 += 4) {
        int64_t c0 = 0;
        for (; c0 + 4 <= cols; c0 += 4) {
            __m256d a[4];
            for (int i = 0; i < 4; i++)
                a[i] = _mm256_loadu_pd(x + (r0 + i) * x_stride + c0);
            /* columns 0 and 2, then 1 and 3, of rows 0-1 and of rows 2-3 */
            const __m256d t0 = _mm256_unpacklo_pd(a[0], a[1]), t1 = _mm256_unpackhi_pd(a[0], a[1]);
            const __m256d t2 = _mm256_unpacklo_pd(a[2], a[3]), t3 = _mm256_unpackhi_pd(a[2], a[3]);
            const __m256d column[4] = {_mm256_permute2f128_pd(t0, t2, 0x20), _mm256_permute2f128_pd(t1, t3, 0x20),
                                       _mm256_permute2f128_pd(t0, t2, 0x31), _mm256_permute2f128_pd(t1, t3, 0x31)};
            for (int i = 0; i < 4; i++)
                _mm256_storeu_pd(y + (c0 + i) * y_stride + r0,
                                 scale ? _mm256_mul_pd(column[i], _mm256_set1_pd(scale[c0 + i])) : column[i]);
        }
        if (c0 < cols)
            transpose_generic_f64(x + r0 * x_stride + c0, x_stride, 4, cols - c0, scale ? scale + c0 : NULL,
                                  y + c0 * y_stride + r0, y_stride);
    }
    if (r0 < rows)
        transpose_generic_f64(x + r0 * x_stride, x_stride, rows - r0, cols, scale, y + r0, y_stride);
}

#include "tile_ops_simd_template.h"
