/* attnbench C kernel: public entry points, SIMD path selection, and the five instances
   (float, double, and bfloat16, float16 and int8 and int4 KV caches computed in float) of the
   tiled online-softmax driver in flash_driver_template.h.

   Tile sizes (query rows × keys per tile, per thread; defined in tiles.h). Swept with
   csrc/sweep_tiles.py on the AVX-512 path of a shared 2-core Sapphire-Rapids-class Xeon VM
   (L2 2 MB a core), 1 thread, 8 heads, n = 4096, d = 64: each call timed beside the FMA
   peak loop, the fraction of the peak full / causal, medians of 12 pairs (quartiles
   ±0.01-0.02):
     float32  528×128 0.701/0.668   792×128 0.718/0.679   1056×64 0.726/0.674
              1056×128 0.719/0.679  1584×128 0.718/0.682
     float64  528×128 0.651/0.632   1056×128 0.666/0.646
   (An earlier sweep by best thread CPU time, 192 to 768 rows, moved by ~10% from one moment
   to the next and chose 528.) Large query tiles win: each K and V tile, packed once per
   query tile (pack_k, pack_v), then serves more queries; at 240 rows packing took ~15% of
   the time, at 528 ~3% (rdtsc around the phases), and the K and V rows it reads come from
   L3 once per query tile (8 heads, whose K and V lie in L3, ran 4-6% below one head of the
   same rows, whose lie in L2, at 528 rows; 2-3% at 1056). Past 1056 rows nothing more is
   gained, and the tile's Qᵀ and Oᵀ (270 KB each at d = 64) would outgrow a 1 MB L2. 128
   keys keep a panel's Sᵀ (48 × 128 float32, 24 KB) in L1 between its three steps, and the
   packed K and V tiles (32 KB each) in L2. The sizes must be multiples of every ISA's query
   panel (float32: 48, 24, 8; float64: 24, 12, 8): 1056 is. (On the earlier 2-core Zen 3
   VM, AVX2 only, with the tile's whole Sᵀ stored between the steps, 264 × 128 was best: 72
   / 68 GFLOP/s float32, 30 / 30 float64.)

   K and V read in place or packed (KV_IN_PLACE_ROWS, tiles.h): a K or V tile is packed once
   per query tile, as many element copies as one query row's products, so a small query
   tile spends on it what it spends on a good share of its products. Read in place, qk_tile
   and pv_tile broadcast from rows d and d_v apart. The C entry point, float32, d = 64,
   full, in place against packed (the same bits), medians of 40 alternating 20 ms rounds,
   the Xeon above, AVX-512. V: query tiles of 32 rows (one head, n = 64, 2 threads) 1.07×,
   48 (n = 256) 1.08×, 144 (n = 1024) 1.03×, 288 (n = 2048) 1.01×, 528 (two heads, n = 1024
   and 2048, one thread; one head, n = 4096, 2 threads) 0.99-1.00×. K then too: n = 64
   1.09-1.12× (AVX2 1.06×), n = 256 1.15×. Tiles of up to 288 rows read them in place.

   What a large call spends beyond its tile operations (the Xeon above, float32, full, 8
   heads, n = 4096, d = 64, one thread; rdtsc around each phase of a call, against
   attn_tile_peak's loop of as many flops in the same process, medians of 5 pairs, 11 runs),
   with the next key tile's K and V fetched in a burst per panel before qk_tile: the call
   took 1.06-1.09 of the loop's cycles. qk_tile took 1.05-1.07 of the loop's, the softmax
   1.01-1.04, pv_tile 0.98-1.01 (the padded last panel of each head counts 1.008); packing K
   and V added 1.5% of the loop's time, Qᵀ's packing 0.6%, the normalisation 1%, the walk's
   own work 1%. With each K and V tile packed once per task and nothing fetched (an
   experiment: wrong results) the call took 1.03-1.04 and qk_tile 1.01-1.02: the burst, 64
   KB a key tile from L3, stalled the phase it was issued in (moved after qk_tile, the
   softmax took 1.23) about as long as reading it at one core's ~9 GB/s would.

   So qk_tile and pv_tile now fetch it a line or two a micro-kernel step (struct read_ahead,
   as the split-KV path's row operations do). Both ways alternated in one process (the way
   read from the environment in a scratch build), medians of 15 rounds, the speed-up on 8
   heads of n = 4096, d = 64, float32, full: 1.012 on 2 threads (quartiles 0.994-1.019),
   1.025 on 1; and on 2 threads, causal 1.017, d = 128 1.022, float64 1.029, n = 1024 1.004,
   one head of n = 1024 (K and V read in place) 0.998; the same build against itself 0.999.
   Tried the same way, and not taken: query tiles of 2112 rows, half the fetches: 1.016× on
   that headline call alone, 0.99-1.00× causal, at n = 2048, d = 128, in float64 and on 2
   heads of 8192 (1584 rows 1.00×, 528 0.96×); pv_tile leaving out its rescaling when a
   panel's maxima did not move, 1.000×. And between builds: a line a KB fetched, for the
   hardware prefetchers to follow (packing then waits for the rest: 3.8%); K and V in 4 KB
   pages rather than 2 MB ones (no change).

   P·V along the rows of V and of the output: tried, not taken. Lanes over value columns,
   4 query rows a pass (the split-KV path's pv_rows loop, its weights read down Pᵀ's
   columns), V read as it lies and O kept as rows, so that no transpose turns Oᵀ into out's
   rows at the end; the same bits. In-process A/B against the transposed tiles, the C entry
   point, float32, full, the Xeon above, AVX-512 (rows ÷ transposed speed, medians of 5-31
   rounds): one head, n = 64, 2 threads 0.99-1.01×, 1 thread 1.03×, causal 1.11×; one head
   of n = 256 0.97×; 8 heads of n = 2048, 2 threads, 0.98×; 2 heads of n = 200, 1 thread, d =
   32 0.89×, d = 48 0.84× (a pass's rows then hold 8 or 12 accumulators, where Oᵀ's tiles hold
   24 at every d_v), d = 128 0.85× (each group of rows streams the 64 KB V tile from L2).
   What the final write costs a tiny call is mostly out's lines taken for ownership, not
   the transpose's shuffles: the row layout storing nothing (wrong results) ran it 1.05×
   faster, and fetching out's lines for writing as a query tile starts (prefetchw, with
   the transposed tiles) gained nothing, 0.97-1.00×. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "tile_ops.h"
#include "tiles.h"   /* ATTN_F32/F64_QUERY_TILE, ATTN_F32/F64_KEY_TILE, DECODE_MAX_QUERIES */

/* Split-KV (decode) path, flash_driver_template.h: its key blocks and chunks. */
#define DECODE_KEY_BLOCK ROW_KEYS_MAX   /* keys per row step, 64: 64 K rows of d = 64 floats fill half of L1 */
#define DECODE_MIN_CHUNK 256   /* keys per task at least */

#define CACHE_LINE 64

static size_t cache_lines(size_t bytes) { return (size_t)round_up((int64_t)bytes, CACHE_LINE); }

/* Each thread's query-tile scratch (flash_driver_template.h, scratch_alloc), kept from one
   call to the next and freed when the thread ends. Allocated and freed per call, it cost a
   tiny call a tenth of its time (one head, n = 64, 2 threads: the helper's aligned_alloc
   and the frees, ~2,000 of 18,700 cycles). A thread runs one call's tasks at a time, so one
   block serves them all. It grows to a call's need; a block above KEPT_SCRATCH_BYTES (d = 64
   needs ~660 KB at QUERY_TILE rows in float32, twice that in float64; a head dimension in
   the thousands, megabytes) is
   replaced by the next call that needs less, so that a thread keeps no more than that
   after its large calls. */
#define KEPT_SCRATCH_BYTES (1u << 20)
struct kept_scratch {
    void *block;
    size_t bytes;
};
static pthread_key_t kept_scratch_key;
static pthread_once_t kept_scratch_once = PTHREAD_ONCE_INIT;
static int kept_scratch_ready;

static void free_kept_scratch(void *kept)
{
    free(((struct kept_scratch *)kept)->block);
    free(kept);
}

static void make_kept_scratch_key(void)
{
    kept_scratch_ready = pthread_key_create(&kept_scratch_key, free_kept_scratch) == 0;
}

/* bytes (a multiple of CACHE_LINE) of CACHE_LINE-aligned scratch for the calling thread,
   whose contents are undefined, valid until its next call; NULL if out of memory */
static void *thread_scratch(size_t bytes)
{
    pthread_once(&kept_scratch_once, make_kept_scratch_key);
    if (!kept_scratch_ready)
        return NULL;
    struct kept_scratch *kept = pthread_getspecific(kept_scratch_key);
    if (!kept) {
        kept = calloc(1, sizeof *kept);
        if (!kept || pthread_setspecific(kept_scratch_key, kept) != 0) {
            free(kept);
            return NULL;
        }
    }
    if (kept->bytes < bytes || (kept->bytes > KEPT_SCRATCH_BYTES && bytes <= KEPT_SCRATCH_BYTES)) {
        free(kept->block);
        kept->block = aligned_alloc(CACHE_LINE, bytes);
        kept->bytes = kept->block ? bytes : 0;
    }
    return kept->block;
}

/* The problem's shape, shared by all the instances. */
struct shape {
    int64_t n_q, n_k, d, d_v;
    int64_t group;           /* query heads per K/V head: query head h reads K/V head h / group */
    int64_t kv_rows;         /* rows from one K/V head to the next (>= n_k) */
    /* the band (attention.h): query i sees the keys of its window, i + left_offset <= j <=
       i + right_offset, and the sinks j < sinks that are not after it */
    int64_t right_offset;    /* n_k when right is unbounded: past every key */
    int64_t left_offset;     /* -UNBOUNDED when left is: before every key */
    int64_t sinks;           /* 0 unless windowed */
    int windowed;            /* left is bounded: the keys a query sees do not start at 0 */
    int64_t first_row;       /* rows before it see no key (right bounded, n_q > n_k + right) */
    int round_out;           /* the output is the inputs' 16-bit type, each row rounded as stored */
};

#define UNBOUNDED (INT64_MAX / 4)   /* a side without a bound: further than any key, with room to add */

static struct shape make_shape(int64_t n_q, int64_t n_k, int64_t d, int64_t d_v, int64_t left, int64_t right,
                               int64_t sinks, int64_t group, int64_t kv_rows, int round_out)
{
    const int64_t aligned = n_k - n_q;   /* query i's position among the keys, less i */
    const int64_t right_offset = right < 0 ? n_k : aligned + right;
    return (struct shape){
        .n_q = n_q, .n_k = n_k, .d = d, .d_v = d_v,
        .group = group, .kv_rows = kv_rows,
        .right_offset = right_offset,
        .left_offset = left < 0 ? -UNBOUNDED : aligned - left,
        .sinks = left < 0 ? 0 : max_i64(sinks, 0),
        .windowed = left >= 0,
        .first_row = clamp_i64(-right_offset, 0, n_q),
        .round_out = round_out != 0,
    };
}

/* query i sees no key from visible_keys(i) on */
static int64_t visible_keys(const struct shape *sh, int64_t i)
{
    return clamp_i64(i + sh->right_offset + 1, 0, sh->n_k);
}

/* the first key of query i's window (0 without one) */
static int64_t window_start(const struct shape *sh, int64_t i)
{
    return clamp_i64(i + sh->left_offset, 0, sh->n_k);
}

/* Query i's keys [lo, hi) in one of the two runs of keys a query tile walks (both ends never
   decrease with i): the sinks' run (sinks_run), [0, min(sinks, visible_keys)) for a query
   whose window starts after the sinks, empty for the others; the windows' run,
   [window_start, visible_keys), from key 0 for a query whose window starts within the
   sinks (the two then meet: it sees every key up to its last). Full and causal attention
   have one run, the windows' from key 0. */
static void run_keys(const struct shape *sh, int sinks_run, int64_t i, int64_t *lo, int64_t *hi)
{
    const int64_t start = window_start(sh, i), end = visible_keys(sh, i);
    const int after_sinks = start > sh->sinks;
    *lo = !sinks_run && after_sinks ? start : 0;
    *hi = !sinks_run ? end : after_sinks ? min_i64(sh->sinks, end) : 0;
}

/* Whether the CPU has the features a path's functions are compiled for (their target
   attributes; every AVX-512F CPU also has FMA, and every one since Skylake DQ). */
static int cpu_has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

/* bfloat16 dot products, with AVX512BW's 16-bit loads and permutes (every CPU with
   AVX512-BF16 so far has BW) */
static int cpu_has_avx512_bf16(void)
{
    __builtin_cpu_init();
    return cpu_has_avx512() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
}

/* F16C too, for the float16 widening (every AVX2 CPU so far has it) */
static int cpu_has_avx2_fma(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

static int cpu_has_any(void) { return 1; }

/* The SIMD paths, best first, by the name attn_select_isa accepts. bf16: the bfloat16
   dot-product operations, or NULL where bfloat16 is widened to float32. The emulated path
   (tile_ops_emulated.c) comes after generic, which every CPU runs: "auto" never takes it. */
static const struct isa_path {
    const char *name;
    int (*cpu_runs)(void);
    const struct tile_ops_f32 *f32;
    const struct tile_ops_f64 *f64;
    const struct convert_ops *convert;
    const struct tile_ops_bf16 *bf16;
} isa_paths[] = {
    {"avx512-bf16", cpu_has_avx512_bf16, &tile_ops_avx512_f32, &tile_ops_avx512_f64, &convert_avx512,
     &tile_ops_avx512_bf16},
    {"avx512", cpu_has_avx512, &tile_ops_avx512_f32, &tile_ops_avx512_f64, &convert_avx512, NULL},
    {"avx2-fma", cpu_has_avx2_fma, &tile_ops_avx2_f32, &tile_ops_avx2_f64, &convert_avx2, NULL},
    {"generic", cpu_has_any, &tile_ops_generic_f32, &tile_ops_generic_f64, &convert_generic, NULL},
    {"avx512-bf16-emulated", cpu_has_any, &tile_ops_emulated_f32, &tile_ops_generic_f64, &convert_generic,
     &tile_ops_emulated_bf16},
};
#define N_ISA_PATHS (sizeof isa_paths / sizeof isa_paths[0])

/* the selected path (one pointer, so a call reads one path's operations) */
static const struct isa_path *active = &isa_paths[N_ISA_PATHS - 2];

/* The int8 cache's integer dot products (int8_dot.c), best first; each SIMD path takes the
   best unit the CPU runs, the generic path the generic unit (so that it stays what a CPU
   without AVX2 runs). */
static const struct int8_dot_ops *const int8_units[] = {
    &int8_dot_avx512_vnni, &int8_dot_avx_vnni, &int8_dot_avx2, &int8_dot_generic,
};
#define N_INT8_UNITS (sizeof int8_units / sizeof int8_units[0])
static const struct int8_dot_ops *active_int8 = &int8_dot_generic;

static const struct int8_dot_ops *best_int8_unit(const struct isa_path *path)
{
    if (path->f32 == &tile_ops_generic_f32 || path->f32 == &tile_ops_emulated_f32)
        return &int8_dot_generic;
    for (size_t i = 0; i < N_INT8_UNITS; i++)
        if (int8_units[i]->cpu_runs())
            return int8_units[i];
    return &int8_dot_generic;
}

static const struct int8_dot_ops *runnable_int8_unit(const char *name)
{
    for (size_t i = 0; i < N_INT8_UNITS; i++)
        if (strcmp(name, int8_units[i]->unit) == 0)
            return int8_units[i]->cpu_runs() ? int8_units[i] : NULL;
    return NULL;
}

/* the path named so that the CPU runs, or NULL */
static const struct isa_path *runnable_path(const char *name)
{
    for (size_t i = 0; i < N_ISA_PATHS; i++)
        if (strcmp(name, isa_paths[i].name) == 0)
            return isa_paths[i].cpu_runs() ? &isa_paths[i] : NULL;
    return NULL;
}

/* "auto" takes the first path the CPU runs, passing over the bfloat16 dot-product path
   where its unit is slower than widening to float32 (attn_bf16_dot_pays); a name, that
   path if the CPU runs it. */
int attn_select_isa(const char *name)
{
    const struct isa_path *path = NULL;
    if (strcmp(name, "auto") == 0) {
        for (size_t i = 0; i < N_ISA_PATHS && !path; i++) {
            const int passed_over = isa_paths[i].bf16 != NULL && !attn_bf16_dot_pays();
            path = isa_paths[i].cpu_runs() && !passed_over ? &isa_paths[i] : NULL;
        }
    } else {
        path = runnable_path(name);
    }
    if (!path)
        return -1;
    active = path;
    active_int8 = best_int8_unit(path);
    return 0;
}

const char *attn_active_isa(void)
{
    return active->name;
}

int attn_select_int8_dot(const char *unit)
{
    const struct int8_dot_ops *ops = runnable_int8_unit(unit);
    if (!ops)
        return -1;
    active_int8 = ops;
    return 0;
}

int64_t attn_decode_max_queries(void)
{
    return DECODE_MAX_QUERIES;
}

int attn_int8_dot_runs(const char *unit)
{
    return runnable_int8_unit(unit) != NULL;
}

const char *attn_int8_dot(void)
{
    return active_int8->unit;
}

/* attn_int8_scores' and attn_int4_scores' unit, or NULL when the CPU does not run it or the
   sizes are out of range */
static const struct int8_dot_ops *scores_unit(const char *unit, int64_t rows, int64_t keys, int64_t s_stride)
{
    const int fits = rows >= 1 && rows <= ROW_GROUP && keys >= 1 && keys <= ROW_KEYS_MAX
                     && s_stride >= round_up(keys, ROW_KEY_PAD);
    return fits ? runnable_int8_unit(unit) : NULL;
}

int attn_int8_scores(const char *unit, const int8_t *k, const float *k_scale, int64_t keys, int64_t d,
                     const float *q, int64_t rows, float scale, float *s, int64_t s_stride)
{
    const struct int8_dot_ops *ops = scores_unit(unit, rows, keys, s_stride);
    if (!ops)
        return -1;
    const int64_t q_stride = round_up(d, INT8_DOT_PAD);
    int16_t *codes = malloc((size_t)(rows * q_stride) * sizeof *codes);
    float q_scale[ROW_GROUP];
    if (!codes)
        return 1;
    quantise_query_rows(q, rows, d, d, scale, codes, q_scale);
    ops->qk_rows(k, k_scale, keys, d, codes, q_scale, rows, s, s_stride, read_ahead_of(NULL, 0));
    free(codes);
    return 0;
}

int attn_int4_scores(const char *unit, const uint8_t *k, const float *k_scale, int64_t keys, int64_t d,
                     const float *q, int64_t rows, float scale, float *s, int64_t s_stride)
{
    const struct int8_dot_ops *ops = scores_unit(unit, rows, keys, s_stride);
    if (!ops)
        return -1;
    const int64_t groups = int4_row_scales(d);
    int16_t *codes = malloc((size_t)(groups * rows * INT4_GROUP) * sizeof *codes);
    float *scales = malloc((size_t)(groups * (rows + keys)) * sizeof *scales);
    int32_t *sums = malloc((size_t)(groups * rows) * sizeof *sums);
    if (codes && scales && sums) {
        float *k_scales = scales + groups * rows;   /* group g's of key j at g · keys + j */
        for (int64_t j = 0; j < keys; j++)
            for (int64_t g = 0; g < groups; g++)
                k_scales[g * keys + j] = k_scale[j * groups + g];
        quantise_query_groups(q, rows, d, scale, codes, scales, sums);
        ops->qk_rows_q4(k, k_scales, keys, keys, d, codes, scales, sums, rows, rows, s, s_stride,
                        read_ahead_of(NULL, 0));
    }
    const int failed = !(codes && scales && sums);
    free(codes);
    free(scales);
    free(sums);
    return failed;
}

/* the bfloat16 dot-product instructions of the path named (tile_ops_bf16), over arrays */
int attn_bf16_dot(const char *isa, float *acc, const uint32_t *a, const uint32_t *b, int64_t n)
{
    const struct isa_path *path = runnable_path(isa);
    if (!path || !path->bf16)
        return -1;
    path->bf16->dot_lanes(acc, a, b, n);
    return 0;
}

int attn_bf16_round(const char *isa, const float *x, int64_t n, uint16_t *y)
{
    const struct isa_path *path = runnable_path(isa);
    if (!path || !path->bf16)
        return -1;
    path->bf16->round_lanes(x, n, y);
    return 0;
}

__attribute__((constructor)) static void select_default_isa(void)
{
    attn_select_isa("auto");
}

/* One instance per input type. The float32 and float64 ones read their inputs in place;
   the 16-bit ones widen each tile (or decode block) to float first, and the int8 one reads
   float queries in place and dequantises each tile or block of K and V rows, all then
   running the float32 instance's tile operations, so they compute exactly what float32
   would on the converted inputs; their output is float, which the 16-bit callers round. */
#define real float
#define q_elem float
#define kv_elem float
#define SUFFIX(name) name##_f32
#define TILE_OPS_T struct tile_ops_f32
#define QUERY_TILE ATTN_F32_QUERY_TILE
#define KEY_TILE ATTN_F32_KEY_TILE
#define KEY_CAP round_up(KEY_TILE, KEY_BLOCK)   /* Sᵀ rows per panel */
#define ACTIVE_OPS active->f32
#define EXP2 exp2f
#define TILE_PEAK
#include "flash_driver_template.h"
#undef SUFFIX
#undef q_elem
#undef kv_elem

/* the 16-bit types: Q, K and V widened, n values at a time (K and V: whole rows; no scales).
   bfloat16's K and V are widened as they are packed instead (a shift per value, which gcc
   vectorises), saving a pass through staging (measured, 2 threads, 8 heads, n = 4096,
   d = 64, full: 0.98 -> 1.04 of float32's speed); float16's conversion wants F16C, so its
   tiles are staged by the dispatched widen_f16. Decoding reads K and V in place through the row operations for any number of query rows:
   a 16-bit row converts in one instruction per vector as it is loaded, cheaper than storing
   a converted block and loading it back (measured, 2 threads, 8 query heads on 2 K/V heads,
   n_k = 65536, d = 64: float16 4.4 -> 2.6 ms). */
#define q_elem uint16_t
#define kv_elem uint16_t
#define KV_TO_REAL(x, scale, row0, rows, width, y) \
    ((void)(scale), Q_TO_REAL((x) + (row0) * (width), (rows) * (width), y))
#define SUFFIX(name) name##_bf16
#define Q_TO_REAL active->convert->widen_bf16
#define KV_ELEM_TO_REAL bf16_to_f32
#define OUT_NARROW active->convert->narrow_bf16
#define KV_ROW_OPS bf16_rows
#define KV_ROW_OPS_MAX_ROWS INT64_MAX
#include "flash_driver_template.h"
#undef KV_ELEM_TO_REAL
#undef SUFFIX
#undef Q_TO_REAL
#undef OUT_NARROW
#undef KV_ROW_OPS
#define SUFFIX(name) name##_f16
#define Q_TO_REAL active->convert->widen_f16
#define OUT_NARROW active->convert->narrow_f16
#define KV_ROW_OPS f16_rows
#include "flash_driver_template.h"
#undef SUFFIX
#undef Q_TO_REAL
#undef OUT_NARROW
#undef KV_ROW_OPS
#undef KV_ROW_OPS_MAX_ROWS
#undef KV_TO_REAL

/* bfloat16 on a path with a dot-product instruction (isa_path.bf16): Q, K and V multiplied
   as bfloat16 pairs, never widened (tile_ops.h, struct tile_ops_bf16); the split-KV path
   reads K and V in place through its row operations for any number of query rows (their
   queries widened, exactly, into staging). */
#undef TILE_OPS_T
#undef ACTIVE_OPS
#define TILE_OPS_T struct tile_ops_bf16
#define ACTIVE_OPS active->bf16
#define PAIRED 1
#define SUFFIX(name) name##_bf16_dot
#define Q_TO_REAL active->convert->widen_bf16
#define OUT_NARROW active->convert->narrow_bf16
#define KV_ROW_OPS dot_rows
#define KV_ROW_OPS_MAX_ROWS INT64_MAX
#include "flash_driver_template.h"   /* (which undefines PAIRED) */
#undef SUFFIX
#undef Q_TO_REAL
#undef OUT_NARROW
#undef KV_ROW_OPS
#undef KV_ROW_OPS_MAX_ROWS
#undef TILE_OPS_T
#undef ACTIVE_OPS
#define TILE_OPS_T struct tile_ops_f32
#define ACTIVE_OPS active->f32
#undef q_elem
#undef kv_elem

/* the int8 cache: float queries in place, K and V rows dequantised with their scales.
   Decoding reads them in place through the row operations with up to 8 query rows per K/V
   head, converting each vector once per ROW_GROUP rows (three instructions); with more,
   each block is dequantised once into staging for all of them. Measured, 2 threads,
   n_k = 65536, d = 64, 8 query heads on 1 K/V head, direct over staged: 1 query (8 rows)
   1.30x, 2 queries (16 rows) 1.00x, 4 queries (32 rows) 0.94x. */
#define q_elem float
#define kv_elem int8_t
#define KV_TO_REAL(x, scale, row0, rows, width, y) \
    active->convert->widen_q8((x) + (row0) * (width), (scale) + (row0), rows, width, y)
#define SUFFIX(name) name##_q8
#define INT8_KEYS 1
#define KV_ROW_OPS q8_rows
#define KV_ROW_OPS_MAX_ROWS 8
#include "flash_driver_template.h"
#undef SUFFIX
#undef KV_ROW_OPS
#undef KV_ROW_OPS_MAX_ROWS
#undef KV_TO_REAL
#undef kv_elem

/* the int4 cache: float queries in place, K and V rows (two codes a byte, a scale per 32
   values). The query tiles dequantise each tile into staging for the float32 operations.
   Decoding multiplies the keys in place as integers, a group of 32 at a time, each key
   byte widened once and split into its two nibbles (qk_rows_q4); up to 8 query rows per
   K/V head it unpacks a block's values to int8 codes (a group of 32 in 8 instructions) for
   the int8 rows' P·V a group of columns at a time; beyond, and on the generic path, the
   values are dequantised into staging. */
#define kv_elem uint8_t
#define KV_ROW_ELEMS(width) int4_row_bytes(width)
#define KV_ROW_SCALES(width) int4_row_scales(width)
#define KV_TO_REAL(x, scale, row0, rows, width, y) \
    active->convert->widen_q4((x) + (row0) * int4_row_bytes(width), (scale) + (row0) * int4_row_scales(width), \
                              rows, width, y)
#define KV_UNPACK(x, scale, row0, rows, width, codes, scales) \
    active->convert->unpack_q4((x) + (row0) * int4_row_bytes(width), (scale) + (row0) * int4_row_scales(width), \
                               rows, width, DECODE_KEY_BLOCK, codes, scales)
#define SUFFIX(name) name##_q4
#define INT8_KEYS 1
#define KV_ROW_OPS q8_rows
#define KV_ROW_OPS_MAX_ROWS 8
#include "flash_driver_template.h"
#undef SUFFIX
#undef KV_TO_REAL
#undef KV_UNPACK
#undef KV_ROW_OPS
#undef KV_ROW_OPS_MAX_ROWS
#undef q_elem
#undef kv_elem
#undef EXP2
#undef real
#undef TILE_OPS_T
#undef QUERY_TILE
#undef KEY_TILE
#undef KEY_CAP
#undef ACTIVE_OPS

#define real double
#define q_elem double
#define kv_elem double
#define SUFFIX(name) name##_f64
#define TILE_OPS_T struct tile_ops_f64
#define QUERY_TILE ATTN_F64_QUERY_TILE
#define KEY_TILE ATTN_F64_KEY_TILE
#define KEY_CAP round_up(KEY_TILE, KEY_BLOCK)
#define ACTIVE_OPS active->f64
#define EXP2 exp2
#define TILE_PEAK
#include "flash_driver_template.h"
#undef SUFFIX
#undef q_elem
#undef kv_elem
#undef EXP2
#undef real
#undef TILE_OPS_T
#undef QUERY_TILE
#undef KEY_TILE
#undef KEY_CAP
#undef ACTIVE_OPS

/* The entry points (attention.h): each instance's driver, given its K/V heads. */
#define SHAPE_ARGS batch, group, n_q, n_k, kv_rows, d, d_v, left, right, sinks, scale, n_threads
#define SHAPE_PARAMS(real) int64_t batch, int64_t group, int64_t n_q, int64_t n_k, int64_t kv_rows, \
    int64_t d, int64_t d_v, int64_t left, int64_t right, int64_t sinks, real scale, int n_threads

int attn_forward_f32(const float *q, const float *k, const float *v, float *out, SHAPE_PARAMS(float))
{
    return forward_f32(q, &(struct kv_f32){.k = k, .v = v}, out, 0, SHAPE_ARGS);
}

int attn_forward_f64(const double *q, const double *k, const double *v, double *out, SHAPE_PARAMS(double))
{
    return forward_f64(q, &(struct kv_f64){.k = k, .v = v}, out, 0, SHAPE_ARGS);
}

/* bfloat16 through the active path's dot products where it has them, else widened */
int attn_forward_bf16(const uint16_t *q, const uint16_t *k, const uint16_t *v, void *out, int round_out,
                      SHAPE_PARAMS(float))
{
    if (active->bf16)
        return forward_bf16_dot(q, &(struct kv_bf16_dot){.k = k, .v = v}, out, round_out, SHAPE_ARGS);
    return forward_bf16(q, &(struct kv_bf16){.k = k, .v = v}, out, round_out, SHAPE_ARGS);
}

int attn_forward_f16(const uint16_t *q, const uint16_t *k, const uint16_t *v, void *out, int round_out,
                     SHAPE_PARAMS(float))
{
    return forward_f16(q, &(struct kv_f16){.k = k, .v = v}, out, round_out, SHAPE_ARGS);
}

int attn_forward_q8(const float *q, const int8_t *k, const float *k_scale, const int8_t *v,
                    const float *v_scale, float *out, SHAPE_PARAMS(float))
{
    return forward_q8(q, &(struct kv_q8){.k = k, .v = v, .k_scale = k_scale, .v_scale = v_scale},
                      out, 0, SHAPE_ARGS);
}

int attn_forward_q4(const float *q, const uint8_t *k, const float *k_scale, const uint8_t *v,
                    const float *v_scale, float *out, SHAPE_PARAMS(float))
{
    return forward_q4(q, &(struct kv_q4){.k = k, .v = v, .k_scale = k_scale, .v_scale = v_scale},
                      out, 0, SHAPE_ARGS);
}

double attn_tile_peak(int32_t bits, int64_t d, int32_t threads, int64_t rounds)
{
    if (d < 1 || (bits != 32 && bits != 64))
        return -1.0;
    return bits == 32 ? tile_peak_f32(d, threads, rounds) : tile_peak_f64(d, threads, rounds);
}
