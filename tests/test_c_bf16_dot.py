"""c_tiled's bfloat16 dot-product path: AVX512-BF16's vdpbf16ps and vcvtne2ps2bf16, and their
emulation in portable C (csrc/tile_ops.h: bf16_dot_lane, bf16_round_as_vcvtne), which the
"avx512-bf16-emulated" path runs on any CPU.

- The emulation of each instruction is held to the instruction reference's words with
  exact rational arithmetic (vdpbf16ps: per lane, c += a.high · b.high, then c += a.low ·
  b.low, each a fused step: subnormal inputs read as zero, one rounding to nearest even,
  a result tiny after rounding written as a zero of its sign), on random and edge-case
  lanes, on every CPU; and, where the CPU has the unit, to the unit itself, bit for bit.
- The whole path: where the CPU has the unit, the real path and the emulated one give the
  same bits on the harness's cases (so the emulated path, which the tests and `make
  sanitize` run everywhere, checks the real path's tiles, pairs and masks); and both pass
  the harness (tests/test_c_tiled.py, test_c_decode.py, test_c_grouped.py run them through
  the ``isa`` fixture).
"""
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from kernels import harness
from kernels.harness import Case
from kernels.rungs import rung4_c_tiled as c_tiled
from kernels.rungs.rung4_c_tiled import ffi, lib

EMULATED, REAL = "avx512-bf16-emulated", "avx512-bf16"
NO_UNIT = "this CPU has no AVX512-BF16 (vdpbf16ps): its emulation is checked against exact arithmetic only"
TINY = 2.0**-126            # float32's least normal
FLOAT32_LIMIT = 2.0**128    # a float32 result this large after rounding overflows


def bf16_dot(isa, acc, a, b):
    """attn_bf16_dot on copies: the accumulators after one vdpbf16ps per lane, or None where
    the path is missing."""
    acc = np.array(acc, np.float32)
    a, b = (np.ascontiguousarray(x, np.uint32) for x in (a, b))
    status = lib.attn_bf16_dot(isa.encode(), ffi.cast("float *", ffi.from_buffer(acc)),
                               ffi.cast("uint32_t *", ffi.from_buffer(a)), ffi.cast("uint32_t *", ffi.from_buffer(b)),
                               acc.size)
    return None if status else acc


def bf16_round(isa, x):
    x = np.ascontiguousarray(x, np.float32)
    y = np.empty(x.shape, np.uint16)
    status = lib.attn_bf16_round(isa.encode(), ffi.cast("float *", ffi.from_buffer(x)), x.size,
                                 ffi.cast("uint16_t *", ffi.from_buffer(y)))
    return None if status else y


UNIT = bf16_round(REAL, [0.0]) is not None   # the CPU has AVX512-BF16 (and AVX512BW)


def bf16_value(bits):
    return float(np.uint32(int(bits) << 16).view(np.float32))


def daz(x):
    """a subnormal float32 read as the zero of its sign"""
    return math.copysign(0.0, x) if x != 0 and abs(x) < TINY else x


def dot_step(a, b, c):
    """c + a · b as one step of vdpbf16ps, from the reference's words, in exact arithmetic:
    the float32 value it must give (NaN for any NaN)."""
    a, b, c = daz(a), daz(b), daz(c)
    if not all(map(math.isfinite, (a, b, c))):
        with np.errstate(invalid="ignore", over="ignore"):
            return float(np.float64(c) + np.float64(a) * np.float64(b))   # inf or NaN, IEEE's rules
    product = Fraction(a) * Fraction(b)
    exact = Fraction(c) + product
    if exact == 0:   # an exact zero sum: -0 only when both terms are zeros of that sign
        negative = c == 0 and product == 0 and math.copysign(1, c) < 0 and math.copysign(1, a) * math.copysign(1, b) < 0
        return -0.0 if negative else 0.0
    # to nearest even at 24 significant bits, the exponent unbounded
    exponent = math.floor(math.log2(abs(exact)))
    while Fraction(2) ** exponent > abs(exact):
        exponent -= 1
    while Fraction(2) ** (exponent + 1) <= abs(exact):
        exponent += 1
    unit = Fraction(2) ** (exponent - 23)
    quotient, remainder = divmod(abs(exact), unit)
    if remainder > unit / 2 or (remainder == unit / 2 and quotient % 2 == 1):
        quotient += 1
    rounded = float(quotient * unit)
    sign = -1.0 if exact < 0 else 1.0
    if rounded >= FLOAT32_LIMIT:
        return sign * math.inf
    if rounded < TINY:   # tiny after rounding: flushed
        return math.copysign(0.0, sign)
    return sign * rounded


def dot_lane(acc, a, b):
    acc = dot_step(bf16_value(a >> 16), bf16_value(b >> 16), acc)
    return dot_step(bf16_value(a & 0xFFFF), bf16_value(b & 0xFFFF), acc)


def same_bits(x, y):
    """float32 arrays equal bit for bit, any NaN equal to any NaN (the reference does not say
    which NaN an instruction returns)"""
    x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
    nan = np.isnan(x)
    return np.array_equal(nan, np.isnan(y)) and np.array_equal(x[~nan].view(np.uint32), y[~nan].view(np.uint32))


# bfloat16 bit patterns at the edges: zeros, subnormals, the least and largest normals, 1,
# infinities, NaN, and magnitudes whose products land near float32's least normal (2^-63 and
# 2^-75 squared: 2^-126 and 2^-150) and its overflow
EDGE_BF16 = [0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x8080, 0x7F7F, 0xFF7F, 0x3F80, 0xBF80, 0x7F80,
             0xFF80, 0x7FC0, 0x2000, 0xA000, 0x1A00, 0x9A40, 0x1A81, 0x5F80, 0x5FC1]
EDGE_ACC = [0.0, -0.0, 1.0, -1.0, TINY, -TINY, TINY * (1 + 2.0**-23), TINY * (1 - 2.0**-23) / 1.0,
            2.0**-149, -(2.0**-140), 3.4028234663852886e38, math.inf, -math.inf, math.nan, 2.0**-100]


def lanes():
    """(acc, a, b) for every edge accumulator against every pair of edge values (the high
    half one edge value, the low half another), and random lanes of every magnitude, and the
    cases where gradual underflow would round a tiny exact sum up to 2^-126 (c = 2^-126,
    a · b just past half a unit of 2^-150 below it)."""
    rng = np.random.default_rng(30)
    acc, a, b = [], [], []
    for c in EDGE_ACC:
        for hi in EDGE_BF16:
            for lo in EDGE_BF16[::3]:
                acc.append(c)
                a.append(hi << 16 | lo)
                b.append(EDGE_BF16[(hi + lo) % len(EDGE_BF16)] << 16 | EDGE_BF16[hi % len(EDGE_BF16)])
    n = 6000
    # random bfloat16 of exponent fields anywhere, accumulators of any float32 magnitude
    random_bits = rng.integers(0, 2**16, size=(n, 4)).astype(np.uint32)
    a += list(random_bits[:, 0] << 16 | random_bits[:, 1])
    b += list(random_bits[:, 2] << 16 | random_bits[:, 3])
    with np.errstate(invalid="ignore"):   # (widening a signalling NaN raises NumPy's "invalid")
        acc += list(rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32).astype(np.float64))
    # products about 2^-126 (factors about 2^-63) cancelling each other and small sums:
    # exact results below 2^-126, and results that round across it
    for k in range(600):
        x, y = (int(v) for v in rng.integers(0x1F80, 0x2080, size=2))
        a.append((0x8000 | x) << 16 | y)
        b.append(y << 16 | x)
        acc.append(TINY * (k % 4) / 2)
    for m in range(0x1A00, 0x1A80, 8):   # −(2^-75 (1 + m/128))² from 2^-126: near 2^-150 below it
        a.append(0x8000 | m)
        b.append(m)
        acc.append(TINY)
    return np.array(acc, np.float64), np.array(a, np.uint32), np.array(b, np.uint32)


def test_the_emulated_dot_product_is_the_reference_s_arithmetic():
    acc, a, b = lanes()
    got = bf16_dot(EMULATED, acc, a, b)
    expected = np.array([dot_lane(float(np.float32(c)), int(x), int(y)) for c, x, y in zip(acc, a, b)])
    wrong = [(hex(x), hex(y), float(np.float32(c)), g, e) for c, x, y, g, e in zip(acc, a, b, got, expected)
             if not same_bits(g, e)]
    assert not wrong, wrong[:5]


def test_the_emulated_dot_product_flushes_what_is_tiny_after_rounding():
    """2^-126 − 1.5 · 2^-151 (the low halves' product −1.5 · 2^-75 · 2^-76 added to 2^-126)
    rounds to 2^-126 − 2^-150 at 24 bits: tiny after rounding, so +0, though gradual
    underflow's coarser grid (2^-149) would round it up to 2^-126; 2^-126 − 2^-152 rounds to
    2^-126 itself; a subnormal accumulator is read as zero."""
    minus_1_5_times_2_75, minus_2_76, two_76 = 0x9A40, 0x9980, 0x1980
    got = bf16_dot(EMULATED, [TINY, TINY, TINY / 2], [minus_1_5_times_2_75, minus_2_76, 0x3F80], [two_76, two_76, 0])
    assert got[0] == 0 and not np.signbit(got[0])
    assert got[1] == np.float32(TINY)
    assert got[2] == 0


def test_the_emulated_rounding_is_vcvtne2ps2bf16_s():
    """To nearest even as ml_dtypes rounds every normal float32 (and overflow to infinity);
    a subnormal becomes the zero of its sign, a NaN its own top bits with the quiet bit set."""
    rng = np.random.default_rng(31)
    bits = np.concatenate([rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32),
                           np.array([0, 0x80000000, 1, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0x7F7F8000,
                                     0x7F800000, 0xFF800000, 0x7F800001, 0xFFC00000, 0x3F808000,
                                     0x3F818000, 0x3F807FFF], np.uint32)])
    x = bits.view(np.float32)
    got = bf16_round(EMULATED, x)
    subnormal = (bits & 0x7F800000) == 0
    nan = np.isnan(x)
    normal = ~subnormal & ~nan
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got[normal], x[normal].astype(ml_dtypes.bfloat16).view(np.uint16))
    np.testing.assert_array_equal(got[subnormal], (bits[subnormal] >> 16) & 0x8000)
    np.testing.assert_array_equal(got[nan], (bits[nan] >> 16) | 0x40)


@pytest.mark.skipif(not UNIT, reason=NO_UNIT)
def test_the_unit_is_its_emulation_bit_for_bit():
    acc, a, b = lanes()
    assert same_bits(bf16_dot(REAL, acc, a, b), bf16_dot(EMULATED, acc, a, b))
    x = np.random.default_rng(32).integers(0, 2**32, 50000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    assert np.array_equal(bf16_round(REAL, x), bf16_round(EMULATED, x))


def test_a_path_without_the_unit_is_refused():
    for isa in ("avx2-fma", "generic", "sse9"):
        assert bf16_dot(isa, [0.0], [0], [0]) is None and bf16_round(isa, [0.0]) is None
    if not UNIT:
        assert bf16_dot(REAL, [0.0], [0], [0]) is None


# the harness's shapes, and the split-KV path's: every tail of pairs (odd d, odd keys), the
# causal diagonal's pairs straddling a query's last key, grouped heads, NaN and Inf
DOT_CASES = [case for case in harness.CASES if case.batch * case.n_q * case.n_k <= 2**21] + [
    Case("decode n_q=3 n_k=1001 d=63", (4,), 3, 1001, 63, 47, causal=causal) for causal in (False, True)]


@pytest.mark.skipif(not UNIT, reason=NO_UNIT)
@pytest.mark.parametrize("rounded", (False, True), ids=("float32 out", "bfloat16 out"))
def test_the_real_path_gives_the_emulated_path_s_bits(rounded):
    """Every case through c_tiled.run on both paths, float32 or bfloat16 out: the same bits,
    NaN where NaN."""
    for case in DOT_CASES:
        q, k, v = (np.ascontiguousarray(x.reshape(-1, *x.shape[-2:])) for x in case.inputs(ml_dtypes.bfloat16))
        outs = []
        for isa in (REAL, EMULATED):
            c_tiled.use_isa(isa)
            out = np.empty((q.shape[0], case.n_q, case.d_v), ml_dtypes.bfloat16 if rounded else np.float32)
            c_tiled.run(q, k, v, out, case.causal, 0.3)
            outs.append(out.astype(np.float32))
        c_tiled.use_isa("auto")
        assert same_bits(*outs), case.label
