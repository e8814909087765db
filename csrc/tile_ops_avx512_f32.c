/* float32 tile operations with AVX-512 (F, VL, DQ), 16 queries per __m512: the vocabulary and
   the register plan of tile_ops_simd_template.h, which holds the algorithm; and bfloat16's
   with AVX512-BF16's dot products (tile_ops_bf16_dot.h).
   The file is compiled for the baseline ISA; only these functions carry
   target("avx512f,avx512vl,avx512dq,fma") (the bfloat16 ones also avx512bw and avx512bf16), and
   attention.c selects them only on CPUs with those. */
#include <immintrin.h>
#include <math.h>
#include "tile_ops.h"

#define TARGET __attribute__((target("avx512f,avx512vl,avx512dq,fma")))
#define INLINE_TARGET static inline __attribute__((always_inline, target("avx512f,avx512vl,avx512dq,fma")))
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
#define NO_LANES ((lane_mask)0)
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

/* x − round(x), to nearest even (imm8 0: no fraction bits kept), exact */
#define v_round_reduce v_round_reduce
INLINE_TARGET __m512 v_round_reduce(__m512 x) { return _mm512_reduce_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

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

/* bfloat16 dot products (tile_ops_bf16_dot.h): vdpbf16ps, vcvtne2ps2bf16, and AVX512BW's
   16-bit masked loads and word permutes; the softmax's rounding of P in AVX-512F's integer
   operations (f32_to_bf16's), so that it runs in the float32 functions */
INLINE_TARGET __m512 v_round_bf16(__m512 x)
{
    const __m512i u = _mm512_castps_si512(x);
    const __m512i last_kept = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(last_kept, _mm512_set1_epi32(0x7fff))),
                                             _mm512_set1_epi32((int)0xffff0000u));
    return _mm512_mask_mov_ps(_mm512_castsi512_ps(rounded), _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}
#define BF16_DOT_OPS tile_ops_avx512_bf16
#define DOT_TARGET __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx512bf16,fma")))
#define INLINE_DOT_WORD static inline __attribute__((always_inline)) DOT_TARGET
typedef __m512i pairs;
#define P(op) pairs_##op
INLINE_DOT_WORD pairs pairs_load(const uint32_t *p) { return _mm512_load_si512(p); }
INLINE_DOT_WORD pairs pairs_loadu(const void *p) { return _mm512_loadu_si512(p); }
INLINE_DOT_WORD void pairs_store(uint32_t *p, pairs x) { _mm512_store_si512(p, x); }
INLINE_DOT_WORD void pairs_storeu(void *p, pairs x) { _mm512_storeu_si512(p, x); }
INLINE_DOT_WORD pairs pairs_set1(uint32_t w) { return _mm512_set1_epi32((int)w); }
INLINE_DOT_WORD pairs pairs_low_halves(pairs x) { return _mm512_and_si512(x, _mm512_set1_epi32(0xffff)); }
INLINE_DOT_WORD __m512 v_dot(__m512 acc, pairs a, pairs b) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }
INLINE_DOT_WORD __m512 v_dot_where(lane_mask mask, __m512 acc, pairs a, pairs b)
{
    return _mm512_mask_dpbf16_ps(acc, mask, (__m512bh)a, (__m512bh)b);
}
/* vcvtne2ps2bf16 puts the second operand's 16 roundings in the low words, the first's above */
INLINE_DOT_WORD pairs pairs_round_run(__m512 lo, __m512 hi) { return (__m512i)_mm512_cvtne2ps_pbh(hi, lo); }
/* the run lo, hi, then word i of each side by side: word 2i from word i, 2i + 1 from 16 + i */
INLINE_DOT_WORD pairs pairs_round(__m512 lo, __m512 hi)
{
    const __m512i i = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i from = _mm512_or_si512(i, _mm512_slli_epi32(_mm512_add_epi32(i, _mm512_set1_epi32(16)), 16));
    return _mm512_permutexvar_epi16(from, pairs_round_run(lo, hi));
}
INLINE_DOT_WORD pairs pairs_first(const uint16_t *p, int64_t n)
{
    return _mm512_maskz_loadu_epi16((__mmask32)((1u << n) - 1), p);   /* n < 32 */
}
/* two rows' 16-bit words zero-extended, the second shifted into the high halves */
INLINE_DOT_WORD pairs pairs_of_rows(const uint16_t *a, const uint16_t *b, int64_t n)
{
    const __mmask16 mask = (__mmask16)((1u << n) - 1);   /* n <= 16 */
    const __m256i low = n == LANES ? _mm256_loadu_si256((const __m256i *)a) : _mm256_maskz_loadu_epi16(mask, a);
    const __m256i high = !b ? _mm256_setzero_si256()
                         : n == LANES ? _mm256_loadu_si256((const __m256i *)b) : _mm256_maskz_loadu_epi16(mask, b);
    return _mm512_or_si512(_mm512_cvtepu16_epi32(low), _mm512_slli_epi32(_mm512_cvtepu16_epi32(high), 16));
}

/* the packing's transposes (tile_ops.h): transpose_lanes of tile_ops_simd_template.h, its
   groups of 4 rows, lane l of u[4g + m] column 4l + m of rows 4g .. 4g + 3 */
#define V_LANE_SHUFFLE _mm512_shuffle_f32x4
#define TRANSPOSE_EDGES transpose_avx2_f32
INLINE_TARGET void v_lane_columns(const __m512 *a, __m512 *u)
{
    __m512 t[LANES];
    for (int i = 0; i < LANES; i += 2) {   /* rows i, i + 1 interleaved, in each 128-bit lane */
        t[i] = _mm512_unpacklo_ps(a[i], a[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(a[i], a[i + 1]);
    }
    for (int g = 0; g < LANES; g += 4) {
        u[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
        u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
        u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
        u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
    }
}
#define TRANSPOSE transpose_lanes_f32

#include "tile_ops_simd_template.h"
