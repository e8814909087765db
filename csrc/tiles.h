/* The C kernel's tile sizes and its split-KV threshold: internal to attention.c (not part of
   the cffi interface, attention.h), and shared with csrc/sanitize/, whose edge cases are
   written in terms of them. Each can be set from outside (-D), as csrc/sweep_tiles.py does:
   a tile-size sweep then rebuilds both the kernel and the sanitizer's cases at its sizes.
   Why these sizes: the sweep's measurements in attention.c's header comment. */
#ifndef ATTNBENCH_TILES_H
#define ATTNBENCH_TILES_H

/* Query rows × keys per tile, per thread. The query tiles must be multiples of every ISA's
   query panel (float32: 48, 24, 8; float64: 24, 12, 8); a narrow panel's tiles (float32:
   32, 16; float64: 16, 8; for calls of few rows) are at most the largest multiple of it. */
#ifndef ATTN_F32_QUERY_TILE
#define ATTN_F32_QUERY_TILE 1056
#endif
#ifndef ATTN_F32_KEY_TILE
#define ATTN_F32_KEY_TILE 128
#endif
#ifndef ATTN_F64_QUERY_TILE
#define ATTN_F64_QUERY_TILE 1056
#endif
#ifndef ATTN_F64_KEY_TILE
#define ATTN_F64_KEY_TILE 128
#endif

/* Split-KV (decode) path, flash_driver_template.h, for calls of at most this many query rows
   per head: a query panel (48 rows with AVX-512, 24 with AVX2) would then be at least 5/6
   padding, and each K and V row serves so few rows that the pass is bound by reading K and
   V, which the split path does once per head, spread over all threads. */
#ifndef DECODE_MAX_QUERIES
#define DECODE_MAX_QUERIES 4
#endif

/* Query tiles of at most this many rows read K's and V's rows in place rather than packed
   (float32 and float64; K: n_k a multiple of 8; V: d_v a multiple of 8, no window's left
   edge): measured in attention.c's header comment. */
#ifndef KV_IN_PLACE_ROWS
#define KV_IN_PLACE_ROWS 288
#endif

#endif
