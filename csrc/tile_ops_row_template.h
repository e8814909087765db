/* The row operations of the split-KV path (tile_ops.h: qk_rows, pv_rows) over K or V rows of
   one element format: a template without include guards, included by
   tile_ops_simd_template.h once for rows of `real` and, in the float32 files (ROW_FORMATS),
   once more for each of bfloat16, float16 and int8 rows, which are converted to float as
   they are loaded (struct row_ops_f32). SIMD lanes run along d; up to ROW_GROUP query rows
   share each K or V vector loaded. Defined
   first, besides the ISA's vocabulary:
     ROW_T                  the rows' element type
     ROW_FN(name)           the names of this instance's functions
     ROW_CONVERTED          0 for rows of real (read with V(loadu) and v_load_first), 1 else:
       ROW_LOAD(p)            LANES elements from p as a vec of float, exactly converted
       ROW_SCALAR(x)          one element as float, for a row's last d % LANES elements
       ROW_SCALED             1 when the rows have a float scale each (int8): values only,
                              pv_rows (int8 keys are multiplied as integers, int8_dot.c)
   The converted instances take the rows as const void * and a scale per row (NULL when not
   scaled), as struct row_ops_f32 has them; unscaled, their results are the real instance's
   on the converted rows, bit for bit (the same operations on the same values). */

#if ROW_CONVERTED
/* the first n < LANES elements, the other lanes 0, converted one at a time: never reads past
   the row */
INLINE_TARGET vec ROW_FN(row_load_first)(const ROW_T *p, int64_t n)
{
    real t[LANES] = {0};
    for (int64_t i = 0; i < n; i++)
        t[i] = ROW_SCALAR(p[i]);
    return V(loadu)(t);
}

#define ROW_LOAD_LANES(p) ROW_LOAD(p)
#define ROW_LOAD_FIRST(p, mask, n) ROW_FN(row_load_first)(p, n)
#define ROW_PARAM(x) const void *x##_in, const float *x##_scale
#else
#define ROW_LOAD_LANES(p) V(loadu)(p)
#define ROW_LOAD_FIRST(p, mask, n) v_load_first(p, mask)
#define ROW_PARAM(x) const real *x
#define ROW_SCALED 0
#endif

#if !ROW_SCALED
/* s (rows, s_stride) = scale · Q (rows, d) · Kᵀ (keys, d) for R query rows that see the
   same keys (a group's query heads over one K/V head), R a constant once inlined: each step
   takes ROW_KEYS / R keys, loads (and converts) each of their vectors once and meets it with
   all R rows, ROW_KEYS / R · R independent FMA chains (8 keep both FMA units busy through
   their latency: 4 left one row latency-bound, 12 cycles a key at d = 64 on Zen 3, 7 with
   8 and V_HSUMS). A score's sum runs in the same order whatever R, so R rows give what R
   one-row calls give, bit for bit. The last d % LANES columns by masked loads (converted
   rows: converted one at a time). */
INLINE_TARGET void ROW_FN(qk_rows_of)(ROW_PARAM(k), int64_t keys, int64_t d, const real *q,
                                      real scale, real *s, int64_t s_stride,
                                      struct read_ahead *ahead, const int R)
{
#if ROW_CONVERTED
    const ROW_T *k = k_in;
    (void)k_scale;
#endif
    const int step = ROW_KEYS / R;   /* keys per step; accumulator [i * R + r]: key i, row r */
    read_ahead_spread(ahead, ceil_div(keys, step));
    const int64_t full = d / LANES * LANES;
    const tail_mask tail = lanes_below(d - full);
    for (int64_t j = 0; j < keys; j += step) {
        read_ahead_step(ahead);
        /* past the last key, repeat it: those scores are computed but not stored */
        const ROW_T *k_rows[ROW_KEYS];
        vec acc[ROW_KEYS], y[ROW_GROUP];
        UNROLL
        for (int i = 0; i < step; i++)
            k_rows[i] = k + min_i64(j + i, keys - 1) * d;
        UNROLL
        for (int i = 0; i < ROW_KEYS; i++)
            acc[i] = V(setzero)();
        /* the rows' vectors held, each key's loaded and used at once: step · R + R + 1
           registers, no more than 13 */
        for (int64_t c = 0; c < full; c += LANES) {
            UNROLL
            for (int r = 0; r < R; r++)
                y[r] = V(loadu)(q + r * d + c);
            UNROLL
            for (int i = 0; i < step; i++) {
                const vec x = ROW_LOAD_LANES(k_rows[i] + c);
                UNROLL
                for (int r = 0; r < R; r++)
                    acc[i * R + r] = V(fmadd)(x, y[r], acc[i * R + r]);
            }
        }
        if (full < d) {
            UNROLL
            for (int r = 0; r < R; r++)
                y[r] = v_load_first(q + r * d + full, tail);
            UNROLL
            for (int i = 0; i < step; i++) {
                const vec x = ROW_LOAD_FIRST(k_rows[i] + full, tail, d - full);
                UNROLL
                for (int r = 0; r < R; r++)
                    acc[i * R + r] = V(fmadd)(x, y[r], acc[i * R + r]);
            }
        }
#ifdef V_HSUMS
        if (R == 1) {   /* all ROW_KEYS scores in one vector (those past keys land in s's padding) */
            V(storeu)(s + j, V(mul)(V(set1)(scale), V_HSUMS(acc)));
            continue;
        }
        real sums[ROW_KEYS];
        V(storeu)(sums, V(mul)(V(set1)(scale), V_HSUMS(acc)));
#else
        real sums[ROW_KEYS];
        UNROLL
        for (int i = 0; i < step * R; i++)
            sums[i] = scale * v_hsum(acc[i]);
#endif
        for (int i = 0; i < step && j + i < keys; i++)
            UNROLL
            for (int r = 0; r < R; r++)
                s[r * s_stride + j + i] = sums[i * R + r];
    }
}

#endif   /* !ROW_SCALED */

/* R rows' vecs (<= ROW_VECS / R) vectors of acc from column c0: acc_r = alpha_r · acc_r +
   Σ_j p_r[j] · V row j, each V vector loaded (and converted) once for the R rows. With full
   (a constant after inlining) all the columns exist; otherwise those past d_v are masked.
   Scaled rows come with their scales folded into p (pv_rows_of). */
INLINE_TARGET void ROW_FN(pv_rows_columns)(const real *p, int64_t p_stride, const ROW_T *v, int64_t keys,
                                           int64_t d_v,
                                           const real *alpha, real *acc, int64_t acc_stride,
                                           int64_t c0, int full, struct read_ahead *ahead, const int R,
                                           const int vecs)
{
    /* o[r * vecs + i]: row r, vector i */
    tail_mask mask[ROW_VECS];
    vec o[ROW_VECS], b[ROW_GROUP];
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
    for (int64_t j = 0; j < keys; j++) {
        read_ahead_step(ahead);
        /* the rows' weights held, each V vector loaded and used at once: vecs · R + R + 1
           registers, no more than 13 */
        UNROLL
        for (int r = 0; r < R; r++)
            b[r] = V(set1)(p[r * p_stride + j]);
        UNROLL
        for (int i = 0; i < vecs; i++) {
            const ROW_T *y = v + j * d_v + c0 + i * LANES;
            const int64_t n = clamp_i64(d_v - c0 - i * LANES, 0, LANES);   /* (converted rows) */
            (void)n;
            const vec x = full ? ROW_LOAD_LANES(y) : ROW_LOAD_FIRST(y, mask[i], n);
            UNROLL
            for (int r = 0; r < R; r++)
                o[r * vecs + i] = V(fmadd)(b[r], x, o[r * vecs + i]);
        }
    }
    UNROLL
    for (int r = 0; r < R; r++) {
        UNROLL
        for (int i = 0; i < vecs; i++) {
            real *y = acc + r * acc_stride + c0 + i * LANES;
            if (full)
                V(storeu)(y, o[r * vecs + i]);
            else
                v_store_first(y, mask[i], o[r * vecs + i]);
        }
    }
}

/* acc_r (d_v) = alpha_r · acc_r + Σ_j p_r[j] · V row j for R rows, ROW_VECS / R · LANES
   columns per pass over the keys. Scaled rows (int8): the weights times their key's scale
   first, (p_r[j] · scale_j) · v_j, a multiply per key and row rather than one per element
   of every pass */
INLINE_TARGET void ROW_FN(pv_rows_of)(const real *p, int64_t p_stride, ROW_PARAM(v), int64_t keys,
                                      int64_t d_v, const real *alpha, real *acc, int64_t acc_stride,
                                      struct read_ahead *ahead, const int R)
{
#if ROW_CONVERTED
    const ROW_T *v = v_in;
#endif
#if ROW_SCALED
    real weights[ROW_GROUP * ROW_KEYS_MAX];
    for (int r = 0; r < R; r++)
        for (int64_t j = 0; j < keys; j++)
            weights[r * ROW_KEYS_MAX + j] = p[r * p_stride + j] * v_scale[j];
    p = weights;
    p_stride = ROW_KEYS_MAX;
#elif ROW_CONVERTED
    (void)v_scale;
#endif
    const int vecs = ROW_VECS / R;
    const int64_t width = vecs * LANES;
    /* the read-ahead spread over every pass's keys (over the first alone, R = 4 issued 4
       times the fetches a cycle, which filled the miss buffers: float32, 8 query heads on
       2 K/V heads, n_k = 65536, 15% slower than one row at a time) */
    /* the rest after the passes of vecs vectors in passes of 4, 2 and 1 whole vectors, a last
       partial one masked: one masked pass of vecs vectors loaded (and converted) vectors past
       d_v in vain (measured, int8 rows, one query row, d_v = 32 of a pass of 64 columns: 27
       -> 7 ns a key) */
    const int64_t rest = d_v % width;
    int64_t passes = d_v / width + (rest % LANES != 0);
    for (int part = 4; part >= 1; part /= 2)
        passes += part < vecs && rest / LANES & part;
    read_ahead_spread(ahead, keys * passes);
    int64_t c0 = 0;
    for (; c0 + width <= d_v; c0 += width)
        ROW_FN(pv_rows_columns)(p, p_stride, v, keys, d_v, alpha, acc, acc_stride, c0, 1, ahead, R, vecs);
    for (int part = 4; part >= 1; part /= 2)
        if (part < vecs && rest / LANES & part) {
            ROW_FN(pv_rows_columns)(p, p_stride, v, keys, d_v, alpha, acc, acc_stride, c0, 1, ahead, R, part);
            c0 += part * LANES;
        }
    if (c0 < d_v)
        ROW_FN(pv_rows_columns)(p, p_stride, v, keys, d_v, alpha, acc, acc_stride, c0, 0, ahead, R, 1);
}

/* the operations for 1 <= rows <= ROW_GROUP rows (tile_ops.h), each count its own
   instance, its loops unrolled for it */
#if !ROW_SCALED
static TARGET void ROW_FN(qk_rows)(ROW_PARAM(k), int64_t keys, int64_t d, const real *q, int64_t rows,
                                   real scale, real *s, int64_t s_stride, struct read_ahead ahead)
{
#if ROW_CONVERTED
#define ROW_ARGS k_in, k_scale
#else
#define ROW_ARGS k
#endif
    switch (rows) {
    case 1: ROW_FN(qk_rows_of)(ROW_ARGS, keys, d, q, scale, s, s_stride, &ahead, 1); break;
    case 2: ROW_FN(qk_rows_of)(ROW_ARGS, keys, d, q, scale, s, s_stride, &ahead, 2); break;
    case 3: ROW_FN(qk_rows_of)(ROW_ARGS, keys, d, q, scale, s, s_stride, &ahead, 3); break;
    default: ROW_FN(qk_rows_of)(ROW_ARGS, keys, d, q, scale, s, s_stride, &ahead, 4); break;
    }
#undef ROW_ARGS
}
#endif

static TARGET void ROW_FN(pv_rows)(const real *p, int64_t p_stride, ROW_PARAM(v), int64_t keys,
                                   int64_t d_v, const real *alpha, real *acc, int64_t acc_stride,
                                   int64_t rows, struct read_ahead ahead)
{
#if ROW_CONVERTED
#define ROW_ARGS v_in, v_scale
#else
#define ROW_ARGS v
#endif
    switch (rows) {
    case 1: ROW_FN(pv_rows_of)(p, p_stride, ROW_ARGS, keys, d_v, alpha, acc, acc_stride, &ahead, 1); break;
    case 2: ROW_FN(pv_rows_of)(p, p_stride, ROW_ARGS, keys, d_v, alpha, acc, acc_stride, &ahead, 2); break;
    case 3: ROW_FN(pv_rows_of)(p, p_stride, ROW_ARGS, keys, d_v, alpha, acc, acc_stride, &ahead, 3); break;
    default: ROW_FN(pv_rows_of)(p, p_stride, ROW_ARGS, keys, d_v, alpha, acc, acc_stride, &ahead, 4); break;
    }
#undef ROW_ARGS
}

#undef ROW_LOAD_LANES
#undef ROW_LOAD_FIRST
#undef ROW_PARAM
#if !ROW_CONVERTED
#undef ROW_SCALED
#endif
