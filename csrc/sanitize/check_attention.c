/* The C kernel under AddressSanitizer and UndefinedBehaviorSanitizer: `make sanitize` links
   this driver with csrc/build_attention.py's SOURCES, all built with its COMPILE_ARGS and
   -fsanitize=address,undefined.

   It runs every SIMD path the CPU has (the names in ISAS that attn_select_isa accepts: the
   emulated AVX512-BF16 path on every CPU, in bfloat16 only, the type it is there for), every
   type (float32, float64, and bfloat16 and float16, whose inputs the kernel widens to
   float32 or, on an AVX512-BF16 path, multiplies as bfloat16 pairs, each also with its output
   rounded to its own type, and the int8 KV cache, attn_forward_q8, whose K and V it
   dequantises to float32, but whose keys a decode call multiplies as integers by quantised
   queries, on each integer dot-product unit the CPU runs: int8_units_of_path), one thread
   and all of them, full and causal, or with its own band (a window and sinks) for a shape
   that has one, over
     - the shapes of kernels/harness.py's CASES (batch and heads flattened into one batch;
       their memory layouts are the Python side's business: C always gets C order), from
       harness_cases.h, which `make sanitize` generates from them (harness_cases.py),
     - the C kernel's own edges (cases.h), in terms of its constants (csrc/tiles.h): the
       split-KV (decode) path of n_q <= DECODE_MAX_QUERIES and the query-tile path just above
       it, each precision's tile sizes, one short of and one past them, rows that see no key,
       NaN and Inf inputs, and calls big enough to wake the pool's helpers, on both paths,
     - d and d_v from 1 to WIDTH_MAX on both paths, together and crossed: every tail of every
       vector width, and past two of the widest micro-kernel passes (pv_rows' 64 columns),
     - grouped query heads (several reading one K/V head) and K/V heads with spare rows
       between them (cases.h), the spare rows NaN, so that a read of one shows in the result.
   Each output is compared with a float64 reference computed here by naive loops, so a wrong
   answer fails as surely as a sanitizer report does; the inputs must come back unchanged and
   every element of out must be written (out starts as UNWRITTEN).

   q, k, v (and the int8 scales) and out are malloc'd at their exact sizes (the last K/V head
   without spare rows after it), so ASan sees a read or write one element past either end.
   It cannot see an overrun from one tile buffer into the next inside the per-thread scratch
   block the kernel carves them from: only the result check catches those.

   Exit status 1 if any call fails its check; a sanitizer report aborts the run (exit 1). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attention.h"
#include "tile_ops.h"         /* quantise_query_rows: the int8 cache's decode queries */
#include "cases.h"           /* struct shape, KERNEL_EDGES, GROUPED_EDGES; tiles.h */
#include "harness_cases.h"   /* HARNESS_CASES: generated from kernels.harness.CASES */

static const char *const ISAS[] = {"generic", "avx2-fma", "avx512", "avx512-bf16", "avx512-bf16-emulated"};
#define N_ISAS (int)(sizeof ISAS / sizeof ISAS[0])

/* whether a path runs a type here: the emulated one (a tenth of the speed, and under the
   sanitizers slower still) only bfloat16, whose dot-product path it emulates; its float32
   operations are the avx512 path's template, which the AVX2 path's shares */
static int isa_runs_type(int isa, enum dtype t)
{
    return strcmp(ISAS[isa], "avx512-bf16-emulated") != 0 || t == BF16;
}

/* What a path may round beyond the problem's tolerance: on the AVX512-BF16 paths bfloat16's
   weights P are rounded to bfloat16 before P·V (unit roundoff 2^-8): each weight within 2^-8
   of itself, the output within 2^-8 of max|v| more */
static double rounding_allowed(int isa, enum dtype t)
{
    return t == BF16 && strncmp(ISAS[isa], "avx512-bf16", strlen("avx512-bf16")) == 0 ? 0x1p-8 : 0;
}

/* Only to label the summary, as pool.c's POOL_MIN_FLOPS: whether a call is big enough to
   run on more than the calling thread. (Its path: n_q > DECODE_MAX_QUERIES, tiles.h.) */
#define PARALLEL_MIN_FLOPS 2e5

#define WIDTH_MAX 136
#define TWO_PI 6.283185307179586   /* M_PI is not C11 */
#define UNWRITTEN 1e30

static const char *const DTYPE_NAMES[] = {"float32", "float64", "bfloat16", "float16", "int8", "int4"};
/* of the type each is computed in: the 16-bit inputs are exact in float32, the int8 cache is
   compared with its dequantised values (float32's, as the kernel computes them), and all
   that is rounded afterwards is float32 (the output stays float32) */
static const double UNIT_ROUNDOFF[] = {0x1p-24, 0x1p-53, 0x1p-24, 0x1p-24, 0x1p-24, 0x1p-24};
/* of K and V (Q8: the codes, Q4: a byte of two; their q and scales are float32) */
static const size_t ITEMSIZE[] = {sizeof(float), sizeof(double), sizeof(uint16_t), sizeof(uint16_t),
                                  sizeof(int8_t), sizeof(uint8_t)};

/* d and d_v from 1 to WIDTH_MAX, together and crossed, on each path */
static const struct shape WIDTH_SWEEPS[] = {
    {"width sweep, query tiles", 2, 53, 37, 0, 0, 1, CLEAN, 0},
    {"width sweep, split-KV", 2, 3, 69, 0, 0, 1, CLEAN, 0},
};

/* calls by path (split-KV or query tiles) and by size (below PARALLEL_MIN_FLOPS or not);
   the worst error / tolerance */
struct tally {
    long calls[2][2];
    double worst;
};

static int isa_available[N_ISAS];
static int thread_counts[2];
static struct tally tallies[N_ISAS][N_DTYPES][2];
static long failures;

/* splitmix64, and standard normal numbers from it by Box–Muller */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static double standard_normal(uint64_t *state)
{
    const double u1 = ((next_random(state) >> 11) + 1) * 0x1p-53;   /* (0, 1] */
    const double u2 = (next_random(state) >> 11) * 0x1p-53;
    return sqrt(-2 * log(u1)) * cos(TWO_PI * u2);
}

/* the type of the kernel's output at dtype t: the 16-bit types' and int8's is float32 */
static enum dtype output_type(enum dtype t)
{
    return t == F64 ? F64 : F32;
}

/* the type of q at dtype t: the int8 and int4 caches' is float32 */
static enum dtype query_type(enum dtype t)
{
    return t == Q8 || t == Q4 ? F32 : t;
}

/* the bits of x rounded to bfloat16, to nearest even (NaN kept quiet) */
static uint16_t bf16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (isnan(x))
        return (uint16_t)(u >> 16 | 0x40);
    return (uint16_t)((u + 0x7fff + (u >> 16 & 1)) >> 16);
}

static float bf16_value(uint16_t bits)
{
    const uint32_t u = (uint32_t)bits << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* x rounded to dtype t: a value the type holds exactly */
static double in_dtype(enum dtype t, double x)
{
    switch (t) {
    case F32: return (float)x;
    case BF16: return bf16_value(bf16_bits((float)x));
    case F16: return (float)(_Float16)(float)x;
    default: return x;
    }
}

static void *checked_malloc(size_t bytes)
{
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "check_attention: out of memory (%zu bytes)\n", bytes);
        exit(2);
    }
    return p;
}

static size_t typed_bytes(enum dtype t, size_t n)
{
    return n * ITEMSIZE[t];
}

/* x (n doubles, each a value of dtype t) as an array of dtype t, malloc'd at its exact size */
static void *typed_copy(enum dtype t, const double *x, size_t n)
{
    void *p = checked_malloc(typed_bytes(t, n));
    for (size_t i = 0; i < n; i++) {
        switch (t) {
        case F32: ((float *)p)[i] = (float)x[i]; break;
        case BF16: ((uint16_t *)p)[i] = bf16_bits((float)x[i]); break;
        case F16: {
            const _Float16 h = (_Float16)x[i];
            memcpy((uint16_t *)p + i, &h, sizeof h);
            break;
        }
        default: ((double *)p)[i] = x[i];
        }
    }
    return p;
}

static double typed_at(enum dtype t, const void *p, size_t i)
{
    switch (t) {
    case F32: return ((const float *)p)[i];
    case BF16: return bf16_value(((const uint16_t *)p)[i]);
    case F16: {
        _Float16 h;
        memcpy(&h, (const uint16_t *)p + i, sizeof h);
        return h;
    }
    default: return ((const double *)p)[i];
    }
}

/* the row of each head that a poisoned input has NaN or Inf in */
static int64_t poisoned_row(int64_t rows)
{
    return rows - 1 < 3 ? rows - 1 : 3;
}

/* x (heads, rows, cols): seeded standard normals times gain, in dtype t (not Q8); poisoned
   (NaN, or Inf for INF_Q) at column 1 % cols of poisoned_row in every head if asked */
static double *make_input(enum dtype t, int64_t heads, int64_t rows, int64_t cols, double gain,
                          int poisoned, enum poison poison, uint64_t *state)
{
    const size_t n = (size_t)(heads * rows * cols);
    double *x = checked_malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = in_dtype(t, gain * standard_normal(state));
    if (poisoned)
        for (int64_t h = 0; h < heads; h++)
            x[(h * rows + poisoned_row(rows)) * cols + 1 % cols] = poison == INF_Q ? INFINITY : NAN;
    return x;
}

/* An int8 K or V (heads, rows, cols): *codes from seeded normals (about 40 per unit,
   clamped to ±127), *scales one float32 per row, gain / 40 times a factor in [0.5, 1.5)
   (NaN for poisoned_row of every head if poisoned); returns the values the kernel reads,
   float32's scale · code, as doubles (NaN across a NaN scale's row). */
static double *make_int8_input(int64_t heads, int64_t rows, int64_t cols, double gain,
                               int poisoned, uint64_t *state, int8_t **codes, float **scales)
{
    const size_t n = (size_t)(heads * rows * cols);
    double *x = checked_malloc(n * sizeof *x);
    *codes = checked_malloc(n);
    *scales = checked_malloc((size_t)(heads * rows) * sizeof **scales);
    for (int64_t row = 0; row < heads * rows; row++) {
        const double factor = 0.5 + (next_random(state) >> 11) * 0x1p-53;
        (*scales)[row] = poisoned && row % rows == poisoned_row(rows) ? NAN : (float)(gain / 40 * factor);
        for (int64_t c = 0; c < cols; c++) {
            const double code = fmax(-127, fmin(127, nearbyint(40 * standard_normal(state))));
            (*codes)[row * cols + c] = (int8_t)code;
            const float value = (*scales)[row] * (float)code;   /* one float32 rounding */
            x[row * cols + c] = value;
        }
    }
    return x;
}

/* An int4 K or V (heads, rows, cols) as make_int8_input's: codes from seeded normals (about
   2.5 per unit, clamped to ±7) packed two to a byte into *bytes (rows of ceil(cols / 2),
   kernels/cache_formats.py), *scales one float32 per group of 32 values of a row (NaN for
   every group of poisoned_row if poisoned); returns the values the kernel reads. */
static double *make_int4_input(int64_t heads, int64_t rows, int64_t cols, double gain,
                               int poisoned, uint64_t *state, uint8_t **bytes, float **scales)
{
    const int64_t row_bytes = int4_row_bytes(cols), groups = int4_row_scales(cols);
    double *x = checked_malloc((size_t)(heads * rows * cols) * sizeof *x);
    *bytes = checked_malloc((size_t)(heads * rows * row_bytes));
    *scales = checked_malloc((size_t)(heads * rows * groups) * sizeof **scales);
    memset(*bytes, INT4_OFFSET | INT4_OFFSET << 4, (size_t)(heads * rows * row_bytes));   /* codes 0 */
    for (int64_t row = 0; row < heads * rows; row++) {
        for (int64_t g = 0; g < groups; g++) {
            const double factor = 0.5 + (next_random(state) >> 11) * 0x1p-53;
            (*scales)[row * groups + g] = poisoned && row % rows == poisoned_row(rows) ? NAN
                                          : (float)(gain / 2.5 * factor);
        }
        for (int64_t c = 0; c < cols; c++) {
            const int code = (int)fmax(-7, fmin(7, nearbyint(2.5 * standard_normal(state))));
            uint8_t *byte = *bytes + row * row_bytes + c / 2;
            *byte = (uint8_t)((*byte & (c % 2 ? 0x0f : 0xf0)) | (code + INT4_OFFSET) << (4 * (c % 2)));
            x[row * cols + c] = (*scales)[row * groups + c / INT4_GROUP] * (float)code;   /* one float32 rounding */
        }
    }
    return x;
}

/* x (heads, rows, cols) of `size`-byte elements with its heads head_rows >= rows rows apart,
   the rows between filled with copies of the element at fill: malloc'd to end with the last
   head's last row, as a cache's view [:, :rows] would be read */
static void *spread_heads(const void *x, size_t size, int64_t heads, int64_t rows, int64_t cols,
                          int64_t head_rows, const void *fill)
{
    const size_t row_bytes = (size_t)cols * size;
    char *y = checked_malloc(((size_t)((heads - 1) * head_rows + rows)) * row_bytes);
    for (int64_t h = 0; h < heads; h++) {
        memcpy(y + (size_t)(h * head_rows) * row_bytes, (const char *)x + (size_t)(h * rows) * row_bytes,
               (size_t)rows * row_bytes);
        if (h + 1 < heads)
            for (int64_t i = rows * cols; i < head_rows * cols; i++)
                memcpy(y + (size_t)(h * head_rows * cols + i) * size, fill, size);
    }
    return y;
}

/* whether query i of n_q sees key j of n_k under band b (attention.h, kernels/band.py) */
static int sees(const struct band *b, int64_t n_q, int64_t n_k, int64_t i, int64_t j)
{
    const int64_t p = i + n_k - n_q;   /* the query's position among the keys */
    return (b->right < 0 || j <= p + b->right) && (b->left < 0 || j >= p - b->left || j < b->sinks);
}

/* ref (batch, n_q, d_v) = softmax(scale · q kᵀ) v over the keys each query sees (band b),
   zeros for a row that sees no key; NaN where a NaN or +inf score reaches a row, as
   kernels/reference.py has it. Query head h reads head h / group of k (batch / group, n_k,
   d) and v (.., n_k, d_v). */
static void reference(const struct shape *s, int64_t group, const struct band *b, double scale,
                      const double *q, const double *k, const double *v, double *ref)
{
    const int64_t n_q = s->n_q, n_k = s->n_k, d = s->d, d_v = s->d_v;
    double *scores = checked_malloc((size_t)n_k * sizeof *scores);
    for (int64_t h = 0; h < s->batch; h++)
        for (int64_t i = 0; i < n_q; i++) {
            const double *qi = q + (h * n_q + i) * d;
            const double *kh = k + h / group * n_k * d, *vh = v + h / group * n_k * d_v;
            double *out = ref + (h * n_q + i) * d_v;
            memset(out, 0, (size_t)d_v * sizeof *out);
            int64_t seen = 0;
            for (int64_t j = 0; j < n_k; j++)
                seen += sees(b, n_q, n_k, i, j);
            if (seen == 0)
                continue;
            /* pass 1: s_j = scale · q_i · k_j and the row max, over the keys it sees */
            double m = -INFINITY;
            for (int64_t j = 0; j < n_k; j++) {
                if (!sees(b, n_q, n_k, i, j))
                    continue;
                double dot = 0;
                for (int64_t c = 0; c < d; c++)
                    dot += qi[c] * kh[j * d + c];
                scores[j] = scale * dot;
                if (scores[j] > m)   /* false for NaN, which reaches the row through exp */
                    m = scores[j];
            }
            /* pass 2: p_j = exp(s_j − m), l = Σ p_j, out = Σ p_j v_j / l */
            double l = 0;
            for (int64_t j = 0; j < n_k; j++) {
                if (!sees(b, n_q, n_k, i, j))
                    continue;   /* not even 0 · v: a NaN value reaches only the rows that see it */
                const double p = exp(scores[j] - m);
                l += p;
                for (int64_t c = 0; c < d_v; c++)
                    out[c] += p * vh[j * d_v + c];
            }
            for (int64_t c = 0; c < d_v; c++)
                out[c] /= l;
        }
    free(scores);
}

/* the largest Euclidean norm of a row of x (rows, cols), of its finite entries */
static double max_row_norm(const double *x, int64_t rows, int64_t cols)
{
    double most = 0;
    for (int64_t i = 0; i < rows; i++) {
        double sum = 0;
        for (int64_t c = 0; c < cols; c++)
            if (isfinite(x[i * cols + c]))
                sum += x[i * cols + c] * x[i * cols + c];
        if (sum > most)
            most = sum;
    }
    return sqrt(most);
}

/* an input as the kernel reads it, and a copy to find out whether it wrote to it */
struct buffer {
    void *p, *kept;
    size_t bytes;
};

static struct buffer kernel_input(void *p, size_t bytes)
{
    struct buffer b = {.p = p, .kept = checked_malloc(bytes ? bytes : 1), .bytes = bytes};
    memcpy(b.kept, p, bytes);
    return b;
}

/* One shape, with one band (full, causal, or its own), at one precision: its inputs (as
   doubles, and as the arrays the kernel reads: the dtype's, K and V with their heads kv_rows
   apart), the reference output, and the tolerance. */
struct problem {
    const struct shape *s;
    struct band band;
    enum dtype t;
    int64_t group, kv_heads, kv_rows;
    double scale, tolerance, v_max;
    double *q, *k, *v, *ref;   /* q (batch, n_q, d); k, v (kv_heads, n_k, ·), as the kernel reads them */
    size_t out_len;
    struct buffer q_t, k_t, v_t, k_scale, v_scale;   /* the scales: int8 only */
};

/* K or V (kv_heads, n_k, cols) at the problem's type, as the kernel reads it (spare rows NaN,
   or int8 codes 127 with a NaN scale); x the values as doubles (not Q8) */
static struct buffer kv_input(const struct problem *pr, const double *x, int64_t cols)
{
    const size_t elements = (size_t)((pr->kv_heads - 1) * pr->kv_rows + pr->s->n_k) * (size_t)cols;
    const double nan = NAN;
    void *compact = typed_copy(pr->t, x, (size_t)(pr->kv_heads * pr->s->n_k * cols));
    void *fill = typed_copy(pr->t, &nan, 1);
    void *spread = spread_heads(compact, ITEMSIZE[pr->t], pr->kv_heads, pr->s->n_k, cols, pr->kv_rows, fill);
    free(compact);
    free(fill);
    return kernel_input(spread, typed_bytes(pr->t, elements));
}

/* x (rows, d) = the float32 queries q as a decode step on the int8 (group = d) or int4
   (group = INT4_GROUP) cache multiplies them (tile_ops.h, quantise_query_rows, a group of
   each row at a time): each group's codes times its step, exact in double */
static void quantised_queries(const float *q, int64_t rows, int64_t d, int64_t group, double *x)
{
    const int64_t stride = round_up(group < d ? group : d, INT8_DOT_PAD);
    int16_t *codes = checked_malloc((size_t)(rows * stride) * sizeof *codes);
    float *steps = checked_malloc((size_t)rows * sizeof *steps);
    for (int64_t c0 = 0; c0 < d; c0 += group) {
        const int64_t width = d - c0 < group ? d - c0 : group;
        quantise_query_rows(q + c0, rows, width, d, 1.0f, codes, steps);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < width; c++)
                x[r * d + c0 + c] = (double)codes[r * round_up(width, INT8_DOT_PAD) + c] * steps[r];
    }
    free(codes);
    free(steps);
}

/* an int8 or int4 K or V's codes (row_bytes a row) and scales (row_scales a row), compact,
   spread as the kernel reads them (the spare rows' codes 127, or 7 and 7, their scales
   NaN); freed here */
static void scaled_kv_input(const struct problem *pr, void *codes, float *scales, int64_t row_bytes,
                            int64_t row_scales, struct buffer *codes_t, struct buffer *scales_t)
{
    const int64_t rows = (pr->kv_heads - 1) * pr->kv_rows + pr->s->n_k;
    const uint8_t spare_byte = pr->t == Q8 ? 127 : 0xff;
    const float spare_scale = NAN;
    *codes_t = kernel_input(spread_heads(codes, 1, pr->kv_heads, pr->s->n_k, row_bytes, pr->kv_rows, &spare_byte),
                            (size_t)(rows * row_bytes));
    float *spare_scales = checked_malloc((size_t)row_scales * sizeof *spare_scales);
    for (int64_t g = 0; g < row_scales; g++)
        spare_scales[g] = spare_scale;
    *scales_t = kernel_input(spread_heads(scales, sizeof(float) * (size_t)row_scales, pr->kv_heads, pr->s->n_k, 1,
                                          pr->kv_rows, spare_scales), (size_t)(rows * row_scales) * sizeof(float));
    free(spare_scales);
    free(codes);
    free(scales);
}

static struct problem make_problem(const struct shape *s, int64_t group, int64_t kv_spare,
                                   struct band band, enum dtype t, uint64_t seed)
{
    struct problem pr = {
        .s = s, .band = band, .t = t, .group = group, .kv_heads = s->batch / group,
        .kv_rows = s->n_k + kv_spare,
        .scale = in_dtype(query_type(t), 1 / sqrt((double)s->d)),
        .out_len = (size_t)(s->batch * s->n_q * s->d_v),
    };
    uint64_t state = seed;   /* the same draws at every type */
    const int poison_q = s->poison == NAN_Q || s->poison == INF_Q;
    pr.q = make_input(query_type(t), s->batch, s->n_q, s->d, s->logit_scale, poison_q, s->poison, &state);
    pr.q_t = kernel_input(typed_copy(query_type(t), pr.q, (size_t)(s->batch * s->n_q * s->d)),
                          typed_bytes(query_type(t), (size_t)(s->batch * s->n_q * s->d)));
    if (t == Q8) {
        int8_t *codes;
        float *scales;
        pr.k = make_int8_input(pr.kv_heads, s->n_k, s->d, s->logit_scale, s->poison == NAN_K, &state,
                               &codes, &scales);
        scaled_kv_input(&pr, codes, scales, s->d, 1, &pr.k_t, &pr.k_scale);
        pr.v = make_int8_input(pr.kv_heads, s->n_k, s->d_v, 1, s->poison == NAN_V, &state, &codes, &scales);
        scaled_kv_input(&pr, codes, scales, s->d_v, 1, &pr.v_t, &pr.v_scale);
    } else if (t == Q4) {
        uint8_t *bytes;
        float *scales;
        pr.k = make_int4_input(pr.kv_heads, s->n_k, s->d, s->logit_scale, s->poison == NAN_K, &state,
                               &bytes, &scales);
        scaled_kv_input(&pr, bytes, scales, int4_row_bytes(s->d), int4_row_scales(s->d), &pr.k_t, &pr.k_scale);
        pr.v = make_int4_input(pr.kv_heads, s->n_k, s->d_v, 1, s->poison == NAN_V, &state, &bytes, &scales);
        scaled_kv_input(&pr, bytes, scales, int4_row_bytes(s->d_v), int4_row_scales(s->d_v), &pr.v_t,
                        &pr.v_scale);
    } else {
        pr.k = make_input(t, pr.kv_heads, s->n_k, s->d, s->logit_scale, s->poison == NAN_K, s->poison, &state);
        pr.v = make_input(t, pr.kv_heads, s->n_k, s->d_v, 1, s->poison == NAN_V, s->poison, &state);
        pr.k_t = kv_input(&pr, pr.k, s->d);
        pr.v_t = kv_input(&pr, pr.v, s->d_v);
    }
    if ((t == Q8 || t == Q4) && s->n_q <= DECODE_MAX_QUERIES)
        quantised_queries(pr.q_t.p, s->batch * s->n_q, s->d, t == Q8 ? s->d : INT4_GROUP, pr.q);
    pr.ref = checked_malloc(pr.out_len * sizeof *pr.ref);
    reference(s, group, &pr.band, pr.scale, pr.q, pr.k, pr.v, pr.ref);
    for (size_t i = 0; i < (size_t)(pr.kv_heads * s->n_k * s->d_v); i++)
        if (isfinite(pr.v[i]) && fabs(pr.v[i]) > pr.v_max)
            pr.v_max = fabs(pr.v[i]);

    /* The error of one element is |out − ref| / (|ref| + max|v|) (max|v| bounds |out|: a row
       is a convex combination of value rows), within, for the dtype's unit roundoff u and
       M = scale · max_i ‖q_i‖ · max_j ‖k_j‖ >= scale · Σ_c |q_ic| |k_jc| (Cauchy–Schwarz),
         4 u ((d + 1) M + n_k + 8):
       a score is d FMAs (or products and sums) and a scale away from exact, at most
       (d + 1) u M off, and moves out by at most twice its error times max|v|; the sums of
       n_k weights and of n_k weighted values lose at most n_k u each; exp (2 ulp) and the
       rescaling at tile and chunk boundaries a few u more. That first-order bound is
       doubled for the reference's own roundings (as large at float64) and second-order
       terms. It is a bound, not the harness's tighter budget (precision is `make verify`'s
       job), and loose: the worst error seen is about 1% of it. A wrong index is off by
       O(max|v|); one leaked key moves a row by about max|v| / (the keys the row sees), which
       only the largest shapes here bring near the float32 tolerance, none near float64's.
       (int8 and int4: the reference's K and V are the dequantised values the kernel
       computes with, and decoding, n_q <= DECODE_MAX_QUERIES, its q the quantised queries
       too.) */
    const double magnitude = pr.scale * max_row_norm(pr.q, s->batch * s->n_q, s->d)
                                      * max_row_norm(pr.k, pr.kv_heads * s->n_k, s->d);
    pr.tolerance = 4 * UNIT_ROUNDOFF[t] * ((s->d + 1) * magnitude + s->n_k + 8);
    return pr;
}

static void free_buffer(struct buffer *b)
{
    free(b->p);
    free(b->kept);
}

static void free_problem(struct problem *pr)
{
    void *arrays[] = {pr->q, pr->k, pr->v, pr->ref};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
        free(arrays[i]);
    struct buffer *buffers[] = {&pr->q_t, &pr->k_t, &pr->v_t, &pr->k_scale, &pr->v_scale};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        free_buffer(buffers[i]);
}

static int inputs_kept(const struct problem *pr)
{
    const struct buffer *buffers[] = {&pr->q_t, &pr->k_t, &pr->v_t, &pr->k_scale, &pr->v_scale};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        if (buffers[i]->p && memcmp(buffers[i]->p, buffers[i]->kept, buffers[i]->bytes) != 0)
            return 0;
    return 1;
}

static void report_failure(const struct problem *pr, int isa, int threads, const char *what)
{
    const struct shape *s = pr->s;
    failures++;
    printf("FAIL %s %s threads=%d %s (batch=%lld group=%lld n_q=%lld n_k=%lld kv_rows=%lld d=%lld "
           "d_v=%lld, band left=%lld right=%lld sinks=%lld): %s\n", ISAS[isa], DTYPE_NAMES[pr->t], threads,
           s->name, (long long)s->batch, (long long)pr->group, (long long)s->n_q, (long long)s->n_k,
           (long long)pr->kv_rows, (long long)s->d, (long long)s->d_v, (long long)pr->band.left,
           (long long)pr->band.right, (long long)pr->band.sinks, what);
}

/* attn_forward_<t> on the problem's kernel inputs; round_out: the 16-bit types' output in
   their own type (out then holds their bits), else float */
static int forward(const struct problem *pr, void *out, int round_out, int threads)
{
    const struct shape *s = pr->s;
    const void *q = pr->q_t.p, *k = pr->k_t.p, *v = pr->v_t.p;
#define SHAPE s->batch, pr->group, s->n_q, s->n_k, pr->kv_rows, s->d, s->d_v, pr->band.left, pr->band.right, \
    pr->band.sinks
    switch (pr->t) {
    case F32:
        return attn_forward_f32(q, k, v, out, SHAPE, (float)pr->scale, threads);
    case BF16:
        return attn_forward_bf16(q, k, v, out, round_out, SHAPE, (float)pr->scale, threads);
    case F16:
        return attn_forward_f16(q, k, v, out, round_out, SHAPE, (float)pr->scale, threads);
    case Q8:
        return attn_forward_q8(q, k, pr->k_scale.p, v, pr->v_scale.p, out, SHAPE, (float)pr->scale,
                               threads);
    case Q4:
        return attn_forward_q4(q, k, pr->k_scale.p, v, pr->v_scale.p, out, SHAPE, (float)pr->scale,
                               threads);
    default:
        return attn_forward_f64(q, k, v, out, SHAPE, pr->scale, threads);
    }
#undef SHAPE
}

/* The 16-bit types' output written in their own type (round_out): each element must be
   out32's (the float output of the same call, already checked) rounded to nearest even, a
   NaN a quiet NaN. The buffer starts as signalling NaNs, which no rounding gives, so an
   element left unwritten shows. Returns 1 if so; else 0, saying where in `what`. */
static int rounded_output_matches(const struct problem *pr, const float *out32, int threads, char *what,
                                  size_t what_size)
{
    const uint16_t unwritten = pr->t == BF16 ? 0x7f81 : 0x7d01, quiet = pr->t == BF16 ? 0x7fc0 : 0x7e00;
    uint16_t *out16 = checked_malloc(pr->out_len * sizeof *out16);
    for (size_t i = 0; i < pr->out_len; i++)
        out16[i] = unwritten;
    const int status = forward(pr, out16, 1, threads);
    int ok = status == 0;
    if (!ok)
        snprintf(what, what_size, "with its output rounded, returned %d", status);
    for (size_t i = 0; i < pr->out_len && ok; i++) {
        uint16_t expected;
        if (pr->t == BF16) {
            expected = bf16_bits(out32[i]);
        } else {
            const _Float16 h = (_Float16)out32[i];
            memcpy(&expected, &h, sizeof h);
        }
        ok = isnan(out32[i]) ? (out16[i] & quiet) == quiet : out16[i] == expected;
        if (!ok)
            snprintf(what, what_size, "rounded output element %zu is 0x%04x, %.9g rounded is 0x%04x", i,
                     out16[i], out32[i], expected);
    }
    free(out16);
    return ok;
}

/* Run the selected ISA on one problem and report a failure; returns the worst error /
   tolerance, inf if the call returned an error or changed its inputs (or, 16-bit types,
   wrote a rounded output other than its float output rounded). */
static double check_call(const struct problem *pr, int isa, int threads)
{
    const struct shape *s = pr->s;
    const enum dtype t = output_type(pr->t);
    double *unwritten = checked_malloc(pr->out_len * sizeof *unwritten);
    for (size_t i = 0; i < pr->out_len; i++)
        unwritten[i] = UNWRITTEN;
    void *out = typed_copy(t, unwritten, pr->out_len);
    free(unwritten);

    const int status = forward(pr, out, 0, threads);
    const double tolerance = pr->tolerance + rounding_allowed(isa, pr->t);
    char what[256];
    double worst = 0;
    size_t worst_at = 0;
    if (status != 0) {
        snprintf(what, sizeof what, "returned %d", status);
        worst = INFINITY;
    } else if (!inputs_kept(pr)) {
        snprintf(what, sizeof what, "modified its inputs");
        worst = INFINITY;
    } else {
        for (size_t i = 0; i < pr->out_len; i++) {
            const double o = typed_at(t, out, i), r = pr->ref[i];
            double error;
            if (isnan(o) || isnan(r))
                error = isnan(o) && isnan(r) ? 0 : INFINITY;
            else if (o == r)
                error = 0;   /* also equal infinities */
            else
                error = fabs(o - r) / ((isfinite(r) ? fabs(r) : 0) + pr->v_max) / tolerance;
            if (!(error <= worst)) {
                worst = error;
                worst_at = i;
            }
        }
        const size_t row = worst_at / (size_t)s->d_v;
        snprintf(what, sizeof what,
                 "out[head %zu, row %zu, column %zu] = %.9g, reference %.9g: %.3g tolerances off "
                 "(tolerance %.3g)", row / (size_t)s->n_q, row % (size_t)s->n_q,
                 worst_at % (size_t)s->d_v, typed_at(t, out, worst_at), pr->ref[worst_at], worst,
                 tolerance);
        if ((pr->t == BF16 || pr->t == F16) && !rounded_output_matches(pr, out, threads, what, sizeof what))
            worst = INFINITY;
    }
    if (worst > 1)
        report_failure(pr, isa, threads, what);
    free(out);
    return worst;
}

/* The int8 cache's integer dot-product units (csrc/int8_dot.c) a path is checked with: the
   one it selects, and on a SIMD path every other SIMD unit the CPU runs (a CPU with VNNI
   selects vpdpwssd, and its AVX2 sequence is checked too); their names in units, their
   number returned. */
static const char *const INT8_UNITS[] = {"avx512-vnni", "avx-vnni", "avx2"};
#define N_INT8_UNITS (sizeof INT8_UNITS / sizeof INT8_UNITS[0] + 1)

static int int8_units_of_path(const char **units)
{
    int n = 0;
    units[n++] = attn_int8_dot();
    if (strcmp(units[0], "generic") != 0)
        for (size_t i = 0; i < N_INT8_UNITS - 1; i++)
            if (attn_int8_dot_runs(INT8_UNITS[i]) && strcmp(INT8_UNITS[i], units[0]) != 0)
                units[n++] = INT8_UNITS[i];
    return n;
}

/* One shape, full and causal, or with its own band if it has one (a window and sinks: full
   and causal attention have shapes enough of their own), at every type, on every available
   ISA and thread count; group query heads per K/V head, the K/V heads n_k + kv_spare rows
   apart. */
static void check_shape(const struct shape *s, int64_t group, int64_t kv_spare, uint64_t seed)
{
    const double flops = 2.0 * s->batch * s->n_q * s->n_k * (double)(s->d + s->d_v);
    const struct band plain[] = {{-1, -1, 0}, {-1, 0, 0}};
    const struct band *bands = s->banded ? &s->band : plain;
    for (int b = 0; b < (s->banded ? 1 : 2); b++)
        for (enum dtype t = F32; t < N_DTYPES; t++) {
            if (s->skip_dtypes & 1u << t)
                continue;
            struct problem pr = make_problem(s, group, kv_spare, bands[b], t, seed);
            for (int isa = 0; isa < N_ISAS; isa++) {
                if (!isa_available[isa] || !isa_runs_type(isa, t))
                    continue;
                attn_select_isa(ISAS[isa]);
                const char *units[N_INT8_UNITS];
                const int integer_keys = t == Q8 || t == Q4;
                const int n_units = integer_keys ? int8_units_of_path(units) : 1;
                for (int u = 0; u < n_units; u++) {
                    if (integer_keys)
                        attn_select_int8_dot(units[u]);
                    for (int ti = 0; ti < 2; ti++) {
                        struct tally *tally = &tallies[isa][t][ti];
                        const double worst = check_call(&pr, isa, thread_counts[ti]);
                        tally->calls[s->n_q > DECODE_MAX_QUERIES][flops >= PARALLEL_MIN_FLOPS]++;
                        if (!(worst <= tally->worst))
                            tally->worst = worst;
                    }
                }
            }
            free_problem(&pr);
        }
}

/* The memory roof's read (read_peak.c), which the benchmarks time beside decode steps: the
   sum of 1, 2, ..., n (exact in double) over buffers of exactly n doubles that start 8 bytes
   past a vector boundary, for n through a vector's tail, a chain's step and several parts,
   so that ASan sees a read past either end. */
static void check_read_sum(void)
{
    static const int64_t sizes[] = {1, 7, 63, 64, 65, 8191, 8192 * 3 + 13, 8192 * 9 + 5};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int ti = 0; ti < 2; ti++) {
            const int64_t n = sizes[i];
            double *block = malloc((size_t)(n + 1) * sizeof(double)), *x = block + 1;
            for (int64_t j = 0; j < n; j++)
                x[j] = (double)(j + 1);
            const double sum = attn_read_sum(x, n, thread_counts[ti]);
            if (sum != (double)n * (double)(n + 1) / 2) {
                printf("FAIL attn_read_sum of %lld doubles on %d threads: %.17g\n", (long long)n,
                       thread_counts[ti], sum);
                failures++;
            }
            free(block);
        }
}

/* The tile operations' ceiling (attn_tile_peak), which the benchmarks time beside the FMA
   peak: on every ISA this CPU runs and each type, a few rounds over its scratch and tiles,
   at a d that fills no whole vector, on 1 and more threads, its flops as counted. */
static void check_tile_peak(void)
{
    static const int64_t d = 19, rounds = 2;
    for (int isa = 0; isa < N_ISAS; isa++)
        for (int bits = 32; bits <= 64 && isa_available[isa]; bits += 32)
            for (int ti = 0; ti < 2; ti++) {
                attn_select_isa(ISAS[isa]);
                const int64_t rows = bits == 32 ? ATTN_F32_QUERY_TILE : ATTN_F64_QUERY_TILE;
                const int64_t keys = bits == 32 ? ATTN_F32_KEY_TILE : ATTN_F64_KEY_TILE;
                const double flops = attn_tile_peak(bits, d, thread_counts[ti], rounds);
                if (flops != 4.0 * rows * keys * d * rounds * thread_counts[ti]) {
                    printf("FAIL attn_tile_peak on %s, %d bits, %d threads: %.17g flops\n", ISAS[isa], bits,
                           thread_counts[ti], flops);
                    failures++;
                }
            }
}

int main(void)
{
    for (int isa = 0; isa < N_ISAS; isa++) {
        isa_available[isa] = attn_select_isa(ISAS[isa]) == 0;
        if (isa_available[isa]) {
            const char *units[N_INT8_UNITS];
            const int n_units = int8_units_of_path(units);
            printf("ISA %s: runs as \"%s\"; int8 and int4 keys by", ISAS[isa], attn_active_isa());
            for (int u = 0; u < n_units; u++)
                printf(" %s%s", units[u], u + 1 < n_units ? "," : "\n");
        }
        else
            printf("ISA %s: skipped, attn_select_isa rejects it (not built, or not on this CPU)\n",
                   ISAS[isa]);
    }
    /* at least 2, so that the pool's helpers run even on a one-CPU machine */
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    thread_counts[0] = 1;
    thread_counts[1] = cpus > 2 ? (int)cpus : 2;

    printf("query tiles (rows x keys): float32 %d x %d, float64 %d x %d; split-KV up to %d "
           "query rows\n", (int)ATTN_F32_QUERY_TILE, (int)ATTN_F32_KEY_TILE,
           (int)ATTN_F64_QUERY_TILE, (int)ATTN_F64_KEY_TILE, (int)DECODE_MAX_QUERIES);

    check_read_sum();
    check_tile_peak();
    uint64_t seed = 1;
    for (size_t i = 0; i < sizeof HARNESS_CASES / sizeof HARNESS_CASES[0]; i++)
        check_shape(&HARNESS_CASES[i], 1, 0, seed++);
    for (size_t i = 0; i < sizeof KERNEL_EDGES / sizeof KERNEL_EDGES[0]; i++)
        check_shape(&KERNEL_EDGES[i], 1, 0, seed++);
    for (size_t i = 0; i < sizeof GROUPED_EDGES / sizeof GROUPED_EDGES[0]; i++)
        check_shape(&GROUPED_EDGES[i].shape, GROUPED_EDGES[i].group, GROUPED_EDGES[i].kv_spare, seed++);
    for (size_t i = 0; i < sizeof WIDTH_SWEEPS / sizeof WIDTH_SWEEPS[0]; i++)
        for (int64_t width = 1; width <= WIDTH_MAX; width++) {
            struct shape s = WIDTH_SWEEPS[i];
            s.d = s.d_v = width;
            check_shape(&s, 1, 0, seed++);
            s.d_v = WIDTH_MAX + 1 - width;
            check_shape(&s, 1, 0, seed++);
        }

    printf("calls by path, and in brackets those of at least %g flops (threaded if threads > 1)\n",
           PARALLEL_MIN_FLOPS);
    printf("%-20s %-8s %7s %14s %14s %16s\n", "ISA", "dtype", "threads", "split-KV", "query tiles",
           "worst error/tol");
    for (int isa = 0; isa < N_ISAS; isa++)
        for (enum dtype t = F32; t < N_DTYPES; t++)
            for (int ti = 0; ti < 2 && isa_available[isa] && isa_runs_type(isa, t); ti++) {
                const struct tally *tally = &tallies[isa][t][ti];
                char split_kv[32], tiles[32];
                snprintf(split_kv, sizeof split_kv, "%ld (%ld)",
                         tally->calls[0][0] + tally->calls[0][1], tally->calls[0][1]);
                snprintf(tiles, sizeof tiles, "%ld (%ld)",
                         tally->calls[1][0] + tally->calls[1][1], tally->calls[1][1]);
                printf("%-20s %-8s %7d %14s %14s %16.3g\n", ISAS[isa], DTYPE_NAMES[t],
                       thread_counts[ti], split_kv, tiles, tally->worst);
            }
    if (failures) {
        printf("%ld calls FAILED\n", failures);
        return 1;
    }
    printf("all calls passed\n");
    return 0;
}
