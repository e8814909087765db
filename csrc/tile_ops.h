/* The contract between the tiling driver (flash_driver_template.h, plain C) and the per-ISA
   tile operations: tile_ops_simd_template.h (and its row operations,
   tile_ops_row_template.h), one algorithm instantiated by tile_ops_avx2_{f32,f64}.c and
   tile_ops_avx512_{f32,f64}.c with each ISA's vocabulary, and tile_ops_generic_template.h,
   instantiated by tile_ops_generic.c.

   Tiles are held query-minor ("transposed"), so that SIMD lanes run over queries: the
   softmax statistics of a vector's queries then live in one vector and need no horizontal
   reductions. K and V are packed once per key tile (pack_k, pack_v):
     qt (rows_pad / query_panel, d, query_panel)        Qᵀ of the query tile in panels;
                                                        padding queries are zero
     st (rows_pad / query_panel, key_cap, query_panel)  Sᵀ: scores, overwritten in place by
                                                        the probabilities Pᵀ
     ot (rows_pad / query_panel, dv_pad, query_panel)   Oᵀ: unnormalised output accumulator;
                                                        dv_pad = d_v rounded up to COL_BLOCK
                                                        (extra rows are scratch, never read)
     kp (key_cap / KEY_BLOCK, d, KEY_BLOCK)             the K tile in blocks of KEY_BLOCK
                                                        keys side by side (key-minor); or
                                                        K's rows in place (a query tile of
                                                        few rows: qk_tile's k_key, k_col)
     vp (dv_pad / COL_BLOCK, key_cap, COL_BLOCK)        the V tile in blocks of COL_BLOCK
                                                        columns, each block contiguous; or
                                                        V's rows in place (a query tile of
                                                        few rows, which packing would cost
                                                        as much as the products: pv_tile's
                                                        v_key and v_block)
     m, l, alpha (rows_pad)   per query: running max, running sum, this tile's rescale factor
   Each panel is contiguous, so a micro-kernel walks its operand linearly. rows_pad is a
   multiple of query_panel; key_cap >= keys rounded up to KEY_BLOCK.

   visible[r] is where the keys of the tile query r sees end: all of them except on the
   causal diagonal (or a right edge). Keys beyond it must not touch row r, not even with
   weight 0, so that a NaN or Inf in a masked key's value cannot leak into the row; the
   driver has already set those scores to −inf. Keys before it that row r does not see (left
   of a window's edge) score −inf too and are summed with weight 0: the driver calls pv_tile
   only when their values are finite, and sums the panel itself otherwise
   (flash_driver_template.h, pv_panel_exact). panel_keys[p] is the most any query of panel p
   sees: Sᵀ rows beyond it are neither computed nor read, which spares the fully masked part
   of a causal diagonal tile.

   The row operations serve the split-KV (decode) path, where a head has too few queries
   to fill a panel: up to ROW_GROUP query rows Q (rows, d) that see the same keys (a group's
   query heads over their K/V head) meet a block of keys straight from the input (or,
   converted types, from staging, or, rows of bfloat16, float16 or int8, read in place
   through struct row_ops_f32; tile_ops_row_template.h holds both), each K and V vector
   loaded once for all the rows:
     S (rows, s_stride) = scale · Q · Kᵀ (keys, d)                     qk_rows
     online softmax of one row of S as above                            online_softmax_row
     acc_r (d_v) = alpha_r · acc_r + p_rᵀ V (keys, d_v), for each row   pv_rows
   Every key of the block is one the rows see: the driver cuts the block at their right
   edge (the bands of the split-KV path have no left one), so a masked key is never read.
   Each also takes a read-ahead: bytes of the next block (struct read_ahead) that it fetches
   into L2 a few lines per step of its loop over the keys, so that memory is busy while it
   computes on cached rows. */
#ifndef ATTNBENCH_TILE_OPS_H
#define ATTNBENCH_TILE_OPS_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Key counts are rounded up to KEY_BLOCK and V is packed in blocks of COL_BLOCK columns;
   every ISA's micro-kernels take a divisor of these at a time (AVX-512: 8, AVX2: 4). */
#define KEY_BLOCK 8
#define COL_BLOCK 8
#define ROW_KEY_PAD 16   /* online_softmax_row's s holds round_up(keys, ROW_KEY_PAD) values:
                            whole vectors of every ISA */
#define ROW_GROUP 4      /* query rows per qk_rows / pv_rows call: each K and V vector loaded
                            meets up to 4 rows (8 FMA chains of ROW_KEYS / 4 keys × 4 rows) */
#define ROW_KEYS_MAX 64  /* keys per qk_rows / pv_rows call at most (the split-KV path's block) */

/* log2(e): the driver's scores are in base-2 units, scale · log2(e) · q · k, and every
   weight is a power of 2 (tile_ops_exp.h) */
#define LOG2E 1.4426950408889634074

/* Index arithmetic, shared by the driver and the tile operations. */
static inline int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max_i64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t clamp_i64(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }
static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

/* The scalar conversions between float and the 16-bit formats: convert.c's tails, and the
   tails of the row operations that read those rows directly.  Widening is exact (float
   holds every value); narrowing rounds to nearest even, as NumPy and ml_dtypes do. */
static inline float float_from_bits(uint32_t bits)
{
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

static inline uint32_t bits_of_float(float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return bits;
}

/* bfloat16 is the upper half of a float32: its bits, shifted into place */
static inline float bf16_to_f32(uint16_t h) { return float_from_bits((uint32_t)h << 16); }

/* float16: sign, 5 exponent bits (bias 15), 10 mantissa bits. Integers only, so that a
   denormals-are-zero mode someone else set on this thread cannot flush a subnormal. */
static inline float f16_to_f32(uint16_t h)
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

/* float to bfloat16, to nearest even on the bits: adding 0x7fff and the last bit kept carries
   into the upper half exactly when the lower half is past (or at, for an odd upper half)
   its midpoint; overflow carries into infinity, subnormals round as any value; a NaN
   becomes ml_dtypes' quiet NaN of its sign */
static inline uint16_t f32_to_bf16(float x)
{
    const uint32_t u = bits_of_float(x);
    if ((u & 0x7fffffff) > 0x7f800000)
        return (uint16_t)(u >> 16 & 0x8000) | 0x7fc0;
    return (uint16_t)((u + 0x7fff + (u >> 16 & 1)) >> 16);
}

/* float to float16, to nearest even, in integers (see f16_to_f32): at least 65,520 (the
   midpoint past 65,504) becomes infinity; below 2^-14 the value is a multiple of 2^-24 (a
   subnormal, or 2^-14 itself when it rounds up); a NaN stays quiet with its top payload
   bits, as F16C's vcvtps2ph */
static inline uint16_t f32_to_f16(float x)
{
    const uint32_t u = bits_of_float(x), a = u & 0x7fffffff;
    const uint16_t sign = (uint16_t)(u >> 16 & 0x8000);
    if (a > 0x7f800000)                    /* NaN */
        return sign | 0x7e00 | (uint16_t)(a >> 13 & 0x3ff);
    if (a >= 0x477ff000)                   /* 65,520 and up, infinity */
        return sign | 0x7c00;
    if (a >= 0x38800000) {                 /* normal: rebias 127 -> 15, round off 13 bits */
        const uint32_t rebiased = a - 0x38000000;
        return sign | (uint16_t)((rebiased + 0xfff + (rebiased >> 13 & 1)) >> 13);
    }
    if (a <= 0x33000000)                   /* at most 2^-25, half the least subnormal: 0 */
        return sign;
    /* a subnormal result: the significand (with its leading bit) in units of 2^-24 */
    const uint32_t significand = (a & 0x7fffff) | 0x800000, shift = 126 - (a >> 23);   /* 14..24 */
    const uint32_t kept = significand >> shift, rest = significand & ((1u << shift) - 1), half = 1u << (shift - 1);
    return sign | (uint16_t)(kept + (rest > half || (rest == half && (kept & 1))));
}

/* AVX512-BF16's two instructions, exactly, in portable C, as the instruction reference
   states them: the emulated path's (tile_ops_emulated.c), and what the tests hold the
   instructions to where a CPU has them (attn_bf16_dot, attn_bf16_round). */

/* a subnormal as the zero of its sign (the instructions' "denormals are zero") */
static inline float subnormal_as_zero(float x)
{
    return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x;   /* (NaN compares false: kept) */
}

/* vcvtne2ps2bf16's (and vcvtneps2bf16's) rounding of one float: to nearest even on the bits
   as f32_to_bf16, but a subnormal becomes a zero of its sign, and a NaN its own top bits with
   the quiet bit set */
static inline uint16_t bf16_round_as_vcvtne(float x)
{
    const uint32_t u = bits_of_float(x);
    if ((u & 0x7f800000) == 0)
        return (uint16_t)(u >> 16 & 0x8000);
    if ((u & 0x7fffffff) > 0x7f800000)
        return (uint16_t)(u >> 16 | 0x40);
    return (uint16_t)((u + 0x7fff + (u >> 16 & 1)) >> 16);
}

/* c + a · b as one step of vdpbf16ps computes it ("FP32 FMA with daz in, ftz out and RNE
   rounding"): subnormal inputs read as zeros, the exact result rounded once to nearest even,
   and a result that is tiny after that rounding (below 2^-126, with the exponent unbounded:
   IEEE's "after rounding", as x86 detects it) written as a zero of its sign.
     A product of two bfloat16 (8 significant bits each) that is a normal float is exact,
   so then c + a · b in float is that one rounding, and a sum of two floats below 2^-126 is
   exact: flushing a subnormal sum is the rule. Any other product (zero, tiny, overflowing,
   NaN) goes through fmaf, exact too. A zero product leaves c (or a zero), never tiny; a
   nonzero tiny one's result near 2^-126 is decided on the operands scaled by 2^64 (exact:
   such a result needs |c| and |a · b| below about 2^-99, so |a| < 2^27 and nothing
   overflows), where gradual underflow's coarser grid cannot round a tiny result up to
   2^-126. Independent of the thread's own MXCSR: with FTZ or DAZ set by someone else, the
   float operations here flush exactly where the rule does. */
static inline float bf16_dot_step(float a, float b, float c)
{
    a = subnormal_as_zero(a);
    b = subnormal_as_zero(b);
    c = subnormal_as_zero(c);
    const float product = a * b;
    if (fabsf(product) >= FLT_MIN && fabsf(product) <= FLT_MAX)
        return subnormal_as_zero(c + product);
    const float r = fmaf(a, b, c);
    if (a == 0 || b == 0 || !(fabsf(r) < 0x1p-125f) || r == 0)   /* c, NaN, infinite, clear of 2^-126, or zero */
        return r;
    const float scaled = fmaf(a * 0x1p64f, b, c * 0x1p64f);
    return fabsf(scaled) >= 0x1p-62f ? scaled * 0x1p-64f : copysignf(0.0f, scaled);
}

/* vdpbf16ps on one float32 lane: acc + the high halves' product, then + the low halves'
   (two bfloat16 in each 32-bit word of a and b, the first of a pair in the low half) */
static inline float bf16_dot_lane(float acc, uint32_t a, uint32_t b)
{
    acc = bf16_dot_step(bf16_to_f32((uint16_t)(a >> 16)), bf16_to_f32((uint16_t)(b >> 16)), acc);
    return bf16_dot_step(bf16_to_f32((uint16_t)a), bf16_to_f32((uint16_t)b), acc);
}

/* Bytes to fetch into L2 over a loop, a few lines a step (read_ahead_of, then in the loop's
   owner read_ahead_spread over its steps and read_ahead_step at each): the split-KV path's
   next block, fetched while the row operations compute on the current one, and the query
   tiles' next key tile, a slice per panel, while qk_tile and pv_tile compute.  The hardware
   prefetchers follow demand misses only (and stop at each 4 KB page), so while a block's
   arithmetic runs on cached rows nothing would be read; and a burst of prefetches for a
   whole block (512 lines of float32 K and V at d = 64) fills the miss buffers and stalls
   the core as long as the misses would (measured: no gain). */
struct read_ahead {
    const char *base;
    int64_t offset, bytes, per_step;   /* per_step: bytes a step, whole lines */
};

/* the bytes [p, p + bytes) (none if p is NULL or bytes <= 0), not yet spread over steps */
static inline struct read_ahead read_ahead_of(const void *p, int64_t bytes)
{
    return (struct read_ahead){.base = p, .bytes = p ? bytes : 0};
}

static inline void read_ahead_spread(struct read_ahead *ahead, int64_t steps)
{
    ahead->per_step = steps > 0 ? round_up(ceil_div(ahead->bytes, steps), 64) : ahead->bytes;
}

static inline void read_ahead_step(struct read_ahead *ahead)
{
    const int64_t end = min_i64(ahead->bytes, ahead->offset + ahead->per_step);
    for (; ahead->offset < end; ahead->offset += 64)
        __builtin_prefetch(ahead->base + ahead->offset, 0, 2);
}

/* all of its bytes at once: for a loop that is skipped, so that its share is fetched still */
static inline void read_ahead_now(struct read_ahead ahead)
{
    read_ahead_spread(&ahead, 1);
    read_ahead_step(&ahead);
}

/* qk_rows and pv_rows (below) over K or V rows kept in another format (bfloat16, float16
   bits, or int8 with a float scale per row, scale NULL otherwise), each element converted to
   float as it is loaded, exactly as struct convert_ops widens it, so the results are those
   of the float rows' operations on its output. The split-KV path reads the rows in
   place through them, as float32's: they spare the store of the converted rows and their
   reload. NULL on the generic path, which converts into staging instead. The int8 rows'
   have pv_rows only (their keys are multiplied as integers: struct int8_dot_ops), which
   folds each row's scale into the weights: (p · scale) · v. */
struct row_ops_f32 {
    void (*qk_rows)(const void *k, const float *k_scale, int64_t keys, int64_t d, const float *q,
                    int64_t rows, float scale, float *s, int64_t s_stride, struct read_ahead ahead);
    void (*pv_rows)(const float *p, int64_t p_stride, const void *v, const float *v_scale, int64_t keys,
                    int64_t d_v, const float *alpha, float *acc, int64_t acc_stride, int64_t rows,
                    struct read_ahead ahead);
};

struct tile_ops_f32 {
    const char *isa;
    int64_t query_panel;
    /* the same ISA's query-tile operations (query_panel, qk_tile, online_softmax, pv_tile;
       its other members NULL) on a narrower panel, or NULL: for calls whose few rows would
       be mostly padding in this one's panels (flash_driver_template.h, tile_ops_for); a
       lane's arithmetic is the same in both, so is the result */
    const struct tile_ops_f32 *narrow;
    /* y[c · y_stride + r] = x[r · x_stride + c] (times scale[c], unless scale is NULL) for
       r < rows, c < cols: how the driver packs Qᵀ and K (pack_qt, pack_k), and turns Oᵀ
       into out's rows, each times its 1 / l; the narrow operations have it too */
    void (*transpose)(const float *x, int64_t x_stride, int64_t rows, int64_t cols, const float *scale,
                      float *y, int64_t y_stride);
    /* Sᵀ (keys, rows_pad) = K (keys, d) · Qᵀ (the scale is in Qᵀ: pack_qt), panel p only for
       its panel_keys[p] keys (rounded up to the ISA's micro-kernel: rows past them are
       scratch, their keys read), column p of key j at kp[j / KEY_BLOCK · KEY_BLOCK · d + j %
       KEY_BLOCK · k_key + p · k_col]: packed (pack_k: k_key = 1, k_col = KEY_BLOCK), or K's
       rows in place (k_key = d, k_col = 1); and tile_range (2 · rows_pad) = each query's
       largest score of those computed, the rounded-up rows' included, then its smallest;
       fetches `ahead` meanwhile, a line or two a micro-kernel step */
    void (*qk_tile)(const float *kp, int64_t k_key, int64_t k_col, const int32_t *panel_keys, const float *qt,
                    int64_t rows_pad, int64_t d, float *st, int64_t key_cap, float *tile_range,
                    struct read_ahead ahead);
    /* per query: m_new = max(m, column max of Sᵀ), Pᵀ = 2^(Sᵀ − m_new) (scores in base-2
       units: the driver's scale holds log2(e)), alpha = 2^(m − m_new), l = alpha · l +
       column sum of Pᵀ, m = m_new
       (measured from 0 instead while m_new = −inf, see online_softmax_panel); the column
       maxima read from tile_range (qk_tile's) unless it is NULL: the driver passes it when
       every score qk_tile computed is one the softmax reads, none masked after. Its minima
       tell the SIMD operations when no weight can underflow (online_softmax_panel). */
    void (*online_softmax)(float *st, int64_t key_cap, const int32_t *panel_keys,
                           int64_t rows_pad, float *m, float *l, float *alpha, const float *tile_range);
    /* Oᵀ = alpha ⊙ Oᵀ + Vᵀ Pᵀ, query r summing over its first visible[r] keys, value column
       c of key j at vp[c / COL_BLOCK · v_block + j · v_key + c % COL_BLOCK]: packed (pack_v:
       v_key = COL_BLOCK, v_block = key_cap · COL_BLOCK), or V's rows in place (v_key = d_v,
       v_block = COL_BLOCK, d_v a multiple of COL_BLOCK); fetches `ahead` meanwhile, as qk_tile */
    void (*pv_tile)(const float *pt, int64_t key_cap, const int32_t *visible, const float *alpha,
                    const float *vp, int64_t v_key, int64_t v_block, int64_t d_v, int64_t rows_pad,
                    float *ot, struct read_ahead ahead);
    /* S (rows, s_stride) = scale · Q (rows, d) · Kᵀ (keys, d), 1 <= rows <= ROW_GROUP; each
       row of S holds round_up(keys, ROW_KEY_PAD) values, and those past keys may be
       overwritten; fetches `ahead` meanwhile */
    void (*qk_rows)(const float *k, int64_t keys, int64_t d, const float *q, int64_t rows, float scale,
                    float *s, int64_t s_stride, struct read_ahead ahead);
    /* m_new = max(m, max s), s = 2^(s − m_new) (measured from 0 while m_new = −inf),
       l = alpha · l + Σ s, m = m_new; returns alpha = 2^(m − m_new) */
    float (*online_softmax_row)(float *s, int64_t keys, float *m, float *l);
    /* acc row r (d_v) = alpha[r] · acc row r + Σ_j P[r, j] · V row j, over keys rows of V
       (keys, d_v), for 1 <= rows <= ROW_GROUP rows of P (rows, p_stride) and acc (rows,
       acc_stride); fetches `ahead` meanwhile */
    void (*pv_rows)(const float *p, int64_t p_stride, const float *v, int64_t keys, int64_t d_v,
                    const float *alpha, float *acc, int64_t acc_stride, int64_t rows,
                    struct read_ahead ahead);
    /* the same over rows of bfloat16, float16 and int8 */
    struct row_ops_f32 bf16_rows, f16_rows, q8_rows;
};

struct tile_ops_f64 {
    const char *isa;
    int64_t query_panel;
    const struct tile_ops_f64 *narrow;   /* as tile_ops_f32's */
    void (*transpose)(const double *x, int64_t x_stride, int64_t rows, int64_t cols, const double *scale,
                      double *y, int64_t y_stride);
    void (*qk_tile)(const double *kp, int64_t k_key, int64_t k_col, const int32_t *panel_keys, const double *qt,
                    int64_t rows_pad, int64_t d, double *st, int64_t key_cap, double *tile_range,
                    struct read_ahead ahead);
    void (*online_softmax)(double *st, int64_t key_cap, const int32_t *panel_keys,
                           int64_t rows_pad, double *m, double *l, double *alpha, const double *tile_range);
    void (*pv_tile)(const double *pt, int64_t key_cap, const int32_t *visible, const double *alpha,
                    const double *vp, int64_t v_key, int64_t v_block, int64_t d_v, int64_t rows_pad,
                    double *ot, struct read_ahead ahead);
    void (*qk_rows)(const double *k, int64_t keys, int64_t d, const double *q, int64_t rows,
                    double scale, double *s, int64_t s_stride, struct read_ahead ahead);
    double (*online_softmax_row)(double *s, int64_t keys, double *m, double *l);
    void (*pv_rows)(const double *p, int64_t p_stride, const double *v, int64_t keys, int64_t d_v,
                    const double *alpha, double *acc, int64_t acc_stride, int64_t rows,
                    struct read_ahead ahead);
};

/* bfloat16 multiplied by a dot-product instruction (AVX512-BF16's vdpbf16ps, or its
   emulation: tile_ops_bf16_dot.h), two bfloat16 products per float32 lane, each exact,
   summed in float32 (bf16_dot_lane). The tiles hold bfloat16 in pairs, two in each 32-bit
   word, the first in the low half (a lone last value paired with 0):
     qt (rows_pad / query_panel, d2, query_panel)   Qᵀ in pairs along d, d2 = ceil(d / 2)
     kp (key_cap / KEY_BLOCK, d2, KEY_BLOCK)        K in pairs along d
     pt (key_cap / 2, query_panel)                  one panel's Pᵀ rounded to bfloat16, in pairs
                                                    of keys (P[j], P[j + 1])
     vp (dv_pad / COL_BLOCK, key_cap / 2, COL_BLOCK)   V in pairs of keys
   and Sᵀ, Oᵀ, m, l, alpha, visible and panel_keys as struct tile_ops_f32 has them; the online
   softmax is float32's, of the same panels, but each weight P rounded to bfloat16 as it is
   computed (and summed so into l). The split-KV path reads bfloat16 K and V rows in place
   through dot_rows (struct row_ops_f32, at most ROW_KEYS_MAX keys a call), whose q and P
   are float holding bfloat16 values (q widened, P rounded by online_softmax_row). */
struct tile_ops_bf16 {
    int64_t query_panel;
    const struct tile_ops_bf16 *narrow;   /* as tile_ops_f32's (none yet: NULL) */
    /* as tile_ops_f32's: the driver's Oᵀ (float) into rows */
    void (*transpose)(const float *x, int64_t x_stride, int64_t rows, int64_t cols, const float *scale,
                      float *y, int64_t y_stride);
    /* Sᵀ (keys, rows_pad) = scale · K Qᵀ from kp and qt, as tile_ops_f32's qk_tile (the
       scale not in Qᵀ: rounding q · scale to bfloat16 would cost bits), no tile_range */
    void (*qk_tile)(const uint32_t *kp, const int32_t *panel_keys, const uint32_t *qt,
                    int64_t rows_pad, int64_t d2, float scale, float *st, int64_t key_cap,
                    struct read_ahead ahead);
    void (*online_softmax)(float *st, int64_t key_cap, const int32_t *panel_keys,
                           int64_t rows_pad, float *m, float *l, float *alpha, const float *tile_range);
    /* pt = one panel's Pᵀ (its first keys rows of st, bfloat16 values: online_softmax
       rounds them) in pairs of keys */
    void (*pack_p)(const float *st, int64_t keys, uint32_t *pt);
    /* Oᵀ = alpha ⊙ Oᵀ + Vᵀ Pᵀ from pt and vp, query r summing over its first visible[r] keys */
    void (*pv_tile)(const uint32_t *pt, int64_t key_cap, const int32_t *visible, const float *alpha,
                    const uint32_t *vp, int64_t d_v, int64_t rows_pad, float *ot, struct read_ahead ahead);
    float (*online_softmax_row)(float *s, int64_t keys, float *m, float *l);
    struct row_ops_f32 dot_rows;
    /* the instructions themselves over arrays, for the tests (tile_ops_bf16_dot.h) */
    void (*dot_lanes)(float *acc, const uint32_t *a, const uint32_t *b, int64_t n);
    void (*round_lanes)(const float *x, int64_t n, uint16_t *y);
};

/* The int4 KV cache's rows (kernels/cache_formats.py): value c of a row is the nibble
   c % 2 (low first) of byte c / 2, less INT4_OFFSET, times the scale of its group of
   INT4_GROUP values */
#define INT4_GROUP 32
#define INT4_OFFSET 8
static inline int64_t int4_row_bytes(int64_t width) { return (width + 1) / 2; }
static inline int64_t int4_row_scales(int64_t width) { return (width + INT4_GROUP - 1) / INT4_GROUP; }
static inline int int4_code(const uint8_t *row, int64_t c) { return (row[c / 2] >> (4 * (c & 1)) & 15) - INT4_OFFSET; }

/* Q·Kᵀ on an int8 cache's keys as integer dot products (int8_dot.c), one set per unit:
   the query rows quantised to int16 once per decode step (quantise_query_rows: codes in
   ±query_levels(d), zero-padded to a multiple of INT8_DOT_PAD, and one float scale per
   row, the attention scale folded in), each score an exact int32 sum Σ_c q_rc · k_jc,
   converted to float (rounded once where it exceeds 2^24) and scaled:
     s[r, j] = ((float)Σ_c q_rc · k_jc · k_scale[j]) · q_scale[r]   (float32 roundings)
   for 1 <= rows <= ROW_GROUP rows of codes (rows, round_up(d, INT8_DOT_PAD)) and keys rows
   of K (keys, d); s as struct tile_ops_f32's qk_rows has it. Every unit gives the same
   scores, bit for bit (integer sums are exact): "avx512-vnni" and "avx-vnni" by vpdpwssd,
   "avx2" by vpmaddwd and an add (the same sums in two instructions), "generic" in C. */
#define INT8_DOT_PAD 16
struct int8_dot_ops {
    const char *unit;
    int (*cpu_runs)(void);
    void (*qk_rows)(const int8_t *k, const float *k_scale, int64_t keys, int64_t d, const int16_t *q,
                    const float *q_scale, int64_t rows, float *s, int64_t s_stride, struct read_ahead ahead);
    /* The same on an int4 cache's keys, read in place (int4_row_bytes(d) bytes a row, never
       unpacked): group g's scale of key j at k_scale[g · scale_stride + j]; the rows' codes
       quantised a group of INT4_GROUP values at a time (quantise_query_groups), group g of
       row r at q + (g · group_rows + r) · INT4_GROUP in nibble order, its scale and the sum
       of its codes at q_scale and q_sum[g · group_rows + r]. Each group's exact int32 sum
       Σ_c q_rc · (nibble_jc − 8) = Σ_c q_rc · nibble_jc − 8 · q_sum is scaled as qk_rows
       scales a row's, and the groups' scores are added in order:
         s[r, j] = Σ_g ((float)sum_g · k_scale_g[j]) · q_scale_g[r]   (float32, g ascending) */
    void (*qk_rows_q4)(const uint8_t *k, const float *k_scale, int64_t scale_stride, int64_t keys, int64_t d,
                       const int16_t *q, const float *q_scale, const int32_t *q_sum, int64_t group_rows,
                       int64_t rows, float *s, int64_t s_stride, struct read_ahead ahead);
};

/* The largest query code for rows of d: 32767 (int16), fewer where d · 127 · 32767 would
   pass 2^31 − 1 (d > 516), so that a score's int32 sum never overflows. */
static inline int32_t query_levels(int64_t d)
{
    const int64_t fit = INT32_MAX / (127 * d);
    return (int32_t)(fit < 32767 ? fit : 32767);
}

/* codes (rows, round_up(d, INT8_DOT_PAD)) and q_scale (rows) of q (rows, d; rows q_stride
   apart: an int4 cache's key groups quantise a group's columns of each row apart), as
   kernels.cache_formats.decode_query_codes has them (bit for bit): L = query_levels(d),
   t = max|q_r|, step = t / L (float32), code = q / step rounded to nearest even;
   q_scale = scale · step. A zero row gets step 0 and codes 0; a row holding NaN or ±Inf the
   scale NaN (its scores NaN, as float32 would make them). The rounding moves each query
   element by at most step / 2 = max|q_r| / 65534, so a score by at most |scale| · step / 2 ·
   Σ_c |k_jc| (k dequantised): int8 codes (step max|q_r| / 127) moved the decode steps'
   errors from 3.7·10⁻² to 5.5·10⁻² (kernels.decode.fidelity, queries ×3), int16 ones leave
   them where the keys' and values' own rounding puts them, for the same instructions on
   AVX2 (vpmaddwd on 16 pairs, against vpsignb, vpmaddubsw and vpmaddwd on 32). */
static inline void quantise_query_rows(const float *q, int64_t rows, int64_t d, int64_t q_stride, float scale,
                                       int16_t *codes, float *q_scale)
{
    const int64_t stride = round_up(d, INT8_DOT_PAD);
    const float levels = (float)query_levels(d);
    for (int64_t r = 0; r < rows; r++) {
        const float *x = q + r * q_stride;
        int16_t *c = codes + r * stride;
        float top = 0;
        int finite = 1;
        for (int64_t i = 0; i < d; i++) {
            finite &= isfinite(x[i]) != 0;
            top = fabsf(x[i]) > top ? fabsf(x[i]) : top;
        }
        const float step = top / levels;
        memset(c, 0, (size_t)stride * sizeof *c);
        if (finite && step > 0)
            for (int64_t i = 0; i < d; i++) {
                const float code = nearbyintf(x[i] / step);
                c[i] = (int16_t)(code > levels ? levels : code < -levels ? -levels : code);
            }
        q_scale[r] = finite ? scale * step : NAN;
    }
}

/* An int4 cache's query codes (struct int8_dot_ops' qk_rows_q4): each group of INT4_GROUP
   values of each of the rows q (rows, d) quantised apart, as quantise_query_rows quantises
   a row (kernels.cache_formats.decode_query_codes with the group), group g of row r at
   codes + (g · rows + r) · INT4_GROUP in nibble order, the codes of its even values first
   and of its odd values 16 later (code c at c / 2 + 16 · (c % 2), zeros where the group is
   short): a key byte zero-extended holds its even value in its low nibble and its odd
   value in its high one, so that the bytes of a group widened once meet the even codes
   masked and the odd codes shifted, never interleaved. q_sum: the sum of each group's
   codes, for the nibbles' offset. */
static inline void quantise_query_groups(const float *q, int64_t rows, int64_t d, float scale, int16_t *codes,
                                         float *q_scale, int32_t *q_sum)
{
    for (int64_t g = 0; g * INT4_GROUP < d; g++)
        for (int64_t r = 0; r < rows; r++) {
            const int64_t at = g * rows + r, width = d - g * INT4_GROUP < INT4_GROUP ? d - g * INT4_GROUP : INT4_GROUP;
            int16_t natural[INT4_GROUP], *out = codes + at * INT4_GROUP;
            quantise_query_rows(q + r * d + g * INT4_GROUP, 1, width, d, scale, natural, q_scale + at);
            memset(out, 0, INT4_GROUP * sizeof *out);
            q_sum[at] = 0;
            for (int64_t c = 0; c < width; c++) {
                out[c / 2 + INT4_GROUP / 2 * (c % 2)] = natural[c];
                q_sum[at] += natural[c];
            }
        }
}


/* Conversions between float and the other formats (convert.c), one set per ISA:
   widen_bf16, widen_f16: y[i] = x[i] for i < n, widened exactly from the bits of a bfloat16
     or a float16: how the 16-bit entry points read their inputs, a tile at a time.
   widen_q8: y (rows, width) = scale[i] · x row i (int8), each product rounded once to float
     (the int8 value is exact in float): how the int8 entry point dequantises a block of K
     or V rows, which lie contiguous (width apart) in x and in y.
   widen_q4: y (rows, width) = each value of the int4 rows x (int4_row_bytes(width) bytes
     a row, two codes a byte) times its group's scale (int4_row_scales(width) a row), one
     rounding: the int4 entry point's, likewise.
   unpack_q4: the codes of the int4 rows x as int8, group by group, for a decode step's
     P·V through the int8 rows' operations: group g of row i (width min(INT4_GROUP, width − g ·
     INT4_GROUP)) at codes + g · capacity · INT4_GROUP + i · its width, its scale at
     scales + g · capacity + i (rows <= capacity).
   narrow_bf16, narrow_f16: y[i] = x[i] rounded to nearest even, as bits (f32_to_bf16,
     f32_to_f16): how a 16-bit entry point stores an output row when asked to. */
struct convert_ops {
    void (*widen_bf16)(const uint16_t *x, int64_t n, float *y);
    void (*widen_f16)(const uint16_t *x, int64_t n, float *y);
    void (*widen_q8)(const int8_t *x, const float *scale, int64_t rows, int64_t width, float *y);
    void (*widen_q4)(const uint8_t *x, const float *scale, int64_t rows, int64_t width, float *y);
    void (*unpack_q4)(const uint8_t *x, const float *scale, int64_t rows, int64_t width, int64_t capacity,
                      int8_t *codes, float *scales);
    void (*narrow_bf16)(const float *x, int64_t n, uint16_t *y);
    void (*narrow_f16)(const float *x, int64_t n, uint16_t *y);
};

extern const struct convert_ops convert_generic, convert_avx2, convert_avx512;
extern const struct int8_dot_ops int8_dot_avx512_vnni, int8_dot_avx_vnni, int8_dot_avx2, int8_dot_generic;
extern const struct tile_ops_f32 tile_ops_generic_f32, tile_ops_avx2_f32, tile_ops_avx512_f32,
    tile_ops_emulated_f32;
extern const struct tile_ops_bf16 tile_ops_avx512_bf16, tile_ops_emulated_bf16;
extern const struct tile_ops_f64 tile_ops_generic_f64, tile_ops_avx2_f64, tile_ops_avx512_f64;

/* struct tile_ops_f32's, _f64's and _bf16's transpose: in 8 × 8 (float64: 4 × 4) blocks of AVX2's
   shuffles for the AVX2 paths (tile_ops_avx2_f32.c, tile_ops_avx2_f64.c: one element at a
   time, a panel of queries or a block of keys took a cycle an element, as much as a tiny
   call's products), the edges one element at a time; in 16 × 16 (float64: 8 × 8) blocks of
   AVX-512's for the AVX-512 paths, their edges in AVX2's (transpose_lanes,
   tile_ops_simd_template.h); or element by element (tile_ops_generic_template.h) */
void transpose_avx2_f32(const float *x, int64_t x_stride, int64_t rows, int64_t cols, const float *scale, float *y,
                        int64_t y_stride);
void transpose_avx2_f64(const double *x, int64_t x_stride, int64_t rows, int64_t cols, const double *scale,
                        double *y, int64_t y_stride);
void transpose_generic_f32(const float *x, int64_t x_stride, int64_t rows, int64_t cols, const float *scale,
                           float *y, int64_t y_stride);
void transpose_generic_f64(const double *x, int64_t x_stride, int64_t rows, int64_t cols, const double *scale,
                           double *y, int64_t y_stride);

#endif
