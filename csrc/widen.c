/* Converting inputs to float32 for the entry points that do not read float32: the bfloat16
   and float16 tiles (Q, K, V) are widened as they are packed, the int8 KV cache's rows are
   dequantised a block at a time, and everything after runs on the float32 tile operations.
   Both widenings are exact (float32 holds every bfloat16 and float16 value), and an int8
   row is its scale times the (exact) float of each value, one rounding, as NumPy's
   scale[:, None] * x.astype(float32) has it; so a call computes what a float32 call on the
   converted inputs would. One set per ISA, chosen with the tile operations (attention.c's
   isa_paths); the SIMD ones convert 8 (AVX2, F16C) or 16 (AVX-512F) values per instruction
   and leave the tail to the scalar ones. */
#include <immintrin.h>
#include <string.h>
#include "tile_ops.h"

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

/* int8 rows: sign-extended to int32, converted (exactly) and multiplied by the row's scale */
static void widen_q8_generic(const int8_t *x, const float *scale, int64_t rows, int64_t width, float *y)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t c = 0; c < width; c++)
            y[i * width + c] = scale[i] * (float)x[i * width + c];
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

/* vpmovsxbd, vcvtdq2ps and vmulps, 16 values per step (two independent vectors); a row's
   last width % 8 values scalar */
static AVX2 void widen_q8_avx2(const int8_t *x, const float *scale, int64_t rows, int64_t width,
                               float *y)
{
    for (int64_t i = 0; i < rows; i++) {
        const int8_t *xi = x + i * width;
        float *yi = y + i * width;
        const __m256 s = _mm256_set1_ps(scale[i]);
        int64_t c = 0;
        for (; c + 16 <= width; c += 16) {
            const __m128i b = _mm_loadu_si128((const __m128i *)(xi + c));
            const __m256i lo = _mm256_cvtepi8_epi32(b), hi = _mm256_cvtepi8_epi32(_mm_srli_si128(b, 8));
            _mm256_storeu_ps(yi + c, _mm256_mul_ps(s, _mm256_cvtepi32_ps(lo)));
            _mm256_storeu_ps(yi + c + 8, _mm256_mul_ps(s, _mm256_cvtepi32_ps(hi)));
        }
        if (c + 8 <= width) {
            const __m256i lo = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(xi + c)));
            _mm256_storeu_ps(yi + c, _mm256_mul_ps(s, _mm256_cvtepi32_ps(lo)));
            c += 8;
        }
        widen_q8_generic(xi + c, scale + i, 1, width - c, yi + c);
    }
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

static AVX512 void widen_q8_avx512(const int8_t *x, const float *scale, int64_t rows, int64_t width,
                                   float *y)
{
    for (int64_t i = 0; i < rows; i++) {
        const int8_t *xi = x + i * width;
        float *yi = y + i * width;
        const __m512 s = _mm512_set1_ps(scale[i]);
        int64_t c = 0;
        for (; c + 16 <= width; c += 16) {
            const __m512i w = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(xi + c)));
            _mm512_storeu_ps(yi + c, _mm512_mul_ps(s, _mm512_cvtepi32_ps(w)));
        }
        widen_q8_generic(xi + c, scale + i, 1, width - c, yi + c);
    }
}

const struct widen_ops widen_generic = {widen_bf16_generic, widen_f16_generic, widen_q8_generic};
const struct widen_ops widen_avx2 = {widen_bf16_avx2, widen_f16_avx2, widen_q8_avx2};
const struct widen_ops widen_avx512 = {widen_bf16_avx512, widen_f16_avx512, widen_q8_avx512};
