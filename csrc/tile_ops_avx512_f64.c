/* float64 tile operations with AVX-512 (F, VL, DQ), 8 queries per __m512d: the vocabulary and
   the register plan of tile_ops_simd_template.h, which holds the algorithm.
   The file is compiled for the baseline ISA; only these functions carry
   target("avx512f,avx512vl,avx512dq,fma"), and attention.c selects them only on CPUs with those. */
#include <immintrin.h>
#include <math.h>
#include "tile_ops.h"

#define TARGET __attribute__((target("avx512f,avx512vl,avx512dq,fma")))
#define INLINE_TARGET static inline __attribute__((always_inline, target("avx512f,avx512vl,avx512dq,fma")))
#define ISA_NAME "avx512"
#define TILE_OPS tile_ops_avx512_f64

#define real double
#define SUFFIX(name) name##_f64
#define vec __m512d
#define LANES 8
#define V(op) _mm512_##op##_pd
#define V_BROADCAST(p) _mm512_set1_pd(*(p))   /* folded into the FMA as an embedded broadcast */

/* 8 × 3 accumulators and 3 loaded operands in the 32 zmm registers; the broadcast operand
   comes from memory inside the FMA */
#define PANEL_VECS 3   /* 24 queries per panel */
#define MICRO_KEYS 8
#define MICRO_COLS 8
#define ROW_KEYS 8
#define ROW_VECS 8     /* 64 value columns per pv_rows pass of one row */

typedef __mmask8 lane_mask;
#define NO_LANES ((lane_mask)0)
typedef __mmask8 tail_mask;

/* the lanes q where visible[q] > j, for 8 queries */
INLINE_TARGET lane_mask lanes_seeing(const int32_t *visible, int64_t j)
{
    return _mm256_cmpgt_epi32_mask(_mm256_load_si256((const __m256i *)visible), _mm256_set1_epi32((int)j));
}

INLINE_TARGET lane_mask v_lt(__m512d a, __m512d b) { return _mm512_cmp_pd_mask(a, b, _CMP_LT_OQ); }
INLINE_TARGET lane_mask v_eq(__m512d a, __m512d b) { return _mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ); }
INLINE_TARGET __m512d v_zero_where(lane_mask mask, __m512d x) { return _mm512_mask_mov_pd(x, mask, _mm512_setzero_pd()); }

/* lanes outside the mask keep acc: their a · b (maybe 0 · NaN) is never formed */
INLINE_TARGET __m512d v_fmadd_where(lane_mask mask, __m512d a, __m512d b, __m512d acc)
{
    return _mm512_mask3_fmadd_pd(a, b, acc, mask);
}

/* one instruction (a zero-masked vscalef), where building 2^k from t's bits, multiplying
   and clearing the zero lanes take three */
INLINE_TARGET __m512d v_mul_pow2(__m512d p, __m512d k, __m512d t, lane_mask zero)
{
    (void)t;
    return _mm512_maskz_scalef_pd((lane_mask)~zero, p, k);
}

/* x − round(x), to nearest even (imm8 0: no fraction bits kept), exact */
#define v_round_reduce v_round_reduce
INLINE_TARGET __m512d v_round_reduce(__m512d x) { return _mm512_reduce_pd(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

/* the lanes c < n, for a row's last n < 8 columns (n <= 0: none, n >= 8: all) */
INLINE_TARGET tail_mask lanes_below(int64_t n)
{
    return (tail_mask)((1u << clamp_i64(n, 0, LANES)) - 1);
}

/* masked-off lanes are not read: no fault past the end of a row */
INLINE_TARGET __m512d v_load_first(const double *p, tail_mask mask) { return _mm512_maskz_loadu_pd(mask, p); }
INLINE_TARGET void v_store_first(double *p, tail_mask mask, __m512d x) { _mm512_mask_storeu_pd(p, mask, x); }

INLINE_TARGET double v_hsum(__m512d x) { return _mm512_reduce_add_pd(x); }
INLINE_TARGET double v_hmax(__m512d x) { return _mm512_reduce_max_pd(x); }   /* of lanes holding no NaN */

/* the packing's transposes (tile_ops.h): 8 × 8 blocks in AVX-512's shuffles, 24 for 64
   elements where AVX2's 4 × 4 blocks take 32, each of a block's rows of y one 64-byte store
   (as tile_ops_avx512_f32.c's 16 × 16); the edges in AVX2's blocks */
static TARGET void transpose_avx512_f64(const double *x, int64_t x_stride, int64_t rows, int64_t cols,
                                        const double *scale, double *y, int64_t y_stride)
{
    int64_t r0 = 0;
    for (; r0 + LANES <= rows; r0 += LANES) {
        int64_t c0 = 0;
        for (; c0 + LANES <= cols; c0 += LANES) {
            __m512d a[LANES], t[LANES];
            for (int i = 0; i < LANES; i++)
                a[i] = _mm512_loadu_pd(x + (r0 + i) * x_stride + c0);
            /* t[2g + h], 128-bit lane l: column 2l + h of rows 2g, 2g + 1 */
            for (int i = 0; i < LANES; i += 2) {
                t[i] = _mm512_unpacklo_pd(a[i], a[i + 1]);
                t[i + 1] = _mm512_unpackhi_pd(a[i], a[i + 1]);
            }
            for (int h = 0; h < 2; h++) {
                /* lanes (0, 2) and (1, 3) of row pairs 0, 1 and of 2, 3, then column 2l + h
                   gathers lane l of the four pairs */
                const __m512d even01 = _mm512_shuffle_f64x2(t[h], t[2 + h], 0x88),
                              odd01 = _mm512_shuffle_f64x2(t[h], t[2 + h], 0xDD),
                              even23 = _mm512_shuffle_f64x2(t[4 + h], t[6 + h], 0x88),
                              odd23 = _mm512_shuffle_f64x2(t[4 + h], t[6 + h], 0xDD);
                const __m512d column[4] = {
                    _mm512_shuffle_f64x2(even01, even23, 0x88), _mm512_shuffle_f64x2(odd01, odd23, 0x88),
                    _mm512_shuffle_f64x2(even01, even23, 0xDD), _mm512_shuffle_f64x2(odd01, odd23, 0xDD),
                };
                for (int l = 0; l < 4; l++) {
                    const int64_t c = c0 + 2 * l + h;
                    _mm512_storeu_pd(y + c * y_stride + r0,
                                     scale ? _mm512_mul_pd(column[l], _mm512_set1_pd(scale[c])) : column[l]);
                }
            }
        }
        if (c0 < cols)
            transpose_avx2_f64(x + r0 * x_stride + c0, x_stride, LANES, cols - c0, scale ? scale + c0 : NULL,
                               y + c0 * y_stride + r0, y_stride);
    }
    if (r0 < rows)
        transpose_avx2_f64(x + r0 * x_stride, x_stride, rows - r0, cols, scale, y + r0, y_stride);
}
#define TRANSPOSE transpose_avx512_f64

#include "tile_ops_simd_template.h"
