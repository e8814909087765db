/* SIMD tile operations (layouts in tile_ops.h): one algorithm for every ISA, a template
   without include guards, included once by each of tile_ops_avx2_f32.c, tile_ops_avx2_f64.c,
   tile_ops_avx512_f32.c and tile_ops_avx512_f64.c. Each file first defines its vocabulary:
     real, SUFFIX(name)     float, name##_f32  or  double, name##_f64
     vec, LANES             the vector type and its lanes (__m256: 8, __m512d: 8, ...)
     V(op)                  the intrinsic of op: load, store, loadu, storeu, setzero, set1,
                            fmadd, fnmadd, mul, add, sub, max
     V_BROADCAST(p)         *p in every lane
     lane_mask              a per-lane condition: an all-ones vector (AVX2) or a __mmask (AVX-512)
     lanes_seeing(visible, j)   the lanes q whose visible[q] > j
     v_lt(a, b), v_eq(a, b)     the lanes where a < b, a == b (false for NaN)
     v_zero_where(mask, x)      x, with 0 in the lanes of mask
     v_fmadd_where(mask, a, b, acc)   acc + a·b in the lanes of mask, acc (untouched) elsewhere
     v_mul_pow2(p, k, t, zero)   p · 2^k, for integral k also held as k + bias in t's low
                            bits, and 0 in the lanes of mask zero (v_exp2)
     NO_LANES               the lane_mask of no lane
     v_round_reduce(x)      optional: x − round(x), rounded to nearest even (exact), in one
                            instruction (AVX-512DQ's vreduce); v_exp2 then takes no t
     tail_mask, lanes_below(n)  the lanes c < n, for a row's last columns
     v_load_first(p, m), v_store_first(p, m, x)   loads and stores of the lanes of tail mask m
     v_hsum(x), v_hmax(x)   the sum and the max of the lanes
     TARGET, INLINE_TARGET  the functions' target attributes
   and its register plan, which the micro-kernels unroll completely at compile time:
     PANEL_VECS             vectors per query panel
     MICRO_KEYS, MICRO_COLS Sᵀ rows of one qk_micro call, Oᵀ rows of one pv_micro call: both
                            hold MICRO_* × PANEL_VECS accumulators in registers, plus
                            PANEL_VECS loaded operands and a broadcast one
     ROW_KEYS, ROW_VECS     FMA chains of a qk_rows step (keys × rows), vectors of value
                            columns per pv_rows pass (× rows)
   and optionally
     V_HSUMS(acc)           the lane sums of ROW_KEYS = LANES vectors as one vector (lane i:
                            acc[i]'s), which qk_rows then stores; else v_hsum each
     ISA_NAME, TILE_OPS     the ops' name and the name of the struct defined at the end
     V_LANE_SHUFFLE(a, b, imm)   AVX-512's shuffle of 128-bit lanes (vshuff32x4, vshuff64x2):
                            with v_lane_columns(a, u) and TRANSPOSE_EDGES, the packing's
                            transpose in LANES × LANES blocks, transpose_lanes below; see there
     BF16_DOT_OPS           the name of a struct tile_ops_bf16 to define too (a bfloat16
                            dot-product instruction: the operations at the end of this file),
                            with this vocabulary:
       pairs                  a vector of LANES 32-bit words, two bfloat16 in each (the first
                              of a pair in the low half)
       P(op)                  load, loadu (uint32_t *), store, storeu
       pairs_set1(w)          the word w in every lane
       pairs_low_halves(x)    x with its high halves 0
       v_dot(acc, a, b)       acc + a.high · b.high, then + a.low · b.low, per lane (vdpbf16ps)
       v_dot_where(m, acc, a, b)   the same in the lanes of m, acc elsewhere
       v_round_bf16(x)        x rounded to bfloat16, as floats: to nearest even (f32_to_bf16,
                              a NaN kept), in the float32 functions' target
       pairs_round(lo, hi)    lane i: (lo_i, hi_i) rounded to bfloat16 (vcvtne2ps2bf16's
                              rounding, bf16_round_as_vcvtne)
       pairs_round_run(lo, hi)     the 2 · LANES floats lo then hi rounded, in pairs of
                              neighbours: lane i (x[2i], x[2i + 1]) of x = lo, hi
       pairs_first(p, n)      the first n < 2 · LANES bfloat16 from p, 0 after, as pairs
       pairs_of_rows(a, b, n) lane i (a[i], b[i]) for i < n <= LANES, 0 after; b NULL: 0
       DOT_TARGET             the target attributes of the functions that use them */

#include "tile_ops_exp.h"

#define QUERY_PANEL (PANEL_VECS * LANES)
#define UNROLL _Pragma("GCC unroll 16")

_Static_assert(KEY_BLOCK % MICRO_KEYS == 0, "the driver rounds key counts to KEY_BLOCK, in whole qk_micro calls");
_Static_assert(COL_BLOCK % MICRO_COLS == 0, "a packed block of COL_BLOCK value columns holds whole pv_micro calls");
_Static_assert(ROW_KEY_PAD % LANES == 0, "online_softmax_row reads s in whole vectors");
#ifdef V_HSUMS
_Static_assert(ROW_KEYS == LANES && ROW_KEY_PAD % ROW_KEYS == 0,
               "qk_rows stores one row's ROW_KEYS scores of V_HSUMS whole, into s's padding past the keys");
#endif
_Static_assert(ROW_KEYS >= ROW_GROUP && ROW_VECS >= ROW_GROUP,
               "qk_rows and pv_rows hold a chain per key or vector for each of ROW_GROUP rows");

/* 2^x on every lane (constants and accuracy in tile_ops_exp.h). The result is 0 below the
   underflow bound and at −inf; NaN gives NaN: p(NaN) is NaN, and only lanes where x < bound,
   false for NaN, are cleared. A caller that knows every x is finite and at least the bound
   says so (bounded, a constant), and the compare and the clearing are left out: two
   operations of the twelve a score costs in the softmax on AVX2, the compare into a mask
   register on AVX-512. With v_round_reduce, r and k take two operations where the rounding
   constant's addition takes three: the same r and k (but at halves, which either rounding
   splits exactly), the same bits. */
INLINE_TARGET vec v_exp2(vec x, const int bounded)
{
#ifdef v_round_reduce
    const vec r = v_round_reduce(x);
    const vec k = V(sub)(x, r), t = k;   /* (no biased copy: v_mul_pow2 then reads k alone) */
#else
    const vec round_biased = V(set1)(SUFFIX(exp2_round_biased));
    const vec t = V(add)(x, round_biased);
    const vec k = V(sub)(t, round_biased);
    const vec r = V(sub)(x, k);
#endif
    vec p = V(set1)(SUFFIX(exp2_poly)[0]);
    UNROLL
    for (int i = 1; i < (int)(sizeof SUFFIX(exp2_poly) / sizeof SUFFIX(exp2_poly)[0]); i++)
        p = V(fmadd)(p, r, V(set1)(SUFFIX(exp2_poly)[i]));
    return v_mul_pow2(p, k, t, bounded ? NO_LANES : v_lt(x, V(set1)(SUFFIX(exp2_underflow))));
}

/* The query-tile operations come in two widths: the register plan's panel of PANEL_VECS
   vectors, and a narrow one of PANEL_VECS − 1 (struct tile_ops_f32's narrow), for calls
   whose few rows would be mostly padding in the wide panels. Each function below takes its
   panel's vectors, vecs, as a constant that always_inline carries into the loops, so both
   widths unroll completely: the registers hold MICRO_* × vecs accumulators. A lane's
   arithmetic does not depend on the width: both give the same bits. */

/* Sᵀ (MICRO_KEYS, panel) = K (MICRO_KEYS keys, d) · Qᵀ panel (d, panel), panel = vecs ·
   LANES, column p of key i at kp[p · k_col + i · k_key] (a packed block, or K's rows in place:
   tile_ops.h); per step vecs loads, MICRO_KEYS broadcasts, MICRO_KEYS · vecs FMAs. The
   panel's running maxima tile_max take the new scores on their way out: the softmax then
   need not read Sᵀ twice, and an op per score vector that would have scaled it (the scale
   is in Qᵀ) finds them instead; the minima tile_min too, from which the softmax learns
   whether any weight can underflow. max(score, m) keeps m for a NaN score, as the softmax's
   own pass does (and min likewise). */
INLINE_TARGET void qk_micro(const real *kp, int64_t k_key, int64_t k_col, const real *qt, int64_t d, real *st,
                            real *tile_max, real *tile_min, const int vecs)
{
    const int64_t panel = vecs * LANES;
    vec acc[MICRO_KEYS][PANEL_VECS];
    UNROLL
    for (int i = 0; i < MICRO_KEYS; i++)
        UNROLL
        for (int c = 0; c < vecs; c++)
            acc[i][c] = V(setzero)();
    for (int64_t p = 0; p < d; p++) {
        vec b[PANEL_VECS];
        UNROLL
        for (int c = 0; c < vecs; c++)
            b[c] = V(load)(qt + p * panel + LANES * c);
        UNROLL
        for (int i = 0; i < MICRO_KEYS; i++) {
            const vec a = V_BROADCAST(kp + p * k_col + i * k_key);
            UNROLL
            for (int c = 0; c < vecs; c++)
                acc[i][c] = V(fmadd)(a, b[c], acc[i][c]);
        }
    }
    UNROLL
    for (int c = 0; c < vecs; c++) {
        vec m = V(load)(tile_max + LANES * c), low = V(load)(tile_min + LANES * c);
        UNROLL
        for (int i = 0; i < MICRO_KEYS; i++) {
            V(store)(st + i * panel + LANES * c, acc[i][c]);
            m = V(max)(acc[i][c], m);
            low = V(min)(acc[i][c], low);
        }
        V(store)(tile_max + LANES * c, m);
        V(store)(tile_min + LANES * c, low);
    }
}

INLINE_TARGET void qk_tile_of(const real *kp, int64_t k_key, int64_t k_col, const int32_t *panel_keys,
                              const real *qt, int64_t rows_pad, int64_t d, real *st, int64_t key_cap,
                              real *tile_range, struct read_ahead *ahead, const int vecs)
{
    const int64_t panel = vecs * LANES;
    int64_t steps = 0;
    for (int64_t r0 = 0; r0 < rows_pad; r0 += panel)
        steps += ceil_div(panel_keys[r0 / panel], MICRO_KEYS);
    read_ahead_spread(ahead, steps);
    /* Panel outer: one Qᵀ panel (d × panel) stays in L1 while the tile's keys stream past it. */
    for (int64_t r0 = 0; r0 < rows_pad; r0 += panel) {
        UNROLL
        for (int c = 0; c < vecs; c++) {
            V(store)(tile_range + r0 + LANES * c, V(set1)(-INFINITY));
            V(store)(tile_range + rows_pad + r0 + LANES * c, V(set1)(INFINITY));
        }
        for (int64_t j = 0; j < panel_keys[r0 / panel]; j += MICRO_KEYS) {
            qk_micro(kp + j / KEY_BLOCK * d * KEY_BLOCK + j % KEY_BLOCK * k_key, k_key, k_col, qt + r0 * d, d,
                     st + r0 * key_cap + j * panel, tile_range + r0, tile_range + rows_pad + r0, vecs);
            read_ahead_step(ahead);
        }
    }
}

/* A packed tile's strides as constants, so that its micro-kernel addresses a block's keys
   from one pointer (with them passed as variables the large calls ran 3% slower) */
INLINE_TARGET void qk_tile_strided(const real *kp, int64_t k_key, int64_t k_col, const int32_t *panel_keys,
                                   const real *qt, int64_t rows_pad, int64_t d, real *st, int64_t key_cap,
                                   real *tile_range, struct read_ahead *ahead, const int vecs)
{
    if (k_key == 1 && k_col == KEY_BLOCK)
        qk_tile_of(kp, 1, KEY_BLOCK, panel_keys, qt, rows_pad, d, st, key_cap, tile_range, ahead, vecs);
    else
        qk_tile_of(kp, k_key, k_col, panel_keys, qt, rows_pad, d, st, key_cap, tile_range, ahead, vecs);
}

static TARGET void qk_tile(const real *kp, int64_t k_key, int64_t k_col, const int32_t *panel_keys,
                           const real *qt, int64_t rows_pad, int64_t d, real *st, int64_t key_cap, real *tile_range,
                           struct read_ahead ahead)
{
    qk_tile_strided(kp, k_key, k_col, panel_keys, qt, rows_pad, d, st, key_cap, tile_range, &ahead, PANEL_VECS);
}

static TARGET void qk_tile_narrow(const real *kp, int64_t k_key, int64_t k_col, const int32_t *panel_keys,
                                  const real *qt, int64_t rows_pad, int64_t d, real *st, int64_t key_cap,
                                  real *tile_range, struct read_ahead ahead)
{
    qk_tile_strided(kp, k_key, k_col, panel_keys, qt, rows_pad, d, st, key_cap, tile_range, &ahead, PANEL_VECS - 1);
}

/* P as the products take it: as computed, or, for the bfloat16 dot products (round_bf16),
   rounded to bfloat16 (v_round_bf16) before the sum l is taken, so that l sums the very
   weights P·V multiplies by and each output row stays a convex combination of V's rows */
#ifdef BF16_DOT_OPS
#define WEIGHT(p, round_bf16) ((round_bf16) ? v_round_bf16(p) : (p))
#else
#define WEIGHT(p, round_bf16) ((void)(round_bf16), (p))
#endif

/* The weights of a panel's keys, Pᵀ = 2^(Sᵀ − m_ref) in place, and their sums per query
   added to sum: the vecs vectors of a key's row are loaded together and give that many
   independent 2^x computations (bounded: v_exp2's) */
INLINE_TARGET void panel_weights(real *st, int64_t keys, const vec *m_ref, vec *sum, const int round_bf16,
                                 const int bounded, const int vecs)
{
    const int64_t panel = vecs * LANES;
    for (int64_t j = 0; j < keys; j++)
        UNROLL
        for (int c = 0; c < vecs; c++) {
            real *s = st + j * panel + LANES * c;
            const vec p = WEIGHT(v_exp2(V(sub)(V(load)(s), m_ref[c]), bounded), round_bf16);
            V(store)(s, p);
            sum[c] = V(add)(sum[c], p);
        }
}

/* The online softmax of one panel of queries (see tile_ops.h), the panel's maxima of its
   scores from tile_max (qk_tile's) or, NULL, found here; and with them its minima,
   tile_min: when each query's smallest score less its m_ref is at least the underflow bound,
   then so is every score's, and no weight needs the underflow's compare (v_exp2's bounded).
   Scores that spread wider than that (a weight below 2^−126 beside the row's largest, 1)
   take the compare: unmasked, vscalef's subnormal results ran the call 8 to 15 times slower. */
INLINE_TARGET void online_softmax_panel(real *st, int64_t keys, real *m, real *l, real *alpha,
                                        const real *tile_max, const real *tile_min, const int round_bf16,
                                        const int vecs)
{
    const int64_t panel = vecs * LANES;
    vec m_old[PANEL_VECS], m_new[PANEL_VECS], m_ref[PANEL_VECS], sum[PANEL_VECS];
    UNROLL
    for (int c = 0; c < vecs; c++)
        m_old[c] = m_new[c] = V(load)(m + LANES * c);
    /* max(x, acc) returns acc when x is NaN: NaN never enters m (it reaches l through 2^x) */
    if (tile_max)
        UNROLL
        for (int c = 0; c < vecs; c++)
            m_new[c] = V(max)(V(load)(tile_max + LANES * c), m_new[c]);
    else
        for (int64_t j = 0; j < keys; j++)
            UNROLL
            for (int c = 0; c < vecs; c++)
                m_new[c] = V(max)(V(load)(st + j * panel + LANES * c), m_new[c]);
    /* While a query has seen only −inf scores, measure from 0, so that its weights are
       2^−inf = 0 rather than 2^(−inf + inf) = NaN; later finite scores then take over as
       in the reference, and a row of only −inf ends as 0/0 = NaN as in the reference. */
    UNROLL
    for (int c = 0; c < vecs; c++) {
        m_ref[c] = v_zero_where(v_eq(m_new[c], V(set1)(-INFINITY)), m_new[c]);
        sum[c] = V(setzero)();
    }
    /* (x − m_ref rounds monotonically: the smallest score gives the smallest x; a −inf or
       NaN minimum fails the test) */
    int bounded = tile_min != NULL;
    if (bounded) {
        real ref[PANEL_VECS * LANES];
        UNROLL
        for (int c = 0; c < vecs; c++)
            V(storeu)(ref + LANES * c, m_ref[c]);
        for (int64_t r = 0; r < panel; r++)
            bounded &= tile_min[r] - ref[r] >= SUFFIX(exp2_underflow);
    }
    if (bounded)
        panel_weights(st, keys, m_ref, sum, round_bf16, 1, vecs);
    else
        panel_weights(st, keys, m_ref, sum, round_bf16, 0, vecs);
    UNROLL
    for (int c = 0; c < vecs; c++) {
        const vec a = v_exp2(V(sub)(m_old[c], m_ref[c]), 0);
        V(store)(alpha + LANES * c, a);
        V(store)(l + LANES * c, V(fmadd)(a, V(load)(l + LANES * c), sum[c]));
        V(store)(m + LANES * c, m_new[c]);
    }
}

/* the query tile's panels in turn; tile_range (tile_ops.h) holds rows_pad maxima, then as
   many minima */
INLINE_TARGET void online_softmax_of(real *st, int64_t key_cap, const int32_t *panel_keys, int64_t rows_pad,
                                     real *m, real *l, real *alpha, const real *tile_range, const int round_bf16,
                                     const int vecs)
{
    for (int64_t r0 = 0; r0 < rows_pad; r0 += vecs * LANES)
        online_softmax_panel(st + r0 * key_cap, panel_keys[r0 / (vecs * LANES)], m + r0, l + r0, alpha + r0,
                             tile_range ? tile_range + r0 : NULL, tile_range ? tile_range + rows_pad + r0 : NULL,
                             round_bf16, vecs);
}

static TARGET void online_softmax(real *st, int64_t key_cap, const int32_t *panel_keys,
                                  int64_t rows_pad, real *m, real *l, real *alpha, const real *tile_range)
{
    online_softmax_of(st, key_cap, panel_keys, rows_pad, m, l, alpha, tile_range, 0, PANEL_VECS);
}

static TARGET void online_softmax_narrow(real *st, int64_t key_cap, const int32_t *panel_keys,
                                         int64_t rows_pad, real *m, real *l, real *alpha, const real *tile_range)
{
    online_softmax_of(st, key_cap, panel_keys, rows_pad, m, l, alpha, tile_range, 0, PANEL_VECS - 1);
}

/* Oᵀ (MICRO_COLS, panel) = alpha ⊙ Oᵀ + Vᵀ (MICRO_COLS columns, keys) · Pᵀ panel (keys,
   panel), panel = vecs · LANES, with vp those value columns: column i of key j at vp[j ·
   v_key + i] (a packed block, or V's rows in place: tile_ops.h). All the panel's queries see keys [0, shared); keys [shared, most)
   only reach the lanes whose visible count exceeds them: there the product is masked, since
   0 · NaN would be NaN. */
INLINE_TARGET void pv_micro(const real *pt, const real *vp, int64_t v_key,
                            const int32_t *visible, int64_t shared, int64_t most,
                            const real *alpha, real *ot, const int vecs)
{
    const int64_t panel = vecs * LANES;
    vec acc[MICRO_COLS][PANEL_VECS];
    UNROLL
    for (int c = 0; c < vecs; c++) {
        const vec a = V(load)(alpha + LANES * c);
        UNROLL
        for (int i = 0; i < MICRO_COLS; i++)
            acc[i][c] = V(mul)(a, V(load)(ot + i * panel + LANES * c));
    }
    for (int64_t j = 0; j < shared; j++) {
        vec p[PANEL_VECS];
        UNROLL
        for (int c = 0; c < vecs; c++)
            p[c] = V(load)(pt + j * panel + LANES * c);
        UNROLL
        for (int i = 0; i < MICRO_COLS; i++) {
            const vec b = V_BROADCAST(vp + j * v_key + i);
            UNROLL
            for (int c = 0; c < vecs; c++)
                acc[i][c] = V(fmadd)(p[c], b, acc[i][c]);
        }
    }
    for (int64_t j = shared; j < most; j++)
        UNROLL
        for (int c = 0; c < vecs; c++) {
            const lane_mask sees = lanes_seeing(visible + LANES * c, j);
            const vec p = V(load)(pt + j * panel + LANES * c);
            UNROLL
            for (int i = 0; i < MICRO_COLS; i++)
                acc[i][c] = v_fmadd_where(sees, p, V_BROADCAST(vp + j * v_key + i), acc[i][c]);
        }
    UNROLL
    for (int i = 0; i < MICRO_COLS; i++)
        UNROLL
        for (int c = 0; c < vecs; c++)
            V(store)(ot + i * panel + LANES * c, acc[i][c]);
}

INLINE_TARGET void pv_tile_of(const real *pt, int64_t key_cap, const int32_t *visible, const real *alpha,
                              const real *vp, int64_t v_key, int64_t v_block, int64_t d_v, int64_t rows_pad,
                              real *ot, struct read_ahead *ahead, const int vecs)
{
    const int64_t dv_pad = round_up(d_v, COL_BLOCK), panel = vecs * LANES;
    read_ahead_spread(ahead, rows_pad / panel * ceil_div(d_v, MICRO_COLS));
    /* Panel outer: one Pᵀ panel (keys × panel) stays in L1 while all value columns stream
       past it. */
    for (int64_t r0 = 0; r0 < rows_pad; r0 += panel) {
        int64_t shared = visible[r0], most = visible[r0];
        for (int64_t r = r0 + 1; r < r0 + panel; r++) {
            shared = visible[r] < shared ? visible[r] : shared;
            most = visible[r] > most ? visible[r] : most;
        }
        for (int64_t c = 0; c < d_v; c += MICRO_COLS) {
            pv_micro(pt + r0 * key_cap, vp + c / COL_BLOCK * v_block + c % COL_BLOCK, v_key,
                     visible + r0, shared, most, alpha + r0, ot + r0 * dv_pad + c * panel, vecs);
            read_ahead_step(ahead);
        }
    }
}

static TARGET void pv_tile(const real *pt, int64_t key_cap, const int32_t *visible, const real *alpha,
                           const real *vp, int64_t v_key, int64_t v_block, int64_t d_v, int64_t rows_pad,
                           real *ot, struct read_ahead ahead)
{
    pv_tile_of(pt, key_cap, visible, alpha, vp, v_key, v_block, d_v, rows_pad, ot, &ahead, PANEL_VECS);
}

static TARGET void pv_tile_narrow(const real *pt, int64_t key_cap, const int32_t *visible, const real *alpha,
                                  const real *vp, int64_t v_key, int64_t v_block, int64_t d_v,
                                  int64_t rows_pad, real *ot, struct read_ahead ahead)
{
    pv_tile_of(pt, key_cap, visible, alpha, vp, v_key, v_block, d_v, rows_pad, ot, &ahead, PANEL_VECS - 1);
}

/* Row operations (split-KV path, tile_ops.h): SIMD lanes run along d, over one row. */

/* online_softmax_panel for one row whose scores lie contiguous (s holds round_up(keys,
   ROW_KEY_PAD) values: the padding is set to −inf, weight 0 and never the max) */
INLINE_TARGET real online_softmax_row_of(real *s, int64_t keys, real *m, real *l, const int round_bf16)
{
    const int64_t padded = round_up(keys, LANES);
    for (int64_t j = keys; j < padded; j++)
        s[j] = -INFINITY;
    vec m_lanes = V(set1)(*m);
    for (int64_t j = 0; j < padded; j += LANES)
        m_lanes = V(max)(V(loadu)(s + j), m_lanes);   /* NaN never enters m */
    const real m_new = v_hmax(m_lanes);
    const real m_ref = m_new == -INFINITY ? 0 : m_new;   /* see online_softmax_panel */
    const vec ref = V(set1)(m_ref);
    vec sum = V(setzero)();
    for (int64_t j = 0; j < padded; j += LANES) {
        const vec p = WEIGHT(v_exp2(V(sub)(V(loadu)(s + j), ref), 0), round_bf16);
        V(storeu)(s + j, p);
        sum = V(add)(sum, p);
    }
    real alpha[LANES];
    V(storeu)(alpha, v_exp2(V(set1)(*m - m_ref), 0));
    *l = alpha[0] * *l + v_hsum(sum);
    *m = m_new;
    return alpha[0];
}

static TARGET real online_softmax_row(real *s, int64_t keys, real *m, real *l)
{
    return online_softmax_row_of(s, keys, m, l, 0);
}

/* qk_rows and pv_rows over rows of real, and in the float32 files (ROW_FORMATS: the ISA's
   load_row_bf16, load_row_f16, load_row_q8) over rows of the other formats */
#define ROW_T real
#define ROW_FN(name) name
#define ROW_CONVERTED 0
#include "tile_ops_row_template.h"
#undef ROW_T
#undef ROW_FN
#undef ROW_CONVERTED

#ifdef ROW_FORMATS
#define ROW_CONVERTED 1
#define ROW_T uint16_t
#define ROW_SCALED 0
#define ROW_FN(name) name##_bf16
#define ROW_LOAD(p) load_row_bf16(p)
#define ROW_SCALAR(x) bf16_to_f32(x)
#include "tile_ops_row_template.h"
#undef ROW_FN
#undef ROW_LOAD
#undef ROW_SCALAR
#define ROW_FN(name) name##_f16
#define ROW_LOAD(p) load_row_f16(p)
#define ROW_SCALAR(x) f16_to_f32(x)
#include "tile_ops_row_template.h"
#undef ROW_FN
#undef ROW_LOAD
#undef ROW_SCALAR
#undef ROW_T
#undef ROW_SCALED
#define ROW_T int8_t
#define ROW_SCALED 1
#define ROW_FN(name) name##_q8
#define ROW_LOAD(p) load_row_q8(p)
#define ROW_SCALAR(x) ((real)(x))
#include "tile_ops_row_template.h"
#undef ROW_FN
#undef ROW_LOAD
#undef ROW_SCALAR
#undef ROW_T
#undef ROW_SCALED
#undef ROW_CONVERTED
#define ROW_OPS_OF(format) \
    {.qk_rows = qk_rows_##format, .pv_rows = pv_rows_##format}
#endif

#ifdef V_LANE_SHUFFLE
/* The packing's transpose (tile_ops.h) in LANES × LANES blocks: a block's rows a become u
   (v_lane_columns), where 128-bit lane l of u[W · g + m] holds column W · l + m of the W
   rows of group g (W = LANES / 4 columns a lane, four groups); each column then gathers
   lane l of the four groups in two rounds of lane shuffles, and is one whole store (float32:
   64 shuffles for 256 elements, where AVX2's 8 × 8 blocks take 96; float64 24 for 64,
   against 32; one head, n = 64, 2 threads, the Xeon: 1.02x float32's call, 1.05x float64's).
   The edges in TRANSPOSE_EDGES (AVX2's blocks). */
#define LANE_COLUMNS (LANES / 4)
static TARGET void SUFFIX(transpose_lanes)(const real *x, int64_t x_stride, int64_t rows, int64_t cols,
                                           const real *scale, real *y, int64_t y_stride)
{
    int64_t r0 = 0;
    for (; r0 + LANES <= rows; r0 += LANES) {
        int64_t c0 = 0;
        for (; c0 + LANES <= cols; c0 += LANES) {
            vec a[LANES], u[LANES];
            for (int i = 0; i < LANES; i++)
                a[i] = V(loadu)(x + (r0 + i) * x_stride + c0);
            v_lane_columns(a, u);
            for (int m = 0; m < LANE_COLUMNS; m++) {
                /* lanes (0, 2) and (1, 3) of groups 0, 1 and of 2, 3; then lane l of all four */
                const vec *g = u + m;
                const vec even01 = V_LANE_SHUFFLE(g[0], g[LANE_COLUMNS], 0x88),
                          odd01 = V_LANE_SHUFFLE(g[0], g[LANE_COLUMNS], 0xDD),
                          even23 = V_LANE_SHUFFLE(g[2 * LANE_COLUMNS], g[3 * LANE_COLUMNS], 0x88),
                          odd23 = V_LANE_SHUFFLE(g[2 * LANE_COLUMNS], g[3 * LANE_COLUMNS], 0xDD);
                const vec column[4] = {
                    V_LANE_SHUFFLE(even01, even23, 0x88), V_LANE_SHUFFLE(odd01, odd23, 0x88),
                    V_LANE_SHUFFLE(even01, even23, 0xDD), V_LANE_SHUFFLE(odd01, odd23, 0xDD),
                };
                for (int l = 0; l < 4; l++) {
                    const int64_t c = c0 + LANE_COLUMNS * l + m;
                    V(storeu)(y + c * y_stride + r0, scale ? V(mul)(column[l], V(set1)(scale[c])) : column[l]);
                }
            }
        }
        if (c0 < cols)
            TRANSPOSE_EDGES(x + r0 * x_stride + c0, x_stride, LANES, cols - c0, scale ? scale + c0 : NULL,
                            y + c0 * y_stride + r0, y_stride);
    }
    if (r0 < rows)
        TRANSPOSE_EDGES(x + r0 * x_stride, x_stride, rows - r0, cols, scale, y + r0, y_stride);
}
#undef LANE_COLUMNS
#endif

#ifdef BF16_DOT_OPS
#include "tile_ops_bf16_dot.h"
#endif
#undef WEIGHT

/* the query-tile operations on the narrow panel (see qk_micro), the others NULL: for
   the driver's query tiles only */
static const struct SUFFIX(tile_ops) narrow_ops = {
    .isa = ISA_NAME,
    .query_panel = (PANEL_VECS - 1) * LANES,
    .transpose = TRANSPOSE,
    .qk_tile = qk_tile_narrow,
    .online_softmax = online_softmax_narrow,
    .pv_tile = pv_tile_narrow,
};

const struct SUFFIX(tile_ops) TILE_OPS = {
    .isa = ISA_NAME,
    .query_panel = QUERY_PANEL,
    .narrow = &narrow_ops,
    .transpose = TRANSPOSE,
    .qk_tile = qk_tile,
    .online_softmax = online_softmax,
    .pv_tile = pv_tile,
    .qk_rows = qk_rows,
    .online_softmax_row = online_softmax_row,
    .pv_rows = pv_rows,
#ifdef ROW_FORMATS
    .bf16_rows = ROW_OPS_OF(bf16),
    .f16_rows = ROW_OPS_OF(f16),
    .q8_rows = {.pv_rows = pv_rows_q8},   /* (int8 keys: int8_dot.c) */
#endif
};
