/* The constants of the SIMD tile operations' base-2 exponential, per precision; the
   algorithm, shared by every ISA, is v_exp2 in tile_ops_simd_template.h. The kernel's scores
   are in base-2 units (the driver's scale carries log2(e)), so that the range reduction is a
   rounding and one exact subtraction, an operation fewer per score vector than e^x's:
     x = k + r with k an integer, |r| <= 1/2,  2^x = 2^k · p(r)
   k is rounded by adding 1.5·2^m + bias (m mantissa bits), which also leaves k + bias, the
   biased exponent of 2^k, in the low bits of the sum; r = x − k is exact.
   p(r) is the earlier fits of e^s on |s| <= ln2/2 composed with s = r · ln2 (coefficient i
   times ln2^i, in 50 digits, then rounded), so p(0) = 1 and 2^0 = 1 exactly, and a running
   sum rescaled by 2^(m − m) keeps its bits (the query tiles' online softmax: a row that sees
   none of a tile's keys ends as it would without the tile):
     float32: degree 5, the fit minimax in relative error (1.05e-7, under an eps); within
              2.11 ulp for x in [−126, 0] (4M points against float64)
     float64: degree 11 (error < 1 eps), within an ulp for x in [−1022, 0] (3M points
              against 80-bit long double)
   x <= 0 is all the kernel asks for: a score less its row's running maximum, or an old
   maximum less a new one.
   Below the underflow bound (a subnormal result) and at −inf the result is 0: such a weight
   is below the smallest normal next to the row maximum's weight 1. */
#ifndef ATTNBENCH_TILE_OPS_EXP_H
#define ATTNBENCH_TILE_OPS_EXP_H

/* each file uses one precision's constants */
#define EXP_CONSTANT static const __attribute__((unused))

EXP_CONSTANT float exp2_round_biased_f32 = 12583039.0f;   /* 1.5·2^23 + 127 */
EXP_CONSTANT float exp2_underflow_f32 = -126.0f;
EXP_CONSTANT float exp2_poly_f32[] = {   /* highest power first */
    1.330026425e-03f, 9.669709019e-03f, 5.550559983e-02f, 2.402228266e-01f, 6.931471825e-01f, 1.0f,
};

EXP_CONSTANT double exp2_round_biased_f64 = 6755399441056767.0;   /* 1.5·2^52 + 1023 */
EXP_CONSTANT double exp2_underflow_f64 = -1022.0;
EXP_CONSTANT double exp2_poly_f64[] = {   /* highest power first */
    4.4558179083360645e-10, 7.074194297288521e-09, 1.0178057087733941e-07,
    1.3215432535912377e-06, 1.5252733841556772e-05, 0.00015403530463724356,
    0.001333355814640647, 0.009618129107587258, 0.055504108664821625,
    0.2402265069591016, 0.6931471805599453, 1.0,
};

#endif
