"""numba_simd's choice of vector width: 64 bytes (zmm) where Numba compiles for AVX-512,
32 bytes elsewhere, and numba_tiled correct on both paths."""
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import njit

from kernels.rungs import rung3_numba_half as numba_half
from kernels.rungs import rung3_numba_simd as numba_simd
from kernels.rungs import rung3_numba_tiled as numba_tiled
from kernels.rungs.rung3_numba_half import widen
from kernels.rungs.rung3_numba_simd import (
    BLOCK_ROWS, VECTOR_BYTES, aligned_empty, exp2, fma_vector, prefer_wide_vectors, register_block,
)

WIDE = pytest.mark.skipif(VECTOR_BYTES != 64, reason="Numba does not compile for AVX-512 here")


def _fma_registers(asm):
    """Register class (xmm, ymm, zmm) of every vector FMA instruction in ``asm``."""
    return re.findall(r"vfmadd\w*\s+[^\n]*?%([xyz]mm)\d+", asm)


def test_vector_width_follows_the_cpu_numba_compiles_for():
    wide = numba_simd.compiles_for("avx512f")
    assert (VECTOR_BYTES, BLOCK_ROWS) == ((64, 8) if wide else (32, 4))


@pytest.mark.parametrize("itemsize", (4, 8))
def test_tiles_hold_whole_panels_and_blocks_at_either_width(itemsize):
    for vector_bytes in (32, 64):
        for tile_rows in (numba_tiled.TILE_Q, numba_tiled.TILE_Q_HALF):
            assert tile_rows % (numba_simd.BLOCK_VECTORS * vector_bytes // itemsize) == 0
    for block_rows in (4, 8):
        assert numba_tiled.TILE_K % block_rows == 0


@pytest.mark.parametrize("dtype", (np.float32, np.float64))
def test_aligned_empty_starts_every_row_on_a_vector_boundary(dtype):
    @njit
    def addresses(like, rows, cols):
        first = aligned_empty(rows, cols, like.dtype)
        second = aligned_empty(rows + 1, cols, like.dtype)
        return first.ctypes.data, second.ctypes.data, first.shape, second.strides

    cols = numba_simd.BLOCK_VECTORS * VECTOR_BYTES // np.dtype(dtype).itemsize
    first, second, shape, strides = addresses(np.zeros(1, dtype), 3, cols)
    assert first % VECTOR_BYTES == 0 and second % VECTOR_BYTES == 0
    assert shape == (3, cols) and strides == (cols * np.dtype(dtype).itemsize, np.dtype(dtype).itemsize)


@WIDE
@pytest.mark.parametrize("dtype", (np.float32, np.float64))
def test_register_blocks_are_whole_zmm_registers(dtype):
    """LLVM prefers 256-bit vectors on AVX-512 CPUs; explicit 64-byte FMAs must not be
    split into ymm halves (they would be if Numba's functions were given clang's
    "min-legal-vector-width" attribute)."""
    @njit
    def outer_product(x, y):
        block = register_block(x.dtype)
        lanes = block.shape[1] // numba_simd.BLOCK_VECTORS
        block[:] = 0
        for r in range(BLOCK_ROWS):
            for u in range(0, block.shape[1], lanes):
                fma_vector(block[r], u, y[r], x, u)
        return block.sum()

    x = np.ones(numba_simd.BLOCK_VECTORS * VECTOR_BYTES // np.dtype(dtype).itemsize, dtype)
    assert outer_product(x, x) == x.size * BLOCK_ROWS
    registers = _fma_registers(outer_product.inspect_asm(outer_product.signatures[0]))
    assert registers and set(registers) == {"zmm"}, registers


@WIDE
def test_prefer_wide_vectors_lets_llvm_vectorise_with_zmm():
    @njit(fastmath=numba_simd.FASTMATH, error_model="numpy")
    def powers_of_two(t):
        prefer_wide_vectors()
        for i in range(t.size):
            t[i] = exp2(t[i])

    t = np.linspace(-30, 0, 1000).astype(np.float32)
    powers_of_two(t.copy())
    asm = powers_of_two.inspect_asm(powers_of_two.signatures[0])
    assert "zmm" in "".join(_fma_registers(asm))


@pytest.mark.parametrize("fmt", (numba_half.BFLOAT16, numba_half.FLOAT16, numba_half.FLOAT16_BY_INTEGERS),
                         ids=("bfloat16", "float16", "float16 by integers"))
def test_widening_16_bit_inputs_vectorises_in_32_bit_lanes(fmt):
    """LLVM vectorises a loop of widen: packed operations on whole vector registers, and
    no 64-bit integer lanes (Numba computes uint32 arithmetic in 64 bits unless told);
    float16 by F16C's vcvtph2ps where Numba compiles for F16C."""
    @njit(fastmath=numba_simd.FASTMATH, error_model="numpy")
    def widen_all(bits, out):
        prefer_wide_vectors()
        for i in range(bits.size):
            out[i] = widen(bits[i], fmt)

    bits = np.arange(2**16, dtype=np.uint16)
    out = np.empty(bits.size, np.float32)
    widen_all(bits, out)
    asm = widen_all.inspect_asm(widen_all.signatures[0])
    register = "zmm" if VECTOR_BYTES == 64 else "ymm"

    def packed(instruction):
        return re.findall(rf"{instruction}\s+[^\n]*%{register}\d+", asm)

    if fmt == numba_half.FLOAT16 and numba_half.F16C:
        # AVX512-FP16 CPUs (Sapphire Rapids on) get its own form, vcvtph2psx
        assert packed("vcvtph2psx?"), "F16C's conversion is not vectorised"
    else:
        assert packed("vpslld"), "the shift into float32's place is not vectorised"
    if fmt == numba_half.FLOAT16_BY_INTEGERS or fmt == numba_half.FLOAT16 and not numba_half.F16C:
        assert packed("vcvtdq2ps"), "no packed int-to-float conversion"
    assert not re.findall(r"\bvp(add|sll|cmpgt|and|or)q\b", asm), "64-bit integer lanes"


def test_without_avx512_the_32_byte_path_stays_correct(tmp_path):
    """Numba compiling for Haswell (AVX2, no AVX-512), in a subprocess with its own cache:
    32-byte vectors, 4 x 3 register blocks, float16 widened by integers (no F16C named),
    and the tiled path through the harness's cases that exercise its tails, masks and
    poisons, every dtype (16-bit ones too)."""
    script = textwrap.dedent("""
        from dataclasses import replace
        from kernels import harness
        from kernels.rungs import rung3_numba_half as numba_half, rung3_numba_simd as numba_simd
        assert (numba_simd.VECTOR_BYTES, numba_simd.BLOCK_ROWS) == (32, 4) and not numba_half.F16C
        names = {"odd d=33", "d_v=40 != d=16", "n=193 prime", "NaN in v", "Inf in q",
                 "n_q=300 n_k=1100 d=127", "large logits x30"}
        cases = [case for case in harness.CASES if case.name in names]
        assert len(cases) == 2 * len(names)
        failed = [f"{o.case.label} {o.dtype}" for o in harness.verify(["numba_tiled"], cases) if o.status != "ok"]
        assert not failed, failed
    """)
    env = dict(os.environ, NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES="", NUMBA_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
