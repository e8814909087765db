/* attnbench C kernel: public entry points, SIMD path selection, and the two instances
   (float, double) of the tiled online-softmax driver in flash_driver.inc.

   Tile sizes (rows of Q × keys of K per tile, per thread) and why:
     TODO filled in by the sweep */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "tile_ops.h"

#ifndef ATTN_F32_QUERY_TILE
#define ATTN_F32_QUERY_TILE 256
#endif
#ifndef ATTN_F32_KEY_TILE
#define ATTN_F32_KEY_TILE 192
#endif
#ifndef ATTN_F64_QUERY_TILE
#define ATTN_F64_QUERY_TILE 256
#endif
#ifndef ATTN_F64_KEY_TILE
#define ATTN_F64_KEY_TILE 192
#endif

#define CACHE_LINE 64

static int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t clamp_i64(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
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

static const struct tile_ops_f32 *ops_f32 = &tile_ops_generic_f32;
static const struct tile_ops_f64 *ops_f64 = &tile_ops_generic_f64;

static int cpu_has_avx2_fma(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

int attn_select_isa(const char *name)
{
    const int avx2 = strcmp(name, "avx2") == 0 || (strcmp(name, "auto") == 0 && cpu_has_avx2_fma());
    if (avx2 && !cpu_has_avx2_fma())
        return -1;
    if (!avx2 && strcmp(name, "generic") != 0 && strcmp(name, "auto") != 0)
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
#include "flash_driver.inc"
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
#include "flash_driver.inc"
