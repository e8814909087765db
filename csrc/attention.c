/* attnbench C kernel: public entry points, SIMD path selection, and the two instances
   (float, double) of the tiled online-softmax driver in flash_driver_template.h.

   Tile sizes (query rows × keys per tile, per thread). Swept with csrc/sweep_tiles.py (1 thread,
   n = 4096, d = 64, GFLOP/s full/causal, best of 8 shuffled rounds on a shared 2-core Zen 3
   VM, so differences below ~3% are noise):
     float32  192×128 69.8/66.9  192×256 72.3/68.3  264×64 69.9/66.4  264×128 71.9/68.0
              264×256 72.4/68.8;  (4 rounds) query tiles of 96-144 rows: 55-68
     float64  96×256 25.7/28.1   192×128 26.9/27.4  264×64 28.8/29.7  264×128 30.3/29.8
              264×256 30.4/28.9
   Large query tiles win: each K and V row read from memory serves more queries. The key
   tile matters little; 128 keeps the score tile (264 × 128) at 135 KB (f32) in L2. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "tile_ops.h"

#ifndef ATTN_F32_QUERY_TILE
#define ATTN_F32_QUERY_TILE 264   /* a multiple of the 24-query panels */
#endif
#ifndef ATTN_F32_KEY_TILE
#define ATTN_F32_KEY_TILE 128
#endif
#ifndef ATTN_F64_QUERY_TILE
#define ATTN_F64_QUERY_TILE 264
#endif
#ifndef ATTN_F64_KEY_TILE
#define ATTN_F64_KEY_TILE 128
#endif

/* Split-KV (decode) path, flash_driver_template.h. Up to 4 query rows per head: a 24-row
   query panel would then be at least 6/7 padding, and each K and V row serves so few rows
   that the pass is bound by reading K and V, which the split path does once per head,
   spread over all threads. */
#ifndef DECODE_MAX_QUERIES
#define DECODE_MAX_QUERIES 4
#endif
#define DECODE_KEY_BLOCK 64    /* keys per row step: 64 K rows of d = 64 floats fill half of L1 */
#define DECODE_MIN_CHUNK 256   /* keys per task at least */

/* A call below this many flops (2 · batch · n_q · n_k · (d + d_v)) runs on the calling thread:
   waking the OpenMP team costs more than the second thread saves. Measured (one head,
   d = d_v = 64, float32, medians of 500 calls, 1 thread vs always 2 on a shared 2-core VM):
     n_q = 1:    n_k = 256 (6.6e4 flops) 4.2 vs 5.7 us,  n_k = 1024 (2.6e5) 12.1 vs 9.9 us
     n_q = n_k:  32 (2.6e5) 14.3 vs 10.1 us,  64 (1.0e6) 30.3 vs 23.2 us
   and a woken team on a busy machine can cost milliseconds (seen: 8 ms for n_k = 64). */
#ifndef PARALLEL_MIN_FLOPS
#define PARALLEL_MIN_FLOPS 2e5
#endif

#define CACHE_LINE 64

static size_t cache_lines(size_t bytes) { return (size_t)round_up((int64_t)bytes, CACHE_LINE); }

/* The problem's shape, shared by both precisions. */
struct shape {
    int64_t n_q, n_k, d, d_v;
    int causal;
    int64_t causal_offset;   /* query i sees keys j <= i + causal_offset */
    int64_t first_row;       /* rows before it see no key (causal with n_q > n_k) */
};

static struct shape make_shape(int64_t n_q, int64_t n_k, int64_t d, int64_t d_v, int causal)
{
    const int64_t offset = n_k - n_q;
    return (struct shape){
        .n_q = n_q, .n_k = n_k, .d = d, .d_v = d_v,
        .causal = causal != 0,
        .causal_offset = offset,
        .first_row = causal && offset < 0 ? -offset : 0,
    };
}

/* query i sees keys [0, visible_keys(i)) */
static int64_t visible_keys(const struct shape *sh, int64_t i)
{
    return sh->causal ? clamp_i64(i + sh->causal_offset + 1, 0, sh->n_k) : sh->n_k;
}

/* whether 2 · batch · n_q · n_k · (d + d_v) flops are worth more than one thread */
static int worth_threads(int64_t batch, int64_t n_q, int64_t n_k, int64_t d, int64_t d_v)
{
    return 2.0 * batch * n_q * n_k * (double)(d + d_v) >= PARALLEL_MIN_FLOPS;
}

static const struct tile_ops_f32 *ops_f32 = &tile_ops_generic_f32;
static const struct tile_ops_f64 *ops_f64 = &tile_ops_generic_f64;

static int cpu_has_avx2_fma(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

int attn_select_isa(const char *name)
{
    const int has_avx2 = cpu_has_avx2_fma();
    int avx2;
    if (strcmp(name, "auto") == 0)
        avx2 = has_avx2;
    else if (strcmp(name, "avx2") == 0 && has_avx2)
        avx2 = 1;
    else if (strcmp(name, "generic") == 0)
        avx2 = 0;
    else
        return -1;
    ops_f32 = avx2 ? &tile_ops_avx2_f32 : &tile_ops_generic_f32;
    ops_f64 = avx2 ? &tile_ops_avx2_f64 : &tile_ops_generic_f64;
    return 0;
}

const char *attn_active_isa(void)
{
    return ops_f32->isa;
}

__attribute__((constructor)) static void select_default_isa(void)
{
    attn_select_isa("auto");
}

#define real float
#define SUFFIX(name) name##_f32
#define QUERY_TILE ATTN_F32_QUERY_TILE
#define KEY_TILE ATTN_F32_KEY_TILE
#define KEY_CAP round_up(KEY_TILE, KEY_BLOCK)   /* Sᵀ rows per panel */
#define ACTIVE_OPS ops_f32
#define EXP expf
#include "flash_driver_template.h"
#undef EXP
#undef real
#undef SUFFIX
#undef QUERY_TILE
#undef KEY_TILE
#undef KEY_CAP
#undef ACTIVE_OPS

#define real double
#define SUFFIX(name) name##_f64
#define QUERY_TILE ATTN_F64_QUERY_TILE
#define KEY_TILE ATTN_F64_KEY_TILE
#define KEY_CAP round_up(KEY_TILE, KEY_BLOCK)
#define ACTIVE_OPS ops_f64
#define EXP exp
#include "flash_driver_template.h"
