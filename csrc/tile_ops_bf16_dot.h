/* bfloat16 tiles multiplied by a dot-product instruction (struct tile_ops_bf16, tile_ops.h):
   a template without include guards, included by tile_ops_simd_template.h in the files
   whose vocabulary has BF16_DOT_OPS (tile_ops_avx512_f32.c: AVX512-BF16's vdpbf16ps;
   tile_ops_emulated.c: the same instructions in portable C), after the float32 operations,
   whose online softmax (the same panels) it shares.

   v_dot takes two bfloat16 products per float32 lane where an FMA takes one, each product
   exact, and sums them into the lane in float32 (tile_ops.h, bf16_dot_lane): Q·Kᵀ pairs
   neighbours along d, P·V pairs neighbouring keys. The products of a score are those of
   float32's, summed in another order; P is rounded to bfloat16 once, as the softmax
   (float32 otherwise) computes it, which the verification harness's budget allows for, and
   the softmax's sum l is taken over the rounded weights, so that out = Σ P V / Σ P with
   the very P that multiply V (a key's value comes back exactly when it is the only one). */

#define INLINE_DOT static inline __attribute__((always_inline)) DOT_TARGET

_Static_assert(KEY_BLOCK % 2 == 0 && ROW_KEYS_MAX % (2 * LANES) == 0,
               "keys are paired within a packed block, and a row's P rounded 2 · LANES at a time");

/* Sᵀ (MICRO_KEYS, QUERY_PANEL) = scale · K (MICRO_KEYS keys, d) · Qᵀ panel, both in pairs
   along d (kp: pair p of key i at kp[p · KEY_BLOCK + i]; qt: (d2, QUERY_PANEL)): qk_micro,
   one v_dot where it has one FMA, over half the steps */
INLINE_DOT void qk_micro_dot(const uint32_t *kp, const uint32_t *qt, int64_t d2, real scale, real *st)
{
    vec acc[MICRO_KEYS][PANEL_VECS];
    UNROLL
    for (int i = 0; i < MICRO_KEYS; i++)
        UNROLL
        for (int c = 0; c < PANEL_VECS; c++)
            acc[i][c] = V(setzero)();
    for (int64_t p = 0; p < d2; p++) {
        pairs b[PANEL_VECS];
        UNROLL
        for (int c = 0; c < PANEL_VECS; c++)
            b[c] = P(load)(qt + p * QUERY_PANEL + LANES * c);
        UNROLL
        for (int i = 0; i < MICRO_KEYS; i++) {
            const pairs a = pairs_set1(kp[p * KEY_BLOCK + i]);
            UNROLL
            for (int c = 0; c < PANEL_VECS; c++)
                acc[i][c] = v_dot(acc[i][c], b[c], a);
        }
    }
    const vec vscale = V(set1)(scale);
    UNROLL
    for (int i = 0; i < MICRO_KEYS; i++)
        UNROLL
        for (int c = 0; c < PANEL_VECS; c++)
            V(store)(st + i * QUERY_PANEL + LANES * c, V(mul)(vscale, acc[i][c]));
}

static DOT_TARGET void qk_tile_dot(const uint32_t *kp, const int32_t *panel_keys, const uint32_t *qt,
                                   int64_t rows_pad, int64_t d2, real scale, real *st, int64_t key_cap,
                                   struct read_ahead ahead)
{
    int64_t steps = 0;
    for (int64_t r0 = 0; r0 < rows_pad; r0 += QUERY_PANEL)
        steps += ceil_div(panel_keys[r0 / QUERY_PANEL], MICRO_KEYS);
    read_ahead_spread(&ahead, steps);
    for (int64_t r0 = 0; r0 < rows_pad; r0 += QUERY_PANEL)
        for (int64_t j = 0; j < panel_keys[r0 / QUERY_PANEL]; j += MICRO_KEYS) {
            qk_micro_dot(kp + j / KEY_BLOCK * d2 * KEY_BLOCK + j % KEY_BLOCK, qt + r0 * d2, d2, scale,
                         st + r0 * key_cap + j * QUERY_PANEL);
            read_ahead_step(&ahead);
        }
}

/* online_softmax with P rounded to bfloat16 (tile_ops_simd_template.h's WEIGHT) */
static TARGET void online_softmax_rounded(real *st, int64_t key_cap, const int32_t *panel_keys,
                                          int64_t rows_pad, real *m, real *l, real *alpha, const real *tile_range)
{
    online_softmax_of(st, key_cap, panel_keys, rows_pad, m, l, alpha, tile_range, 1, PANEL_VECS);
}

static TARGET real online_softmax_row_rounded(real *s, int64_t keys, real *m, real *l)
{
    return online_softmax_row_of(s, keys, m, l, 1);
}

/* pt (ceil(keys / 2), QUERY_PANEL) = one panel's Pᵀ (keys, QUERY_PANEL), bfloat16 values
   (online_softmax_rounded's), in pairs of keys (P[j], P[j + 1]), a lone last key paired with 0 */
static DOT_TARGET void pack_p(const real *st, int64_t keys, uint32_t *pt)
{
    for (int64_t j = 0; j < keys; j += 2)
        UNROLL
        for (int c = 0; c < PANEL_VECS; c++) {
            const vec low = V(load)(st + j * QUERY_PANEL + LANES * c);
            const vec high = j + 1 < keys ? V(load)(st + (j + 1) * QUERY_PANEL + LANES * c) : V(setzero)();
            P(store)(pt + j / 2 * QUERY_PANEL + LANES * c, pairs_round(low, high));
        }
}

/* Oᵀ (MICRO_COLS, QUERY_PANEL) = alpha ⊙ Oᵀ + Vᵀ Pᵀ over pairs of keys (pt: pairs of P,
   (keys / 2, QUERY_PANEL); vp: pair j / 2 of column i at vp[j / 2 · COL_BLOCK + i]). Pairs of
   keys [0, shared) reach every lane; on the causal diagonal, [shared, most), a lane that sees
   both keys of a pair takes both products, one that sees the first only takes the pair with
   its V half of the second key cleared (its P half is 0: weight 0 on a V of NaN would be
   NaN), and the others keep their sums. */
INLINE_DOT void pv_micro_dot(const uint32_t *pt, const uint32_t *vp, const int32_t *visible, int64_t shared,
                             int64_t most, const real *alpha, real *ot)
{
    vec acc[MICRO_COLS][PANEL_VECS];
    UNROLL
    for (int c = 0; c < PANEL_VECS; c++) {
        const vec a = V(load)(alpha + LANES * c);
        UNROLL
        for (int i = 0; i < MICRO_COLS; i++)
            acc[i][c] = V(mul)(a, V(load)(ot + i * QUERY_PANEL + LANES * c));
    }
    int64_t j = 0;
    for (; j + 1 < shared; j += 2) {
        pairs p[PANEL_VECS];
        UNROLL
        for (int c = 0; c < PANEL_VECS; c++)
            p[c] = P(load)(pt + j / 2 * QUERY_PANEL + LANES * c);
        UNROLL
        for (int i = 0; i < MICRO_COLS; i++) {
            const pairs b = pairs_set1(vp[j / 2 * COL_BLOCK + i]);
            UNROLL
            for (int c = 0; c < PANEL_VECS; c++)
                acc[i][c] = v_dot(acc[i][c], p[c], b);
        }
    }
    for (; j < most; j += 2)
        UNROLL
        for (int c = 0; c < PANEL_VECS; c++) {
            const lane_mask both = lanes_seeing(visible + LANES * c, j + 1);
            const lane_mask first = (lane_mask)(lanes_seeing(visible + LANES * c, j) & ~both);
            const pairs p = P(load)(pt + j / 2 * QUERY_PANEL + LANES * c);
            UNROLL
            for (int i = 0; i < MICRO_COLS; i++) {
                const pairs b = pairs_set1(vp[j / 2 * COL_BLOCK + i]);
                acc[i][c] = v_dot_where(both, acc[i][c], p, b);
                acc[i][c] = v_dot_where(first, acc[i][c], p, pairs_low_halves(b));
            }
        }
    UNROLL
    for (int i = 0; i < MICRO_COLS; i++)
        UNROLL
        for (int c = 0; c < PANEL_VECS; c++)
            V(store)(ot + i * QUERY_PANEL + LANES * c, acc[i][c]);
}

static DOT_TARGET void pv_tile_dot(const uint32_t *pt, int64_t key_cap, const int32_t *visible,
                                   const real *alpha, const uint32_t *vp, int64_t d_v, int64_t rows_pad,
                                   real *ot, struct read_ahead ahead)
{
    const int64_t dv_pad = round_up(d_v, COL_BLOCK);
    read_ahead_spread(&ahead, rows_pad / QUERY_PANEL * ceil_div(d_v, MICRO_COLS));
    for (int64_t r0 = 0; r0 < rows_pad; r0 += QUERY_PANEL) {
        int64_t shared = visible[r0], most = visible[r0];
        for (int64_t r = r0 + 1; r < r0 + QUERY_PANEL; r++) {
            shared = visible[r] < shared ? visible[r] : shared;
            most = visible[r] > most ? visible[r] : most;
        }
        for (int64_t c = 0; c < d_v; c += MICRO_COLS) {
            pv_micro_dot(pt + r0 * (key_cap / 2), vp + c / COL_BLOCK * (key_cap / 2) * COL_BLOCK + c % COL_BLOCK,
                         visible + r0, shared, most, alpha + r0, ot + r0 * dv_pad + c * QUERY_PANEL);
            read_ahead_step(&ahead);
        }
    }
}

/* Row operations (split-KV path, tile_ops.h's struct row_ops_f32): bfloat16 K and V rows read
   in place; SIMD lanes run along d, over pairs. */

/* s (rows, s_stride) = scale · Q (R rows, d) · Kᵀ (keys, d), K rows of bfloat16 in place (each
   a run of pairs along d) and q the float of bfloat16 values (rounding them back is exact):
   qk_rows (tile_ops_row_template.h) with one v_dot per 2 · LANES columns, ROW_KEYS / R keys a
   step and R rows sharing each K vector loaded. */
INLINE_DOT void qk_rows_dot_of(const uint16_t *k, int64_t keys, int64_t d, const real *q, real scale, real *s,
                               int64_t s_stride, struct read_ahead *ahead, const int R)
{
    const int step = ROW_KEYS / R;   /* accumulator [i * R + r]: key i, row r */
    read_ahead_spread(ahead, ceil_div(keys, step));
    const int64_t full = d / (2 * LANES) * (2 * LANES), rest = d - full;
    for (int64_t j = 0; j < keys; j += step) {
        read_ahead_step(ahead);
        /* past the last key, repeat it: those scores are computed but not stored */
        const uint16_t *k_rows[ROW_KEYS];
        vec acc[ROW_KEYS];
        pairs y[ROW_GROUP];
        UNROLL
        for (int i = 0; i < step; i++)
            k_rows[i] = k + min_i64(j + i, keys - 1) * d;
        UNROLL
        for (int i = 0; i < ROW_KEYS; i++)
            acc[i] = V(setzero)();
        for (int64_t c = 0; c < full; c += 2 * LANES) {
            UNROLL
            for (int r = 0; r < R; r++)
                y[r] = pairs_round_run(V(loadu)(q + r * d + c), V(loadu)(q + r * d + c + LANES));
            UNROLL
            for (int i = 0; i < step; i++) {
                const pairs x = P(loadu)(k_rows[i] + c);
                UNROLL
                for (int r = 0; r < R; r++)
                    acc[i * R + r] = v_dot(acc[i * R + r], x, y[r]);
            }
        }
        if (rest) {
            UNROLL
            for (int r = 0; r < R; r++) {
                const real *tail = q + r * d + full;
                y[r] = pairs_round_run(v_load_first(tail, lanes_below(rest)),
                                       rest > LANES ? v_load_first(tail + LANES, lanes_below(rest - LANES)) : V(setzero)());
            }
            UNROLL
            for (int i = 0; i < step; i++) {
                const pairs x = pairs_first(k_rows[i] + full, rest);
                UNROLL
                for (int r = 0; r < R; r++)
                    acc[i * R + r] = v_dot(acc[i * R + r], x, y[r]);
            }
        }
        for (int i = 0; i < step && j + i < keys; i++)
            UNROLL
            for (int r = 0; r < R; r++)
                s[r * s_stride + j + i] = scale * v_hsum(acc[i * R + r]);
    }
}

/* R rows' ROW_VECS / R vectors of acc from column c0: acc_r = alpha_r · acc_r + Σ_j p_r[j] ·
   V row j, over pairs of keys: p2 holds each row's P in bfloat16 pairs of keys, and each V
   vector is the pair of rows j, j + 1 side by side (a lone last key paired with 0), loaded
   once for the R rows. With full (a constant after inlining) all the columns exist. */
INLINE_DOT void pv_rows_dot_columns(const uint32_t (*p2)[ROW_KEYS_MAX / 2], const uint16_t *v, int64_t keys,
                                    int64_t d_v, const real *alpha, real *acc, int64_t acc_stride, int64_t c0,
                                    int full, struct read_ahead *ahead, const int R)
{
    const int vecs = ROW_VECS / R;   /* o[r * vecs + i]: row r, vector i */
    tail_mask mask[ROW_VECS];
    vec o[ROW_VECS];
    pairs b[ROW_GROUP];
    UNROLL
    for (int i = 0; i < vecs; i++)
        mask[i] = lanes_below(d_v - c0 - i * LANES);
    UNROLL
    for (int r = 0; r < R; r++) {
        const vec a = V(set1)(alpha[r]);
        UNROLL
        for (int i = 0; i < vecs; i++) {
            const real *y = acc + r * acc_stride + c0 + i * LANES;
            o[r * vecs + i] = V(mul)(a, full ? V(loadu)(y) : v_load_first(y, mask[i]));
        }
    }
    for (int64_t j = 0; j < keys; j += 2) {
        read_ahead_step(ahead);
        const uint16_t *low = v + j * d_v + c0, *high = j + 1 < keys ? low + d_v : NULL;
        UNROLL
        for (int r = 0; r < R; r++)
            b[r] = pairs_set1(p2[r][j / 2]);
        UNROLL
        for (int i = 0; i < vecs; i++) {
            const int64_t n = full ? LANES : clamp_i64(d_v - c0 - i * LANES, 0, LANES);
            const pairs x = pairs_of_rows(low + i * LANES, high ? high + i * LANES : NULL, n);
            UNROLL
            for (int r = 0; r < R; r++)
                o[r * vecs + i] = v_dot(o[r * vecs + i], x, b[r]);
        }
    }
    UNROLL
    for (int r = 0; r < R; r++)
        UNROLL
        for (int i = 0; i < vecs; i++) {
            real *y = acc + r * acc_stride + c0 + i * LANES;
            if (full)
                V(storeu)(y, o[r * vecs + i]);
            else
                v_store_first(y, mask[i], o[r * vecs + i]);
        }
}

/* acc_r (d_v) = alpha_r · acc_r + Σ_j p_r[j] · V row j for R rows, keys <= ROW_KEYS_MAX: each
   row's P (bfloat16 values: online_softmax_row_rounded's) in bfloat16 pairs once (2 · LANES at
   a time, 0 past keys), then
   ROW_VECS / R · LANES columns per pass over the pairs */
INLINE_DOT void pv_rows_dot_of(const real *p, int64_t p_stride, const uint16_t *v, int64_t keys, int64_t d_v,
                               const real *alpha, real *acc, int64_t acc_stride, struct read_ahead *ahead,
                               const int R)
{
    uint32_t p2[ROW_GROUP][ROW_KEYS_MAX / 2];
    UNROLL
    for (int r = 0; r < R; r++)
        for (int64_t j = 0; j < keys; j += 2 * LANES) {
            const real *row = p + r * p_stride + j;
            const vec low = v_load_first(row, lanes_below(keys - j));
            const vec high = keys - j > LANES ? v_load_first(row + LANES, lanes_below(keys - j - LANES)) : V(setzero)();
            P(storeu)(p2[r] + j / 2, pairs_round_run(low, high));
        }
    const int64_t width = ROW_VECS / R * LANES;
    read_ahead_spread(ahead, ceil_div(keys, 2) * ceil_div(d_v, width));
    int64_t c0 = 0;
    for (; c0 + width <= d_v; c0 += width)
        pv_rows_dot_columns((const uint32_t (*)[ROW_KEYS_MAX / 2])p2, v, keys, d_v, alpha, acc, acc_stride, c0, 1, ahead, R);
    if (c0 < d_v)
        pv_rows_dot_columns((const uint32_t (*)[ROW_KEYS_MAX / 2])p2, v, keys, d_v, alpha, acc, acc_stride, c0, 0, ahead, R);
}

/* the operations for 1 <= rows <= ROW_GROUP rows (struct row_ops_f32; no scales), each count
   its own instance */
static DOT_TARGET void qk_rows_dot(const void *k, const float *k_scale, int64_t keys, int64_t d, const real *q,
                                   int64_t rows, real scale, real *s, int64_t s_stride, struct read_ahead ahead)
{
    (void)k_scale;
    switch (rows) {
    case 1: qk_rows_dot_of(k, keys, d, q, scale, s, s_stride, &ahead, 1); break;
    case 2: qk_rows_dot_of(k, keys, d, q, scale, s, s_stride, &ahead, 2); break;
    case 3: qk_rows_dot_of(k, keys, d, q, scale, s, s_stride, &ahead, 3); break;
    default: qk_rows_dot_of(k, keys, d, q, scale, s, s_stride, &ahead, 4); break;
    }
}

static DOT_TARGET void pv_rows_dot(const real *p, int64_t p_stride, const void *v, const float *v_scale,
                                   int64_t keys, int64_t d_v, const real *alpha, real *acc, int64_t acc_stride,
                                   int64_t rows, struct read_ahead ahead)
{
    (void)v_scale;
    switch (rows) {
    case 1: pv_rows_dot_of(p, p_stride, v, keys, d_v, alpha, acc, acc_stride, &ahead, 1); break;
    case 2: pv_rows_dot_of(p, p_stride, v, keys, d_v, alpha, acc, acc_stride, &ahead, 2); break;
    case 3: pv_rows_dot_of(p, p_stride, v, keys, d_v, alpha, acc, acc_stride, &ahead, 3); break;
    default: pv_rows_dot_of(p, p_stride, v, keys, d_v, alpha, acc, acc_stride, &ahead, 4); break;
    }
}

/* The two instructions over arrays, for the tests that hold the emulation to the unit
   (attn_bf16_dot, attn_bf16_round): acc[i] = v_dot's lane of (acc[i], a[i], b[i]), and
   y[i] = x[i] rounded as pairs_round_run rounds, for i < n; the last n % LANES (or
   n % (2 · LANES)) through a zero-padded copy */
static DOT_TARGET void dot_lanes(float *acc, const uint32_t *a, const uint32_t *b, int64_t n)
{
    for (int64_t i = 0; i < n; i += LANES) {
        const int64_t m = min_i64(LANES, n - i);
        float acc_lanes[LANES] = {0};
        uint32_t a_lanes[LANES] = {0}, b_lanes[LANES] = {0};
        memcpy(acc_lanes, acc + i, m * sizeof *acc);
        memcpy(a_lanes, a + i, m * sizeof *a);
        memcpy(b_lanes, b + i, m * sizeof *b);
        V(storeu)(acc_lanes, v_dot(V(loadu)(acc_lanes), P(loadu)(a_lanes), P(loadu)(b_lanes)));
        memcpy(acc + i, acc_lanes, m * sizeof *acc);
    }
}

static DOT_TARGET void round_lanes(const float *x, int64_t n, uint16_t *y)
{
    for (int64_t i = 0; i < n; i += 2 * LANES) {
        const int64_t m = min_i64(2 * LANES, n - i);
        float x_lanes[2 * LANES] = {0};
        uint16_t y_lanes[2 * LANES];
        memcpy(x_lanes, x + i, m * sizeof *x);
        P(storeu)(y_lanes, pairs_round_run(V(loadu)(x_lanes), V(loadu)(x_lanes + LANES)));
        memcpy(y + i, y_lanes, m * sizeof *y);
    }
}

const struct tile_ops_bf16 BF16_DOT_OPS = {
    .query_panel = QUERY_PANEL,
    .transpose = TRANSPOSE,
    .qk_tile = qk_tile_dot,
    .online_softmax = online_softmax_rounded,
    .pack_p = pack_p,
    .pv_tile = pv_tile_dot,
    .online_softmax_row = online_softmax_row_rounded,
    .dot_rows = {.qk_rows = qk_rows_dot, .pv_rows = pv_rows_dot},
    .dot_lanes = dot_lanes,
    .round_lanes = round_lanes,
};

#undef INLINE_DOT
