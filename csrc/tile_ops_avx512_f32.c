/* float32 tile operations with AVX-512 (F, VL), 16 queries per __m512: the vocabulary and
   the register plan of tile_ops_simd_template.h, which holds the algorithm.
   The file is compiled for the baseline ISA; only these functions carry
   target("avx512f,avx512vl,fma"), and attention.c selects them only on CPUs with those. */
#include <immintrin.h>
#include <math.h>
#include "tile_ops.h"

#define TARGET __attribute__((target("avx512f,avx512vl,fma")))
#define INLINE_TARGET static inline __attribute__((always_inline, target("avx512f,avx512vl,fma")))
#define ISA_NAME "avx512"
#define TILE_OPS tile_ops_avx512_f32

#define real float
#define SUFFIX(name) name##_f32
#define vec __m512
#define LANES 16
#define V(op) _mm512_##op##_ps
#define V_BROADCAST(p) _mm512_set1_ps(*(p))   /* folded into the FMA as an embedded broadcast */

/* 8 × 3 accumulators and 3 loaded operands in the 32 zmm registers; the broadcast operand
   comes from memory inside the FMA */
#define PANEL_VECS 3   /* 48 queries per panel */
#define MICRO_KEYS 8
#define MICRO_COLS 8
#define ROW_KEYS 8
#define ROW_VECS 4     /* 64 value columns per pv_rows pass of one row */

typedef __mmask16 lane_mask;
typedef __mmask16 tail_mask;

/* the lanes q where visible[q] > j, for 16 queries */
INLINE_TARGET lane_mask lanes_seeing(const int32_t *visible, int64_t j)
{
    return _mm512_cmpgt_epi32_mask(_mm512_load_si512(visible), _mm512_set1_epi32((int)j));
}

INLINE_TARGET lane_mask v_lt(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
INLINE_TARGET lane_mask v_eq(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
INLINE_TARGET __m512 v_zero_where(lane_mask mask, __m512 x) { return _mm512_mask_mov_ps(x, mask, _mm512_setzero_ps()); }

/* lanes outside the mask keep acc: their a · b (maybe 0 · NaN) is never formed */
INLINE_TARGET __m512 v_fmadd_where(lane_mask mask, __m512 a, __m512 b, __m512 acc)
{
    return _mm512_mask3_fmadd_ps(a, b, acc, mask);
}

/* one instruction (a zero-masked vscalef), where building 2^k from t's bits, multiplying
   and clearing the zero lanes take three */
INLINE_TARGET __m512 v_mul_pow2(__m512 p, __m512 k, __m512 t, lane_mask zero)
{
    (void)t;
    return _mm512_maskz_scalef_ps((lane_mask)~zero, p, k);
}

/* the lanes c < n, for a row's last n < 16 columns (n <= 0: none, n >= 16: all) */
INLINE_TARGET tail_mask lanes_below(int64_t n)
{
    return (tail_mask)((1u << clamp_i64(n, 0, LANES)) - 1);
}

/* masked-off lanes are not read: no fault past the end of a row */
INLINE_TARGET __m512 v_load_first(const float *p, tail_mask mask) { return _mm512_maskz_loadu_ps(mask, p); }
INLINE_TARGET void v_store_first(float *p, tail_mask mask, __m512 x) { _mm512_mask_storeu_ps(p, mask, x); }

INLINE_TARGET float v_hsum(__m512 x) { return _mm512_reduce_add_ps(x); }
INLINE_TARGET float v_hmax(__m512 x) { return _mm512_reduce_max_ps(x); }   /* of lanes holding no NaN */

/* Rows of the other formats for the row operations (ROW_FORMATS, tile_ops_row_template.h),
   16 elements converted exactly: bfloat16 shifted into the upper half, float16 by
   vcvtph2ps, int8 sign-extended and converted (the scale multiplies after) */
#define ROW_FORMATS
INLINE_TARGET __m512 load_row_bf16(const uint16_t *p)
{
    const __m512i bits = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16));
}
INLINE_TARGET __m512 load_row_f16(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
INLINE_TARGET __m512 load_row_q8(const int8_t *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

#include "tile_ops_simd_template.h"
