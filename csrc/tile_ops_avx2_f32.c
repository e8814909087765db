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

/* exp(x) on 8 lanes, within 2 ulp for x in [−87.3, 88]: x = k·ln2 + r with |r| <= ln2/2,
   exp(x) = 2^k · p(r), p a degree-5 near-minimax polynomial (Chebyshev fit, error < 2 eps).
   k is rounded by adding 1.5·2^23 + 127, which also leaves k + 127, the biased exponent of
   2^k, in the low bits of the sum. x < −126·ln2 (a subnormal result) and x = −inf give 0:
   such a weight is below 2^−126 next to the row maximum's weight 1. NaN gives NaN: p(NaN) is
   NaN, and the final mask clears only lanes where x < bound, which is false for NaN. */
INLINE_AVX2_FMA __m256 exp8(__m256 x)
{
    const __m256 round_biased = _mm256_set1_ps(12583039.0f);   /* 1.5·2^23 + 127 */
    const __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), round_biased);
    const __m256 k = _mm256_sub_ps(t, round_biased);
    /* r = x − k·ln2 in two steps (Cody–Waite): ln2_hi has 12 trailing zero bits, so k·ln2_hi is exact */
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(6.931152344e-01f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(3.194618330e-05f), r);

    __m256 p = _mm256_set1_ps(0.008369148708879948f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.041917506605386734f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.16666504740715027f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.49998870491981506f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0000001192092896f));

    const __m256 two_k = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23));
    const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654475f), _CMP_LT_OQ);
    return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, two_k));
}

/* Sᵀ (4, 24) = scale · K (4 rows, d) · Qᵀ panel (d, 24); per step 3 loads, 4 broadcasts, 12 FMAs */
INLINE_AVX2_FMA void qk_4x24(const float *const k_rows[4], const float *qt, int64_t d, float scale,
                             float *st)
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
            _mm256_store_ps(st + i * QUERY_PANEL + 8 * c, _mm256_mul_ps(vscale, acc[i][c]));
}

static AVX2_FMA void qk_tile(const float *k, const int32_t *panel_keys, const float *qt,
                             int64_t rows_pad, int64_t d, float scale, float *st, int64_t key_cap)
{
    /* Panel outer: one Qᵀ panel (d × 24) stays in L1 while the tile's keys stream past it. */
    for (int64_t r0 = 0; r0 < rows_pad; r0 += QUERY_PANEL) {
        const int64_t keys = panel_keys[r0 / QUERY_PANEL];
        for (int64_t j = 0; j < keys; j += KEY_BLOCK) {
            /* past the last key, repeat it: those Sᵀ rows are computed but never used */
            const float *const k_rows[4] = {
                k + min_i64(j, keys - 1) * d,     k + min_i64(j + 1, keys - 1) * d,
                k + min_i64(j + 2, keys - 1) * d, k + min_i64(j + 3, keys - 1) * d,
            };
            qk_4x24(k_rows, qt + r0 * d, d, scale, st + r0 * key_cap + j * QUERY_PANEL);
        }
    }
}

/* The online softmax of one panel of 24 queries (see tile_ops.h). The three vectors of a
   key's row are loaded together and give three independent exp computations. */
INLINE_AVX2_FMA void online_softmax_24(float *st, int64_t keys, float *m, float *l, float *alpha)
{
    __m256 m_old[3], m_new[3], m_ref[3], sum[3];
    for (int c = 0; c < 3; c++)
        m_old[c] = m_new[c] = _mm256_load_ps(m + 8 * c);
    /* max(x, acc) returns acc when x is NaN: NaN never enters m (it reaches l through exp) */
    for (int64_t j = 0; j < keys; j++)
        for (int c = 0; c < 3; c++)
            m_new[c] = _mm256_max_ps(_mm256_load_ps(st + j * QUERY_PANEL + 8 * c), m_new[c]);
    /* While a query has seen only −inf scores, measure from 0, so that its weights are
       exp(−inf) = 0 rather than exp(−inf + inf) = NaN; later finite scores then take over as
       in the reference, and a row of only −inf ends as 0/0 = NaN as in the reference. */
    for (int c = 0; c < 3; c++) {
        const __m256 never_finite = _mm256_cmp_ps(m_new[c], _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ);
        m_ref[c] = _mm256_andnot_ps(never_finite, m_new[c]);
        sum[c] = _mm256_setzero_ps();
    }
    for (int64_t j = 0; j < keys; j++)
        for (int c = 0; c < 3; c++) {
            float *s = st + j * QUERY_PANEL + 8 * c;
            const __m256 p = exp8(_mm256_sub_ps(_mm256_load_ps(s), m_ref[c]));
            _mm256_store_ps(s, p);
            sum[c] = _mm256_add_ps(sum[c], p);
        }
    for (int c = 0; c < 3; c++) {
        const __m256 a = exp8(_mm256_sub_ps(m_old[c], m_ref[c]));
        _mm256_store_ps(alpha + 8 * c, a);
        _mm256_store_ps(l + 8 * c, _mm256_fmadd_ps(a, _mm256_load_ps(l + 8 * c), sum[c]));
        _mm256_store_ps(m + 8 * c, m_new[c]);
    }
}

static AVX2_FMA void online_softmax(float *st, int64_t key_cap, const int32_t *panel_keys,
                                    int64_t rows_pad, float *m, float *l, float *alpha)
{
    for (int64_t r0 = 0; r0 < rows_pad; r0 += QUERY_PANEL)
        online_softmax_24(st + r0 * key_cap, panel_keys[r0 / QUERY_PANEL], m + r0, l + r0, alpha + r0);
}

/* Oᵀ (4, 24) = alpha ⊙ Oᵀ + Vᵀ (4 columns, keys) · Pᵀ panel (keys, 24).
   All 24 queries see keys [0, shared); keys [shared, most) only reach the lanes whose
   visible count exceeds them: there the product is masked, since 0 · NaN would be NaN. */
INLINE_AVX2_FMA void pv_4x24(const float *pt, const float *const v_cols[4], int64_t d_v,
                             const int32_t *visible, int64_t shared, int64_t most,
                             const float *alpha, float *ot)
{
    __m256 acc[4][3];
    for (int c = 0; c < 3; c++) {
        const __m256 a = _mm256_load_ps(alpha + 8 * c);
        for (int i = 0; i < 4; i++)
            acc[i][c] = _mm256_mul_ps(a, _mm256_load_ps(ot + i * QUERY_PANEL + 8 * c));
    }
    for (int64_t j = 0; j < shared; j++) {
        const __m256 p0 = _mm256_load_ps(pt + j * QUERY_PANEL);
        const __m256 p1 = _mm256_load_ps(pt + j * QUERY_PANEL + 8);
        const __m256 p2 = _mm256_load_ps(pt + j * QUERY_PANEL + 16);
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
            const __m256 p = _mm256_load_ps(pt + j * QUERY_PANEL + 8 * c);
            for (int i = 0; i < 4; i++) {
                const __m256 pv = _mm256_mul_ps(p, _mm256_broadcast_ss(v_cols[i] + j * d_v));
                acc[i][c] = _mm256_add_ps(acc[i][c], _mm256_and_ps(pv, sees));
            }
        }
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < 3; c++)
            _mm256_store_ps(ot + i * QUERY_PANEL + 8 * c, acc[i][c]);
}

static AVX2_FMA void pv_tile(const float *pt, int64_t key_cap, const int32_t *visible,
                             const float *alpha, const float *v, int64_t d_v, int64_t rows_pad,
                             float *ot)
{
    const int64_t dv_pad = (d_v + COL_BLOCK - 1) / COL_BLOCK * COL_BLOCK;
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
            pv_4x24(pt + r0 * key_cap, v_cols, d_v, visible + r0, shared, most,
                    alpha + r0, ot + r0 * dv_pad + c * QUERY_PANEL);
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
