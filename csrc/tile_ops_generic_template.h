/* Portable tile operations: a template, without include guards, instantiated once per
   precision by tile_ops_generic.c (which defines `real`, SUFFIX(name) and EXP2 first).
   Plain loops over the layouts of tile_ops.h that gcc -O3 may vectorise for the baseline
   ISA; correctness first. */

#define GENERIC_QUERY_PANEL 8

/* Sᵀ (keys, rows_pad) = K (keys, d) · Qᵀ (d, rows_pad), K packed or in place, and each
   query's largest and smallest score in tile_range (tile_ops.h); `ahead` fetched a key at a
   time */
static void SUFFIX(qk_tile_generic)(const real *kp, int64_t k_key, int64_t k_col, const int32_t *panel_keys,
                                    const real *qt, int64_t rows_pad, int64_t d, real *st, int64_t key_cap,
                                    real *tile_range, struct read_ahead ahead)
{
    real *tile_max = tile_range, *tile_min = tile_range + rows_pad;
    int64_t steps = 0;
    for (int64_t r0 = 0; r0 < rows_pad; r0 += GENERIC_QUERY_PANEL)
        steps += panel_keys[r0 / GENERIC_QUERY_PANEL];
    read_ahead_spread(&ahead, steps);
    for (int64_t r0 = 0; r0 < rows_pad; r0 += GENERIC_QUERY_PANEL) {
        const real *panel = qt + r0 * d;                 /* (d, GENERIC_QUERY_PANEL) */
        for (int lane = 0; lane < GENERIC_QUERY_PANEL; lane++) {
            tile_max[r0 + lane] = -INFINITY;
            tile_min[r0 + lane] = INFINITY;
        }
        for (int64_t j = 0; j < panel_keys[r0 / GENERIC_QUERY_PANEL]; j++, read_ahead_step(&ahead)) {
            const real *kj = kp + j / KEY_BLOCK * d * KEY_BLOCK + j % KEY_BLOCK * k_key;   /* kj[p * k_col] */
            /* Summed in double: without FMA each float32 product would be rounded before the
               add, and with large logits the score error is what the output error is made of. */
            double acc[GENERIC_QUERY_PANEL] = {0};
            for (int64_t p = 0; p < d; p++)
                for (int lane = 0; lane < GENERIC_QUERY_PANEL; lane++)
                    acc[lane] += (double)kj[p * k_col] * panel[p * GENERIC_QUERY_PANEL + lane];
            for (int lane = 0; lane < GENERIC_QUERY_PANEL; lane++) {
                const real score = (real)acc[lane];
                st[r0 * key_cap + j * GENERIC_QUERY_PANEL + lane] = score;
                if (score > tile_max[r0 + lane])   /* false for NaN, as in online_softmax_generic */
                    tile_max[r0 + lane] = score;
                if (score < tile_min[r0 + lane])
                    tile_min[r0 + lane] = score;
            }
        }
    }
}

static void SUFFIX(online_softmax_generic)(real *st, int64_t key_cap, const int32_t *panel_keys,
                                           int64_t rows_pad, real *m, real *l, real *alpha, const real *tile_range)
{
    const real *tile_max = tile_range;   /* (the minima: for the SIMD operations) */
    for (int64_t r = 0; r < rows_pad; r++) {
        const int64_t keys = panel_keys[r / GENERIC_QUERY_PANEL];
        /* query r's scores: s[j * GENERIC_QUERY_PANEL], j < keys */
        real *s = st + (r / GENERIC_QUERY_PANEL) * key_cap * GENERIC_QUERY_PANEL + r % GENERIC_QUERY_PANEL;
        real m_new = m[r];
        if (tile_max) {
            if (tile_max[r] > m_new)
                m_new = tile_max[r];
        } else
            for (int64_t j = 0; j < keys; j++)
                if (s[j * GENERIC_QUERY_PANEL] > m_new)   /* false for NaN: it reaches l through 2^x */
                    m_new = s[j * GENERIC_QUERY_PANEL];
        /* While a query has seen only −inf scores, measure from 0, so that its weights are
           2^−inf = 0 rather than 2^(−inf + inf) = NaN; later finite scores then take over
           as in the reference, and a row of only −inf ends as 0/0 = NaN as in the reference. */
        const real m_ref = m_new == -INFINITY ? 0 : m_new;
        real sum = 0;
        for (int64_t j = 0; j < keys; j++) {
            s[j * GENERIC_QUERY_PANEL] = EXP2(s[j * GENERIC_QUERY_PANEL] - m_ref);
            sum += s[j * GENERIC_QUERY_PANEL];
        }
        alpha[r] = EXP2(m[r] - m_ref);
        l[r] = alpha[r] * l[r] + sum;
        m[r] = m_new;
    }
}

/* Oᵀ (dv_pad, rows_pad) = alpha ⊙ Oᵀ + Vᵀ (d_v, keys) · Pᵀ (keys, rows_pad), V packed or in
   place (tile_ops.h); `ahead` fetched a query at a time */
static void SUFFIX(pv_tile_generic)(const real *pt, int64_t key_cap, const int32_t *visible,
                                    const real *alpha, const real *vp, int64_t v_key, int64_t v_block,
                                    int64_t d_v, int64_t rows_pad, real *ot, struct read_ahead ahead)
{
    const int64_t dv_pad = round_up(d_v, COL_BLOCK);
    read_ahead_spread(&ahead, rows_pad);
    for (int64_t r = 0; r < rows_pad; r++, read_ahead_step(&ahead)) {
        const int64_t panel = r / GENERIC_QUERY_PANEL, lane = r % GENERIC_QUERY_PANEL;
        const real *p = pt + panel * key_cap * GENERIC_QUERY_PANEL + lane;   /* p[j * PANEL] */
        real *o = ot + panel * dv_pad * GENERIC_QUERY_PANEL + lane;          /* o[c * PANEL] */
        for (int64_t c = 0; c < d_v; c++) {
            const real *vc = vp + (c / COL_BLOCK) * v_block + c % COL_BLOCK;   /* vc[j * v_key] */
            real acc = alpha[r] * o[c * GENERIC_QUERY_PANEL];
            for (int64_t j = 0; j < visible[r]; j++)
                acc += p[j * GENERIC_QUERY_PANEL] * vc[j * v_key];
            o[c * GENERIC_QUERY_PANEL] = acc;
        }
    }
}

/* S (rows, s_stride) = scale · Q (rows, d) · Kᵀ (keys, d), summed in double as in
   qk_tile_generic */
static void SUFFIX(qk_rows_generic)(const real *k, int64_t keys, int64_t d, const real *q, int64_t rows,
                                    real scale, real *s, int64_t s_stride, struct read_ahead ahead)
{
    read_ahead_spread(&ahead, keys);
    for (int64_t j = 0; j < keys; j++) {
        read_ahead_step(&ahead);
        for (int64_t r = 0; r < rows; r++) {
            double acc = 0;
            for (int64_t p = 0; p < d; p++)
                acc += (double)k[j * d + p] * q[r * d + p];
            s[r * s_stride + j] = (real)(scale * acc);
        }
    }
}

/* online_softmax_generic for one row whose scores lie contiguous */
static real SUFFIX(online_softmax_row_generic)(real *s, int64_t keys, real *m, real *l)
{
    real m_new = *m;
    for (int64_t j = 0; j < keys; j++)
        if (s[j] > m_new)   /* false for NaN: it reaches l through 2^x */
            m_new = s[j];
    const real m_ref = m_new == -INFINITY ? 0 : m_new;   /* see online_softmax_generic */
    real sum = 0;
    for (int64_t j = 0; j < keys; j++) {
        s[j] = EXP2(s[j] - m_ref);
        sum += s[j];
    }
    const real alpha = EXP2(*m - m_ref);
    *l = alpha * *l + sum;
    *m = m_new;
    return alpha;
}

/* acc row r (d_v) = alpha[r] · acc row r + Σ_j P[r, j] · V row j */
static void SUFFIX(pv_rows_generic)(const real *p, int64_t p_stride, const real *v, int64_t keys,
                                    int64_t d_v, const real *alpha, real *acc, int64_t acc_stride,
                                    int64_t rows, struct read_ahead ahead)
{
    read_ahead_spread(&ahead, keys);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < d_v; c++)
            acc[r * acc_stride + c] *= alpha[r];
    for (int64_t j = 0; j < keys; j++, read_ahead_step(&ahead))
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < d_v; c++)
                acc[r * acc_stride + c] += p[r * p_stride + j] * v[j * d_v + c];
}

void SUFFIX(transpose_generic)(const real *x, int64_t x_stride, int64_t rows, int64_t cols, const real *scale,
                               real *y, int64_t y_stride)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            y[c * y_stride + r] = scale ? x[r * x_stride + c] * scale[c] : x[r * x_stride + c];
}

const struct SUFFIX(tile_ops) SUFFIX(tile_ops_generic) = {
    .isa = "generic",
    .query_panel = GENERIC_QUERY_PANEL,
    .transpose = SUFFIX(transpose_generic),
    .qk_tile = SUFFIX(qk_tile_generic),
    .online_softmax = SUFFIX(online_softmax_generic),
    .pv_tile = SUFFIX(pv_tile_generic),
    .qk_rows = SUFFIX(qk_rows_generic),
    .online_softmax_row = SUFFIX(online_softmax_row_generic),
    .pv_rows = SUFFIX(pv_rows_generic),
};

#undef GENERIC_QUERY_PANEL
