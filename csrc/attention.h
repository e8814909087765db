/* attnbench C kernel: fused, tiled self-attention  out = softmax(scale · Q Kᵀ) V.
   The declarations below are the whole public interface; csrc/build_attention.py feeds
   them (preprocessor lines and comments removed) to cffi's cdef. */
#ifndef ATTNBENCH_ATTENTION_H
#define ATTNBENCH_ATTENTION_H

#include <stdint.h>

/* Query head h of batch (= B: batch and heads flattened) attends to K/V head h / group, so
   B must be a multiple of group (1: one K/V head per query head; B: one for all, multi-query).
     q (B, n_q, d), out (B, n_q, d_v): C-contiguous.
     K/V head g: its n_k rows at k + g·kv_rows·d (d each) and v + g·kv_rows·d_v (d_v each),
       rows contiguous within a head; kv_rows >= n_k is the rows from one head to the next,
       so that a cache with spare capacity (heads, kv_rows, d) is read in place, [:, :n_k].
   left, right, sinks: the keys each query sees (kernels/band.py): query i, at position
     p = i + (n_k - n_q), sees key j when j <= p + right and (j >= p - left or j < sinks); a
     negative left or right is unbounded (full attention: -1, -1, 0; causal: -1, 0, 0). Key
     tiles outside the band are skipped: a window costs O(n_q · (left + right + sinks)).
     A query that sees no key gets a zero row.
   Returns 0 on success (batch = 0 or n_q = 0: nothing written), 1 if scratch memory could not
   be allocated (out is then unspecified), -1 for a shape it cannot read (a negative size,
   d < 1, group < 1, batch not a multiple of it, kv_rows < n_k). */
int attn_forward_f32(const float *q, const float *k, const float *v, float *out,
                     int64_t batch, int64_t group, int64_t n_q, int64_t n_k, int64_t kv_rows,
                     int64_t d, int64_t d_v, int64_t left, int64_t right, int64_t sinks,
                     float scale, int n_threads);
int attn_forward_f64(const double *q, const double *k, const double *v, double *out,
                     int64_t batch, int64_t group, int64_t n_q, int64_t n_k, int64_t kv_rows,
                     int64_t d, int64_t d_v, int64_t left, int64_t right, int64_t sinks,
                     double scale, int n_threads);
/* The 16-bit types, given as their bits (bfloat16, IEEE float16): widened exactly to float a
   tile (or a block of decode rows) at a time and computed as attn_forward_f32 computes.
   out is float when round_out is 0; otherwise the inputs' 16-bit type (its bits), each row
   rounded to nearest even as it is stored (as NumPy's and ml_dtypes' casts of the float
   result round it). */
int attn_forward_bf16(const uint16_t *q, const uint16_t *k, const uint16_t *v, void *out, int round_out,
                      int64_t batch, int64_t group, int64_t n_q, int64_t n_k, int64_t kv_rows,
                      int64_t d, int64_t d_v, int64_t left, int64_t right, int64_t sinks,
                      float scale, int n_threads);
int attn_forward_f16(const uint16_t *q, const uint16_t *k, const uint16_t *v, void *out, int round_out,
                     int64_t batch, int64_t group, int64_t n_q, int64_t n_k, int64_t kv_rows,
                     int64_t d, int64_t d_v, int64_t left, int64_t right, int64_t sinks,
                     float scale, int n_threads);
/* An int8 KV cache with a float scale per row: key j of K/V head g is
   k_scale[g·kv_rows + j] · k[g·kv_rows·d + j·d + c] (each product rounded once to float),
   and likewise v with v_scale; q and out are float, shaped and laid out as above. Read in
   place (1 byte per element and 4 per row), dequantised a block of rows at a time inside
   the loops, and computed exactly as attn_forward_f32 computes on the dequantised K and V.
   A row whose scale is NaN dequantises to NaN. */
int attn_forward_q8(const float *q, const int8_t *k, const float *k_scale, const int8_t *v,
                    const float *v_scale, float *out, int64_t batch, int64_t group, int64_t n_q,
                    int64_t n_k, int64_t kv_rows, int64_t d, int64_t d_v, int64_t left, int64_t right,
                    int64_t sinks, float scale, int n_threads);
/* An int4 KV cache: each row of K (and V) is ceil(d / 2) bytes, value c the nibble c % 2
   (low first) of byte c / 2 less 8, times k_scale[row · ceil(d / 32) + c / 32], the scale of
   its group of 32 (kernels/cache_formats.py); rows and their scales lie as the int8 cache's,
   kv_rows rows a head. Read in place (d / 2 bytes and 4 per group a row), dequantised a block
   of rows at a time, and computed exactly as attn_forward_f32 computes on the dequantised
   K and V. A group whose scale is NaN dequantises to NaN. */
int attn_forward_q4(const float *q, const uint8_t *k, const float *k_scale, const uint8_t *v,
                    const float *v_scale, float *out, int64_t batch, int64_t group, int64_t n_q,
                    int64_t n_k, int64_t kv_rows, int64_t d, int64_t d_v, int64_t left, int64_t right,
                    int64_t sinks, float scale, int n_threads);

/* SIMD path: "auto" (default: the best the CPU has of AVX-512 (F, VL) with AVX512-BF16 (and
   BW) where its dot products beat float32's FMAs (attn_bf16_dot_pays), AVX-512, AVX2+FMA+F16C,
   generic), "avx512-bf16", "avx512", "avx2-fma", "generic", or
   "avx512-bf16-emulated" (the avx512-bf16 path with each instruction emulated in portable C,
   on any CPU: slow, for checking it; never chosen by "auto"). Only bfloat16 calls differ
   between avx512-bf16 and avx512: multiplied by vdpbf16ps, two exact products per float32
   lane, P rounded to bfloat16 once (tile_ops.h). Returns 0, or -1 for an unknown name or an
   ISA the CPU lacks. */
int attn_select_isa(const char *name);
const char *attn_active_isa(void);   /* the name of the path selected */

/* The int8 cache's integer dot products (tile_ops.h, struct int8_dot_ops): the unit the
   selected path uses ("avx512-vnni", "avx-vnni", "avx2" or "generic"; attn_select_isa
   picks the best the CPU runs), whether the CPU runs a unit (1 or 0), and another the CPU
   runs, selected by name (-1 if it does not run it). attn_int8_scores, for the tests: s (rows, s_stride) = scale · q̃ · Kᵀ as a
   decode step computes it with the unit named, q (rows, d) quantised as the step quantises
   it; 1 <= rows <= 4, 1 <= keys <= 64, s_stride >= keys rounded up to 16; -1 if the CPU
   does not run the unit or the sizes are out of range. */
int attn_int8_dot_runs(const char *unit);
/* query rows per head up to which a call decodes (the split-KV path; int8: quantised queries) */
int64_t attn_decode_max_queries(void);
int attn_select_int8_dot(const char *unit);
const char *attn_int8_dot(void);
int attn_int8_scores(const char *unit, const int8_t *k, const float *k_scale, int64_t keys, int64_t d,
                     const float *q, int64_t rows, float scale, float *s, int64_t s_stride);
/* attn_int4_scores: the same on int4 keys k (keys, ceil(d / 2) bytes) and their scales
   (keys, ceil(d / 32)), laid out as the int4 cache's, q quantised a group of 32 values at a
   time as the step quantises it, the groups' scores added in order */
int attn_int4_scores(const char *unit, const uint8_t *k, const float *k_scale, int64_t keys, int64_t d,
                     const float *q, int64_t rows, float scale, float *s, int64_t s_stride);

/* AVX512-BF16's instructions over arrays, on the path named ("avx512-bf16" or
   "avx512-bf16-emulated"), so that the emulation can be held to the unit: attn_bf16_dot:
   acc[i] = vdpbf16ps of (acc[i], a[i], b[i]), a and b each two bfloat16 (the first in the
   low half); attn_bf16_round: y[i] = x[i] rounded to bfloat16 as vcvtne2ps2bf16 rounds, for
   i < n. Return 0, or -1 for a path that has no such unit or that the CPU lacks. */
int attn_bf16_dot(const char *isa, float *acc, const uint32_t *a, const uint32_t *b, int64_t n);
int attn_bf16_round(const char *isa, const float *x, int64_t n, uint16_t *y);

/* attnbench's thread pool (pool.c), which c_tiled's tasks and numba_tiled's compiled tasks
   both run on.  A task: context is its loop's, task its index in [0, n_tasks), worker the
   index in [0, threads) of the thread running it: 0 is the caller, and no two threads run
   tasks of one loop under the same index (so that it can pick per-thread scratch). */
typedef void (*pool_task_fn)(void *context, int64_t task, int32_t worker);

/* Who claims which of a loop's tasks.  POOL_IN_ORDER: one queue, claimed in index order by
   whichever thread is free, so that a list sorted heaviest first ends balanced (the query
   tiles of a causal call).  POOL_IN_SHARES: thread w of the loop's t owns the contiguous
   indices [n·w/t, n·(w + 1)/t) and claims them in order, then claims from the others'
   shares: a loop run again over the same data (a decode step's chunks of one cache) finds
   each share's bytes in the core's cache that read them last time. */
enum pool_order { POOL_IN_ORDER, POOL_IN_SHARES };

/* Runs task(context, t, worker) once for every t in [0, n_tasks) and returns when all have
   run.  The calling thread claims tasks itself from the start; up to threads − 1 helper
   threads are woken and claim tasks too once they are running.  The caller waits only for
   tasks a helper has started, never for a helper that has not started one: the shares of a
   helper that never runs are claimed by the others.  Every task runs on the calling thread
   when threads <= 1 or while another loop holds the helpers (a concurrent call from another
   thread, or a task that calls in again). */
void pool_run(int64_t n_tasks, int32_t threads, enum pool_order order, pool_task_fn task, void *context);

/* The threads worth using for a call of this many flops under a budget of `threads`: 1
   below the size at which a helper's wake-up costs more than it saves. */
int32_t pool_threads_for(int32_t threads, double flops);

/* Helper threads started so far (they live as long as the process, sleeping when idle). */
int32_t pool_helpers_started(void);

/* The compute roof (fma_peak.c).  The FMA loops this CPU runs, best first, by index, under
   the names attn_active_isa reports: "avx512-bf16" (AVX-512F and AVX512-BF16: AVX-512's
   loops, and bfloat16 dot products), "avx512" (AVX-512F), "avx2-fma", "generic" (portable C
   on 16-byte vectors, a multiply and an add); NULL past the last. */
const char *attn_fma_isa(int32_t index);

/* Runs `threads` tasks on the pool, one per thread, each `iterations` rounds of 12
   independent vector chains on `bits`-bit elements, and returns the flops they performed:
   2 · 12 · lanes · iterations · threads, lanes = the vector's bits / `bits` (512, 256, 128
   for avx512*, avx2-fma, generic).  bits 32 and 64: FMAs on float32 and float64 lanes;
   bits 16, on "avx512-bf16" only: vdpbf16ps on pairs of bfloat16 lanes summed into float32,
   so 2 flops per bfloat16 product as per float32 FMA.  -1 when the CPU lacks `isa`, when
   `isa` has no loop of `bits` or is unknown, or when one double per thread could not be
   allocated.  The caller times it. */
double attn_fma_peak(const char *isa, int32_t bits, int32_t threads, int64_t iterations);

/* The ceiling of c_tiled's design on this CPU: its tile operations alone (qk_tile,
   online_softmax, pv_tile on the selected path's panels), on the pool's `threads` threads,
   each walking one packed key tile over one packed query tile of a large call's rows,
   `rounds` times, as a call walks each of its key tiles (no packing, transposing or walk
   over heads and tiles); `bits` 32 or 64 for float32 or float64, d = d_v. Returns the flops
   performed, 4 · rows · keys · d a round and thread, or -1 for other bits, d < 1, or
   scratch that could not be allocated.  The caller times it. */
double attn_tile_peak(int32_t bits, int64_t d, int32_t threads, int64_t rounds);
/* 1 when this CPU multiplies bfloat16 faster on AVX512-BF16's dot products than widened
   to float32 on AVX-512's FMAs (their loops timed once on the calling thread, ~0.5 ms, at
   the first call), else 0 (and on a CPU without the unit).  "auto" takes the avx512-bf16
   path only then. */
int attn_bf16_dot_pays(void);

/* The memory roof (read_peak.c): the sum of x[0 .. n), read once on the pool's `threads`
   threads (parts of it claimed as a decode step's tasks are), with the widest vector loads
   this CPU has.  The caller times it. */
double attn_read_sum(const double *x, int64_t n, int32_t threads);

#endif
