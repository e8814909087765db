/* AVX2 + FMA tile operations: a template, without include guards, included once by
   tile_ops_avx2_f32.c and once by tile_ops_avx2_f64.c (layouts in tile_ops.h). Each file
   first defines its precision's vocabulary:
     real, SUFFIX(name)   float, name##_f32  or  double, name##_f64
     vec, LANES           __m256 (8 lanes)   or  __m256d (4 lanes)
     V(op)                the intrinsic _mm256_<op>_ps or _mm256_<op>_pd
     V_BROADCAST          _mm256_broadcast_ss or _mm256_broadcast_sd
     v_exp(x)             exp on every lane (its polynomial is the precision's own)
     lanes_seeing(visible, j)   all-ones in the lanes whose visible count exceeds key j
     lanes_below(n)       the __m256i mask of lanes c < n (a row's tail for maskload)
     v_hsum(x), v_hmax(x) the sum and the max of the lanes
   and AVX2_FMA / INLINE_AVX2_FMA, the target attributes. Both micro-kernels are
   KEY_BLOCK (or COL_BLOCK) × PANEL_VECS = 4 × 3 vectors: 12 accumulators, and with
   3 loaded and 1 broadcast operand all 16 ymm registers. Their inner loops are unrolled
   by hand for these sizes; the _Static_asserts beside them say what a change must touch. */

#define PANEL_VECS 3                       /* vectors per query panel */
#define QUERY_PANEL (PANEL_VECS * LANES)   /* queries per panel: 24 (float32) or 12 (float64) */

/* Sᵀ (KEY_BLOCK, QUERY_PANEL) = scale · K (KEY_BLOCK rows, d) · Qᵀ panel (d, QUERY_PANEL);
   per step PANEL_VECS loads, KEY_BLOCK broadcasts, KEY_BLOCK · PANEL_VECS FMAs */
INLINE_AVX2_FMA void qk_micro(const real *const k_rows[KEY_BLOCK], const real *qt, int64_t d,
                              real scale, real *st)
{
    vec acc[KEY_BLOCK][PANEL_VECS];
    for (int i = 0; i < KEY_BLOCK; i++)
        for (int c = 0; c < PANEL_VECS; c++)
            acc[i][c] = V(setzero)();
    _Static_assert(PANEL_VECS == 3, "qk_micro loads a panel as b0, b1, b2 and updates acc[i][0..2] "
                                    "by hand: another PANEL_VECS needs this loop rewritten");
    for (int64_t p = 0; p < d; p++) {
        const vec b0 = V(load)(qt + p * QUERY_PANEL);
        const vec b1 = V(load)(qt + p * QUERY_PANEL + LANES);
        const vec b2 = V(load)(qt + p * QUERY_PANEL + 2 * LANES);
        for (int i = 0; i < KEY_BLOCK; i++) {
            const vec a = V_BROADCAST(k_rows[i] + p);
            acc[i][0] = V(fmadd)(a, b0, acc[i][0]);
            acc[i][1] = V(fmadd)(a, b1, acc[i][1]);
            acc[i][2] = V(fmadd)(a, b2, acc[i][2]);
        }
    }
    const vec vscale = V(set1)(scale);
    for (int i = 0; i < KEY_BLOCK; i++)
        for (int c = 0; c < PANEL_VECS; c++)
            V(store)(st + i * QUERY_PANEL + LANES * c, V(mul)(vscale, acc[i][c]));
}

static AVX2_FMA void qk_tile(const real *k, const int32_t *panel_keys, const real *qt,
                             int64_t rows_pad, int64_t d, real scale, real *st, int64_t key_cap)
{
    /* Panel outer: one Qᵀ panel (d × QUERY_PANEL) stays in L1 while the tile's keys stream past it. */
    for (int64_t r0 = 0; r0 < rows_pad; r0 += QUERY_PANEL) {
        const int64_t keys = panel_keys[r0 / QUERY_PANEL];
        for (int64_t j = 0; j < keys; j += KEY_BLOCK) {
            _Static_assert(KEY_BLOCK == 4, "k_rows lists 4 key rows by hand: another KEY_BLOCK needs "
                                           "one entry per key, and qk_micro's 16-register plan redone");
            /* past the last key, repeat it: those Sᵀ rows are computed but never used */
            const real *const k_rows[KEY_BLOCK] = {
                k + min_i64(j, keys - 1) * d,     k + min_i64(j + 1, keys - 1) * d,
                k + min_i64(j + 2, keys - 1) * d, k + min_i64(j + 3, keys - 1) * d,
            };
            qk_micro(k_rows, qt + r0 * d, d, scale, st + r0 * key_cap + j * QUERY_PANEL);
        }
    }
}

/* The online softmax of one panel of queries (see tile_ops.h). The PANEL_VECS vectors of a
   key's row are loaded together and give that many independent exp computations. */
INLINE_AVX2_FMA void online_softmax_panel(real *st, int64_t keys, real *m, real *l, real *alpha)
{
    vec m_old[PANEL_VECS], m_new[PANEL_VECS], m_ref[PANEL_VECS], sum[PANEL_VECS];
    for (int c = 0; c < PANEL_VECS; c++)
        m_old[c] = m_new[c] = V(load)(m + LANES * c);
    /* max(x, acc) returns acc when x is NaN: NaN never enters m (it reaches l through exp) */
    for (int64_t j = 0; j < keys; j++)
        for (int c = 0; c < PANEL_VECS; c++)
            m_new[c] = V(max)(V(load)(st + j * QUERY_PANEL + LANES * c), m_new[c]);
    /* While a query has seen only −inf scores, measure from 0, so that its weights are
       exp(−inf) = 0 rather than exp(−inf + inf) = NaN; later finite scores then take over as
       in the reference, and a row of only −inf ends as 0/0 = NaN as in the reference. */
    for (int c = 0; c < PANEL_VECS; c++) {
        const vec never_finite = V(cmp)(m_new[c], V(set1)(-INFINITY), _CMP_EQ_OQ);
        m_ref[c] = V(andnot)(never_finite, m_new[c]);
        sum[c] = V(setzero)();
    }
    for (int64_t j = 0; j < keys; j++)
        for (int c = 0; c < PANEL_VECS; c++) {
            real *s = st + j * QUERY_PANEL + LANES * c;
            const vec p = v_exp(V(sub)(V(load)(s), m_ref[c]));
            V(store)(s, p);
            sum[c] = V(add)(sum[c], p);
        }
    for (int c = 0; c < PANEL_VECS; c++) {
        const vec a = v_exp(V(sub)(m_old[c], m_ref[c]));
        V(store)(alpha + LANES * c, a);
        V(store)(l + LANES * c, V(fmadd)(a, V(load)(l + LANES * c), sum[c]));
        V(store)(m + LANES * c, m_new[c]);
    }
}

static AVX2_FMA void online_softmax(real *st, int64_t key_cap, const int32_t *panel_keys,
                                    int64_t rows_pad, real *m, real *l, real *alpha)
{
    for (int64_t r0 = 0; r0 < rows_pad; r0 += QUERY_PANEL)
        online_softmax_panel(st + r0 * key_cap, panel_keys[r0 / QUERY_PANEL], m + r0, l + r0, alpha + r0);
}

/* Oᵀ (COL_BLOCK, QUERY_PANEL) = alpha ⊙ Oᵀ + Vᵀ (COL_BLOCK columns, keys) · Pᵀ panel
   (keys, QUERY_PANEL), with vp the packed block (keys, COL_BLOCK) of those value columns.
   All the panel's queries see keys [0, shared); keys [shared, most) only reach the lanes whose
   visible count exceeds them: there the product is masked, since 0 · NaN would be NaN. */
INLINE_AVX2_FMA void pv_micro(const real *pt, const real *vp,
                              const int32_t *visible, int64_t shared, int64_t most,
                              const real *alpha, real *ot)
{
    _Static_assert(COL_BLOCK == 4, "pv_micro's 4 x 3 accumulators, 3 loaded and 1 broadcast operand "
                                   "fill the 16 ymm registers: another COL_BLOCK needs that plan redone");
    vec acc[COL_BLOCK][PANEL_VECS];
    for (int c = 0; c < PANEL_VECS; c++) {
        const vec a = V(load)(alpha + LANES * c);
        for (int i = 0; i < COL_BLOCK; i++)
            acc[i][c] = V(mul)(a, V(load)(ot + i * QUERY_PANEL + LANES * c));
    }
    _Static_assert(PANEL_VECS == 3, "pv_micro loads a panel as p0, p1, p2 and updates acc[i][0..2] "
                                    "by hand: another PANEL_VECS needs this loop rewritten");
    for (int64_t j = 0; j < shared; j++) {
        const vec p0 = V(load)(pt + j * QUERY_PANEL);
        const vec p1 = V(load)(pt + j * QUERY_PANEL + LANES);
        const vec p2 = V(load)(pt + j * QUERY_PANEL + 2 * LANES);
        for (int i = 0; i < COL_BLOCK; i++) {
            const vec b = V_BROADCAST(vp + j * COL_BLOCK + i);
            acc[i][0] = V(fmadd)(p0, b, acc[i][0]);
            acc[i][1] = V(fmadd)(p1, b, acc[i][1]);
            acc[i][2] = V(fmadd)(p2, b, acc[i][2]);
        }
    }
    for (int64_t j = shared; j < most; j++)
        for (int c = 0; c < PANEL_VECS; c++) {
            const vec sees = lanes_seeing(visible + LANES * c, j);
            const vec p = V(load)(pt + j * QUERY_PANEL + LANES * c);
            for (int i = 0; i < COL_BLOCK; i++) {
                const vec pv = V(mul)(p, V_BROADCAST(vp + j * COL_BLOCK + i));
                acc[i][c] = V(add)(acc[i][c], V(and)(pv, sees));
            }
        }
    for (int i = 0; i < COL_BLOCK; i++)
        for (int c = 0; c < PANEL_VECS; c++)
            V(store)(ot + i * QUERY_PANEL + LANES * c, acc[i][c]);
}

static AVX2_FMA void pv_tile(const real *pt, int64_t key_cap, const int32_t *visible,
                             const real *alpha, const real *vp, int64_t d_v, int64_t rows_pad,
                             real *ot)
{
    const int64_t dv_pad = round_up(d_v, COL_BLOCK);
    /* Panel outer: one Pᵀ panel (keys × QUERY_PANEL) stays in L1 while all value columns
       stream past it. */
    for (int64_t r0 = 0; r0 < rows_pad; r0 += QUERY_PANEL) {
        int64_t shared = visible[r0], most = visible[r0];
        for (int64_t r = r0 + 1; r < r0 + QUERY_PANEL; r++) {
            shared = visible[r] < shared ? visible[r] : shared;
            most = visible[r] > most ? visible[r] : most;
        }
        for (int64_t c = 0; c < d_v; c += COL_BLOCK)
            pv_micro(pt + r0 * key_cap, vp + c * key_cap, visible + r0, shared, most,
                     alpha + r0, ot + r0 * dv_pad + c * QUERY_PANEL);
    }
}

/* Row operations (split-KV path, tile_ops.h): SIMD lanes run along d, over one row. */

#define ROW_KEYS 4   /* keys per qk_row step: four independent FMA chains */
#define ROW_VECS 8   /* vectors of value columns per pv_row pass: 8 accumulators */

/* s (keys) = scale · K (keys, d) · q (d); the last d % LANES columns by masked loads */
static AVX2_FMA void qk_row(const real *k, int64_t keys, int64_t d, const real *q, real scale,
                            real *s)
{
    const int64_t full = d / LANES * LANES;
    const __m256i tail = lanes_below(d - full);
    for (int64_t j = 0; j < keys; j += ROW_KEYS) {
        _Static_assert(ROW_KEYS == 4, "k_rows lists 4 key rows by hand");
        /* past the last key, repeat it: those scores are computed but not stored */
        const real *const k_rows[ROW_KEYS] = {
            k + min_i64(j, keys - 1) * d,     k + min_i64(j + 1, keys - 1) * d,
            k + min_i64(j + 2, keys - 1) * d, k + min_i64(j + 3, keys - 1) * d,
        };
        vec acc[ROW_KEYS];
        for (int i = 0; i < ROW_KEYS; i++)
            acc[i] = V(setzero)();
        for (int64_t c = 0; c < full; c += LANES) {
            const vec x = V(loadu)(q + c);
            for (int i = 0; i < ROW_KEYS; i++)
                acc[i] = V(fmadd)(V(loadu)(k_rows[i] + c), x, acc[i]);
        }
        if (full < d) {
            const vec x = V(maskload)(q + full, tail);
            for (int i = 0; i < ROW_KEYS; i++)
                acc[i] = V(fmadd)(V(maskload)(k_rows[i] + full, tail), x, acc[i]);
        }
        for (int i = 0; i < ROW_KEYS && j + i < keys; i++)
            s[j + i] = scale * v_hsum(acc[i]);
    }
}

/* online_softmax_panel for one row whose scores lie contiguous (s holds round_up(keys,
   ROW_KEY_PAD) values: the padding is set to −inf, weight 0 and never the max) */
static AVX2_FMA real online_softmax_row(real *s, int64_t keys, real *m, real *l)
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
        const vec p = v_exp(V(sub)(V(loadu)(s + j), ref));
        V(storeu)(s + j, p);
        sum = V(add)(sum, p);
    }
    real alpha[LANES];
    V(storeu)(alpha, v_exp(V(set1)(*m - m_ref)));
    *l = alpha[0] * *l + v_hsum(sum);
    *m = m_new;
    return alpha[0];
}

/* ROW_VECS vectors of acc from column c0: acc = alpha · acc + Σ_j p[j] · V row j. With full
   (a constant after inlining) all the columns exist; otherwise those past d_v are masked. */
INLINE_AVX2_FMA void pv_row_columns(const real *p, const real *v, int64_t keys, int64_t d_v,
                                    real alpha, real *acc, int64_t c0, int full)
{
    __m256i mask[ROW_VECS];
    vec o[ROW_VECS];
    const vec a = V(set1)(alpha);
    for (int i = 0; i < ROW_VECS; i++) {
        mask[i] = lanes_below(d_v - c0 - i * LANES);
        const real *x = acc + c0 + i * LANES;
        o[i] = V(mul)(a, full ? V(loadu)(x) : V(maskload)(x, mask[i]));
    }
    for (int64_t j = 0; j < keys; j++) {
        const vec b = V(set1)(p[j]);
        for (int i = 0; i < ROW_VECS; i++) {
            const real *x = v + j * d_v + c0 + i * LANES;
            o[i] = V(fmadd)(b, full ? V(loadu)(x) : V(maskload)(x, mask[i]), o[i]);
        }
    }
    for (int i = 0; i < ROW_VECS; i++) {
        if (full)
            V(storeu)(acc + c0 + i * LANES, o[i]);
        else
            V(maskstore)(acc + c0 + i * LANES, mask[i], o[i]);
    }
}

/* acc (d_v) = alpha · acc + Σ_j p[j] · V row j, ROW_VECS · LANES columns per pass over the keys */
static AVX2_FMA void pv_row(const real *p, const real *v, int64_t keys, int64_t d_v, real alpha,
                            real *acc)
{
    int64_t c0 = 0;
    for (; c0 + ROW_VECS * LANES <= d_v; c0 += ROW_VECS * LANES)
        pv_row_columns(p, v, keys, d_v, alpha, acc, c0, 1);
    if (c0 < d_v)
        pv_row_columns(p, v, keys, d_v, alpha, acc, c0, 0);
}

const struct SUFFIX(tile_ops) SUFFIX(tile_ops_avx2) = {
    .isa = "avx2-fma",
    .query_panel = QUERY_PANEL,
    .qk_tile = qk_tile,
    .online_softmax = online_softmax,
    .pv_tile = pv_tile,
    .qk_row = qk_row,
    .online_softmax_row = online_softmax_row,
    .pv_row = pv_row,
};
