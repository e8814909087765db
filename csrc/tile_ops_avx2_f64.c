/* float64 tile operations with AVX2 + FMA, 4 queries per __m256d: the vocabulary of
   tile_ops_avx2_template.h (which holds the algorithm) and the float64 exp.
   The file is compiled for the baseline ISA; only these functions carry
   target("avx2,fma"), and attention.c selects them only on CPUs with both features. */
#include <immintrin.h>
#include <math.h>
#include "tile_ops.h"

#define AVX2_FMA __attribute__((target("avx2,fma")))
#define INLINE_AVX2_FMA static inline __attribute__((always_inline, target("avx2,fma")))

#define real double
#define SUFFIX(name) name##_f64
#define vec __m256d
#define LANES 4
#define V(op) _mm256_##op##_pd
#define V_BROADCAST _mm256_broadcast_sd

/* exp(x) on 4 lanes, within an ulp for x in [−708.3, 709]: as v_exp in the float32 file,
   with a degree-11 polynomial (Chebyshev fit, error < 1 eps), rounding by adding
   1.5·2^52 + 1023, and 0 below −1022·ln2. */
INLINE_AVX2_FMA __m256d v_exp(__m256d x)
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

/* all-ones in lane q where visible[q] > j, for 4 queries (the int32 counts widened to 64 bits) */
INLINE_AVX2_FMA __m256d lanes_seeing(const int32_t *visible, int64_t j)
{
    return _mm256_castsi256_pd(_mm256_cmpgt_epi64(
        _mm256_cvtepi32_epi64(_mm_load_si128((const __m128i *)visible)), _mm256_set1_epi64x(j)));
}

/* all-ones in lanes c < n, for a row's last n < 4 columns (n <= 0: none, n >= 4: all) */
INLINE_AVX2_FMA __m256i lanes_below(int64_t n)
{
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(clamp_i64(n, 0, LANES)), _mm256_setr_epi64x(0, 1, 2, 3));
}

INLINE_AVX2_FMA double v_hsum(__m256d x)
{
    const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

/* the largest lane, of lanes holding no NaN */
INLINE_AVX2_FMA double v_hmax(__m256d x)
{
    const __m128d s = _mm_max_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
    return _mm_cvtsd_f64(_mm_max_sd(s, _mm_unpackhi_pd(s, s)));
}

#include "tile_ops_avx2_template.h"
