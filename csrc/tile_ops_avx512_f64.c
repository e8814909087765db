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

/* the packing's transposes (tile_ops.h): transpose_lanes of tile_ops_simd_template.h, its
   groups of 2 rows, lane l of u[2g + h] column 2l + h of rows 2g, 2g + 1 */
#define V_LANE_SHUFFLE _mm512_shuffle_f64x2
#define TRANSPOSE_EDGES transpose_avx2_f64
INLINE_TARGET void v_lane_columns(const __m512d *a, __m512d *u)
{
    for (int i = 0; i < LANES; i += 2) {
        u[i] = _mm512_unpacklo_pd(a[i], a[i + 1]);
        u[i + 1] = _mm512_unpackhi_pd(a[i], a[i + 1]);
    }
}
#define TRANSPOSE transpose_lanes_f64

#include "tile_ops_simd_template.h"
