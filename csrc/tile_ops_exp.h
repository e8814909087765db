/* The constants of the SIMD tile operations' exp, per precision; the algorithm, shared by
   every ISA, is v_exp in tile_ops_simd_template.h:
     x = k·ln2 + r with |r| <= ln2/2,  exp(x) = 2^k · p(r)
   k is rounded by adding 1.5·2^m + bias (m mantissa bits), which also leaves k + bias, the
   biased exponent of 2^k, in the low bits of the sum; r = x − k·ln2 in two steps
   (Cody–Waite), ln2_hi having enough trailing zero bits that k·ln2_hi is exact.
     float32: degree 5, p(r) = 1 + r + r²·q(r) with q of degree 3 fitted minimax in
              relative error (1.05e-7, under an eps), within 2.2 ulp for x in [−87.3, 88]
              (2M points against float64); p(0) = 1, so exp(0) = 1 exactly and a running
              sum rescaled by exp(m − m) keeps its bits (the query tiles' online softmax: a
              row that sees none of a tile's keys ends as it would without the tile; the
              earlier fit's 1 + eps at 0 made a row's last bit depend on its panel);
              ln2_hi has 12 trailing zero bits
     float64: degree 11 (error < 1 eps), within an ulp for x in [−708.3, 709]; ln2_hi has
              21 trailing zero bits
   Below the underflow bound (a subnormal result) and at −inf the result is 0: such a weight
   is below the smallest normal next to the row maximum's weight 1. */
#ifndef ATTNBENCH_TILE_OPS_EXP_H
#define ATTNBENCH_TILE_OPS_EXP_H

/* each file uses one precision's constants */
#define EXP_CONSTANT static const __attribute__((unused))

EXP_CONSTANT float exp_round_biased_f32 = 12583039.0f;   /* 1.5·2^23 + 127 */
EXP_CONSTANT float exp_log2e_f32 = 1.44269504088896341f;
EXP_CONSTANT float exp_ln2_hi_f32 = 6.931152344e-01f;
EXP_CONSTANT float exp_ln2_lo_f32 = 3.194618330e-05f;
EXP_CONSTANT float exp_underflow_f32 = -87.33654475f;   /* −126·ln2 */
EXP_CONSTANT float exp_poly_f32[] = {   /* highest power first */
    0.008312525f, 0.041890115f, 0.16667114f, 0.49999234f, 1.0f, 1.0f,
};

EXP_CONSTANT double exp_round_biased_f64 = 6755399441056767.0;   /* 1.5·2^52 + 1023 */
EXP_CONSTANT double exp_log2e_f64 = 1.4426950408889634;
EXP_CONSTANT double exp_ln2_hi_f64 = 6.93147180369123816e-01;
EXP_CONSTANT double exp_ln2_lo_f64 = 1.90821492927058770e-10;
EXP_CONSTANT double exp_underflow_f64 = -708.3964185322641;   /* −1022·ln2 */
EXP_CONSTANT double exp_poly_f64[] = {   /* highest power first */
    2.5110037605963777e-08, 2.763263963904103e-07, 2.755724091857897e-06,
    2.4801485482328494e-05, 0.00019841269890047113, 0.0013888888952314775,
    0.008333333333319601, 0.0416666666664881, 0.1666666666666668,
    0.5000000000000019, 1.0, 1.0,
};

#endif
