/* The shapes check_attention.c runs: struct shape, and the C kernel's own edges
   (KERNEL_EDGES), written in terms of the kernel's constants in csrc/tiles.h, so that they
   follow its tile sizes and split-KV threshold (also when those are set with -D).
   The harness's shapes are not here: build/sanitize/harness_cases.h (HARNESS_CASES) is
   generated from kernels.harness.CASES by harness_cases.py, and included after this file.
   tests/test_sanitize_cases.py checks both tables. */
#ifndef ATTNBENCH_SANITIZE_CASES_H
#define ATTNBENCH_SANITIZE_CASES_H

#include <stdint.h>

#include "tiles.h"

/* the 16-bit types run on float32's tiles (they are widened to float32 as they are packed;
   on an AVX512-BF16 path bfloat16 is packed in pairs instead, in the same tiles), and so do
   Q8, the int8 KV cache (float32 q, int8 K and V with a float32 scale per row, dequantised
   as they are packed), and Q4, the int4 one (two codes a byte, a float32 scale per 32
   values of a row) */
enum dtype { F32, F64, BF16, F16, Q8, Q4, N_DTYPES };

enum poison { CLEAN, NAN_Q, NAN_K, NAN_V, INF_Q };

/* The keys each query sees (attention.h): a negative left or right is unbounded. */
struct band {
    int64_t left, right, sinks;
};

/* q (batch, n_q, d), k (batch, n_k, d), v (batch, n_k, d_v) -> out (batch, n_q, d_v);
   every shape runs full and causal, or with its own band when it has one */
struct shape {
    const char *name;
    int64_t batch, n_q, n_k, d, d_v;
    double logit_scale;     /* multiplies q and k: large logits */
    enum poison poison;     /* NaN or Inf at row min(3, rows - 1), column 1 % columns, every head
                               (an int8 or int4 K or V: that row's scales NaN) */
    unsigned skip_dtypes;   /* the types (1u << F32, ...) not to run it at; 0: none */
    int banded;             /* 1: run with `band` (a window, sinks) instead */
    struct band band;
};
/* A shape without a band of its own leaves banded and band out of its initializer: zero, as
   C has it, which -Wextra's -Wmissing-field-initializers would report line by line. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

/* A shape with grouped query heads: batch query heads, batch / group K/V heads (query head h
   reads K/V head h / group), the K/V heads n_k + kv_spare rows apart (a cache's spare
   capacity: filled with NaN, so that a read of it shows in the result). */
struct grouped_shape {
    struct shape shape;
    int64_t group, kv_spare;
};

#define FLOAT32_TILES (1u << F64)                       /* float32, bfloat16, float16, int8, int4 */
#define FLOAT64_TILES (1u << F32 | 1u << BF16 | 1u << F16 | 1u << Q8 | 1u << Q4)    /* float64 */

/* The query-tile path at the edges of one precision's tiles, query_tile rows × key_tile
   keys, at the types that run on those tiles only: a tile, one short of it and one past it in both directions,
   two and one past, and n_q > n_k, which leaves key_tile rows that see no key when causal
   (and then query_tile + 1 that do); windows whose left edges cross the key tiles, with
   sinks spanning more than a key tile and a NaN value behind every window but a few. 4 heads, because the kernel shrinks a query tile until
   all heads give about four tiles per thread (flash_driver_template.h): one thread then
   keeps whole tiles; the calls on more threads cover the shrunk ones. */
#define TILE_EDGES(dtype, only, query_tile, key_tile)                                            \
    {dtype " tiles: one tile", 4, (query_tile), (key_tile), 24, 20, 1, CLEAN, only},             \
    {dtype " tiles: one short", 4, (query_tile) - 1, (key_tile) - 1, 12, 12, 1, CLEAN, only},    \
    {dtype " tiles: one past", 4, (query_tile) + 1, (key_tile) + 1, 12, 12, 1, CLEAN, only},     \
    {dtype " tiles: two and one past", 4, 2 * (query_tile) + 1, 2 * (key_tile) + 1, 8, 8, 1,     \
     CLEAN, only},                                                                               \
    {dtype " tiles: n_q > n_k (causal: rows that see no key)", 4, (query_tile) + (key_tile) + 1, \
     (query_tile) + 1, 32, 32, 1, CLEAN, only},                                                  \
    {dtype " tiles: window (key_tile - 1, 0) + 3 sinks", 4, 2 * (query_tile) + 1,                \
     2 * (query_tile) + 1, 16, 16, 1, CLEAN, only, 1, {(key_tile) - 1, 0, 3}},                   \
    {dtype " tiles: window (2, key_tile) + key_tile + 1 sinks, n_q < n_k", 4, (query_tile) + 5,  \
     (query_tile) + 3 * (key_tile), 16, 16, 1, CLEAN, only, 1, {2, (key_tile), (key_tile) + 1}}, \
    {dtype " tiles: window (2, 0), NaN in v", 4, (query_tile) + 1, (query_tile) + 1, 8, 8, 1,   \
     NAN_V, only, 1, {2, 0, 0}}

static const struct shape KERNEL_EDGES[] = {
    /* the split-KV path: n_q <= DECODE_MAX_QUERIES */
    {"split-KV n_q=1 n_k=1 d=1", 1, 1, 1, 1, 1, 1, CLEAN, 0},
    {"split-KV most queries, n_q > n_k (rows that see no key)", 2, DECODE_MAX_QUERIES,
     (DECODE_MAX_QUERIES + 1) / 2, 16, 16, 1, CLEAN, 0},
    {"split-KV n_q=2 n_k=70 d=9 d_v=70", 3, 2, 70, 9, 70, 1, CLEAN, 0},
    {"split-KV n_q=1 n_k=1100 (threaded, in chunks)", 1, 1, 1100, 64, 64, 1, CLEAN, 0},
    {"split-KV most queries, 8 heads n_k=3000 d=40 d_v=72", 8, DECODE_MAX_QUERIES, 3000, 40, 72,
     1, CLEAN, 0},
    {"split-KV large logits x30 n_q=3 n_k=700", 2, 3, 700, 64, 64, 30, CLEAN, 0},
    {"split-KV NaN in q", 2, DECODE_MAX_QUERIES, 900, 16, 16, 1, NAN_Q, 0},
    {"split-KV NaN in k", 2, DECODE_MAX_QUERIES, 900, 16, 16, 1, NAN_K, 0},
    {"split-KV NaN in v", 2, DECODE_MAX_QUERIES, 900, 16, 16, 1, NAN_V, 0},
    {"split-KV Inf in q", 2, DECODE_MAX_QUERIES, 900, 16, 16, 1, INF_Q, 0},
    /* a window's few queries take the query tiles; a right edge alone, the split-KV path */
    {"decode with a window (20, 0) + 4 sinks n_k=300", 2, 1, 300, 16, 16, 1, CLEAN, 0, 1, {20, 0, 4}},
    {"split-KV right edge (none, 5) n_q=3 n_k=300", 2, 3, 300, 16, 16, 1, CLEAN, 0, 1, {-1, 5, 0}},
    /* the query-tile path, from its first n_q to the edges of each precision's tiles */
    {"query tiles: one past split-KV", 1, DECODE_MAX_QUERIES + 1, DECODE_MAX_QUERIES + 1, 8, 8,
     1, CLEAN, 0},
    TILE_EDGES("float32", FLOAT32_TILES, ATTN_F32_QUERY_TILE, ATTN_F32_KEY_TILE),
    TILE_EDGES("float64", FLOAT64_TILES, ATTN_F64_QUERY_TILE, ATTN_F64_KEY_TILE),
};

/* grouped query heads and K/V heads with spare rows between them: the split-KV path takes a
   group's query heads as one head of group · n_q rows, the query-tile path points each query
   head at its K/V head */
static const struct grouped_shape GROUPED_EDGES[] = {
    {{"grouped 2, split-KV n_q=1, spare rows", 4, 1, 300, 64, 64, 1, CLEAN, 0}, 2, 37},
    {{"grouped 4, split-KV most queries n_k=1100 d=9 d_v=70, spare rows", 8, DECODE_MAX_QUERIES,
      1100, 9, 70, 1, CLEAN, 0}, 4, 5},
    {{"grouped 4, split-KV most queries, n_q > n_k (rows that see no key)", 4, DECODE_MAX_QUERIES,
      (DECODE_MAX_QUERIES + 1) / 2, 16, 16, 1, CLEAN, 0}, 4, 3},
    {{"grouped 2, split-KV NaN in k, spare rows", 4, DECODE_MAX_QUERIES, 900, 16, 16, 1, NAN_K, 0},
     2, 1},
    {{"grouped 2, split-KV NaN in v", 4, 3, 900, 16, 16, 1, NAN_V, 0}, 2, 0},
    {{"multi-query (group = batch), split-KV n_q=2 n_k=2000 (threaded)", 8, 2, 2000, 64, 64, 1,
      CLEAN, 0}, 8, 64},
    {{"grouped 2, query tiles n_q=50 n_k=300, spare rows", 4, 50, 300, 24, 20, 1, CLEAN, 0}, 2, 11},
    {{"grouped 4, query tiles one past split-KV, n_q > n_k", 8, DECODE_MAX_QUERIES + 1, 2, 8, 8, 1,
      CLEAN, 0}, 4, 2},
    {{"grouped 4, float32 tiles: one past, spare rows", 4, ATTN_F32_QUERY_TILE + 1,
      ATTN_F32_KEY_TILE + 1, 12, 12, 1, CLEAN, FLOAT32_TILES}, 4, 7},
    {{"grouped 2, float64 tiles: one past, spare rows", 4, ATTN_F64_QUERY_TILE + 1,
      ATTN_F64_KEY_TILE + 1, 12, 12, 1, CLEAN, FLOAT64_TILES}, 2, 7},
    {{"grouped 2, query tiles NaN in k", 4, 40, 70, 16, 16, 1, NAN_K, 0}, 2, 0},
};

#endif
