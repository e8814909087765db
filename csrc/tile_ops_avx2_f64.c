/* float64 tile operations with AVX2 + FMA (4 doubles per __m256d): the float32 design
   (tile_ops_avx2_f32.c) at half the lanes, with a longer exp polynomial.
   Only these functions carry target("avx2,fma"); attention.c calls them only when the CPU
   reports both features. */
#include <immintrin.h>
#include <math.h>
#include "tile_ops.h"

#define AVX2_FMA __attribute__((target("avx2,fma")))
#define INLINE_AVX2_FMA static inline __attribute__((always_inline, target("avx2,fma")))

#define KEY_PANEL 12    /* keys per packed Kᵀ panel = 3 vectors: the QK micro-kernel is 4 × 12 */
#define DV_ALIGN 4      /* V columns padded to whole vectors: the PV micro-kernel is 4 × 8 or 4 × 4 */

/* Lanes [0, n) set, for the tails of rows that are not a multiple of 4 long. */
INLINE_AVX2_FMA __m256i lanes_below(int64_t n)
{
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
}

INLINE_AVX2_FMA double hmax4(__m256d x)
{
    __m128d m = _mm_max_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
    m = _mm_max_sd(m, _mm_unpackhi_pd(m, m));
    return _mm_cvtsd_f64(m);
}

INLINE_AVX2_FMA double hsum4(__m256d x)
{
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
}

/* exp(x) on 4 lanes, within 1 ulp-ish for x in [−708.4, 709]: x = k·ln2 + r with |r| <= ln2/2,
   exp(x) = 2^k · p(r), p a degree-11 near-minimax polynomial (Chebyshev fit, error < 1 eps).
   x < −1022·ln2 (subnormal result) and x = −inf give 0; NaN gives NaN (see exp8 in the
   float32 file). */
INLINE_AVX2_FMA __m256d exp4(__m256d x)
{
    const __m256d k = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(1.4426950408889634)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* Cody–Waite: ln2_hi has 21 trailing zero bits, so k·ln2_hi is exact */
    __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(6.93147180369123816e-01), x);
    r = _mm256_fnmadd_pd(k, _mm256_set1_pd(1.90821492927058770e-10), r);

    static const double coef[] = {
        2.5110037605963777e-08, 2.763263963904103e-07, 2.755724091857897e-06,
        2.4801485482328494e-05, 0.00019841269890047113, 0.0013888888952314775,
        0.008333333333319601, 0.0416666666664881, 0.1666666666666668,
        0.5000000000000019, 1.0, 1.0,
    };
    __m256d p = _mm256_set1_pd(coef[0]);
    for (int i = 1; i < (int)(sizeof coef / sizeof coef[0]); i++)
        p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(coef[i]));

    /* 2^k built in the exponent field */
    const __m256i biased = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k)),
                                            _mm256_set1_epi64x(1023));
    const __m256d two_k = _mm256_castsi256_pd(_mm256_slli_epi64(biased, 52));
    const __m256d underflow = _mm256_cmp_pd(x, _mm256_set1_pd(-708.3964185322641), _CMP_LT_OQ);
    return _mm256_andnot_pd(underflow, _mm256_mul_pd(p, two_k));
}

/* S (4, 12) = scale · Q (4, d) · Kᵀ panel (d, 12): 12 accumulators, per step 3 loads + 4 broadcasts */
INLINE_AVX2_FMA void qk_4x12(const double *q, int64_t d, const double *kt, double *s, int64_t ld_s,
                             double scale)
{
    __m256d acc[4][3];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++)
            acc[r][c] = _mm256_setzero_pd();
    for (int64_t p = 0; p < d; p++) {
        const __m256d b0 = _mm256_load_pd(kt + p * KEY_PANEL);
        const __m256d b1 = _mm256_load_pd(kt + p * KEY_PANEL + 4);
        const __m256d b2 = _mm256_load_pd(kt + p * KEY_PANEL + 8);
        for (int r = 0; r < 4; r++) {
            const __m256d a = _mm256_broadcast_sd(q + r * d + p);
            acc[r][0] = _mm256_fmadd_pd(a, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_pd(a, b1, acc[r][1]);
            acc[r][2] = _mm256_fmadd_pd(a, b2, acc[r][2]);
        }
    }
    const __m256d vscale = _mm256_set1_pd(scale);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++)
            _mm256_storeu_pd(s + r * ld_s + 4 * c, _mm256_mul_pd(vscale, acc[r][c]));
}

static AVX2_FMA void qk_tile(const double *q, const double *kt, double *s, int64_t ld_s,
                             int64_t rows, int64_t keys_pad, int64_t d, double scale)
{
    /* Panel outer: one Kᵀ panel (d × 12) stays in L1 while all query rows stream past it. */
    for (int64_t j = 0; j < keys_pad; j += KEY_PANEL)
        for (int64_t r = 0; r < rows; r += 4)
            qk_4x12(q + r * d, d, kt + j * d, s + r * ld_s + j, ld_s, scale);
}

static AVX2_FMA double row_max(const double *s, int64_t count)
{
    /* max(x, acc) returns acc when x is NaN: NaN never enters the accumulators */
    __m256d m0 = _mm256_set1_pd(-INFINITY), m1 = m0;
    int64_t j = 0;
    for (; j + 8 <= count; j += 8) {
        m0 = _mm256_max_pd(_mm256_loadu_pd(s + j), m0);
        m1 = _mm256_max_pd(_mm256_loadu_pd(s + j + 4), m1);
    }
    for (; j < count; j += 4) {
        const __m256i lanes = lanes_below(count - j);
        const __m256d x = _mm256_blendv_pd(_mm256_set1_pd(-INFINITY), _mm256_maskload_pd(s + j, lanes),
                                           _mm256_castsi256_pd(lanes));
        m0 = _mm256_max_pd(x, m0);
    }
    return hmax4(_mm256_max_pd(m0, m1));
}

static AVX2_FMA double exp_row(double *s, int64_t count, double m)
{
    const __m256d vm = _mm256_set1_pd(m);
    __m256d sum0 = _mm256_setzero_pd(), sum1 = sum0;
    int64_t j = 0;
    for (; j + 8 <= count; j += 8) {
        const __m256d p0 = exp4(_mm256_sub_pd(_mm256_loadu_pd(s + j), vm));
        const __m256d p1 = exp4(_mm256_sub_pd(_mm256_loadu_pd(s + j + 4), vm));
        _mm256_storeu_pd(s + j, p0);
        _mm256_storeu_pd(s + j + 4, p1);
        sum0 = _mm256_add_pd(sum0, p0);
        sum1 = _mm256_add_pd(sum1, p1);
    }
    for (; j < count; j += 4) {
        const __m256i lanes = lanes_below(count - j);
        const __m256d p = _mm256_and_pd(exp4(_mm256_sub_pd(_mm256_maskload_pd(s + j, lanes), vm)),
                                        _mm256_castsi256_pd(lanes));
        _mm256_maskstore_pd(s + j, lanes, p);
        sum0 = _mm256_add_pd(sum0, p);
    }
    return hsum4(_mm256_add_pd(sum0, sum1));
}

/* O (4, 4·vecs) = alpha ⊙ O + P (4, keys) · V (keys, 4·vecs), vecs = 2 (4 × 8) or 1 (4 × 4) */
INLINE_AVX2_FMA void pv_4xn(const double *p, int64_t ld_p, const double *v, int64_t ld_v,
                            double *o, int64_t ld_o, const double *alpha, int64_t keys, const int vecs)
{
    __m256d acc[4][2];
    for (int r = 0; r < 4; r++) {
        const __m256d a = _mm256_broadcast_sd(alpha + r);
        for (int c = 0; c < vecs; c++)
            acc[r][c] = _mm256_mul_pd(a, _mm256_load_pd(o + r * ld_o + 4 * c));
    }
    for (int64_t j = 0; j < keys; j++) {
        __m256d b[2];
        for (int c = 0; c < vecs; c++)
            b[c] = _mm256_load_pd(v + j * ld_v + 4 * c);
        for (int r = 0; r < 4; r++) {
            const __m256d w = _mm256_broadcast_sd(p + r * ld_p + j);
            for (int c = 0; c < vecs; c++)
                acc[r][c] = _mm256_fmadd_pd(w, b[c], acc[r][c]);
        }
    }
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < vecs; c++)
            _mm256_store_pd(o + r * ld_o + 4 * c, acc[r][c]);
}

/* o (4·vecs) += p[from:to] · V[from:to] — keys only some rows of a block see (causal diagonal) */
INLINE_AVX2_FMA void pv_row_extra(const double *p, const double *v, int64_t ld_v, double *o,
                                  int64_t from, int64_t to, const int vecs)
{
    for (int c = 0; c < vecs; c++) {
        __m256d acc = _mm256_load_pd(o + 4 * c);
        for (int64_t j = from; j < to; j++)
            acc = _mm256_fmadd_pd(_mm256_broadcast_sd(p + j), _mm256_load_pd(v + j * ld_v + 4 * c), acc);
        _mm256_store_pd(o + 4 * c, acc);
    }
}

INLINE_AVX2_FMA void pv_block(const double *p, int64_t ld_p, const int64_t *visible,
                              const double *alpha, const double *v, int64_t ld_v, double *o,
                              int64_t ld_o, const int vecs)
{
    int64_t shared = visible[0];
    for (int r = 1; r < 4; r++)
        shared = visible[r] < shared ? visible[r] : shared;
    pv_4xn(p, ld_p, v, ld_v, o, ld_o, alpha, shared, vecs);
    for (int r = 0; r < 4; r++)
        if (visible[r] > shared)
            pv_row_extra(p + r * ld_p, v, ld_v, o + r * ld_o, shared, visible[r], vecs);
}

static AVX2_FMA void pv_tile(const double *p, int64_t ld_p, const int64_t *visible,
                             const double *alpha, const double *v, double *o,
                             int64_t rows, int64_t dv_pad)
{
    /* Column block outer: a (keys × 8) slice of V stays in L1 while all rows stream past it. */
    int64_t c = 0;
    for (; c + 8 <= dv_pad; c += 8)
        for (int64_t r = 0; r < rows; r += 4)
            pv_block(p + r * ld_p, ld_p, visible + r, alpha + r, v + c, dv_pad,
                     o + r * dv_pad + c, dv_pad, 2);
    if (c < dv_pad)
        for (int64_t r = 0; r < rows; r += 4)
            pv_block(p + r * ld_p, ld_p, visible + r, alpha + r, v + c, dv_pad,
                     o + r * dv_pad + c, dv_pad, 1);
}

const struct tile_ops_f64 tile_ops_avx2_f64 = {
    .isa = "avx2-fma",
    .key_panel = KEY_PANEL,
    .dv_align = DV_ALIGN,
    .qk_tile = qk_tile,
    .row_max = row_max,
    .exp_row = exp_row,
    .pv_tile = pv_tile,
};
