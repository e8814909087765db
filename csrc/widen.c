/* Widening 16-bit inputs to float32, for the bfloat16 and float16 entry points: their tiles
   (Q, K, V) are widened as they are packed, and everything after runs on the float32 tile
   operations. Both widenings are exact (float32 holds every bfloat16 and float16 value),
   so a 16-bit call computes what a float32 call on the widened inputs would. One set per
   ISA, chosen with the tile operations (attention.c's isa_paths); the SIMD ones convert 8
   (AVX2, F16C) or 16 (AVX-512F) values per instruction and leave the tail to the scalar
   ones. */
#include <immintrin.h>
#include <string.h>
#include "tile_ops.h"

static float float_from_bits(uint32_t bits)
{
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

/* bfloat16 is the upper half of a float32: its bits, shifted into place */
static float bf16_to_f32(uint16_t h) { return float_from_bits((uint32_t)h << 16); }

/* float16: sign, 5 exponent bits (bias 15), 10 mantissa bits. Integers only, so that a
   denormals-are-zero mode someone else set on this thread cannot flush a subnormal. */
static float f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    uint32_t bits;
    if (exponent == 0x1f)           /* inf, NaN (payload kept) */
        bits = 0x7f800000 | mantissa << 13;
    else if (exponent != 0)         /* normal: rebias 15 -> 127 */
        bits = (exponent + 112) << 23 | mantissa << 13;
    else if (mantissa == 0)         /* ±0 */
        bits = 0;
    else {                          /* subnormal, mantissa · 2^-24: normal in float32 */
        const int top = 31 - __builtin_clz(mantissa);           /* its leading bit, 0..9 */
        bits = (uint32_t)(top + 103) << 23 | (mantissa << (23 - top) & 0x7fffff);
    }
    return float_from_bits(sign | bits);
}

static void widen_bf16_generic(const uint16_t *x, int64_t n, float *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = bf16_to_f32(x[i]);
}

static void widen_f16_generic(const uint16_t *x, int64_t n, float *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = f16_to_f32(x[i]);
}

#define AVX2 __attribute__((target("avx2,f16c")))

static AVX2 void widen_bf16_avx2(const uint16_t *x, int64_t n, float *y)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    widen_bf16_generic(x + i, n - i, y + i);
}

static AVX2 void widen_f16_avx2(const uint16_t *x, int64_t n, float *y)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    widen_f16_generic(x + i, n - i, y + i);
}

#define AVX512 __attribute__((target("avx512f")))

static AVX512 void widen_bf16_avx512(const uint16_t *x, int64_t n, float *y)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(x + i)));
        _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
    }
    widen_bf16_generic(x + i, n - i, y + i);
}

static AVX512 void widen_f16_avx512(const uint16_t *x, int64_t n, float *y)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))));
    widen_f16_generic(x + i, n - i, y + i);
}

const struct widen_ops widen_generic = {widen_bf16_generic, widen_f16_generic};
const struct widen_ops widen_avx2 = {widen_bf16_avx2, widen_f16_avx2};
const struct widen_ops widen_avx512 = {widen_bf16_avx512, widen_f16_avx512};
