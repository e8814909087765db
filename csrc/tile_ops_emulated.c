/* The avx512-bf16 path on any CPU: tile_ops_simd_template.h and tile_ops_bf16_dot.h over a
   vocabulary of portable C that computes what each AVX-512 and AVX512-BF16 instruction of
   tile_ops_avx512_f32.c computes, lane for lane and bit for bit: 16 float lanes, fmadd an
   exact fused multiply-add (fmaf), vscalefps an ldexpf, the reductions in
   _mm512_reduce_add_ps's order, vdpbf16ps and vcvtne2ps2bf16 as tile_ops.h's bf16_dot_lane and
   bf16_round_as_vcvtne emulate them. Same register plan (panels of 48 queries), same
   algorithm text.

   What it is for: the bfloat16 dot-product path's tiles, pairs and masks run, and are
   checked against float64 (the tests, `make sanitize`), on every CPU, also on those without
   the unit; and where the unit exists, this path and the real one give the same bits
   (tests/test_c_bf16_dot.py), which ties the emulation of each instruction to the unit
   (attn_bf16_dot, attn_bf16_round) and the real path's tile logic to this one. It is slow:
   a loop of scalar operations per vector instruction, and a libm call per fused
   multiply-add. Selected only by name (attention.c: "avx512-bf16-emulated"), never by
   "auto". */
#include <math.h>
#include <string.h>
#include "tile_ops.h"

#define TARGET
#define INLINE_TARGET static inline __attribute__((always_inline))
/* Each instruction a function of its own, called, not inlined: inlined into the template's
   fully unrolled micro-kernels, sixteen lanes of each took minutes to compile (and far
   longer under the sanitizers); called, the cost is a call per vector instruction beside
   sixteen lanes of work. */
#define INSTRUCTION static __attribute__((noinline, unused))
#define ISA_NAME "avx512-bf16-emulated"
#define TILE_OPS tile_ops_emulated_f32

#define real float
#define SUFFIX(name) name##_f32
#define LANES 16
typedef struct {
    float lane[LANES];
} vec;
#define V(op) emulated_##op
#define V_BROADCAST(p) emulated_set1(*(p))

/* tile_ops_avx512_f32.c's register plan */
#define PANEL_VECS 3
#define MICRO_KEYS 8
#define MICRO_COLS 8
#define ROW_KEYS 8
#define ROW_VECS 4

typedef uint16_t lane_mask;   /* bit i: lane i, as a __mmask16 */
#define NO_LANES ((lane_mask)0)
typedef uint16_t tail_mask;

#define EACH_LANE(i) for (int i = 0; i < LANES; i++)

INSTRUCTION vec emulated_loadu(const float *p)
{
    vec x;
    memcpy(x.lane, p, sizeof x.lane);
    return x;
}
INSTRUCTION vec emulated_load(const float *p) { return emulated_loadu(p); }
INSTRUCTION void emulated_storeu(float *p, vec x) { memcpy(p, x.lane, sizeof x.lane); }
INSTRUCTION void emulated_store(float *p, vec x) { emulated_storeu(p, x); }

INSTRUCTION vec emulated_set1(float a)
{
    vec x;
    EACH_LANE(i) x.lane[i] = a;
    return x;
}
INSTRUCTION vec emulated_setzero(void) { return emulated_set1(0.0f); }

/* vfmadd: a · b + c rounded once; vfnmadd: −(a · b) + c, the same rounding of the negation */
INSTRUCTION vec emulated_fmadd(vec a, vec b, vec c)
{
    EACH_LANE(i) c.lane[i] = fmaf(a.lane[i], b.lane[i], c.lane[i]);
    return c;
}
INSTRUCTION vec emulated_fnmadd(vec a, vec b, vec c)
{
    EACH_LANE(i) c.lane[i] = fmaf(-a.lane[i], b.lane[i], c.lane[i]);
    return c;
}

#define EMULATED_BINARY(name, expression)                                                     \
    INSTRUCTION vec emulated_##name(vec a, vec b)                                            \
    {                                                                                         \
        EACH_LANE(i) a.lane[i] = expression;                                                  \
        return a;                                                                             \
    }
EMULATED_BINARY(mul, a.lane[i] * b.lane[i])
EMULATED_BINARY(add, a.lane[i] + b.lane[i])
EMULATED_BINARY(sub, a.lane[i] - b.lane[i])
EMULATED_BINARY(max, a.lane[i] > b.lane[i] ? a.lane[i] : b.lane[i])   /* vmaxps: b if either is NaN */
EMULATED_BINARY(min, a.lane[i] < b.lane[i] ? a.lane[i] : b.lane[i])   /* vminps: b if either is NaN */

INSTRUCTION lane_mask lanes_seeing(const int32_t *visible, int64_t j)
{
    lane_mask mask = 0;
    EACH_LANE(i) mask |= (lane_mask)((visible[i] > j) << i);
    return mask;
}

INSTRUCTION lane_mask v_lt(vec a, vec b)
{
    lane_mask mask = 0;
    EACH_LANE(i) mask |= (lane_mask)((a.lane[i] < b.lane[i]) << i);   /* false for NaN */
    return mask;
}

INSTRUCTION lane_mask v_eq(vec a, vec b)
{
    lane_mask mask = 0;
    EACH_LANE(i) mask |= (lane_mask)((a.lane[i] == b.lane[i]) << i);
    return mask;
}

INSTRUCTION vec v_zero_where(lane_mask mask, vec x)
{
    EACH_LANE(i) if (mask >> i & 1) x.lane[i] = 0.0f;
    return x;
}

INSTRUCTION vec v_fmadd_where(lane_mask mask, vec a, vec b, vec acc)
{
    EACH_LANE(i) if (mask >> i & 1) acc.lane[i] = fmaf(a.lane[i], b.lane[i], acc.lane[i]);
    return acc;
}

/* vscalefps zeroed in the lanes of zero: p · 2^floor(k), one rounding (ldexpf's); k is
   integral here, and infinite or NaN only where x was, whose p is NaN */
INSTRUCTION vec v_mul_pow2(vec p, vec k, vec t, lane_mask zero)
{
    (void)t;
    EACH_LANE(i) {
        const float e = k.lane[i];
        p.lane[i] = zero >> i & 1 ? 0.0f
                    : fabsf(e) <= 1000.0f ? ldexpf(p.lane[i], (int)floorf(e))
                    : p.lane[i] * (e > 0 ? INFINITY : e < 0 ? 0.0f : e);
    }
    return p;
}

/* vreduceps to nearest even, no fraction bits kept: x − rintf(x), exact (and +0 at ±inf,
   which v_exp2 clears) */
#define v_round_reduce v_round_reduce
INSTRUCTION vec v_round_reduce(vec x)
{
    EACH_LANE(i) x.lane[i] = isinf(x.lane[i]) ? 0.0f : x.lane[i] - rintf(x.lane[i]);
    return x;
}

INSTRUCTION tail_mask lanes_below(int64_t n)
{
    return (tail_mask)((1u << clamp_i64(n, 0, LANES)) - 1);
}

/* masked-off lanes are not read */
INSTRUCTION vec v_load_first(const float *p, tail_mask mask)
{
    vec x = emulated_setzero();
    EACH_LANE(i) if (mask >> i & 1) x.lane[i] = p[i];
    return x;
}

INSTRUCTION void v_store_first(float *p, tail_mask mask, vec x)
{
    EACH_LANE(i) if (mask >> i & 1) p[i] = x.lane[i];
}

/* _mm512_reduce_add_ps's tree: the upper 8 lanes onto the lower, then 4, then lanes 0 + 2 and
   1 + 3, then those two */
INSTRUCTION float v_hsum(vec x)
{
    for (int half = LANES / 2; half >= 4; half /= 2)
        for (int i = 0; i < half; i++)
            x.lane[i] = x.lane[i + half] + x.lane[i];
    return (x.lane[0] + x.lane[2]) + (x.lane[1] + x.lane[3]);
}

/* the largest lane, of lanes holding no NaN (any order gives it) */
INSTRUCTION float v_hmax(vec x)
{
    float most = x.lane[0];
    EACH_LANE(i) most = x.lane[i] > most ? x.lane[i] : most;
    return most;
}

/* rows of the other formats, exactly (ROW_FORMATS, tile_ops_row_template.h) */
#define ROW_FORMATS
INSTRUCTION vec load_row_bf16(const uint16_t *p)
{
    vec x;
    EACH_LANE(i) x.lane[i] = bf16_to_f32(p[i]);
    return x;
}
INSTRUCTION vec load_row_f16(const uint16_t *p)
{
    vec x;
    EACH_LANE(i) x.lane[i] = f16_to_f32(p[i]);
    return x;
}
INSTRUCTION vec load_row_q8(const int8_t *p)
{
    vec x;
    EACH_LANE(i) x.lane[i] = (float)p[i];
    return x;
}

/* bfloat16 dot products (tile_ops_bf16_dot.h): the vocabulary of tile_ops_avx512_f32.c's */
#define BF16_DOT_OPS tile_ops_emulated_bf16
#define DOT_TARGET
typedef struct {
    uint32_t lane[LANES];
} pairs;
#define P(op) pairs_##op

INSTRUCTION pairs pairs_loadu(const void *p)
{
    pairs x;
    memcpy(x.lane, p, sizeof x.lane);
    return x;
}
INSTRUCTION pairs pairs_load(const uint32_t *p) { return pairs_loadu(p); }
INSTRUCTION void pairs_storeu(void *p, pairs x) { memcpy(p, x.lane, sizeof x.lane); }
INSTRUCTION void pairs_store(uint32_t *p, pairs x) { pairs_storeu(p, x); }

INSTRUCTION pairs pairs_set1(uint32_t w)
{
    pairs x;
    EACH_LANE(i) x.lane[i] = w;
    return x;
}

INSTRUCTION pairs pairs_low_halves(pairs x)
{
    EACH_LANE(i) x.lane[i] &= 0xffff;
    return x;
}

INSTRUCTION vec v_dot(vec acc, pairs a, pairs b)
{
    EACH_LANE(i) acc.lane[i] = bf16_dot_lane(acc.lane[i], a.lane[i], b.lane[i]);
    return acc;
}

INSTRUCTION vec v_dot_where(lane_mask mask, vec acc, pairs a, pairs b)
{
    EACH_LANE(i) if (mask >> i & 1) acc.lane[i] = bf16_dot_lane(acc.lane[i], a.lane[i], b.lane[i]);
    return acc;
}

INSTRUCTION vec v_round_bf16(vec x)
{
    EACH_LANE(i) if (!isnan(x.lane[i])) x.lane[i] = bf16_to_f32(f32_to_bf16(x.lane[i]));
    return x;
}

INSTRUCTION pairs pairs_round(vec lo, vec hi)
{
    pairs x;
    EACH_LANE(i) x.lane[i] = bf16_round_as_vcvtne(lo.lane[i]) | (uint32_t)bf16_round_as_vcvtne(hi.lane[i]) << 16;
    return x;
}

INSTRUCTION pairs pairs_round_run(vec lo, vec hi)
{
    uint16_t words[2 * LANES];
    EACH_LANE(i) {
        words[i] = bf16_round_as_vcvtne(lo.lane[i]);
        words[LANES + i] = bf16_round_as_vcvtne(hi.lane[i]);
    }
    return pairs_loadu(words);
}

INSTRUCTION pairs pairs_first(const uint16_t *p, int64_t n)
{
    uint16_t words[2 * LANES] = {0};
    memcpy(words, p, n * sizeof *p);
    return pairs_loadu(words);
}

INSTRUCTION pairs pairs_of_rows(const uint16_t *a, const uint16_t *b, int64_t n)
{
    pairs x;
    EACH_LANE(i) x.lane[i] = i < n ? a[i] | (uint32_t)(b ? b[i] : 0) << 16 : 0;
    return x;
}

/* the packing moves values, each times a scale or not (one rounding, as every path's
   transpose multiplies): any exact transpose is the real path's */
#define TRANSPOSE transpose_generic_f32

#include "tile_ops_simd_template.h"
