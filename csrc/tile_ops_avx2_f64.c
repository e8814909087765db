/* float64 tile operations with AVX2 + FMA, 4 queries per __m256d (layouts in tile_ops.h):
   the float32 design of tile_ops_avx2_f32.c at half the lanes.
   The file is compiled for the baseline ISA; only these functions carry
   target("avx2,fma"), and attention.c selects them only on CPUs with both features. */
#include <immintrin.h>
#include <math.h>
#include "tile_ops.h"

#define AVX2_FMA __attribute__((target("avx2,fma")))
#define INLINE_AVX2_FMA static inline __attribute__((always_inline, target("avx2,fma")))

#define QUERY_PANEL 12   /* 3 vectors: both micro-kernels are 4 × 12 (12 accumulators) */

static int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

/* exp(x) on 4 lanes, within an ulp for x in [−708.3, 709]: as exp8 in the float32 file,
   with a degree-11 polynomial (Chebyshev fit, error < 1 eps), rounding by adding
   1.5·2^52 + 1023, and 0 below −1022·ln2. */
INLINE_AVX2_FMA __m256d exp4(__m256d x)
{
    const __m256d round_biased = _mm256_set1_pd(6755399441056767.0);   /* 1.5·2^52 + 1023 */
    const __m256d t = _mm256_fmadd_pd(x, _mm256_set1_pd(1.4426950408889634), round_biased);
    const __m256d k = _mm256_sub_pd(t, round_biased);
    /* Cody–Waite: ln2_hi has 21 trailing zero bits, so k·ln2_hi is exact */
    __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(6.93147180369123816e-01), x);
    r = _mm256_fnmadd_pd(k, _mm256_set1_pd(1.90821492927058770e-10), r);

    static const double coef[] = {   /* highest power first */
        2.5110037605963777e-08, 2.763263963904103e-07, 2.755724091857897e-06,
        2.4801485482328494e-05, 0.00019841269890047113, 0.0013888888952314775,
        0.008333333333319601, 0.0416666666664881, 0.1666666666666668,
        0.5000000000000019, 1.0, 1.0,
    };
    __m256d p = _mm256_set1_pd(coef[0]);
    for (int i = 1; i < (int)(sizeof coef / sizeof coef[0]); i++)
        p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(coef[i]));

    const __m256d two_k = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_castpd_si256(t), 52));
    const __m256d underflow = _mm256_cmp_pd(x, _mm256_set1_pd(-708.3964185322641), _CMP_LT_OQ);
    return _mm256_andnot_pd(underflow, _mm256_mul_pd(p, two_k));
}

/* Sᵀ (4, 12) = scale · K (4 rows, d) · Qᵀ panel (d, 12); per step 3 loads, 4 broadcasts, 12 FMAs */
INLINE_AVX2_FMA void qk_4x12(const double *const k_rows[4], const double *qt, int64_t d, double scale,
                             double *st)
{
    __m256d acc[4][3];
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < 3; c++)
            acc[i][c] = _mm256_setzero_pd();
    for (int64_t p = 0; p < d; p++) {
        const __m256d b0 = _mm256_load_pd(qt + p * QUERY_PANEL);
        const __m256d b1 = _mm256_load_pd(qt + p * QUERY_PANEL + 4);
        const __m256d b2 = _mm256_load_pd(qt + p * QUERY_PANEL + 8);
        for (int i = 0; i < 4; i++) {
            const __m256d a = _mm256_broadcast_sd(k_rows[i] + p);
            acc[i][0] = _mm256_fmadd_pd(a, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_pd(a, b1, acc[i][1]);
            acc[i][2] = _mm256_fmadd_pd(a, b2, acc[i][2]);
        }
    }
    const __m256d vscale = _mm256_set1_pd(scale);
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < 3; c++)
            _mm256_store_pd(st + i * QUERY_PANEL + 4 * c, _mm256_mul_pd(vscale, acc[i][c]));
}

static AVX2_FMA void qk_tile(const double *k, const int32_t *panel_keys, const double *qt,
                             int64_t rows_pad, int64_t d, double scale, double *st, int64_t key_cap)
{
    /* Panel outer: one Qᵀ panel (d × 12) stays in L1 while the tile's keys stream past it. */
    for (int64_t r0 = 0; r0 < rows_pad; r0 += QUERY_PANEL) {
        const int64_t keys = panel_keys[r0 / QUERY_PANEL];
        for (int64_t j = 0; j < keys; j += KEY_BLOCK) {
            /* past the last key, repeat it: those Sᵀ rows are computed but never used */
            const double *const k_rows[4] = {
                k + min_i64(j, keys - 1) * d,     k + min_i64(j + 1, keys - 1) * d,
                k + min_i64(j + 2, keys - 1) * d, k + min_i64(j + 3, keys - 1) * d,
            };
            qk_4x12(k_rows, qt + r0 * d, d, scale, st + r0 * key_cap + j * QUERY_PANEL);
        }
    }
}

/* The online softmax of one panel of 12 queries (see tile_ops.h). The three vectors of a
   key's row are loaded together and give three independent exp computations. */
INLINE_AVX2_FMA void online_softmax_12(double *st, int64_t keys, double *m, double *l, double *alpha)
{
    __m256d m_old[3], m_new[3], m_ref[3], sum[3];
    for (int c = 0; c < 3; c++)
        m_old[c] = m_new[c] = _mm256_load_pd(m + 4 * c);
    /* max(x, acc) returns acc when x is NaN: NaN never enters m (it reaches l through exp) */
    for (int64_t j = 0; j < keys; j++)
        for (int c = 0; c < 3; c++)
            m_new[c] = _mm256_max_pd(_mm256_load_pd(st + j * QUERY_PANEL + 4 * c), m_new[c]);
    /* While a query has seen only −inf scores, measure from 0, so that its weights are
       exp(−inf) = 0 rather than exp(−inf + inf) = NaN; later finite scores then take over as
       in the reference, and a row of only −inf ends as 0/0 = NaN as in the reference. */
    for (int c = 0; c < 3; c++) {
        const __m256d never_finite = _mm256_cmp_pd(m_new[c], _mm256_set1_pd(-INFINITY), _CMP_EQ_OQ);
        m_ref[c] = _mm256_andnot_pd(never_finite, m_new[c]);
        sum[c] = _mm256_setzero_pd();
    }
    for (int64_t j = 0; j < keys; j++)
        for (int c = 0; c < 3; c++) {
            double *s = st + j * QUERY_PANEL + 4 * c;
            const __m256d p = exp4(_mm256_sub_pd(_mm256_load_pd(s), m_ref[c]));
            _mm256_store_pd(s, p);
            sum[c] = _mm256_add_pd(sum[c], p);
        }
    for (int c = 0; c < 3; c++) {
        const __m256d a = exp4(_mm256_sub_pd(m_old[c], m_ref[c]));
        _mm256_store_pd(alpha + 4 * c, a);
        _mm256_store_pd(l + 4 * c, _mm256_fmadd_pd(a, _mm256_load_pd(l + 4 * c), sum[c]));
        _mm256_store_pd(m + 4 * c, m_new[c]);
    }
}

static AVX2_FMA void online_softmax(double *st, int64_t key_cap, const int32_t *panel_keys,
                                    int64_t rows_pad, double *m, double *l, double *alpha)
{
    for (int64_t r0 = 0; r0 < rows_pad; r0 += QUERY_PANEL)
        online_softmax_12(st + r0 * key_cap, panel_keys[r0 / QUERY_PANEL], m + r0, l + r0, alpha + r0);
}

/* Oᵀ (4, 12) = alpha ⊙ Oᵀ + Vᵀ (4 columns, keys) · Pᵀ panel (keys, 12).
   All 12 queries see keys [0, shared); keys [shared, most) only reach the lanes whose
   visible count exceeds them: there the product is masked, since 0 · NaN would be NaN. */
INLINE_AVX2_FMA void pv_4x12(const double *pt, const double *const v_cols[4], int64_t d_v,
                             const int32_t *visible, int64_t shared, int64_t most,
                             const double *alpha, double *ot)
{
    __m256d acc[4][3];
    for (int c = 0; c < 3; c++) {
        const __m256d a = _mm256_load_pd(alpha + 4 * c);
        for (int i = 0; i < 4; i++)
            acc[i][c] = _mm256_mul_pd(a, _mm256_load_pd(ot + i * QUERY_PANEL + 4 * c));
    }
    for (int64_t j = 0; j < shared; j++) {
        const __m256d p0 = _mm256_load_pd(pt + j * QUERY_PANEL);
        const __m256d p1 = _mm256_load_pd(pt + j * QUERY_PANEL + 4);
        const __m256d p2 = _mm256_load_pd(pt + j * QUERY_PANEL + 8);
        for (int i = 0; i < 4; i++) {
            const __m256d b = _mm256_broadcast_sd(v_cols[i] + j * d_v);
            acc[i][0] = _mm256_fmadd_pd(p0, b, acc[i][0]);
            acc[i][1] = _mm256_fmadd_pd(p1, b, acc[i][1]);
            acc[i][2] = _mm256_fmadd_pd(p2, b, acc[i][2]);
        }
    }
    for (int64_t j = shared; j < most; j++)
        for (int c = 0; c < 3; c++) {
            const __m256d sees = _mm256_castsi256_pd(_mm256_cmpgt_epi64(
                _mm256_cvtepi32_epi64(_mm_load_si128((const __m128i *)(visible + 4 * c))),
                _mm256_set1_epi64x(j)));
            const __m256d p = _mm256_load_pd(pt + j * QUERY_PANEL + 4 * c);
            for (int i = 0; i < 4; i++) {
                const __m256d pv = _mm256_mul_pd(p, _mm256_broadcast_sd(v_cols[i] + j * d_v));
                acc[i][c] = _mm256_add_pd(acc[i][c], _mm256_and_pd(pv, sees));
            }
        }
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < 3; c++)
            _mm256_store_pd(ot + i * QUERY_PANEL + 4 * c, acc[i][c]);
}

static AVX2_FMA void pv_tile(const double *pt, int64_t key_cap, const int32_t *visible,
                             const double *alpha, const double *v, int64_t d_v, int64_t rows_pad,
                             double *ot)
{
    const int64_t dv_pad = (d_v + COL_BLOCK - 1) / COL_BLOCK * COL_BLOCK;
    /* Panel outer: one Pᵀ panel (keys × 12) stays in L1 while all value columns stream past it. */
    for (int64_t r0 = 0; r0 < rows_pad; r0 += QUERY_PANEL) {
        int64_t shared = visible[r0], most = visible[r0];
        for (int64_t r = r0 + 1; r < r0 + QUERY_PANEL; r++) {
            shared = visible[r] < shared ? visible[r] : shared;
            most = visible[r] > most ? visible[r] : most;
        }
        for (int64_t c = 0; c < d_v; c += COL_BLOCK) {
            /* past the last column, repeat it: those Oᵀ rows are scratch, never read back */
            const double *const v_cols[4] = {
                v + min_i64(c, d_v - 1),     v + min_i64(c + 1, d_v - 1),
                v + min_i64(c + 2, d_v - 1), v + min_i64(c + 3, d_v - 1),
            };
            pv_4x12(pt + r0 * key_cap, v_cols, d_v, visible + r0, shared, most,
                    alpha + r0, ot + r0 * dv_pad + c * QUERY_PANEL);
        }
    }
}

const struct tile_ops_f64 tile_ops_avx2_f64 = {
    .isa = "avx2-fma",
    .query_panel = QUERY_PANEL,
    .qk_tile = qk_tile,
    .online_softmax = online_softmax,
    .pv_tile = pv_tile,
};
