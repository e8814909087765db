/* Conversions between float32 and the formats the kernel reads and writes besides it, one
   set per ISA (struct convert_ops), chosen with the tile operations (attention.c's
   isa_paths).

   Widening, how the entry points that do not read float32 read their inputs: the bfloat16
   and float16 tiles (Q, K, V) are widened as they are packed, the int8 and int4 KV caches'
   rows are dequantised a block at a time, and everything after runs on the float32 tile
   operations. Both widenings are exact (float32 holds every bfloat16 and float16 value),
   and an int8 row is its scale times the (exact) float of each value, one rounding, as
   NumPy's scale[:, None] * x.astype(float32) has it (int4: each value times its group's
   scale); so a call computes what a float32 call on the converted inputs would.

   Narrowing, how a 16-bit call writes its output when asked to (attention.h's round_out):
   each row of float32 results rounded to nearest even as it is stored, bit for bit what
   NumPy's astype (float16) and ml_dtypes' (bfloat16) give for every finite value, subnormals
   and overflow to infinity included; a NaN stays a NaN (quiet; bfloat16's is ml_dtypes'
   sign | 0x7fc0).  That spares the whole pass over the output that rounding it afterwards
   costs (NumPy's float16 cast of an 8 × 4,096 × 64 output: 7.5-14 ms).

   The SIMD sets convert 8 (AVX2, F16C) or 16 (AVX-512F) values per instruction and leave
   the tail to the scalar ones.  bfloat16 rounds in integer arithmetic (x + 0x7fff + the
   last bit kept, then the upper half), since AVX512-BF16's vcvtneps2bf16 flushes
   subnormals to zero; float16 rounds by F16C's vcvtps2ph, to nearest even. */
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

/* int4 rows (kernels/cache_formats.py): ceil(width / 2) bytes a row, value c in the low
   (c even) or high nibble of byte c / 2, plus 8; scale[c / INT4_GROUP] of the row's
   ceil(width / INT4_GROUP) scales */
static void widen_q4_generic(const uint8_t *x, const float *scale, int64_t rows, int64_t width, float *y)
{
    const int64_t bytes = int4_row_bytes(width), groups = int4_row_scales(width);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t c = 0; c < width; c++)
            y[i * width + c] = scale[i * groups + c / INT4_GROUP] * (float)int4_code(x + i * bytes, c);
}

/* unpack_q4 of group g of every row */
static void unpack_q4_group(const uint8_t *x, const float *scale, int64_t rows, int64_t width, int64_t g,
                            int64_t capacity, int8_t *codes, float *scales)
{
    const int64_t bytes = int4_row_bytes(width), groups = int4_row_scales(width);
    const int64_t c0 = g * INT4_GROUP, w = width - c0 < INT4_GROUP ? width - c0 : INT4_GROUP;
    int8_t *out = codes + g * capacity * INT4_GROUP;
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t c = c0; c < c0 + w; c++)
            out[i * w + c - c0] = (int8_t)int4_code(x + i * bytes, c);
        scales[g * capacity + i] = scale[i * groups + g];
    }
}

static void unpack_q4_generic(const uint8_t *x, const float *scale, int64_t rows, int64_t width,
                              int64_t capacity, int8_t *codes, float *scales)
{
    for (int64_t g = 0; g < int4_row_scales(width); g++)
        unpack_q4_group(x, scale, rows, width, g, capacity, codes, scales);
}

static void narrow_bf16_generic(const float *x, int64_t n, uint16_t *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = f32_to_bf16(x[i]);
}

static void narrow_f16_generic(const float *x, int64_t n, uint16_t *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = f32_to_f16(x[i]);
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

/* the 32 int4 codes of a whole group (16 bytes at x) as int8, in order: the nibbles masked
   and shifted apart, interleaved back (vpunpck{l,h}bw), less 8 */
static inline AVX2 void int4_group_codes(const uint8_t *x, __m128i codes[2])
{
    const __m128i nibble = _mm_set1_epi8(15), offset = _mm_set1_epi8(INT4_OFFSET);
    const __m128i b = _mm_loadu_si128((const __m128i *)x);
    const __m128i lo = _mm_and_si128(b, nibble), hi = _mm_and_si128(_mm_srli_epi16(b, 4), nibble);
    codes[0] = _mm_sub_epi8(_mm_unpacklo_epi8(lo, hi), offset);
    codes[1] = _mm_sub_epi8(_mm_unpackhi_epi8(lo, hi), offset);
}

/* a whole group of 32 values at a time (int4_group_codes), then as widen_q8_avx2; the rest
   of a row scalar. Also the AVX-512 set's (a block of a decode step is 64 rows of
   ceil(d / 32) groups: the conversion is a small part of the step at either width). */
static AVX2 void widen_q4_avx2(const uint8_t *x, const float *scale, int64_t rows, int64_t width, float *y)
{
    const int64_t bytes = int4_row_bytes(width), groups = int4_row_scales(width), full = width / INT4_GROUP;
    for (int64_t i = 0; i < rows; i++) {
        const uint8_t *xi = x + i * bytes;
        float *yi = y + i * width;
        for (int64_t g = 0; g < full; g++) {
            __m128i codes[2];
            int4_group_codes(xi + g * INT4_GROUP / 2, codes);
            const __m256 s = _mm256_set1_ps(scale[i * groups + g]);
            for (int h = 0; h < 2; h++) {
                float *out = yi + g * INT4_GROUP + 16 * h;
                _mm256_storeu_ps(out, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes[h]))));
                _mm256_storeu_ps(out + 8, _mm256_mul_ps(
                    s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(codes[h], 8)))));
            }
        }
        for (int64_t c = full * INT4_GROUP; c < width; c++)
            yi[c] = scale[i * groups + c / INT4_GROUP] * (float)int4_code(xi, c);
    }
}
#define widen_q4_avx512 widen_q4_avx2

/* unpack_q4's whole groups by int4_group_codes; a short last group as unpack_q4_generic's */
static AVX2 void unpack_q4_avx2(const uint8_t *x, const float *scale, int64_t rows, int64_t width,
                                int64_t capacity, int8_t *codes, float *scales)
{
    const int64_t bytes = int4_row_bytes(width), groups = int4_row_scales(width), full = width / INT4_GROUP;
    for (int64_t g = 0; g < full; g++) {
        int8_t *out = codes + g * capacity * INT4_GROUP;
        for (int64_t i = 0; i < rows; i++) {
            __m128i group[2];
            int4_group_codes(x + i * bytes + g * INT4_GROUP / 2, group);
            _mm_storeu_si128((__m128i *)(out + i * INT4_GROUP), group[0]);
            _mm_storeu_si128((__m128i *)(out + i * INT4_GROUP + 16), group[1]);
            scales[g * capacity + i] = scale[i * groups + g];
        }
    }
    if (full < groups)
        unpack_q4_group(x, scale, rows, width, full, capacity, codes, scales);
}
#define unpack_q4_avx512 unpack_q4_avx2

/* 8 bfloat16 roundings (f32_to_bf16's integer rounding, NaN lanes blended in), packed to
   16 bits: packus works within each 128-bit half, so the halves' results are joined first */
static AVX2 void narrow_bf16_avx2(const float *x, int64_t n, uint16_t *y)
{
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i quiet = _mm256_set1_epi32(0x7fc00000), sign = _mm256_set1_epi32((int)0x80000000u);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256i u = _mm256_castps_si256(v);
        const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
        const __m256i nan = _mm256_or_si256(quiet, _mm256_and_si256(u, sign));
        const __m256i bits = _mm256_srli_epi32(
            _mm256_blendv_epi8(rounded, nan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))), 16);
        const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
        _mm_storeu_si128((__m128i *)(y + i), packed);
    }
    narrow_bf16_generic(x + i, n - i, y + i);
}

static AVX2 void narrow_f16_avx2(const float *x, int64_t n, uint16_t *y)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    narrow_f16_generic(x + i, n - i, y + i);
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

/* 16 bfloat16 roundings as narrow_bf16_avx2's, the NaN lanes by mask; vpmovdw keeps the
   low halves in order */
static AVX512 void narrow_bf16_avx512(const float *x, int64_t n, uint16_t *y)
{
    const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    const __m512i quiet = _mm512_set1_epi32(0x7fc00000), sign = _mm512_set1_epi32((int)0x80000000u);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        const __m512i u = _mm512_castps_si512(v);
        const __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
        const __m512i nan = _mm512_or_si512(quiet, _mm512_and_si512(u, sign));
        const __m512i bits = _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), nan);
        _mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(bits, 16)));
    }
    narrow_bf16_generic(x + i, n - i, y + i);
}

static AVX512 void narrow_f16_avx512(const float *x, int64_t n, uint16_t *y)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    narrow_f16_generic(x + i, n - i, y + i);
}

#define CONVERT_OPS(isa)                                                                      \
    {widen_bf16_##isa, widen_f16_##isa, widen_q8_##isa, widen_q4_##isa, unpack_q4_##isa, narrow_bf16_##isa, \
     narrow_f16_##isa}
const struct convert_ops convert_generic = CONVERT_OPS(generic);
const struct convert_ops convert_avx2 = CONVERT_OPS(avx2);
const struct convert_ops convert_avx512 = CONVERT_OPS(avx512);
