/* float32 tile operations with AVX2 + FMA, 8 queries per __m256: the vocabulary of
   tile_ops_avx2_template.h (which holds the algorithm) and the float32 exp.
   The file is compiled for the baseline ISA; only these functions carry
   target("avx2,fma"), and attention.c selects them only on CPUs with both features. */
#include <immintrin.h>
#include <math.h>
#include "tile_ops.h"

#define AVX2_FMA __attribute__((target("avx2,fma")))
#define INLINE_AVX2_FMA static inline __attribute__((always_inline, target("avx2,fma")))

#define real float
#define SUFFIX(name) name##_f32
#define vec __m256
#define LANES 8
#define V(op) _mm256_##op##_ps
#define V_BROADCAST _mm256_broadcast_ss

/* exp(x) on 8 lanes, within 2 ulp for x in [−87.3, 88]: x = k·ln2 + r with |r| <= ln2/2,
   exp(x) = 2^k · p(r), p a degree-5 near-minimax polynomial (Chebyshev fit, error < 2 eps).
   k is rounded by adding 1.5·2^23 + 127, which also leaves k + 127, the biased exponent of
   2^k, in the low bits of the sum. x < −126·ln2 (a subnormal result) and x = −inf give 0:
   such a weight is below 2^−126 next to the row maximum's weight 1. NaN gives NaN: p(NaN) is
   NaN, and the final mask clears only lanes where x < bound, which is false for NaN. */
INLINE_AVX2_FMA __m256 v_exp(__m256 x)
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

/* all-ones in lane q where visible[q] > j, for 8 queries */
INLINE_AVX2_FMA __m256 lanes_seeing(const int32_t *visible, int64_t j)
{
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_load_si256((const __m256i *)visible),
                                                  _mm256_set1_epi32((int)j)));
}

/* all-ones in lanes c < n, for a row's last n < 8 columns (n <= 0: none, n >= 8: all) */
INLINE_AVX2_FMA __m256i lanes_below(int64_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)clamp_i64(n, 0, LANES)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

INLINE_AVX2_FMA float v_hsum(__m256 x)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* the largest lane, of lanes holding no NaN */
INLINE_AVX2_FMA float v_hmax(__m256 x)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

#include "tile_ops_avx2_template.h"
