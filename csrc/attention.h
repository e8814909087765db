/* attnbench C kernel: fused, tiled self-attention  out = softmax(scale · Q Kᵀ) V.
   The declarations below are the whole public interface; csrc/build_attention.py feeds
   them (preprocessor lines and comments removed) to cffi's cdef. */
#ifndef ATTNBENCH_ATTENTION_H
#define ATTNBENCH_ATTENTION_H

#include <stdint.h>

/* q (batch, n_q, d), k (batch, n_k, d), v (batch, n_k, d_v), out (batch, n_q, d_v); all C-contiguous.
   causal: query i sees keys j <= i + (n_k - n_q); a query that sees no key gets a zero row.
   Returns 0 on success, nonzero if scratch memory could not be allocated (out is then unspecified). */
int attn_forward_f32(const float *q, const float *k, const float *v, float *out,
                     int64_t batch, int64_t n_q, int64_t n_k, int64_t d, int64_t d_v,
                     int causal, float scale, int n_threads);
int attn_forward_f64(const double *q, const double *k, const double *v, double *out,
                     int64_t batch, int64_t n_q, int64_t n_k, int64_t d, int64_t d_v,
                     int causal, double scale, int n_threads);

/* SIMD path: "auto" (default: the best the CPU has of AVX-512 (F, VL), AVX2+FMA, generic),
   "avx512", "avx2", "generic". Returns 0, or -1 for an unknown name or an ISA the CPU lacks. */
int attn_select_isa(const char *name);
const char *attn_active_isa(void);   /* "avx512", "avx2-fma" or "generic" */

#endif
