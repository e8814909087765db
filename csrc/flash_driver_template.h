/* The tiled attention algorithm with the online softmax: a template, without include
   guards, that attention.c includes once per input type with these defined:
     real                   float or double: the type computed in, and the output's
     q_elem, kv_elem        the element types of Q and of K and V: real, uint16_t (the bits
                            of a bfloat16 or float16, which real = float computes), or for K
                            and V int8_t (a quantised cache, one float scale per row)
     Q_TO_REAL(x, n, y)     only when q_elem is not real: y[i] = x[i] as real, i < n (a
                            struct convert_ops function); Q is then read through staging
     KV_TO_REAL(x, scale, row0, rows, width, y)
                            only when kv_elem is not real: y (rows, width) = rows
                            [row0, row0 + rows) of the K or V head at x, whose rows hold
                            width values, as real; scale is that head's scales (int8: one a
                            row; int4: KV_ROW_SCALES a row) or NULL. K and V are then read
                            through staging, a tile or a block of rows at a time; otherwise
                            in place
     KV_ROW_ELEMS(width), KV_ROW_SCALES(width)
                            optional: the kv_elem and float scales a row of width values
                            takes (default width and 1; int4, two codes a byte: ceil(width /
                            2) and one scale per 32)
     KV_ROW_OPS, KV_ROW_OPS_MAX_ROWS
                            optional, with KV_TO_REAL or PAIRED: the member of TILE_OPS_T
                            (struct row_ops_f32) whose row operations read such K and V rows
                            in place, converting as they load, which the split-KV path uses
                            with up to KV_ROW_OPS_MAX_ROWS query rows per K/V head
     PAIRED                 optional (bfloat16 Q, K and V; TILE_OPS_T struct tile_ops_bf16):
                            the tiles are multiplied as pairs of bfloat16 by a dot-product
                            instruction, never widened: Q and K packed in pairs along d, V
                            in pairs of keys, and P rounded to bfloat16 by the softmax (its
                            sum l over the rounded weights) and packed in pairs of keys for
                            P·V (pack_p); the split-KV path reads K and V in place through
                            KV_ROW_OPS with any number of rows (undefined at the end)
     INT8_KEYS              optional, 1 for the int8 and int4 caches: the split-KV path
                            quantises the step's query rows once, to int16 (int8: a row at a
                            time, quantise_query_rows; int4: a group of 32 values at a time,
                            quantise_query_groups), and computes Q·Kᵀ as integer dot products
                            on the keys in place (active_int8, struct int8_dot_ops: qk_rows,
                            or qk_rows_q4 with KV_UNPACK), K never converted to float; the
                            query tiles (prefill) stay float on dequantised K
     KV_UNPACK(x, scale, row0, rows, width, codes, scales)
                            with INT8_KEYS, optional (the int4 cache, its keys read by
                            qk_rows_q4): rows [row0, row0 + rows) of the V head at x as int8
                            codes and scales group by group (struct convert_ops' unpack_q4,
                            capacity DECODE_KEY_BLOCK), how a decode block's values are read
                            directly
     OUT_NARROW(x, n, y)    optional (the 16-bit types): y[i] = x[i] rounded to the inputs'
                            type, i < n (a struct convert_ops function), how a call asked to
                            round its output (struct shape's round_out) stores each row
     SUFFIX(name)           name##_f32, _f64, _bf16, _bf16_dot, _f16, _q8 or _q4
     TILE_OPS_T             struct tile_ops_f32, tile_ops_f64 or (PAIRED) tile_ops_bf16
     QUERY_TILE, KEY_TILE   tile sizes (query rows, keys)
     KEY_CAP                Sᵀ rows per panel: KEY_TILE rounded up to KEY_BLOCK
     ACTIVE_OPS             the selected const TILE_OPS_T *
     EXP2                   exp2f or exp2

   Scores are in base-2 units: SUFFIX(forward) turns the caller's scale into scale · log2(e)
   once, so that every weight is 2^(s − m) (v_exp2, tile_ops_exp.h: an operation fewer per
   score vector than e^x's range reduction). For every (head, query tile) and every key tile
   the query tile can see (tiles are stored transposed, in panels of queries: see
   tile_ops.h):
     Sᵀ = K (scale · Q)ᵀ  (K packed by pack_k, or   qk_tile (pack_qt scales Qᵀ once
       read in place by a tile of few rows)         a tile; paired: qk_tile scales Sᵀ)
     mask the scores outside the band (−inf)        mask_band
     m_new = max(m, rowmax S), P = 2^(S − m_new),   online_softmax (rowmax S from qk_tile
                                                    where no score is masked)
     alpha = 2^(m − m_new), l = alpha · l + rowsum P
     O = alpha · O + P V  (V packed by pack_v, or   pv_tile
       read in place by a tile of few rows)
   and finally out = O · (1 / l), each row rounded to the output's type as it is stored
   (store_row). Nothing larger than a tile is ever stored, and Sᵀ only for one panel of
   queries at a time.

   Grouped query heads: query head h attends to K/V head h / group (struct shape); the query
   tiles of each query head read their K/V head in place (the tile path is bound by its
   products, not by reading K and V, so a K/V head read once per query head costs little).

   With at most DECODE_MAX_QUERIES query rows per head (decoding with a KV cache) a query
   tile would be almost all padding and there would be only `batch` tiles to share among the
   threads, so SUFFIX(forward) takes the split-KV ("flash decoding") path instead: the group's
   query heads of one K/V head are taken together as group · n_q rows of one head (contiguous
   in q and out), so that each K and V row is read from memory once for all of them; that
   head's keys are cut into chunks, every (K/V head, chunk) is a task that streams its K and
   V rows once and keeps, per query row, the partial softmax state of its chunk
     m_c = max s, l_c = Σ 2^(s − m_c), acc_c = Σ 2^(s − m_c) v     attend_key_chunk
   and the rows are then merged across chunks
     m = max m_c, out = Σ 2^(m_c − m) acc_c / Σ 2^(m_c − m) l_c    merge_chunks */

#ifdef Q_TO_REAL
#define Q_STAGED 1
#else
#define Q_STAGED 0
#endif
#ifdef KV_TO_REAL
#define KV_STAGED 1
#else
#define KV_STAGED 0
#endif
#ifndef PAIRED
#define PAIRED 0
#endif
#ifndef INT8_KEYS
#define INT8_KEYS 0
#endif
#ifndef KV_ROW_ELEMS
#define KV_ROW_ELEMS(width) (width)
#define KV_ROW_SCALES(width) 1
#endif
#ifdef KV_UNPACK
#define KV_UNPACKED 1
#else
#define KV_UNPACKED 0
#endif
/* K's and V's rows are real as they lie (neither converted nor paired): qk_tile and pv_tile
   can read them in place (struct tile_loop's k_in_place, v_in_place) */
#if !PAIRED && !KV_STAGED && !defined(KV_ELEM_TO_REAL)
#define KV_READ_IN_PLACE 1
#else
#define KV_READ_IN_PLACE 0
#endif
/* the packed tiles' element type: real, or two bfloat16 in one word (PAIRED) */
#if PAIRED
#define packed uint32_t
#else
#define packed real
#endif
/* what pack_k and pack_v read: K and V themselves, each element converted as it is copied
   (KV_ELEM_TO_REAL), or real rows (in place, or staged by KV_TO_REAL) */
#ifdef KV_ELEM_TO_REAL
#define packed_from kv_elem
#define PACKED_VALUE(x) KV_ELEM_TO_REAL(x)
#define KV_TILE_STAGED 0
#else
#define packed_from real
#define PACKED_VALUE(x) (x)
#define KV_TILE_STAGED KV_STAGED
#endif

/* Bytes of one output element: real's, or the inputs' 16-bit type's when the call rounds
   its rows (OUT_NARROW) */
static size_t SUFFIX(out_size)(const struct shape *sh)
{
    return sh->round_out ? sizeof(uint16_t) : sizeof(real);
}

/* out row `row` of the call (d_v values): stored as real, or rounded to the inputs' 16-bit
   type as it is stored when the call asks for that */
static void SUFFIX(store_row)(const struct shape *sh, void *out, int64_t row, const real *values)
{
#ifdef OUT_NARROW
    if (sh->round_out) {
        OUT_NARROW(values, sh->d_v, (uint16_t *)out + row * sh->d_v);
        return;
    }
#endif
    memcpy((real *)out + row * sh->d_v, values, sh->d_v * sizeof(real));
}

/* The K/V heads of a call: head 0's K and V rows and (int8) their scales, NULL otherwise;
   head g's lie g · kv_rows rows further (SUFFIX(kv_head)). */
struct SUFFIX(kv) {
    const kv_elem *k, *v;
    const float *k_scale, *v_scale;
};

/* K/V head g of the call's heads */
static struct SUFFIX(kv) SUFFIX(kv_head)(const struct SUFFIX(kv) *heads, const struct shape *sh,
                                         int64_t g)
{
    const int64_t row = g * sh->kv_rows;
    return (struct SUFFIX(kv)){
        .k = heads->k + row * KV_ROW_ELEMS(sh->d),
        .v = heads->v + row * KV_ROW_ELEMS(sh->d_v),
        /* (an offset from NULL is undefined, even unread) */
        .k_scale = heads->k_scale ? heads->k_scale + row * KV_ROW_SCALES(sh->d) : NULL,
        .v_scale = heads->v_scale ? heads->v_scale + row * KV_ROW_SCALES(sh->d_v) : NULL,
    };
}

struct SUFFIX(scratch) {
    packed *qt, *kp, *vp;
    real *st, *ot, *m, *l, *alpha, *staging, *rows;   /* rows: one panel's out rows */
    real *tile_range;   /* one panel's maxima of its scores, then its minima (qk_tile's) */
    real *scales;       /* d copies of the scale, the transpose's factors (pack_qt) */
    uint32_t *pt;   /* PAIRED: one panel's Pᵀ in pairs of keys */
    int32_t *first, *visible, *panel_keys, *panel_first, *panel_whole;   /* count_visible's */
    const kv_elem *packed_head;           /* kp and vp hold this K/V head's (its K rows) keys ... */
    int64_t packed_j0, packed_keys;       /* ... [packed_j0, + packed_keys) (walk_keys) */
    int k_in_place, v_in_place;           /* kp, vp not used: the tile ops read K's, V's rows (tile_loop's) */
    uint64_t call;                        /* the call it was carved for (tile_loop's) */
    void *block;
};

/* packed values of a row of d values: d, or d / 2 pairs rounded up (PAIRED) */
static int64_t SUFFIX(packed_width)(int64_t d)
{
    return PAIRED ? ceil_div(d, 2) : d;
}

/* The calling thread's scratch (thread_scratch), carved into the tile buffers for query
   tiles of `rows` rows (a multiple of ops' panel); block is NULL on failure. */
static void SUFFIX(scratch_alloc)(struct SUFFIX(scratch) *sc, const struct shape *sh,
                                  const TILE_OPS_T *ops, int64_t rows)
{
    const int64_t d_packed = SUFFIX(packed_width)(sh->d), dv_pad = round_up(sh->d_v, COL_BLOCK);
    const size_t sizes[] = {
        cache_lines(rows * d_packed * sizeof(packed)),                     /* qt */
        cache_lines(ops->query_panel * KEY_CAP * sizeof(real)),            /* st: one panel */
        cache_lines(rows * dv_pad * sizeof(real)),                         /* ot */
        cache_lines(rows * sizeof(real)),                                  /* m */
        cache_lines(rows * sizeof(real)),                                  /* l */
        cache_lines(rows * sizeof(real)),                                  /* alpha */
        cache_lines(rows * sizeof(int32_t)),                               /* visible */
        cache_lines(rows * sizeof(int32_t)),                               /* panel_keys */
        cache_lines(rows * sizeof(int32_t)),                               /* first */
        cache_lines(rows * sizeof(int32_t)),                               /* panel_first */
        cache_lines(rows * sizeof(int32_t)),                               /* panel_whole */
        cache_lines(KEY_CAP * d_packed * sizeof(packed)),                  /* kp */
        /* vp: KEY_CAP keys of each column (PAIRED: KEY_CAP / 2 pairs) */
        cache_lines(KEY_CAP / (PAIRED + 1) * dv_pad * sizeof(packed)),
        cache_lines(PAIRED * ops->query_panel * KEY_CAP / 2 * sizeof(uint32_t)),   /* pt */
        cache_lines(ops->query_panel * sh->d_v * sizeof(real)),            /* rows */
        cache_lines(2 * ops->query_panel * sizeof(real)),                  /* tile_range */
        cache_lines(sh->d * sizeof(real)),                                 /* scales */
        /* staging: a tile of Q, K or V converted to real (16-bit, int8), before it is packed */
        cache_lines((size_t)(Q_STAGED * rows * sh->d > KV_TILE_STAGED * KEY_CAP * max_i64(sh->d, sh->d_v)
                             ? Q_STAGED * rows * sh->d : KV_TILE_STAGED * KEY_CAP * max_i64(sh->d, sh->d_v))
                    * sizeof(real)),
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += sizes[i];
    char *block = thread_scratch(total);
    *sc = (struct SUFFIX(scratch)){.block = block};
    if (!block)
        return;
    sc->qt = (packed *)block;        block += sizes[0];
    sc->st = (real *)block;          block += sizes[1];
    sc->ot = (real *)block;          block += sizes[2];
    sc->m = (real *)block;           block += sizes[3];
    sc->l = (real *)block;           block += sizes[4];
    sc->alpha = (real *)block;       block += sizes[5];
    sc->visible = (int32_t *)block;      block += sizes[6];
    sc->panel_keys = (int32_t *)block;   block += sizes[7];
    sc->first = (int32_t *)block;        block += sizes[8];
    sc->panel_first = (int32_t *)block;  block += sizes[9];
    sc->panel_whole = (int32_t *)block;  block += sizes[10];
    sc->kp = (packed *)block;        block += sizes[11];
    sc->vp = (packed *)block;        block += sizes[12];
    sc->pt = (uint32_t *)block;      block += sizes[13];
    sc->rows = (real *)block;        block += sizes[14];
    sc->tile_range = (real *)block;  block += sizes[15];
    sc->scales = (real *)block;      block += sizes[16];
    sc->staging = (real *)block;
}

/* count query elements from x, as real: x itself, or x converted into staging, which must
   then hold count values */
static const real *SUFFIX(q_as_real)(const q_elem *x, int64_t count, real *staging)
{
#if Q_STAGED
    Q_TO_REAL(x, count, staging);
    return staging;
#else
    (void)count;
    (void)staging;
    return x;
#endif
}

#if !PAIRED
/* rows [row0, row0 + rows) of one K or V head x (width values a row; scale: the head's row
   scales, or NULL), as real: in place, or converted into staging, which must then hold
   rows · width values */
static const real *SUFFIX(kv_as_real)(const kv_elem *x, const float *scale, int64_t row0,
                                      int64_t rows, int64_t width, real *staging)
{
#if KV_STAGED
    KV_TO_REAL(x, scale, row0, rows, width, staging);
    return staging;
#else
    (void)scale;
    (void)rows;
    (void)staging;
    return x + row0 * width;
#endif
}

/* qt (rows_pad / panel, d, panel) = scale · Qᵀ of query rows [0, rows), zero columns after:
   each panel by ops' transpose (on a tiny call the packing is as much work as the products),
   which scales each value as it stores it (scales: d copies of scale, its per-column
   factors), so that qk_tile's scores come out scaled (a multiply per score vector spared,
   the 1 / √d of a power-of-two d exact). The same bits as a pass of its own for the
   scaling, which in the driver's baseline-ISA code took 9% of a one-head n = 64 call (the
   C entry point, float32, d = 64, AVX-512, medians of 20,000 calls, the builds alternated
   3 times: 1 thread 9.10 -> 8.30 µs, 2 threads 5.61 -> 5.12 µs). */
static void SUFFIX(pack_qt)(const TILE_OPS_T *ops, const real *q, int64_t rows, int64_t rows_pad, int64_t d,
                            int64_t panel, real scale, real *scales, real *qt)
{
    for (int64_t p = 0; p < d; p++)
        scales[p] = scale;
    for (int64_t r0 = 0; r0 < rows_pad; r0 += panel) {
        const int64_t live = min_i64(panel, rows - r0);
        real *block = qt + r0 * d;
        ops->transpose(q + r0 * d, d, live, d, scales, block, panel);
        for (int64_t p = 0; live < panel && p < d; p++)
            for (int64_t lane = live; lane < panel; lane++)
                block[p * panel + lane] = 0;
    }
}

/* kp (KEY_CAP / KEY_BLOCK, d, KEY_BLOCK) = K rows [0, keys) of the tile, each block of
   KEY_BLOCK keys side by side, so that a micro-kernel finds the keys it broadcasts at one
   address per step (in place, gcc's addressing of 8 key rows spilled registers); keys past
   the tile are zero, scored but never read. Real rows go through ops' transpose. */
static void SUFFIX(pack_k)(const TILE_OPS_T *ops, const packed_from *k, int64_t keys, int64_t d, real *kp)
{
    for (int64_t j0 = 0; j0 < keys; j0 += KEY_BLOCK) {
        real *block = kp + j0 * d;
        const int64_t live = min_i64(KEY_BLOCK, keys - j0);
#ifdef KV_ELEM_TO_REAL
        (void)ops;
        for (int64_t i = 0; i < live; i++)   /* (no test per element) */
            for (int64_t p = 0; p < d; p++)
                block[p * KEY_BLOCK + i] = PACKED_VALUE(k[(j0 + i) * d + p]);
#else
        ops->transpose(k + j0 * d, d, live, d, NULL, block, KEY_BLOCK);
#endif
        for (int64_t i = live; i < KEY_BLOCK; i++)
            for (int64_t p = 0; p < d; p++)
                block[p * KEY_BLOCK + i] = 0;
    }
}

/* vp (dv_pad / COL_BLOCK, KEY_CAP, COL_BLOCK) = V rows [0, keys) of the tile in blocks of
   COL_BLOCK columns, each block contiguous; columns past d_v repeat the last one. In place,
   a block's keys lie d_v apart, every one on its own cache line, and at d_v = 64 the key
   tile's lines pile into a quarter of L1's sets and evict each other between the panels
   that reuse them; packed, they stream (measured: 3-4% faster at n = 2048-4096, 1 thread). */
static void SUFFIX(pack_v)(const packed_from *v, int64_t keys, int64_t d_v, real *vp)
{
    const int64_t full = d_v / COL_BLOCK * COL_BLOCK;
    for (int64_t j = 0; j < keys; j++) {
        for (int64_t c0 = 0; c0 < full; c0 += COL_BLOCK)
            for (int64_t c = 0; c < COL_BLOCK; c++)
                vp[c0 * KEY_CAP + j * COL_BLOCK + c] = PACKED_VALUE(v[j * d_v + c0 + c]);
        for (int64_t c = full; c < round_up(d_v, COL_BLOCK); c++)
            vp[full * KEY_CAP + j * COL_BLOCK + c - full] = PACKED_VALUE(v[j * d_v + min_i64(c, d_v - 1)]);
    }
}
#endif

#if PAIRED
/* the bfloat16 pair (x[i], x[i + 1]) of a row of n values in one word, low half first (the
   order a dot-product instruction multiplies them in), 0 for a position past n */
static uint32_t SUFFIX(pair)(const q_elem *x, int64_t i, int64_t n)
{
    return (i < n ? x[i] : 0) | (uint32_t)(i + 1 < n ? x[i + 1] : 0) << 16;
}

/* qt (rows_pad / panel, d2, panel) = Qᵀ of query rows [0, rows) in pairs along d (d2 =
   ceil(d / 2), a lone last element paired with 0), zero columns after */
static void SUFFIX(pack_qt_pairs)(const q_elem *q, int64_t rows, int64_t rows_pad, int64_t d,
                                  int64_t panel, uint32_t *qt)
{
    const int64_t d2 = ceil_div(d, 2);
    for (int64_t r0 = 0; r0 < rows_pad; r0 += panel)
        for (int64_t p = 0; p < d2; p++)
            for (int64_t lane = 0; lane < panel; lane++)
                qt[r0 * d2 + p * panel + lane] = r0 + lane < rows ? SUFFIX(pair)(q + (r0 + lane) * d, 2 * p, d) : 0;
}

/* kp (KEY_CAP / KEY_BLOCK, d2, KEY_BLOCK) = K rows [0, keys) in pairs along d, each block of
   KEY_BLOCK keys side by side (pack_k); keys past the tile are zero */
static void SUFFIX(pack_k_pairs)(const kv_elem *k, int64_t keys, int64_t d, uint32_t *kp)
{
    const int64_t d2 = ceil_div(d, 2);
    for (int64_t j0 = 0; j0 < keys; j0 += KEY_BLOCK) {
        uint32_t *block = kp + j0 * d2;
        for (int64_t i = 0; i < KEY_BLOCK; i++)
            for (int64_t p = 0; p < d2; p++)
                block[p * KEY_BLOCK + i] = j0 + i < keys ? SUFFIX(pair)(k + (j0 + i) * d, 2 * p, d) : 0;
    }
}

/* vp (dv_pad / COL_BLOCK, KEY_CAP / 2, COL_BLOCK) = V rows [0, keys) in pairs of keys, (V[j, c],
   V[j + 1, c]) in one word, each block of COL_BLOCK columns contiguous (pack_v); a lone last
   key is paired with 0, and columns past d_v are 0 (scratch, never read) */
static void SUFFIX(pack_v_pairs)(const kv_elem *v, int64_t keys, int64_t d_v, uint32_t *vp)
{
    for (int64_t j = 0; j < keys; j += 2)
        for (int64_t c = 0; c < round_up(d_v, COL_BLOCK); c++) {
            const uint32_t low = c < d_v ? v[j * d_v + c] : 0;
            const uint32_t high = c < d_v && j + 1 < keys ? v[(j + 1) * d_v + c] : 0;
            vp[c / COL_BLOCK * (KEY_CAP / 2) * COL_BLOCK + j / 2 * COL_BLOCK + c % COL_BLOCK] = low | high << 16;
        }
}
#endif

/* Which keys of the tile [j0, j0 + keys) each query i0 + r sees in one run of the walk
   (run_keys): [first[r], visible[r]) of them, or none (both 0); panel_keys[p] = the most any
   query of panel p sees (0: the panel is skipped), panel_first[p] = the most keys any of its
   queries leaves out at the tile's start (a window's left edge), panel_whole[p] = whether
   each of its queries sees all of them (else the tile crosses the causal diagonal or a
   window's edge there). */
static void SUFFIX(count_visible)(const struct shape *sh, int sinks_run, int64_t i0, int64_t j0,
                                  int64_t keys, int64_t rows_pad, int64_t panel, int32_t *first,
                                  int32_t *visible, int32_t *panel_keys, int32_t *panel_first,
                                  int32_t *panel_whole)
{
    /* Both ends of a run never decrease with the query: when the first query's run ends
       after the tile and the last one's starts before it, every query sees all of it (all
       of full attention's tiles, most of a band's), and no query's ends need working out. */
    int64_t lo, hi, first_hi;
    run_keys(sh, sinks_run, i0, &lo, &first_hi);
    run_keys(sh, sinks_run, i0 + rows_pad - 1, &lo, &hi);
    if (first_hi >= j0 + keys && lo <= j0)
        for (int64_t r = 0; r < rows_pad; r++) {
            first[r] = 0;
            visible[r] = (int32_t)keys;
        }
    else
        for (int64_t r = 0; r < rows_pad; r++) {
            run_keys(sh, sinks_run, i0 + r, &lo, &hi);
            lo = clamp_i64(lo - j0, 0, keys);
            hi = clamp_i64(hi - j0, 0, keys);
            first[r] = (int32_t)(lo < hi ? lo : 0);
            visible[r] = (int32_t)(lo < hi ? hi : 0);
        }
    for (int64_t r0 = 0; r0 < rows_pad; r0 += panel) {
        int32_t most = 0, fewest = (int32_t)keys, most_left_out = 0;
        for (int64_t r = r0; r < r0 + panel; r++) {
            most = visible[r] > most ? visible[r] : most;
            fewest = visible[r] < fewest ? visible[r] : fewest;
            most_left_out = first[r] > most_left_out ? first[r] : most_left_out;
        }
        panel_keys[r0 / panel] = most;
        panel_first[r0 / panel] = most_left_out;
        panel_whole[r0 / panel] = fewest == keys && most_left_out == 0;
    }
}

/* Sᵀ[j][r] = −inf for the keys j < first[r] and visible[r] <= j < panel_keys[panel of r]
   that query r must not see */
static void SUFFIX(mask_band)(real *st, const int32_t *first, const int32_t *visible,
                              const int32_t *panel_keys, int64_t rows_pad, int64_t panel)
{
    for (int64_t r = 0; r < rows_pad; r++) {
        real *column = st + (r / panel) * KEY_CAP * panel + r % panel;   /* column[j * panel] */
        for (int64_t j = 0; j < first[r]; j++)
            column[j * panel] = -INFINITY;
        for (int64_t j = visible[r]; j < panel_keys[r / panel]; j++)
            column[j * panel] = -INFINITY;
    }
}

/* value column c of key j of the packed V tile (pack_v, or pack_v_pairs), as real */
static real SUFFIX(packed_value)(const packed *vp, int64_t j, int64_t c)
{
#if PAIRED
    const uint32_t word = vp[c / COL_BLOCK * (KEY_CAP / 2) * COL_BLOCK + j / 2 * COL_BLOCK + c % COL_BLOCK];
    return float_from_bits((j % 2 ? word >> 16 : word & 0xFFFF) << 16);
#else
    return vp[c / COL_BLOCK * KEY_CAP * COL_BLOCK + j * COL_BLOCK + c % COL_BLOCK];
#endif
}

/* How many of the packed V tile's first keys (at most `keys`) hold finite values only. */
static int64_t SUFFIX(finite_keys)(const packed *vp, int64_t keys, int64_t d_v)
{
    for (int64_t j = 0; j < keys; j++)
        for (int64_t c = 0; c < d_v; c++)
            if (!isfinite(SUFFIX(packed_value)(vp, j, c)))
                return j;
    return keys;
}

/* pv_tile for one panel, each query summing exactly its keys [first[r], visible[r]), one
   product at a time: for a panel some of whose queries leave out keys at the tile's start
   whose values are not all finite. pv_tile sums keys [0, visible[r]) and a left-out key's
   P is 0, which is exact only while 0 · v = 0 (rare input: scalar code is fast enough). */
static void SUFFIX(pv_panel_exact)(const real *st, const packed *vp, const int32_t *first,
                                   const int32_t *visible, const real *alpha, int64_t d_v,
                                   int64_t panel, real *ot)
{
    for (int64_t r = 0; r < panel; r++)
        for (int64_t c = 0; c < d_v; c++) {
            real acc = alpha[r] * ot[c * panel + r];
            for (int64_t j = first[r]; j < visible[r]; j++)
                acc += st[j * panel + r] * SUFFIX(packed_value)(vp, j, c);
            ot[c * panel + r] = acc;
        }
}

/* slice `part` of `parts` of rows [row0, row0 + n) of a K or V head x (width values a row),
   whole lines, as a read-ahead for a tile or row operation (tile_ops.h); nothing if n <= 0 */
static struct read_ahead SUFFIX(rows_ahead)(const kv_elem *x, int64_t width, int64_t row0, int64_t n,
                                            int64_t part, int64_t parts)
{
    if (n <= 0)
        return read_ahead_of(NULL, 0);
    const int64_t bytes = n * KV_ROW_ELEMS(width) * (int64_t)sizeof(kv_elem);
    const int64_t from = bytes * part / parts / CACHE_LINE * CACHE_LINE, to = bytes * (part + 1) / parts;
    return read_ahead_of((const char *)(x + row0 * KV_ROW_ELEMS(width)) + from, to - from);
}

/* One run of attend_query_tile's keys (run_keys), the key tiles [j_begin, j_end): for each,
   the query tile's panels through qk_tile, the band's mask, online_softmax and pv_tile. */
static void SUFFIX(walk_keys)(const TILE_OPS_T *ops, const struct shape *sh, real scale,
                              const struct SUFFIX(kv) *kv, int sinks_run, int64_t i0, int64_t rows_pad,
                              int64_t j_begin, int64_t j_end, struct SUFFIX(scratch) *sc)
{
    const kv_elem *k = kv->k, *v = kv->v;
    const int64_t d = sh->d, d_v = sh->d_v, d_packed = SUFFIX(packed_width)(d);
    const int64_t panel = ops->query_panel, dv_pad = round_up(d_v, COL_BLOCK);

    for (int64_t j0 = j_begin; j0 < j_end; j0 += KEY_TILE) {
        const int64_t keys = min_i64(KEY_TILE, j_end - j0);
        SUFFIX(count_visible)(sh, sinks_run, i0, j0, keys, rows_pad, panel, sc->first, sc->visible,
                              sc->panel_keys, sc->panel_first, sc->panel_whole);

        /* A thread's next query tile of the same head over the same key tile finds them
           packed already: a head whose keys fit one tile (a tiny call, whose tiles one thread
           runs when the other cores are busy), where packing costs as much as the products. */
        if (sc->packed_head != k || sc->packed_j0 != j0 || sc->packed_keys != keys) {
#if PAIRED
            SUFFIX(pack_k_pairs)(k + j0 * d, keys, d, sc->kp);
            SUFFIX(pack_v_pairs)(v + j0 * d_v, keys, d_v, sc->vp);
#elif defined(KV_ELEM_TO_REAL)
            SUFFIX(pack_k)(ops, k + j0 * d, keys, d, sc->kp);
            SUFFIX(pack_v)(v + j0 * d_v, keys, d_v, sc->vp);
#else
            if (!sc->k_in_place)
                SUFFIX(pack_k)(ops, SUFFIX(kv_as_real)(k, kv->k_scale, j0, keys, d, sc->staging), keys, d, sc->kp);
            if (!sc->v_in_place)
                SUFFIX(pack_v)(SUFFIX(kv_as_real)(v, kv->v_scale, j0, keys, d_v, sc->staging), keys, d_v, sc->vp);
#endif
            sc->packed_head = k;
            sc->packed_j0 = j0;
            sc->packed_keys = keys;
        }
        /* a window's left edge: the leading keys whose values are finite, which a query may
           leave out and still be summed over with weight 0 (pv_tile) */
        int64_t most_left_out = 0;
        for (int64_t p = 0; p < rows_pad / panel; p++)
            most_left_out = max_i64(most_left_out, sc->panel_first[p]);
        const int64_t finite = most_left_out ? SUFFIX(finite_keys)(sc->vp, most_left_out, d_v) : 0;
        /* The next key tile's K and V rows, contiguous in the input, fetched into L2 a slice
           per panel while this tile computes, so that packing them finds them there: by
           qk_tile and pv_tile, a line or two a step. Fetched in a burst per panel before
           qk_tile, they stalled it about as long as reading them would; spread, large calls
           run 1-3% faster (attention.c's header). */
        const int64_t next_keys = min_i64(KEY_TILE, j_end - j0 - keys);
        /* One panel at a time through all three steps, so that its Sᵀ (KEY_CAP × panel) is
           still in L1 when the softmax and P V read it. A panel that sees none of the keys
           would keep its state unchanged: skipped, its slice of the next tile fetched still. */
        for (int64_t r0 = 0; r0 < rows_pad; r0 += panel) {
            const struct read_ahead k_ahead = SUFFIX(rows_ahead)(k, d, j0 + keys, next_keys, r0 / panel,
                                                                 rows_pad / panel);
            const struct read_ahead v_ahead = SUFFIX(rows_ahead)(v, d_v, j0 + keys, next_keys, r0 / panel,
                                                                 rows_pad / panel);
            const int32_t *panel_keys = sc->panel_keys + r0 / panel;
            const int whole = sc->panel_whole[r0 / panel];
            if (*panel_keys == 0) {
                read_ahead_now(k_ahead);
                read_ahead_now(v_ahead);
                continue;
            }
#if PAIRED
            ops->qk_tile(sc->kp, panel_keys, sc->qt + r0 * d_packed, panel, d_packed, scale, sc->st, KEY_CAP, k_ahead);
            const real *tile_range = NULL;   /* (the paired qk_tile finds no maxima) */
#else
#if KV_READ_IN_PLACE
            if (sc->k_in_place)
                ops->qk_tile(k + j0 * d, d, 1, panel_keys, sc->qt + r0 * d_packed, panel, d_packed, sc->st,
                             KEY_CAP, sc->tile_range, k_ahead);
            else
#endif
                ops->qk_tile(sc->kp, 1, KEY_BLOCK, panel_keys, sc->qt + r0 * d_packed, panel, d_packed, sc->st,
                             KEY_CAP, sc->tile_range, k_ahead);
            /* qk_tile's maxima count every score it computed: the softmax's own, unless some
               are masked after or the keys were rounded up to its micro-kernel's */
            const real *tile_range = whole && *panel_keys % KEY_BLOCK == 0 ? sc->tile_range : NULL;
            (void)scale;   /* (in Qᵀ: pack_qt) */
#endif
            if (!whole)
                SUFFIX(mask_band)(sc->st, sc->first + r0, sc->visible + r0, panel_keys, panel, panel);
            ops->online_softmax(sc->st, KEY_CAP, panel_keys, panel, sc->m + r0, sc->l + r0, sc->alpha + r0,
                                tile_range);
            if (sc->panel_first[r0 / panel] > finite) {
                SUFFIX(pv_panel_exact)(sc->st, sc->vp, sc->first + r0, sc->visible + r0, sc->alpha + r0, d_v,
                                       panel, sc->ot + r0 * dv_pad);
                read_ahead_now(v_ahead);
                continue;
            }
#if PAIRED
            ops->pack_p(sc->st, *panel_keys, sc->pt);   /* Pᵀ in bfloat16 pairs of keys */
            ops->pv_tile(sc->pt, KEY_CAP, sc->visible + r0, sc->alpha + r0, sc->vp, d_v, panel,
                         sc->ot + r0 * dv_pad, v_ahead);
#elif KV_READ_IN_PLACE
            if (sc->v_in_place)
                ops->pv_tile(sc->st, KEY_CAP, sc->visible + r0, sc->alpha + r0, v + j0 * d_v, d_v, COL_BLOCK,
                             d_v, panel, sc->ot + r0 * dv_pad, v_ahead);
            else
                ops->pv_tile(sc->st, KEY_CAP, sc->visible + r0, sc->alpha + r0, sc->vp, COL_BLOCK,
                             KEY_CAP * COL_BLOCK, d_v, panel, sc->ot + r0 * dv_pad, v_ahead);
#else
            ops->pv_tile(sc->st, KEY_CAP, sc->visible + r0, sc->alpha + r0, sc->vp, COL_BLOCK, KEY_CAP * COL_BLOCK,
                         d_v, panel, sc->ot + r0 * dv_pad, v_ahead);
#endif
        }
    }
}

/* rows [i0, i0 + rows) of one query head (q: the head's queries), from all the keys they see
   of its K/V head kv, into out rows out_row0 + i0 onwards: the sinks' run of keys where the
   tile's last query's window starts after the sinks, then the windows' (run_keys). No key
   tile outside them is visited: O(rows · (window + rows + sinks)) for a window. */
static void SUFFIX(attend_query_tile)(const TILE_OPS_T *ops, const struct shape *sh,
                                      real scale, const q_elem *q, const struct SUFFIX(kv) *kv,
                                      void *out, int64_t out_row0, int64_t i0, int64_t rows,
                                      struct SUFFIX(scratch) *sc)
{
    const int64_t d = sh->d, d_v = sh->d_v;
    const int64_t rows_pad = round_up(rows, ops->query_panel);
    const int64_t panel = ops->query_panel, dv_pad = round_up(d_v, COL_BLOCK);

#if PAIRED
    SUFFIX(pack_qt_pairs)(q + i0 * d, rows, rows_pad, d, panel, sc->qt);
#else
    SUFFIX(pack_qt)(ops, SUFFIX(q_as_real)(q + i0 * d, rows * d, sc->staging), rows, rows_pad, d, panel, scale,
                    sc->scales, sc->qt);
#endif
    for (int64_t r = 0; r < rows_pad; r++) {
        sc->m[r] = -INFINITY;
        sc->l[r] = 0;
    }
    memset(sc->ot, 0, rows_pad * dv_pad * sizeof(real));

    int64_t lo, hi;
    run_keys(sh, 1, i0 + rows - 1, &lo, &hi);
    if (hi > 0)
        SUFFIX(walk_keys)(ops, sh, scale, kv, 1, i0, rows_pad, 0, hi, sc);
    run_keys(sh, 0, i0, &lo, &hi);
    SUFFIX(walk_keys)(ops, sh, scale, kv, 0, i0, rows_pad, lo, visible_keys(sh, i0 + rows - 1), sc);

    /* out = O · (1 / l), a panel at a time: Oᵀ turned into rows by the ISA's transpose, each
       times its 1 / l (a division per value, and each row's values gathered one by one from
       d_v columns of Oᵀ, took ~15% of a one-head n = 64 call). 1 / l is within half an ulp,
       and l >= 1 (a row's largest weight is 2^0), so each value is within an ulp of
       O / l; 0 · (1 / 0) is NaN as 0 / 0 is. Rows rounded to a 16-bit type go through
       sc->rows. */
    for (int64_t r0 = 0; r0 < rows; r0 += panel) {
        real *inverse = sc->alpha + r0;   /* (alpha is free once the keys are done) */
        for (int64_t r = 0; r < panel; r++)
            inverse[r] = 1 / sc->l[r0 + r];
        const int64_t n = min_i64(panel, rows - r0), row = out_row0 + i0 + r0;
        if (!sh->round_out) {
            ops->transpose(sc->ot + r0 * dv_pad, panel, d_v, n, inverse, (real *)out + row * d_v, d_v);
            continue;
        }
        ops->transpose(sc->ot + r0 * dv_pad, panel, d_v, n, inverse, sc->rows, d_v);
        for (int64_t r = 0; r < n; r++)
            SUFFIX(store_row)(sh, out, row + r, sc->rows + r * d_v);
    }
}

/* The split-KV partial state of one (head, chunk, query row): [m, l, acc (d_v)]. */
#define PARTIAL_M 0
#define PARTIAL_L 1
#define PARTIAL_ACC 2

/* A decode step's integer keys (INT8_KEYS): its query rows quantised once, int8 a row at a
   time (row r's codes at q_codes + r · round_up(d, INT8_DOT_PAD), quantise_query_rows),
   int4 (KV_UNPACK) a group of INT4_GROUP values at a time (quantise_query_groups: group g of
   row r at q_codes + (g · rows + r) · INT4_GROUP), their scales (and int4's code sums) at
   [g ·] rows + r; and, int4, a block's key scales group by group (k_scales + g ·
   DECODE_KEY_BLOCK: its keys are read in place) and its values unpacked, group g's codes at
   v_codes + g · DECODE_KEY_BLOCK · INT4_GROUP and scales at v_scales + g · DECODE_KEY_BLOCK. */
struct SUFFIX(int_keys) {
    int16_t *q_codes;
    float *q_scale;
    int32_t *q_sum;
    int64_t rows;
    int8_t *v_codes;
    float *k_scales, *v_scales;
};

/* the bytes of a step's struct int_keys buffers */
static int64_t SUFFIX(int_keys_bytes)(const struct shape *sh)
{
    const int64_t rows = sh->group * sh->n_q;
#if KV_UNPACKED
    const int64_t groups = int4_row_scales(sh->d), v_groups = int4_row_scales(sh->d_v);
    return groups * rows * (INT4_GROUP * (int64_t)sizeof(int16_t) + (int64_t)sizeof(float) + (int64_t)sizeof(int32_t))
           + DECODE_KEY_BLOCK * (groups * (int64_t)sizeof(float) + v_groups * (INT4_GROUP + (int64_t)sizeof(float)));
#else
    return INT8_KEYS * rows * (round_up(sh->d, INT8_DOT_PAD) * (int64_t)sizeof(int16_t) + (int64_t)sizeof(float));
#endif
}

#if INT8_KEYS
/* the struct int_keys of a step's rows, carved from at (int_keys_bytes), the queries (q
   (rows, d) as real) quantised */
static struct SUFFIX(int_keys) SUFFIX(int_keys_of)(const struct shape *sh, const real *q, real scale, void *at)
{
    const int64_t d = sh->d, rows = sh->group * sh->n_q;
    struct SUFFIX(int_keys) ik = {.q_codes = at, .rows = rows};
#if KV_UNPACKED
    const int64_t groups = int4_row_scales(d);
    ik.q_scale = (float *)(ik.q_codes + groups * rows * INT4_GROUP);
    ik.q_sum = (int32_t *)(ik.q_scale + groups * rows);
    ik.k_scales = (float *)(ik.q_sum + groups * rows);
    ik.v_scales = ik.k_scales + DECODE_KEY_BLOCK * groups;
    ik.v_codes = (int8_t *)(ik.v_scales + DECODE_KEY_BLOCK * int4_row_scales(sh->d_v));
    quantise_query_groups(q, rows, d, scale, ik.q_codes, ik.q_scale, ik.q_sum);
#else
    ik.q_scale = (float *)(ik.q_codes + rows * round_up(d, INT8_DOT_PAD));
    quantise_query_rows(q, rows, d, d, scale, ik.q_codes, ik.q_scale);
#endif
    return ik;
}

#if KV_UNPACKED
/* the scales of K rows [row0, row0 + rows) (scale: the head's, int4_row_scales(d) a row)
   group by group, group g's at scales + g · DECODE_KEY_BLOCK, as qk_rows_q4 reads them */
static void SUFFIX(group_scales)(const float *scale, int64_t row0, int64_t rows, int64_t d, float *scales)
{
    const int64_t groups = int4_row_scales(d);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t g = 0; g < groups; g++)
            scales[g * DECODE_KEY_BLOCK + i] = scale[(row0 + i) * groups + g];
}
#endif

/* S (n, DECODE_KEY_BLOCK) = scale · Q Kᵀ for rows [r, r + n) of the step and the keys
   [jb, jb + keys) of K/V head kv as integer dot products on the keys in place: int8 a row
   at a time, int4 a group at a time (its block's key scales in ik) */
static void SUFFIX(int_scores)(const struct SUFFIX(int_keys) *ik, const struct SUFFIX(kv) *kv, int64_t d,
                               int64_t r, int64_t jb, int64_t keys, int64_t n, real *s, struct read_ahead ahead)
{
#if KV_UNPACKED
    active_int8->qk_rows_q4(kv->k + jb * int4_row_bytes(d), ik->k_scales, DECODE_KEY_BLOCK, keys, d,
                            ik->q_codes + r * INT4_GROUP, ik->q_scale + r, ik->q_sum + r, ik->rows, n, s,
                            DECODE_KEY_BLOCK, ahead);
#else
    active_int8->qk_rows((const int8_t *)kv->k + jb * d, kv->k_scale + jb, keys, d,
                         ik->q_codes + r * round_up(d, INT8_DOT_PAD), ik->q_scale + r, n, s, DECODE_KEY_BLOCK, ahead);
#endif
}
#endif

/* attend_key_chunk's step for n <= ROW_GROUP query rows q (n, d) that see the same keys
   [jb, jb + keys) of K/V head kv, their states state (n, stride): through the row
   operations, over k_rows and v_rows (the block's rows as real: in place, or staged), or,
   when they are NULL, over kv's rows in place through `direct` (KV_ROW_OPS), which converts
   as it loads. Each also fetches slice `part` of `parts` of the next block (next_keys rows)
   into L2 as it goes; s (ROW_GROUP, DECODE_KEY_BLOCK) holds the scores, alpha (ROW_GROUP)
   the rescalings. */
static void SUFFIX(attend_rows)(const TILE_OPS_T *ops, const struct shape *sh, real scale, const real *q,
                                const struct SUFFIX(int_keys) *ik, int64_t r,
                                const struct SUFFIX(kv) *kv, const real *k_rows, const real *v_rows,
                                int64_t jb, int64_t keys, int64_t n, int64_t next_keys,
                                int64_t part, int64_t parts, real *state, real *s, real *alpha)
{
    const int64_t d = sh->d, d_v = sh->d_v, stride = d_v + PARTIAL_ACC;
    /* The next block's K and V rows, a slice per call, fetched into L2 by the row
       operations as they compute (tile_ops.h, struct read_ahead): measured, 2 threads,
       n_k = 65536, d = 64, float32, 8 query heads on 2 K/V heads 8.4 -> 5.2 ms, on 8
       25 -> 20 ms. (The scales, 4 bytes a row, are left to the hardware prefetchers.) */
    const struct read_ahead k_ahead = SUFFIX(rows_ahead)(kv->k, d, jb + keys, next_keys, part, parts);
    const struct read_ahead v_ahead = SUFFIX(rows_ahead)(kv->v, d_v, jb + keys, next_keys, part, parts);
    /* S = scale · Q Kᵀ */
#if INT8_KEYS
    (void)q;
    SUFFIX(int_scores)(ik, kv, d, r, jb, keys, n, s, k_ahead);
#else
    (void)ik;
    (void)r;
#endif
#ifdef KV_ROW_OPS
    const struct row_ops_f32 *direct = &ops->KV_ROW_OPS;
    if (!k_rows && !INT8_KEYS)
        direct->qk_rows(kv->k + jb * d, kv->k_scale ? kv->k_scale + jb : NULL, keys, d, q, n, scale, s,
                        DECODE_KEY_BLOCK, k_ahead);
#endif
#if !PAIRED   /* (bfloat16 pairs are only ever read in place) */
    if (k_rows && !INT8_KEYS)
        ops->qk_rows(k_rows, keys, d, q, n, scale, s, DECODE_KEY_BLOCK, k_ahead);
#endif
    for (int64_t r = 0; r < n; r++)
        alpha[r] = ops->online_softmax_row(s + r * DECODE_KEY_BLOCK, keys, state + r * stride + PARTIAL_M,
                                           state + r * stride + PARTIAL_L);
    /* acc = alpha acc + P V */
#if KV_UNPACKED   /* the block's values unpacked by group: each group's columns apart */
    for (int64_t g = 0; !v_rows && g * INT4_GROUP < d_v; g++)
        direct->pv_rows(s, DECODE_KEY_BLOCK, ik->v_codes + g * DECODE_KEY_BLOCK * INT4_GROUP,
                        ik->v_scales + g * DECODE_KEY_BLOCK, keys, min_i64(INT4_GROUP, d_v - g * INT4_GROUP), alpha,
                        state + PARTIAL_ACC + g * INT4_GROUP, stride, n, g ? read_ahead_of(NULL, 0) : v_ahead);
#elif defined(KV_ROW_OPS)
    if (!v_rows)
        direct->pv_rows(s, DECODE_KEY_BLOCK, kv->v + jb * d_v, kv->v_scale ? kv->v_scale + jb : NULL, keys,
                        d_v, alpha, state + PARTIAL_ACC, stride, n, v_ahead);
#endif
#if !PAIRED
    if (v_rows)
        ops->pv_rows(s, DECODE_KEY_BLOCK, v_rows, keys, d_v, alpha, state + PARTIAL_ACC, stride, n, v_ahead);
#endif
}

/* partial (group · n_q, d_v + 2): the state of each query row of one K/V head's group (row
   r: query index r % n_q of query head r / n_q of the group) over the keys [j0, j1) of one
   chunk that the row sees, in blocks of DECODE_KEY_BLOCK keys, ROW_GROUP rows at a time
   (each K and V row is read from memory once, and each of its vectors loaded once per
   ROW_GROUP rows). Rows that see none of the chunk are left unwritten: merge_chunks does not
   read them. staging holds SUFFIX(decode_staging) values: the group's queries and a block's
   K and V rows, converted to real when they are not (16-bit, int8) and not read in place. */
static void SUFFIX(attend_key_chunk)(const TILE_OPS_T *ops, const struct shape *sh,
                                     real scale, const q_elem *q, const struct SUFFIX(kv) *kv,
                                     int64_t j0, int64_t j1, real *partial, real *staging)
{
    const int64_t d = sh->d, d_v = sh->d_v, stride = d_v + PARTIAL_ACC;
    const int64_t rows = sh->group * sh->n_q, parts = ceil_div(rows, ROW_GROUP);
    _Static_assert(DECODE_KEY_BLOCK % ROW_KEY_PAD == 0, "online_softmax_row pads s to ROW_KEY_PAD");
    real s[ROW_GROUP * DECODE_KEY_BLOCK], alpha[ROW_GROUP];
    for (int64_t r = 0; r < rows; r++) {
        real *state = partial + r * stride;
        state[PARTIAL_M] = -INFINITY;
        state[PARTIAL_L] = 0;
        memset(state + PARTIAL_ACC, 0, d_v * sizeof(real));
    }
    const real *q_rows = SUFFIX(q_as_real)(q, rows * d, staging);
    real *k_staging = staging + Q_STAGED * rows * d;
    real *v_staging = k_staging + KV_STAGED * DECODE_KEY_BLOCK * d;
    /* int8 keys: the rows' queries quantised once, for every block (tile_ops.h) */
    struct SUFFIX(int_keys) ik = {0};
#if INT8_KEYS
    ik = SUFFIX(int_keys_of)(sh, q_rows, scale, v_staging + KV_STAGED * DECODE_KEY_BLOCK * d_v);
#endif
    /* With KV_ROW_OPS and up to KV_ROW_OPS_MAX_ROWS query rows, K and V are read in place by
       row operations that convert each element as they load it (struct row_ops_f32), which
       spares storing the converted block and loading it back (measured, 2 threads, 8 heads
       of one query row, n_k = 65536, d = 64: int8 8.4 -> 4.7 ms, float16 11.4 -> 8.4 ms);
       beyond, the rows share one conversion into staging (attention.c says which, per
       type). Not on the generic ISA, which has no such operations. bfloat16 pairs are
       always read in place. */
    int direct = PAIRED;
#ifdef KV_ROW_OPS
    direct |= rows <= KV_ROW_OPS_MAX_ROWS && ops->KV_ROW_OPS.pv_rows;
#endif
    /* the keys the last query index sees, the most any row sees */
    const int64_t seen = min_i64(j1, visible_keys(sh, sh->n_q - 1));
    for (int64_t jb = j0; jb < seen; jb += DECODE_KEY_BLOCK) {
        const int64_t block_end = min_i64(seen, jb + DECODE_KEY_BLOCK);
        const int64_t next_keys = min_i64(DECODE_KEY_BLOCK, seen - block_end);
        /* real K and V in place, others staged; NULL: read in place by the direct operations */
#if PAIRED
        const real *k_rows = NULL, *v_rows = NULL;
        (void)k_staging;
        (void)v_staging;
#else
        const real *k_rows = direct || INT8_KEYS ? NULL
                           : SUFFIX(kv_as_real)(kv->k, kv->k_scale, jb, block_end - jb, d, k_staging);
        const real *v_rows = direct ? NULL : SUFFIX(kv_as_real)(kv->v, kv->v_scale, jb, block_end - jb, d_v, v_staging);
#endif
#if KV_UNPACKED   /* the block's key scales by group, and its values when read directly unpacked */
        SUFFIX(group_scales)(kv->k_scale, jb, block_end - jb, d, ik.k_scales);
        if (direct)
            KV_UNPACK(kv->v, kv->v_scale, jb, block_end - jb, d_v, ik.v_codes, ik.v_scales);
#endif
        for (int64_t r = 0, n; r < rows; r += n) {
            /* the block's keys row r sees: a masked key is never read, not even with weight
               0; the rows after it that see as many join its call */
            const int64_t keys = min_i64(block_end, visible_keys(sh, r % sh->n_q)) - jb;
            for (n = 1; n < ROW_GROUP && r + n < rows; n++)
                if (min_i64(block_end, visible_keys(sh, (r + n) % sh->n_q)) - jb != keys)
                    break;
            if (keys > 0)
                SUFFIX(attend_rows)(ops, sh, scale, q_rows + r * d,
                                    &ik, r, kv, k_rows, v_rows, jb, keys, n,
                                    next_keys, min_i64(r / ROW_GROUP, parts - 1), parts, partial + r * stride,
                                    s, alpha);
        }
    }
}

/* The values attend_key_chunk's staging holds: 0 when Q, K and V are all real (int8 keys:
   the queries' codes and scales besides, in real's units). */
static int64_t SUFFIX(decode_staging)(const struct shape *sh)
{
    const int64_t rows = sh->group * sh->n_q;
    return Q_STAGED * rows * sh->d + KV_STAGED * DECODE_KEY_BLOCK * (sh->d + sh->d_v)
           + ceil_div(SUFFIX(int_keys_bytes)(sh), sizeof(real));
}

/* row (d_v) of a row of query index i from the partial states of the chunks it sees
   keys of, the first at partial, the next chunk_stride further: m = max m_c,
   w_c = 2^(m_c − m), out = Σ w_c acc_c / Σ w_c l_c; zeros for a row that sees no key. A
   chunk whose scores were all −inf has w_c = 0 (its l_c and acc_c are 0, or NaN, which
   0 · NaN keeps); an all −inf row ends as 0/0 = NaN, and a NaN or +inf score as NaN, all as
   in the reference. */
static void SUFFIX(merge_chunks)(const struct shape *sh, int64_t i, int64_t key_chunk,
                                 const real *partial, int64_t chunk_stride, real *row)
{
    const int64_t chunks = ceil_div(visible_keys(sh, i), key_chunk);
    memset(row, 0, sh->d_v * sizeof(real));
    if (chunks == 0)
        return;
    real m = -INFINITY;
    for (int64_t c = 0; c < chunks; c++)
        if (partial[c * chunk_stride + PARTIAL_M] > m)
            m = partial[c * chunk_stride + PARTIAL_M];
    const real m_ref = m == -INFINITY ? 0 : m;
    real l = 0;
    for (int64_t c = 0; c < chunks; c++) {
        const real *state = partial + c * chunk_stride;
        const real w = EXP2(state[PARTIAL_M] - m_ref);
        l += w * state[PARTIAL_L];
        for (int64_t col = 0; col < sh->d_v; col++)
            row[col] += w * state[PARTIAL_ACC + col];
    }
    for (int64_t col = 0; col < sh->d_v; col++)
        row[col] /= l;
}

/* One split-KV call: its (K/V head, key chunk) tasks, then its (query row) merges. */
struct SUFFIX(split_kv_loop) {
    const TILE_OPS_T *ops;
    const struct shape *sh;
    real scale;
    const q_elem *q;
    struct SUFFIX(kv) kv;
    void *out;
    real *partial, *staging;   /* staging: decode_staging values per worker */
    real *rows;                /* a row of d_v values per worker, for the merges */
    int64_t key_chunk, chunks, chunk_stride, row_stride;
};

static void SUFFIX(key_chunk_task)(void *context, int64_t w, int32_t worker)
{
    const struct SUFFIX(split_kv_loop) *loop = context;
    const struct shape *sh = loop->sh;
    const int64_t g = w / loop->chunks, j0 = w % loop->chunks * loop->key_chunk;
    const struct SUFFIX(kv) kv = SUFFIX(kv_head)(&loop->kv, sh, g);
    SUFFIX(attend_key_chunk)(loop->ops, sh, loop->scale, loop->q + g * sh->group * sh->n_q * sh->d,
                             &kv, j0, min_i64(sh->n_k, j0 + loop->key_chunk),
                             loop->partial + w * loop->chunk_stride,
                             loop->staging + worker * SUFFIX(decode_staging)(sh));
}

/* query row w of the call (its rows are the group's rows of each K/V head in turn) */
static void SUFFIX(merge_task)(void *context, int64_t w, int32_t worker)
{
    const struct SUFFIX(split_kv_loop) *loop = context;
    const struct shape *sh = loop->sh;
    const int64_t rows = sh->group * sh->n_q, g = w / rows, r = w % rows;
    real *row = loop->rows + worker * sh->d_v;
    SUFFIX(merge_chunks)(sh, r % sh->n_q, loop->key_chunk,
                         loop->partial + g * loop->chunks * loop->chunk_stride + r * loop->row_stride,
                         loop->chunk_stride, row);
    SUFFIX(store_row)(sh, loop->out, w, row);
}

/* The split-KV path for all heads: (K/V head, key chunk) tasks, then (query row) merges.
   Chunks: about four tasks per thread over the K/V heads (as for the query tiles below),
   none shorter than DECODE_MIN_CHUNK keys, in shares: each thread reads the same run of
   the cache at every step (pool.c). Returns nonzero if the partials could not be
   allocated. */
static int SUFFIX(attend_split_kv)(const TILE_OPS_T *ops, const struct shape *sh, real scale,
                                   const q_elem *q, const struct SUFFIX(kv) *kv, void *out,
                                   int64_t batch, int32_t threads)
{
    const int64_t kv_heads = batch / sh->group;
    const int64_t chunks_per_head = ceil_div(4 * threads, kv_heads);
    const int64_t even_chunk = ceil_div(sh->n_k, chunks_per_head);
    const int64_t key_chunk = round_up(even_chunk > DECODE_MIN_CHUNK ? even_chunk : DECODE_MIN_CHUNK,
                                       DECODE_KEY_BLOCK);
    const int64_t chunks = ceil_div(sh->n_k, key_chunk);
    const int64_t row_stride = sh->d_v + PARTIAL_ACC, chunk_stride = sh->group * sh->n_q * row_stride;
    /* the partial states, then each worker's staging and merged row */
    const int64_t per_worker = SUFFIX(decode_staging)(sh) + sh->d_v;
    real *partial = malloc((size_t)(kv_heads * chunks * chunk_stride + threads * per_worker) * sizeof(real));
    if (!partial)
        return 1;
    real *staging = partial + kv_heads * chunks * chunk_stride;
    struct SUFFIX(split_kv_loop) loop = {
        .ops = ops, .sh = sh, .scale = scale, .q = q, .kv = *kv, .out = out,
        .partial = partial, .staging = staging, .rows = staging + threads * SUFFIX(decode_staging)(sh),
        .key_chunk = key_chunk, .chunks = chunks,
        .chunk_stride = chunk_stride, .row_stride = row_stride,
    };
    pool_run(kv_heads * chunks, threads, POOL_IN_SHARES, SUFFIX(key_chunk_task), &loop);
    pool_run(batch * sh->n_q, pool_threads_for(threads, 4.0 * batch * sh->n_q * chunks * sh->d_v), POOL_IN_ORDER,
             SUFFIX(merge_task), &loop);
    free(partial);
    return 0;
}

/* One call of the query-tile path: its (query head, query tile) tasks, heaviest first. */
struct SUFFIX(tile_loop) {
    const TILE_OPS_T *ops;
    const struct shape *sh;
    real scale;
    const q_elem *q;
    struct SUFFIX(kv) kv;
    void *out;
    int64_t batch, tiles, query_tile;
    int k_in_place, v_in_place;   /* qk_tile, pv_tile read K's, V's rows where they lie (SUFFIX(forward)) */
    uint64_t call;   /* this call's number (SUFFIX(calls)), for the workers' scratch */
    atomic_int failed;
};

/* Each thread's query-tile scratch, carved anew (scratch_alloc) on its first task of each
   call (the calls are numbered from 1), in the block the thread keeps (thread_scratch).
   Kept in the thread rather than allocated by the caller for each call: a helper's first
   task then reads no line the caller has just written but the loop's own. Measured, one
   head, n = 64, float32, 2 threads, the C entry point, in-process A/B against an array
   calloc'ed for each call (2-core Xeon VM, both orders): full 1.12-1.14x, causal 1.06-1.12x;
   1 thread, and 8 heads of n = 256, unchanged (1.00). */
static _Thread_local struct SUFFIX(scratch) SUFFIX(worker_scratch);
static _Atomic uint64_t SUFFIX(calls);

static void SUFFIX(query_tile_task)(void *context, int64_t w, int32_t worker)
{
    (void)worker;
    struct SUFFIX(tile_loop) *loop = context;
    const struct shape *sh = loop->sh;
    struct SUFFIX(scratch) *sc = &SUFFIX(worker_scratch);
    if (sc->call != loop->call) {
        SUFFIX(scratch_alloc)(sc, sh, loop->ops, loop->query_tile);
        sc->call = loop->call;
    }
    sc->k_in_place = loop->k_in_place;
    sc->v_in_place = loop->v_in_place;
    if (!sc->block) {
        atomic_store(&loop->failed, 1);
        return;
    }
    /* Heaviest work first: under the causal mask a head's last query tiles see the most keys. */
    const int64_t tile = loop->tiles - 1 - w / loop->batch, h = w % loop->batch;
    const int64_t i0 = sh->first_row + tile * loop->query_tile;
    const struct SUFFIX(kv) kv = SUFFIX(kv_head)(&loop->kv, sh, h / sh->group);
    SUFFIX(attend_query_tile)(loop->ops, sh, loop->scale, loop->q + h * sh->n_q * sh->d, &kv,
                              loop->out, h * sh->n_q, i0, min_i64(loop->query_tile, sh->n_q - i0), sc);
}

/* Query rows per tile with ops' panels. Full QUERY_TILE rows reuse each K and V row best,
   but a single head at moderate n then gives too few tiles to share among the threads:
   shrink the tile (in whole panels) until all heads together give about four tiles per
   thread (measured: one head, n = 1024, float32, 2 threads: 82 -> 90 GFLOP/s). */
static int64_t SUFFIX(query_tile_for)(const TILE_OPS_T *ops, int64_t rows, int64_t batch, int32_t threads)
{
    const int64_t panel = ops->query_panel, tiles_per_head = ceil_div(4 * threads, batch);
    return clamp_i64(round_up(ceil_div(rows, tiles_per_head), panel), panel, QUERY_TILE / panel * panel);
}

/* The query rows the busiest thread computes with ops' panels, padding included (its share
   of the tiles, each counted whole) */
static int64_t SUFFIX(busiest_rows)(const TILE_OPS_T *ops, int64_t rows, int64_t batch, int32_t threads)
{
    const int64_t tile = SUFFIX(query_tile_for)(ops, rows, batch, threads);
    return ceil_div(batch * ceil_div(rows, tile), threads) * tile;
}

/* ops, or its narrow panel's operations where they spare the busiest thread a quarter of
   its rows or more: a call of few rows a head, which the wide panels would pad (one head of
   64 rows on 2 threads: a 48-row AVX-512 panel each, 96 rows, or 32 each). Measured, one
   head, d = 64, float32, 2 threads, the C entry point: n = 64 10.8 -> 8.8 µs, n = 128 28.4
   -> 22.9 µs; where the rows are many, the narrow panels run as fast (2 heads, n = 1024, 1
   thread: 0.99) but spare nothing, and n = 256 (144 rows against 128) is 4% slower. */
static const TILE_OPS_T *SUFFIX(tile_ops_for)(const TILE_OPS_T *ops, int64_t rows, int64_t batch, int32_t threads)
{
    return ops->narrow && 4 * SUFFIX(busiest_rows)(ops->narrow, rows, batch, threads)
                              <= 3 * SUFFIX(busiest_rows)(ops, rows, batch, threads)
           ? ops->narrow : ops;
}

/* The entry point's work (attention.h): q (batch, n_q, d), query head h reading K/V head
   h / group of kv; out (batch, n_q, d_v) of real, or, with round_out, of the inputs'
   16-bit type. */
static int SUFFIX(forward)(const q_elem *q, const struct SUFFIX(kv) *kv, void *out, int round_out,
                           int64_t batch, int64_t group, int64_t n_q, int64_t n_k, int64_t kv_rows,
                           int64_t d, int64_t d_v, int64_t left, int64_t right, int64_t sinks, real scale_e,
                           int n_threads)
{
    if (batch < 0 || n_q < 0 || n_k < 0 || d < 1 || d_v < 0 || group < 1 || batch % group != 0 || kv_rows < n_k)
        return -1;
    if (batch == 0 || n_q == 0)
        return 0;   /* no row to write (the tiles' and chunks' counts divide by batch) */
    const real scale = (real)(scale_e * LOG2E);   /* scores in base-2 units (see the top) */
    const TILE_OPS_T *ops = ACTIVE_OPS;
    const struct shape sh = make_shape(n_q, n_k, d, d_v, left, right, sinks, group, kv_rows, round_out);
    /* 2 · batch · n_q · (keys a query sees) · (d + d_v) flops, causal or not: n_k, or a
       window's width at most */
    const int64_t seen = sh.windowed && right >= 0 ? min_i64(n_k, left + right + 1 + sh.sinks) : n_k;
    const int32_t threads = pool_threads_for(n_threads, 2.0 * batch * n_q * seen * (double)(d + d_v));

    /* a window's few queries take the query tiles, which skip the keys outside it (the
       split-KV path reads a contiguous run of keys per query from key 0) */
    if (n_q <= DECODE_MAX_QUERIES && !sh.windowed)
        return SUFFIX(attend_split_kv)(ops, &sh, scale, q, kv, out, batch, threads);

    /* A right edge with n_q > n_k + right (causal: n_q > n_k): the first rows see no key. */
    const size_t out_size = SUFFIX(out_size)(&sh);   /* (a 16-bit zero is all zero bits too) */
    for (int64_t h = 0; h < batch; h++)
        memset((char *)out + h * n_q * d_v * out_size, 0, sh.first_row * d_v * out_size);

    const int64_t rows = n_q - sh.first_row;
    const TILE_OPS_T *tile_ops = SUFFIX(tile_ops_for)(ops, rows, batch, threads);
    const int64_t query_tile = SUFFIX(query_tile_for)(tile_ops, rows, batch, threads);
    struct SUFFIX(tile_loop) loop = {
        .ops = tile_ops, .sh = &sh, .scale = scale, .q = q, .kv = *kv, .out = out,
        .batch = batch, .tiles = ceil_div(rows, query_tile), .query_tile = query_tile,
        /* A tile of few query rows would pack each K and V row for as few products; read in
           place, their rows lie d and d_v apart. Not across a window's left edge: its key
           tiles start anywhere, and the micro-kernels read whole blocks of KEY_BLOCK keys
           from a tile's start (past its last key, which must exist: n_k a multiple of it);
           and its left-out keys' values are checked for finite ones in the packed V tile
           (finite_keys). */
        .k_in_place = KV_READ_IN_PLACE && !sh.windowed && n_k % KEY_BLOCK == 0 && query_tile <= KV_IN_PLACE_ROWS,
        .v_in_place = KV_READ_IN_PLACE && !sh.windowed && d_v % COL_BLOCK == 0 && query_tile <= KV_IN_PLACE_ROWS,
        .call = atomic_fetch_add(&SUFFIX(calls), 1) + 1,
    };
    pool_run(batch * loop.tiles, threads, POOL_IN_ORDER, SUFFIX(query_tile_task), &loop);
    return atomic_load(&loop.failed);
}

#ifdef TILE_PEAK
/* The tile operations' ceiling (attn_tile_peak): what a large call's time is made of, bar
   packing, transposing and the walk over heads and tiles. Each thread's task walks one key
   tile of KEY_TILE keys over one query tile of the rows a large call's tiles have, both
   packed once, `rounds` times, as walk_keys walks each key tile of a call: qk_tile,
   online_softmax and pv_tile, panel by panel, on the path c_tiled runs (ACTIVE_OPS, its
   wide panels). The inputs are fixed values in [-1, 1]; m, l and Oᵀ carry over from round
   to round as from tile to tile (l and Oᵀ grow by at most KEY_TILE a round: far from
   overflow). -> its flops, 4 · rows · KEY_TILE · d a round and thread; -1 if a thread's
   scratch could not be allocated. */
struct SUFFIX(tile_peak) {
    int64_t d, rows, rounds;
    atomic_int failed;
};

static void SUFFIX(tile_peak_task)(void *context, int64_t task, int32_t worker)
{
    (void)task;
    (void)worker;
    struct SUFFIX(tile_peak) *run = context;
    const TILE_OPS_T *ops = ACTIVE_OPS;
    const int64_t d = run->d, rows = run->rows, keys = KEY_TILE, values = (rows + 2 * keys) * d;
    const struct shape sh = make_shape(rows, keys, d, d, -1, -1, 0, 1, keys, 0);
    struct SUFFIX(scratch) sc;
    SUFFIX(scratch_alloc)(&sc, &sh, ops, rows);   /* (k_in_place, v_in_place 0: packed, as a large call's) */
    real *x = malloc((size_t)values * sizeof(real));
    if (!sc.block || !x) {
        free(x);
        atomic_store(&run->failed, 1);
        return;
    }
    for (int64_t i = 0; i < values; i++)
        x[i] = (real)((i * 37 % 101) / 50.0 - 1.0);
    const struct SUFFIX(kv) kv = {.k = x + rows * d, .v = x + (rows + keys) * d};
    const real scale = (real)(LOG2E / sqrt((double)d));
    SUFFIX(pack_qt)(ops, x, rows, rows, d, ops->query_panel, scale, sc.scales, sc.qt);
    for (int64_t r = 0; r < rows; r++) {
        sc.m[r] = -INFINITY;
        sc.l[r] = 0;
    }
    memset(sc.ot, 0, rows * round_up(d, COL_BLOCK) * sizeof(real));
    for (int64_t round = 0; round < run->rounds; round++)
        SUFFIX(walk_keys)(ops, &sh, scale, &kv, 0, 0, rows, 0, keys, &sc);   /* packs K and V once */
    free(x);
}

static double SUFFIX(tile_peak)(int64_t d, int32_t threads, int64_t rounds)
{
    const TILE_OPS_T *ops = ACTIVE_OPS;
    struct SUFFIX(tile_peak) run = {
        .d = d, .rows = QUERY_TILE / ops->query_panel * ops->query_panel, .rounds = rounds < 0 ? 0 : rounds};
    threads = threads < 1 ? 1 : threads;
    pool_run(threads, threads, POOL_IN_SHARES, SUFFIX(tile_peak_task), &run);   /* one task a thread */
    return atomic_load(&run.failed) ? -1.0 : 4.0 * run.rows * KEY_TILE * d * (double)run.rounds * threads;
}
#endif

#undef PARTIAL_M
#undef PARTIAL_L
#undef PARTIAL_ACC
#undef Q_STAGED
#undef KV_STAGED
#undef PAIRED
#undef INT8_KEYS
#undef KV_ROW_ELEMS
#undef KV_ROW_SCALES
#undef KV_UNPACKED
#undef packed
#undef packed_from
#undef PACKED_VALUE
#undef KV_TILE_STAGED
#undef KV_READ_IN_PLACE
#undef TILE_PEAK
