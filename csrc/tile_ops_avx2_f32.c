/* float32 tile operations with AVX2 + FMA (8 floats per __m256).
   Compiled for the baseline ISA; only these functions carry target("avx2,fma"), and
   attention.c calls them only when the CPU reports both features. */
#include <immintrin.h>
#include <math.h>
#include "tile_ops.h"

#define AVX2_FMA __attribute__((target("avx2,fma")))
#define INLINE_AVX2_FMA static inline __attribute__((always_inline, target("avx2,fma")))

#define KEY_PANEL 24    /* keys per packed Kᵀ panel = 3 vectors: the QK micro-kernel is 4 × 24 */
#define DV_ALIGN 8      /* V columns padded to whole vectors: the PV micro-kernel is 4 × 16 or 4 × 8 */

/* Lanes [0, n) set, for the tails of rows that are not a multiple of 8 long. */
INLINE_AVX2_FMA __m256i lanes_below(int64_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

INLINE_AVX2_FMA float hmax8(__m256 x)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

INLINE_AVX2_FMA float hsum8(__m256 x)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* exp(x) on 8 lanes, within 1 ulp-ish for x in [−87.3, 88]: x = k·ln2 + r with |r| <= ln2/2,
   exp(x) = 2^k · p(r), p a degree-6 near-minimax polynomial (Chebyshev fit, error < 0.9 eps).
   x < −126·ln2 (the result would be subnormal) and x = −inf give 0: such a weight is below
   2^−126 next to the row maximum's weight 1. NaN gives NaN (p(NaN) = NaN, and the final
   mask only clears lanes where x < bound, which is false for NaN). */
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

/* S (4, 24) = scale · Q (4, d) · Kᵀ panel (d, 24): 12 accumulators, per step 3 loads + 4 broadcasts */
INLINE_AVX2_FMA void qk_4x24(const float *q, int64_t d, const float *kt, float *s, int64_t ld_s,
                             float scale)
{
    __m256 acc[4][3];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++)
            acc[r][c] = _mm256_setzero_ps();
    for (int64_t p = 0; p < d; p++) {
        const __m256 b0 = _mm256_load_ps(kt + p * KEY_PANEL);
        const __m256 b1 = _mm256_load_ps(kt + p * KEY_PANEL + 8);
        const __m256 b2 = _mm256_load_ps(kt + p * KEY_PANEL + 16);
        for (int r = 0; r < 4; r++) {
            const __m256 a = _mm256_broadcast_ss(q + r * d + p);
            acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
            acc[r][2] = _mm256_fmadd_ps(a, b2, acc[r][2]);
        }
    }
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++)
            _mm256_storeu_ps(s + r * ld_s + 8 * c, _mm256_mul_ps(vscale, acc[r][c]));
}

static AVX2_FMA void qk_tile(const float *q, const float *kt, float *s, int64_t ld_s,
                             int64_t rows, int64_t keys_pad, int64_t d, float scale)
{
    /* Panel outer: one Kᵀ panel (d × 24) stays in L1 while all query rows stream past it. */
    for (int64_t j = 0; j < keys_pad; j += KEY_PANEL)
        for (int64_t r = 0; r < rows; r += 4)
            qk_4x24(q + r * d, d, kt + j * d, s + r * ld_s + j, ld_s, scale);
}

static AVX2_FMA float row_max(const float *s, int64_t count)
{
    /* max(x, acc) returns acc when x is NaN: NaN never enters the accumulators */
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    int64_t j = 0;
    for (; j + 16 <= count; j += 16) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(s + j), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(s + j + 8), m1);
    }
    for (; j < count; j += 8) {
        const __m256i lanes = lanes_below(count - j);
        const __m256 x = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(s + j, lanes),
                                          _mm256_castsi256_ps(lanes));
        m0 = _mm256_max_ps(x, m0);
    }
    return hmax8(_mm256_max_ps(m0, m1));
}

static AVX2_FMA float exp_row(float *s, int64_t count, float m)
{
    const __m256 vm = _mm256_set1_ps(m);
    __m256 sum0 = _mm256_setzero_ps(), sum1 = sum0;
    int64_t j = 0;
    for (; j + 16 <= count; j += 16) {
        const __m256 p0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        const __m256 p1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j + 8), vm));
        _mm256_storeu_ps(s + j, p0);
        _mm256_storeu_ps(s + j + 8, p1);
        sum0 = _mm256_add_ps(sum0, p0);
        sum1 = _mm256_add_ps(sum1, p1);
    }
    for (; j < count; j += 8) {
        const __m256i lanes = lanes_below(count - j);
        const __m256 p = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(s + j, lanes), vm)),
                                       _mm256_castsi256_ps(lanes));
        _mm256_maskstore_ps(s + j, lanes, p);
        sum0 = _mm256_add_ps(sum0, p);
    }
    return hsum8(_mm256_add_ps(sum0, sum1));
}

/* O (4, 8·vecs) = alpha ⊙ O + P (4, keys) · V (keys, 8·vecs), vecs = 2 (4 × 16) or 1 (4 × 8) */
INLINE_AVX2_FMA void pv_4xn(const float *p, int64_t ld_p, const float *v, int64_t ld_v,
                            float *o, int64_t ld_o, const float *alpha, int64_t keys, const int vecs)
{
    __m256 acc[4][2];
    for (int r = 0; r < 4; r++) {
        const __m256 a = _mm256_broadcast_ss(alpha + r);
        for (int c = 0; c < vecs; c++)
            acc[r][c] = _mm256_mul_ps(a, _mm256_load_ps(o + r * ld_o + 8 * c));
    }
    for (int64_t j = 0; j < keys; j++) {
        __m256 b[2];
        for (int c = 0; c < vecs; c++)
            b[c] = _mm256_load_ps(v + j * ld_v + 8 * c);
        for (int r = 0; r < 4; r++) {
            const __m256 w = _mm256_broadcast_ss(p + r * ld_p + j);
            for (int c = 0; c < vecs; c++)
                acc[r][c] = _mm256_fmadd_ps(w, b[c], acc[r][c]);
        }
    }
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < vecs; c++)
            _mm256_store_ps(o + r * ld_o + 8 * c, acc[r][c]);
}

/* o (8·vecs) += p[from:to] · V[from:to] — keys only some rows of a block see (causal diagonal) */
INLINE_AVX2_FMA void pv_row_extra(const float *p, const float *v, int64_t ld_v, float *o,
                                  int64_t from, int64_t to, const int vecs)
{
    for (int c = 0; c < vecs; c++) {
        __m256 acc = _mm256_load_ps(o + 8 * c);
        for (int64_t j = from; j < to; j++)
            acc = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j), _mm256_load_ps(v + j * ld_v + 8 * c), acc);
        _mm256_store_ps(o + 8 * c, acc);
    }
}

INLINE_AVX2_FMA void pv_block(const float *p, int64_t ld_p, const int64_t *visible,
                              const float *alpha, const float *v, int64_t ld_v, float *o,
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

static AVX2_FMA void pv_tile(const float *p, int64_t ld_p, const int64_t *visible,
                             const float *alpha, const float *v, float *o,
                             int64_t rows, int64_t dv_pad)
{
    /* Column block outer: a (keys × 16) slice of V stays in L1 while all rows stream past it. */
    int64_t c = 0;
    for (; c + 16 <= dv_pad; c += 16)
        for (int64_t r = 0; r < rows; r += 4)
            pv_block(p + r * ld_p, ld_p, visible + r, alpha + r, v + c, dv_pad,
                     o + r * dv_pad + c, dv_pad, 2);
    if (c < dv_pad)
        for (int64_t r = 0; r < rows; r += 4)
            pv_block(p + r * ld_p, ld_p, visible + r, alpha + r, v + c, dv_pad,
                     o + r * dv_pad + c, dv_pad, 1);
}

const struct tile_ops_f32 tile_ops_avx2_f32 = {
    .isa = "avx2-fma",
    .key_panel = KEY_PANEL,
    .dv_align = DV_ALIGN,
    .qk_tile = qk_tile,
    .row_max = row_max,
    .exp_row = exp_row,
    .pv_tile = pv_tile,
};
