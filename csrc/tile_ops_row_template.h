/* The row operations of the split-KV path (tile_ops.h: qk_row, pv_row) over K or V rows of
   one element format: a template without include guards, included by
   tile_ops_simd_template.h once for rows of `real` and, in the float32 files (ROW_FORMATS),
   once more for each of bfloat16, float16 and int8 rows, which are converted to float as
   they are loaded (struct row_ops_f32). SIMD lanes run along d, over one row. Defined
   first, besides the ISA's vocabulary:
     ROW_T                  the rows' element type
     ROW_FN(name)           the names of this instance's functions
     ROW_CONVERTED          0 for rows of real (read with V(loadu) and v_load_first), 1 else:
       ROW_LOAD(p)            LANES elements from p as a vec of float, exactly converted
       ROW_SCALAR(x, scale)   one element as float (int8: scale · x, one rounding, as
                              ROW_LOAD's lanes times the row's scale), for a row's last
                              d % LANES elements
       ROW_SCALED             1 when the rows have a float scale each (int8)
   The converted instances take the rows as const void * and a scale per row (NULL when not
   scaled), as struct row_ops_f32 has them; their results are the real instance's on the
   converted rows, bit for bit (the same operations on the same values). */

#if ROW_CONVERTED
/* LANES elements of a row from p, as real: converted, times the row's scale if scaled (the
   same rounding as widen_ops' q8) */
INLINE_TARGET vec ROW_FN(row_load)(const ROW_T *p, real scale)
{
    return ROW_SCALED ? V(mul)(V(set1)(scale), ROW_LOAD(p)) : ROW_LOAD(p);
}

/* the first n < LANES elements, the other lanes 0, converted one at a time: never reads past
   the row (and a NaN or infinite scale stays out of the empty lanes) */
INLINE_TARGET vec ROW_FN(row_load_first)(const ROW_T *p, int64_t n, real scale)
{
    (void)scale;
    real t[LANES] = {0};
    for (int64_t i = 0; i < n; i++)
        t[i] = ROW_SCALAR(p[i], scale);
    return V(loadu)(t);
}

#define ROW_LOAD_LANES(p, scale) ROW_FN(row_load)(p, scale)
#define ROW_LOAD_FIRST(p, mask, n, scale) ROW_FN(row_load_first)(p, n, scale)
#define ROW_PARAM(x) const void *x##_in, const float *x##_scale
#define ROW_SCALE_OF(x, row) (ROW_SCALED ? x##_scale[row] : 1)
#else
#define ROW_LOAD_LANES(p, scale) V(loadu)(p)
#define ROW_LOAD_FIRST(p, mask, n, scale) v_load_first(p, mask)
#define ROW_PARAM(x) const real *x
#define ROW_SCALE_OF(x, row) 1
#endif

/* s (keys) = scale · K (keys, d) · q (d), ROW_KEYS independent FMA chains (8 keep both FMA
   units busy through their latency: 4 left qk_row latency-bound, 12 cycles a key at d = 64
   on Zen 3, 7 with 8 and V_HSUMS); the last d % LANES columns by masked loads (converted
   rows: converted one at a time) */
static TARGET void ROW_FN(qk_row)(ROW_PARAM(k), int64_t keys, int64_t d, const real *q,
                                  real scale, real *s, struct read_ahead ahead)
{
#if ROW_CONVERTED
    const ROW_T *k = k_in;
#endif
    read_ahead_spread(&ahead, ceil_div(keys, ROW_KEYS));
    const int64_t full = d / LANES * LANES;
    const tail_mask tail = lanes_below(d - full);
    for (int64_t j = 0; j < keys; j += ROW_KEYS) {
        read_ahead_step(&ahead);
        /* past the last key, repeat it: those scores are computed but not stored */
        const ROW_T *k_rows[ROW_KEYS];
        real row_scale[ROW_KEYS];
        vec acc[ROW_KEYS];
        UNROLL
        for (int i = 0; i < ROW_KEYS; i++) {
            const int64_t row = min_i64(j + i, keys - 1);
            k_rows[i] = k + row * d;
            row_scale[i] = ROW_SCALE_OF(k, row);
            acc[i] = V(setzero)();
        }
        (void)row_scale;
        for (int64_t c = 0; c < full; c += LANES) {
            const vec x = V(loadu)(q + c);
            UNROLL
            for (int i = 0; i < ROW_KEYS; i++)
                acc[i] = V(fmadd)(ROW_LOAD_LANES(k_rows[i] + c, row_scale[i]), x, acc[i]);
        }
        if (full < d) {
            const vec x = v_load_first(q + full, tail);
            UNROLL
            for (int i = 0; i < ROW_KEYS; i++)
                acc[i] = V(fmadd)(ROW_LOAD_FIRST(k_rows[i] + full, tail, d - full, row_scale[i]), x, acc[i]);
        }
#ifdef V_HSUMS
        /* all ROW_KEYS sums in one vector (those past keys land in s's padding) */
        V(storeu)(s + j, V(mul)(V(set1)(scale), V_HSUMS(acc)));
#else
        for (int i = 0; i < ROW_KEYS && j + i < keys; i++)
            s[j + i] = scale * v_hsum(acc[i]);
#endif
    }
}

/* ROW_VECS vectors of acc from column c0: acc = alpha · acc + Σ_j p[j] · V row j. With full
   (a constant after inlining) all the columns exist; otherwise those past d_v are masked. */
INLINE_TARGET void ROW_FN(pv_row_columns)(const real *p, const ROW_T *v, const float *v_scale,
                                          int64_t keys, int64_t d_v, real alpha, real *acc,
                                          int64_t c0, int full, struct read_ahead *ahead)
{
    (void)v_scale;
    tail_mask mask[ROW_VECS];
    vec o[ROW_VECS];
    const vec a = V(set1)(alpha);
    UNROLL
    for (int i = 0; i < ROW_VECS; i++) {
        mask[i] = lanes_below(d_v - c0 - i * LANES);
        const real *x = acc + c0 + i * LANES;
        o[i] = V(mul)(a, full ? V(loadu)(x) : v_load_first(x, mask[i]));
    }
    for (int64_t j = 0; j < keys; j++) {
        read_ahead_step(ahead);
        const vec b = V(set1)(p[j]);
        const real row_scale = ROW_SCALE_OF(v, j);
        (void)row_scale;
        UNROLL
        for (int i = 0; i < ROW_VECS; i++) {
            const ROW_T *x = v + j * d_v + c0 + i * LANES;
            const int64_t n = clamp_i64(d_v - c0 - i * LANES, 0, LANES);   /* (converted rows) */
            (void)n;
            o[i] = V(fmadd)(b, full ? ROW_LOAD_LANES(x, row_scale)
                                    : ROW_LOAD_FIRST(x, mask[i], n, row_scale), o[i]);
        }
    }
    UNROLL
    for (int i = 0; i < ROW_VECS; i++) {
        if (full)
            V(storeu)(acc + c0 + i * LANES, o[i]);
        else
            v_store_first(acc + c0 + i * LANES, mask[i], o[i]);
    }
}

/* acc (d_v) = alpha · acc + Σ_j p[j] · V row j, ROW_VECS · LANES columns per pass over the keys */
static TARGET void ROW_FN(pv_row)(const real *p, ROW_PARAM(v), int64_t keys, int64_t d_v,
                                  real alpha, real *acc, struct read_ahead ahead)
{
#if ROW_CONVERTED
    const ROW_T *v = v_in;
#else
    const float *v_scale = NULL;
#endif
    /* the read-ahead spread over the first pass's keys */
    read_ahead_spread(&ahead, keys);
    int64_t c0 = 0;
    for (; c0 + ROW_VECS * LANES <= d_v; c0 += ROW_VECS * LANES)
        ROW_FN(pv_row_columns)(p, v, v_scale, keys, d_v, alpha, acc, c0, 1, &ahead);
    if (c0 < d_v)
        ROW_FN(pv_row_columns)(p, v, v_scale, keys, d_v, alpha, acc, c0, 0, &ahead);
}

#undef ROW_LOAD_LANES
#undef ROW_LOAD_FIRST
#undef ROW_PARAM
#undef ROW_SCALE_OF
