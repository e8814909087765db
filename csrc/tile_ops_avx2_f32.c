/* float32 tile operations with AVX2 + FMA, 8 queries per __m256 (layouts in tile_ops.h).
   The file is compiled for the baseline ISA; only these functions carry
   target("avx2,fma"), and attention.c selects them only on CPUs with both features. */
#include <immintrin.h>
#include <math.h>
#include "tile_ops.h"

#define AVX2_FMA __attribute__((target("avx2,fma")))
#define INLINE_AVX2_FMA static inline __attribute__((always_inline, target("avx2,fma")))

#define QUERY_PANEL 24   /* 3 vectors: both micro-kernels are 4 × 24 (12 accumulators) */

static int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

/* exp(x) on 8 lanes, within an ulp for x in [−87.3, 88]: x = k·ln2 + r with |r| <= ln2/2,
   exp(x) = 2^k · p(r), p a degree-6 near-minimax polynomial (Chebyshev fit, error < 0.9 eps).
   x < −126·ln2 (a subnormal result) and x = −inf give 0: such a weight is below 2^−126 next
   to the row maximum's weight 1. NaN gives NaN: p(NaN) = NaN, and the final mask clears only
   lanes where x < bound, which is false for NaN. */
INLINE_AVX2_FMA __m256 exp8(__m256 x)
{
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* r = x − k·ln2 in two steps (Cody–Waite): ln2_hi has 12 trailing zero bits, so k·ln2_hi is exact */
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(6.931152344e-01f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(3.194618330e-05f), r);

    __m256 p = _mm256_set1_ps(0.0013941108481958508f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.00837512593716383f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.04166635125875473f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.16666415333747864f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));

    /* 2^k built in the exponent field */
    const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127));
    const __m256 two_k = _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23));
    const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654475f), _CMP_LT_OQ);
    return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, two_k));
}

/* Sᵀ (4, 24) = scale · K (4 rows, d) · Qᵀ panel (d, 24); per step 3 loads, 4 broadcasts, 12 FMAs */
INLINE_AVX2_FMA void qk_4x24(const float *const k_rows[4], const float *qt, int64_t d, float scale,
                             float *st, int64_t ld)
{
    __m256 acc[4][3];
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < 3; c++)
            acc[i][c] = _mm256_setzero_ps();
    for (int64_t p = 0; p < d; p++) {
        const __m256 b0 = _mm256_load_ps(qt + p * QUERY_PANEL);
        const __m256 b1 = _mm256_load_ps(qt + p * QUERY_PANEL + 8);
        const __m256 b2 = _mm256_load_ps(qt + p * QUERY_PANEL + 16);
        for (int i = 0; i < 4; i++) {
            const __m256 a = _mm256_broadcast_ss(k_rows[i] + p);
            acc[i][0] = _mm256_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(a, b1, acc[i][1]);
            acc[i][2] = _mm256_fmadd_ps(a, b2, acc[i][2]);
        }
    }
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < 3; c++)
            _mm256_store_ps(st + i * ld + 8 * c, _mm256_mul_ps(vscale, acc[i][c]));
}

static AVX2_FMA void qk_tile(const float *k, int64_t keys, const float *qt, int64_t rows_pad,
                             int64_t d, float scale, float *st, int64_t ld)
{
    /* Panel outer: one Qᵀ panel (d × 24) stays in L1 while the tile's keys stream past it. */
    for (int64_t r0 = 0; r0 < rows_pad; r0 += QUERY_PANEL)
        for (int64_t j = 0; j < keys; j += KEY_BLOCK) {
            /* past the last key, repeat it: those Sᵀ rows are computed but never used */
            const float *const k_rows[4] = {
                k + min_i64(j, keys - 1) * d,     k + min_i64(j + 1, keys - 1) * d,
                k + min_i64(j + 2, keys - 1) * d, k + min_i64(j + 3, keys - 1) * d,
            };
            qk_4x24(k_rows, qt + r0 * d, d, scale, st + j * ld + r0, ld);
        }
}

/* The online softmax for 8 queries (one column strip of Sᵀ); see tile_ops.h */
INLINE_AVX2_FMA void online_softmax_8(float *st, int64_t ld, int64_t keys, float *m, float *l,
                                      float *alpha)
{
    const __m256 m_old = _mm256_load_ps(m);
    /* max(x, acc) returns acc when x is NaN: NaN never enters m (it reaches l through exp) */
    __m256 m_new = m_old;
    for (int64_t j = 0; j < keys; j++)
        m_new = _mm256_max_ps(_mm256_load_ps(st + j * ld), m_new);
    /* While a query has seen only −inf scores, measure from 0, so that its weights are
       exp(−inf) = 0 rather than exp(−inf + inf) = NaN; later finite scores then take over as
       in the reference, and a row of only −inf ends as 0/0 = NaN as in the reference. */
    const __m256 m_ref = _mm256_andnot_ps(_mm256_cmp_ps(m_new, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ),
                                          m_new);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j = 0; j < keys; j++) {
        const __m256 p = exp8(_mm256_sub_ps(_mm256_load_ps(st + j * ld), m_ref));
        _mm256_store_ps(st + j * ld, p);
        sum = _mm256_add_ps(sum, p);
    }
    const __m256 a = exp8(_mm256_sub_ps(m_old, m_ref));
    _mm256_store_ps(alpha, a);
    _mm256_store_ps(l, _mm256_fmadd_ps(a, _mm256_load_ps(l), sum));
    _mm256_store_ps(m, m_new);
}

static AVX2_FMA void online_softmax(float *st, int64_t ld, int64_t keys, int64_t rows_pad,
                                    float *m, float *l, float *alpha)
{
    for (int64_t r = 0; r < rows_pad; r += 8)
        online_softmax_8(st + r, ld, keys, m + r, l + r, alpha + r);
}

/* Oᵀ (4, 24) = alpha ⊙ Oᵀ + Vᵀ (4 columns, keys) · Pᵀ panel (keys, 24).
   All 24 queries see keys [0, shared); keys [shared, most) only reach the lanes whose
   visible count exceeds them: there the product is masked, since 0 · NaN would be NaN. */
INLINE_AVX2_FMA void pv_4x24(const float *pt, int64_t ld, const float *const v_cols[4], int64_t d_v,
                             const int32_t *visible, int64_t shared, int64_t most,
                             const float *alpha, float *ot)
{
    __m256 acc[4][3];
    for (int c = 0; c < 3; c++) {
        const __m256 a = _mm256_load_ps(alpha + 8 * c);
        for (int i = 0; i < 4; i++)
            acc[i][c] = _mm256_mul_ps(a, _mm256_load_ps(ot + i * ld + 8 * c));
    }
    for (int64_t j = 0; j < shared; j++) {
        const __m256 p0 = _mm256_load_ps(pt + j * ld);
        const __m256 p1 = _mm256_load_ps(pt + j * ld + 8);
        const __m256 p2 = _mm256_load_ps(pt + j * ld + 16);
        for (int i = 0; i < 4; i++) {
            const __m256 b = _mm256_broadcast_ss(v_cols[i] + j * d_v);
            acc[i][0] = _mm256_fmadd_ps(p0, b, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(p1, b, acc[i][1]);
            acc[i][2] = _mm256_fmadd_ps(p2, b, acc[i][2]);
        }
    }
    for (int64_t j = shared; j < most; j++)
        for (int c = 0; c < 3; c++) {
            const __m256 sees = _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                _mm256_load_si256((const __m256i *)(visible + 8 * c)), _mm256_set1_epi32((int)j)));
            const __m256 p = _mm256_load_ps(pt + j * ld + 8 * c);
            for (int i = 0; i < 4; i++) {
                const __m256 pv = _mm256_mul_ps(p, _mm256_broadcast_ss(v_cols[i] + j * d_v));
                acc[i][c] = _mm256_add_ps(acc[i][c], _mm256_and_ps(pv, sees));
            }
        }
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < 3; c++)
            _mm256_store_ps(ot + i * ld + 8 * c, acc[i][c]);
}

static AVX2_FMA void pv_tile(const float *pt, int64_t ld, const int32_t *visible, const float *alpha,
                             const float *v, int64_t d_v, int64_t rows_pad, float *ot)
{
    /* Panel outer: one Pᵀ panel (keys × 24) stays in L1 while all value columns stream past it. */
    for (int64_t r0 = 0; r0 < rows_pad; r0 += QUERY_PANEL) {
        int64_t shared = visible[r0], most = visible[r0];
        for (int64_t r = r0 + 1; r < r0 + QUERY_PANEL; r++) {
            shared = visible[r] < shared ? visible[r] : shared;
            most = visible[r] > most ? visible[r] : most;
        }
        for (int64_t c = 0; c < d_v; c += COL_BLOCK) {
            /* past the last column, repeat it: those Oᵀ rows are scratch, never read back */
            const float *const v_cols[4] = {
                v + min_i64(c, d_v - 1),     v + min_i64(c + 1, d_v - 1),
                v + min_i64(c + 2, d_v - 1), v + min_i64(c + 3, d_v - 1),
            };
            pv_4x24(pt + r0, ld, v_cols, d_v, visible + r0, shared, most, alpha + r0,
                    ot + c * ld + r0);
        }
    }
}

const struct tile_ops_f32 tile_ops_avx2_f32 = {
    .isa = "avx2-fma",
    .query_panel = QUERY_PANEL,
    .qk_tile = qk_tile,
    .online_softmax = online_softmax,
    .pv_tile = pv_tile,
};
