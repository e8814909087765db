/* One SIMD unit's qk_rows (int8 keys) and qk_rows_q4 (int4 keys) for struct int8_dot_ops
   (int8_dot.c says why and how): a template without include guards, included once per unit
   with
     UNIT(name)      the names of its functions
     TARGET_ISA      the target attribute's string
     DPWSSD(a, x, y) a + the sums of pairs of int16 products x · y, per int32 lane
   Each step takes 8 / R keys and meets each 16 elements of a key row (widened to int16
   once) with the R query rows, 8 / R · R int32 accumulators, reduced together into one
   vector of 8 sums, converted and scaled 8 lanes at a time. int8 keys are sign-extended
   and scaled once per row; int4 keys are zero-extended a group's 16 bytes at a time, the
   low nibbles masked and the high ones shifted (the group's even and odd values), and each
   group's sums scaled by that group's scale before the groups are added. */
#define INLINE_UNIT static inline __attribute__((always_inline, target(TARGET_ISA)))
#ifndef UNROLL
#define UNROLL _Pragma("GCC unroll 16")
#endif

/* lane i: the sum of acc[i]'s lanes, for 8 vectors (a transposed reduction) */
INLINE_UNIT __m256i UNIT(hsums)(const __m256i *acc)
{
    const __m256i u0 = _mm256_hadd_epi32(_mm256_hadd_epi32(acc[0], acc[1]), _mm256_hadd_epi32(acc[2], acc[3]));
    const __m256i u1 = _mm256_hadd_epi32(_mm256_hadd_epi32(acc[4], acc[5]), _mm256_hadd_epi32(acc[6], acc[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

/* acc[i * R + r] += the products of 16 elements of key i (x[i], int16) and of row r's codes (y[r]) */
INLINE_UNIT void UNIT(dot_step)(__m256i *acc, const __m256i *x, const __m256i *y, const int step, const int R)
{
    UNROLL
    for (int i = 0; i < step; i++) {
        UNROLL
        for (int r = 0; r < R; r++)
            acc[i * R + r] = DPWSSD(acc[i * R + r], x[i], y[r]);
    }
}

/* a step's scores, lane i * R + r key i's for row r, into s (rows s_stride apart) for its
   first `here` keys: with one row all 8 (those past the keys land in s's padding) */
INLINE_UNIT void UNIT(store_scores)(__m256 scores, int64_t here, float *s, int64_t s_stride, const int R)
{
    if (R == 1) {
        _mm256_storeu_ps(s, scores);
        return;
    }
    float sums[8];
    _mm256_storeu_ps(sums, scores);
    for (int i = 0; i < here; i++)
        for (int r = 0; r < R; r++)
            s[r * s_stride + i] = sums[i * R + r];
}

INLINE_UNIT void UNIT(qk_rows_of)(const int8_t *k, const float *k_scale, int64_t keys, int64_t d,
                                  const int16_t *q, const float *q_scale, float *s, int64_t s_stride,
                                  struct read_ahead *ahead, const int R)
{
    const int step = 8 / R;   /* keys per step; lane i * R + r: key i, row r */
    const int64_t q_stride = round_up(d, INT8_DOT_PAD), full = d / 16 * 16;
    read_ahead_spread(ahead, ceil_div(keys, step));
    /* lane l's query scale and the key (of the step) whose scale it takes */
    float lane_q_scale[8] = {0};
    int32_t lane_key[8];
    for (int l = 0; l < 8; l++) {
        lane_q_scale[l] = l < step * R ? q_scale[l % R] : 0;
        lane_key[l] = l < step * R ? l / R : 0;
    }
    const __m256 qs = _mm256_loadu_ps(lane_q_scale);
    const __m256i key_of_lane = _mm256_loadu_si256((const __m256i *)lane_key);
    for (int64_t j = 0; j < keys; j += step) {
        read_ahead_step(ahead);
        /* past the last key, repeat it: those sums are computed but not stored */
        const int8_t *k_rows[8];
        for (int i = 0; i < step; i++)
            k_rows[i] = k + min_i64(j + i, keys - 1) * d;
        __m256i acc[8], x[8], y[ROW_GROUP];
        for (int i = 0; i < 8; i++)
            acc[i] = _mm256_setzero_si256();
        for (int64_t c = 0; c < full; c += 16) {
            UNROLL
            for (int r = 0; r < R; r++)
                y[r] = _mm256_loadu_si256((const __m256i *)(q + r * q_stride + c));
            UNROLL
            for (int i = 0; i < step; i++)
                x[i] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(k_rows[i] + c)));
            UNIT(dot_step)(acc, x, y, step, R);
        }
        if (full < d) {
            int8_t tail[8][16];
            for (int r = 0; r < R; r++)
                y[r] = _mm256_loadu_si256((const __m256i *)(q + r * q_stride + full));
            for (int i = 0; i < step; i++) {
                memset(tail[i], 0, 16);
                memcpy(tail[i], k_rows[i] + full, (size_t)(d - full));
                x[i] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)tail[i]));
            }
            UNIT(dot_step)(acc, x, y, step, R);
        }
        /* the step's key scales, lane l taking key lane_key[l]'s (masked: no read past keys) */
        const int64_t here = min_i64(step, keys - j);
        const __m256i present = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)here), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256 ks = _mm256_permutevar8x32_ps(_mm256_maskload_ps(k_scale + j, present), key_of_lane);
        const __m256 scores = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(UNIT(hsums)(acc)), ks), qs);
        UNIT(store_scores)(scores, here, s + j, s_stride, R);
    }
}

static __attribute__((target(TARGET_ISA))) void UNIT(qk_rows)(const int8_t *k, const float *k_scale, int64_t keys,
                                                              int64_t d, const int16_t *q, const float *q_scale,
                                                              int64_t rows, float *s, int64_t s_stride,
                                                              struct read_ahead ahead)
{
    switch (rows) {
    case 1: UNIT(qk_rows_of)(k, k_scale, keys, d, q, q_scale, s, s_stride, &ahead, 1); break;
    case 2: UNIT(qk_rows_of)(k, k_scale, keys, d, q, q_scale, s, s_stride, &ahead, 2); break;
    case 3: UNIT(qk_rows_of)(k, k_scale, keys, d, q, q_scale, s, s_stride, &ahead, 3); break;
    default: UNIT(qk_rows_of)(k, k_scale, keys, d, q, q_scale, s, s_stride, &ahead, 4); break;
    }
}

/* lane i * R + r: the sum over one group of INT4_GROUP values of key i's nibbles (the 16
   bytes at rows[i] + c0, zero-extended to int16 once, vpmovzxbw, and split into the even
   values, the low nibbles masked, and the odd ones, the high nibbles shifted) times row r's
   codes (codes + r · INT4_GROUP: the even values' then the odd values', read from L1 as
   they are used: held, 2 · R registers beside the 8 sums, they spilled at R = 4) */
INLINE_UNIT __m256i UNIT(q4_group_sums)(const uint8_t *const *rows, int64_t c0, const int16_t *codes,
                                         const int step, const int R)
{
    const __m256i low_nibble = _mm256_set1_epi16(15);
    __m256i acc[8];
    for (int i = 0; i < 8; i++)
        acc[i] = _mm256_setzero_si256();
    UNROLL
    for (int i = 0; i < step; i++) {
        const __m256i x = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(rows[i] + c0)));
        const __m256i even = _mm256_and_si256(x, low_nibble), odd = _mm256_srli_epi16(x, 4);
        UNROLL
        for (int r = 0; r < R; r++) {
            const __m256i *y = (const __m256i *)(codes + r * INT4_GROUP);
            acc[i * R + r] = DPWSSD(DPWSSD(acc[i * R + r], even, _mm256_loadu_si256(y)), odd, _mm256_loadu_si256(y + 1));
        }
    }
    return UNIT(hsums)(acc);
}

/* qk_rows_q4 (tile_ops.h) for R rows: as qk_rows_of, a group at a time (q4_group_sums), each
   group's sums less 8 · q_sum, scaled, and added to the step's scores. A short last group's
   bytes are copied into zeroed vectors (its codes are zero past the group), never read past
   the row. */
INLINE_UNIT void UNIT(qk_rows_q4_of)(const uint8_t *k, const float *k_scale, int64_t scale_stride, int64_t keys,
                                     int64_t d, const int16_t *q, const float *q_scale, const int32_t *q_sum,
                                     int64_t group_rows, float *s, int64_t s_stride, struct read_ahead *ahead,
                                     const int R)
{
    const int step = 8 / R;   /* keys per step; lane i * R + r: key i, row r */
    const int64_t row_bytes = int4_row_bytes(d), groups = int4_row_scales(d), full = d / INT4_GROUP;
    read_ahead_spread(ahead, ceil_div(keys, step));
    /* lane l's row and the key (of the step) whose scale it takes; the rows' scales and
       sums are read R at a time (masked) and spread over the lanes by lane_row */
    int32_t lane_key[8], lane_row[8];
    for (int l = 0; l < 8; l++) {
        lane_key[l] = l < step * R ? l / R : 0;
        lane_row[l] = l % R;
    }
    const __m256i key_of_lane = _mm256_loadu_si256((const __m256i *)lane_key);
    const __m256i row_of_lane = _mm256_loadu_si256((const __m256i *)lane_row);
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i row_present = _mm256_cmpgt_epi32(_mm256_set1_epi32(R), lanes);
    for (int64_t j = 0; j < keys; j += step) {
        read_ahead_step(ahead);
        /* past the last key, repeat it: those sums are computed but not stored */
        const uint8_t *k_rows[8];
        for (int i = 0; i < step; i++)
            k_rows[i] = k + min_i64(j + i, keys - 1) * row_bytes;
        const int64_t here = min_i64(step, keys - j);
        const __m256i present = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)here), lanes);
        __m256 scores = _mm256_setzero_ps();
        for (int64_t g = 0; g < groups; g++) {
            __m256i sums;
            if (g < full) {
                sums = UNIT(q4_group_sums)(k_rows, g * INT4_GROUP / 2, q + g * group_rows * INT4_GROUP, step, R);
            } else {
                uint8_t tail[8][16] = {{0}};
                const uint8_t *tail_rows[8];
                for (int i = 0; i < step; i++) {
                    memcpy(tail[i], k_rows[i] + g * INT4_GROUP / 2, (size_t)(row_bytes - g * INT4_GROUP / 2));
                    tail_rows[i] = tail[i];
                }
                sums = UNIT(q4_group_sums)(tail_rows, 0, q + g * group_rows * INT4_GROUP, step, R);
            }
            /* the lanes' sums less the offset, scaled by the step's key scales and the rows' */
            const __m256i offset = _mm256_permutevar8x32_epi32(_mm256_maskload_epi32(q_sum + g * group_rows, row_present),
                                                               row_of_lane);
            const __m256 qs = _mm256_permutevar8x32_ps(_mm256_maskload_ps(q_scale + g * group_rows, row_present),
                                                       row_of_lane);
            const __m256 ks = _mm256_permutevar8x32_ps(_mm256_maskload_ps(k_scale + g * scale_stride + j, present),
                                                       key_of_lane);
            sums = _mm256_sub_epi32(sums, _mm256_slli_epi32(offset, 3));
            scores = _mm256_add_ps(scores, _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sums), ks), qs));
        }
        UNIT(store_scores)(scores, here, s + j, s_stride, R);
    }
}

static __attribute__((target(TARGET_ISA))) void UNIT(qk_rows_q4)(const uint8_t *k, const float *k_scale,
                                                                 int64_t scale_stride, int64_t keys, int64_t d,
                                                                 const int16_t *q, const float *q_scale,
                                                                 const int32_t *q_sum, int64_t group_rows,
                                                                 int64_t rows, float *s, int64_t s_stride,
                                                                 struct read_ahead ahead)
{
    switch (rows) {
    case 1: UNIT(qk_rows_q4_of)(k, k_scale, scale_stride, keys, d, q, q_scale, q_sum, group_rows, s, s_stride, &ahead, 1); break;
    case 2: UNIT(qk_rows_q4_of)(k, k_scale, scale_stride, keys, d, q, q_scale, q_sum, group_rows, s, s_stride, &ahead, 2); break;
    case 3: UNIT(qk_rows_q4_of)(k, k_scale, scale_stride, keys, d, q, q_scale, q_sum, group_rows, s, s_stride, &ahead, 3); break;
    default: UNIT(qk_rows_q4_of)(k, k_scale, scale_stride, keys, d, q, q_scale, q_sum, group_rows, s, s_stride, &ahead, 4); break;
    }
}

#undef INLINE_UNIT
