/* The contract between the tiling driver (flash_driver.inc, plain C) and the per-ISA tile
   operations (tile_ops_avx2_f32.c, tile_ops_avx2_f64.c, tile_ops_generic.c).

   The driver packs one query tile and one key tile into per-thread scratch:
     q_pack  (rows, d)                        query rows; rows a multiple of ROW_BLOCK, padding rows zero
     kt_pack (keys_pad / key_panel, d, key_panel)
                                              Kᵀ in panels of key_panel keys; keys_pad a multiple of
                                              key_panel, padding keys zero
     v_pack  (keys, dv_pad)                   V rows; dv_pad a multiple of dv_align, padding columns zero
     s       (rows, ld_s)                     scores S, overwritten in place by probabilities P
     o       (rows, dv_pad)                   unnormalised output accumulator O
   visible[r] is how many leading keys of the tile row r sees (all of them except on the
   causal diagonal); keys beyond it must not touch row r, not even with weight 0, so that a
   NaN in a masked key's value cannot leak into the row. */
#ifndef ATTNBENCH_TILE_OPS_H
#define ATTNBENCH_TILE_OPS_H

#include <stdint.h>

#define ROW_BLOCK 4   /* query rows per micro-kernel call, for every ISA */

struct tile_ops_f32 {
    const char *isa;
    int64_t key_panel, dv_align;
    /* S (rows, keys_pad) = scale · Q Kᵀ */
    void (*qk_tile)(const float *q_pack, const float *kt_pack, float *s, int64_t ld_s,
                    int64_t rows, int64_t keys_pad, int64_t d, float scale);
    /* max of s[0:count], ignoring NaN (a NaN score reaches the sum through exp_row) */
    float (*row_max)(const float *s, int64_t count);
    /* s[0:count] = exp(s - m); returns their sum */
    float (*exp_row)(float *s, int64_t count, float m);
    /* O = alpha ⊙ O + P V, row r summing over its first visible[r] keys */
    void (*pv_tile)(const float *p, int64_t ld_p, const int64_t *visible, const float *alpha,
                    const float *v_pack, float *o, int64_t rows, int64_t dv_pad);
};

struct tile_ops_f64 {
    const char *isa;
    int64_t key_panel, dv_align;
    void (*qk_tile)(const double *q_pack, const double *kt_pack, double *s, int64_t ld_s,
                    int64_t rows, int64_t keys_pad, int64_t d, double scale);
    double (*row_max)(const double *s, int64_t count);
    double (*exp_row)(double *s, int64_t count, double m);
    void (*pv_tile)(const double *p, int64_t ld_p, const int64_t *visible, const double *alpha,
                    const double *v_pack, double *o, int64_t rows, int64_t dv_pad);
};

extern const struct tile_ops_f32 tile_ops_generic_f32, tile_ops_avx2_f32;
extern const struct tile_ops_f64 tile_ops_generic_f64, tile_ops_avx2_f64;

#endif
