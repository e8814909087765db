"""The machine's ceilings (kernels.ceilings, csrc/fma_peak.c): the FMA loop counts the flops
it runs, refuses an ISA the CPU lacks, measures on the thread budget only, bfloat16's
dot-product loop runs where the CPU has AVX512-BF16 and is refused, naming the unit,
elsewhere, c_tiled's tile operations loop counts its tiles' flops, and the BLAS is named with
what forces it, without touching this process's environment.

No figure is asserted: how fast the machine is gets measured in benchmarks, not here.
"""
import math
import os
import pathlib
import re
import statistics
import subprocess
import sys

import numpy as np
import pytest

from kernels import ceilings, threads

FMA_CHAINS = 12  # csrc/fma_peak.c
# Products per instruction: a 512-, 256- or 128-bit vector's elements; vdpbf16ps's 32
# bfloat16 lanes make 16 float32 lanes' worth of pairs
LANES = {("avx512-bf16", 32): 16, ("avx512-bf16", 64): 8, ("avx512-bf16", 16): 32,
         ("avx512", 32): 16, ("avx512", 64): 8, ("avx2-fma", 32): 8, ("avx2-fma", 64): 4,
         ("generic", 32): 4, ("generic", 64): 2}
ALL_ISAS = ("avx512-bf16", "avx512", "avx2-fma", "generic")
BF16_ISA = "avx512-bf16"
HAS_BF16 = BF16_ISA in ceilings.isas()
needs_bf16 = pytest.mark.skipif(not HAS_BF16, reason="no AVX512-BF16 on this CPU: the bfloat16 dot-product "
                                                        "loop cannot run here")


def fma_peak(isa, bits, n_threads, iterations):
    """The C entry point itself: the flops it reports."""
    _, lib = ceilings._extension()
    return lib.attn_fma_peak(isa.encode(), bits, n_threads, iterations)


def test_isas_best_first_and_generic_always():
    available = ceilings.isas()
    assert available == [isa for isa in ALL_ISAS if isa in available]
    assert available[-1] == "generic"


@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_flops_counted_per_isa(bits, n_threads):
    for isa in ceilings.isas():
        iterations = 1000
        expected = 2 * FMA_CHAINS * LANES[isa, bits] * iterations * n_threads
        assert fma_peak(isa, bits, n_threads, iterations) == expected


def test_unavailable_or_unknown_isa_is_refused_not_run():
    for isa in set(ALL_ISAS) - set(ceilings.isas()):
        assert fma_peak(isa, 32, 1, 1000) == -1
        with pytest.raises(ValueError, match="not available"):
            ceilings.fma_peak_gflops(np.float32, 1, isa=isa, repeats=1)
    assert fma_peak("sse9", 32, 1, 1000) == -1
    for isa in ("avx512", "avx2-fma", "generic"):   # a loop of bfloat16 products on avx512-bf16 alone
        assert fma_peak(isa, 16, 1, 1000) == -1
    assert fma_peak("generic", 8, 1, 1000) == -1


@needs_bf16
@pytest.mark.parametrize("n_threads", [1, 2])
def test_bf16_dot_products_counted_two_flops_per_product(n_threads):
    # 12 chains of vdpbf16ps, each 16 float32 lanes × 2 bfloat16 products × 2 flops
    assert fma_peak(BF16_ISA, 16, n_threads, 1000) == 2 * FMA_CHAINS * 32 * 1000 * n_threads
    samples = ceilings.fma_peak_gflops("bfloat16", 1, repeats=2)
    assert len(samples) == 2 and all(math.isfinite(s) and s > 0 for s in samples)
    assert ceilings.missing_unit("bfloat16") is None


def test_bf16_dot_products_refused_naming_the_unit_without_avx512_bf16():
    if HAS_BF16:
        pytest.skip("this CPU has AVX512-BF16: its loop runs (test_bf16_dot_products_counted_two_flops_per_product)")
    assert fma_peak(BF16_ISA, 16, 1, 1000) == -1
    assert ceilings.missing_unit("bfloat16") == "no AVX512-BF16 on this CPU"
    with pytest.raises(ValueError, match="no AVX512-BF16 on this CPU"):
        ceilings.fma_peak_gflops("bfloat16", 1, repeats=1)
    with pytest.raises(ValueError, match="no AVX512-BF16 on this CPU"):
        ceilings.peak_loop("bfloat16", 1e6, 1)


def test_an_isa_without_the_types_loop_is_refused():
    if HAS_BF16:
        with pytest.raises(ValueError, match="'generic' has no bfloat16 loop; avx512-bf16 here"):
            ceilings.fma_peak_gflops("bfloat16", 1, isa="generic", repeats=1)
    assert [ceilings.missing_unit(dtype) for dtype in ("float32", "float64")] == [None, None]
    with pytest.raises(TypeError, match="float16"):   # widened to float32: no loop of its own
        ceilings.missing_unit("float16")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_peak_loop_does_the_flops_asked_for(dtype):
    if ceilings.missing_unit(dtype):
        pytest.skip(ceilings.missing_unit(dtype))
    per_round = fma_peak(ceilings.isas()[0], ceilings.PEAK_BITS[dtype], 1, 1)   # the best ISA's
    call, flops = ceilings.peak_loop(dtype, 10.4 * per_round, threads=1)
    assert flops == 10 * per_round   # the nearest whole number of rounds
    assert call() == flops
    assert ceilings.peak_loop(dtype, 1.0, threads=1)[1] == per_round   # at least one round


def tile_size(name):
    """A tile size as csrc/tiles.h defines it (the extension is built with its defaults)."""
    text = (pathlib.Path(__file__).parents[1] / "csrc" / "tiles.h").read_text()
    return int(re.search(rf"#define {name} (\d+)", text).group(1))


@pytest.mark.parametrize("dtype, bits, name", [("float32", 32, "F32"), ("float64", 64, "F64")])
def test_the_tile_operations_loop_counts_its_tiles_flops(dtype, bits, name):
    """TileFraction's call: each round and thread walks one key tile over one query tile of
    a large call's (the tiles are multiples of every panel), 4 · rows · keys · d flops, the
    whole number of rounds nearest the flops asked for; -1 from the C entry for other bits
    or d < 1, nothing for no rounds."""
    lib = ceilings._extension()[1]
    per_round = 4 * tile_size(f"ATTN_{name}_QUERY_TILE") * tile_size(f"ATTN_{name}_KEY_TILE") * 16
    assert lib.attn_tile_peak(bits, 16, 1, 3) == 3 * per_round
    assert lib.attn_tile_peak(bits, 16, 2, 1) == 2 * per_round
    assert lib.attn_tile_peak(bits, 16, 1, 0) == 0
    assert lib.attn_tile_peak(16, 16, 1, 1) == lib.attn_tile_peak(bits, 0, 1, 1) == -1
    call, flops = ceilings.tile_loop(dtype, 4.4 * per_round, threads=1, d=16)
    assert flops == 4 * per_round and call() == flops
    assert ceilings.tile_loop(dtype, 1.0, threads=1, d=16)[1] == per_round   # at least one round
    with pytest.raises(TypeError, match="bfloat16"):
        ceilings.tile_loop("bfloat16", per_round)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fma_peak_samples(dtype):
    # the cheapest ISA; each sample is still one ~75 ms call
    samples = ceilings.fma_peak_gflops(dtype, 1, isa="generic", repeats=2)
    assert len(samples) == 2
    assert all(math.isfinite(s) and s > 0 for s in samples)


def test_threads_beyond_the_budget_are_refused():
    with threads.using_budget(1):
        with pytest.raises(ValueError, match="beyond the thread budget of 1"):
            ceilings.fma_peak_gflops(np.float32, 2)
        for wrong in (0, -1, 1.5, True):
            with pytest.raises(ValueError, match="whole number"):
                ceilings.fma_peak_gflops(np.float32, wrong)


def test_other_dtypes_are_refused():
    with pytest.raises(TypeError, match="int16"):
        ceilings.fma_peak_gflops(np.int16, 1)
    with pytest.raises(TypeError, match="int32"):
        ceilings.gemm_gflops(np.int32)


def test_gemm_samples():
    samples = ceilings.gemm_gflops(np.float64, n=64, repeats=3)
    assert len(samples) == 3 and all(math.isfinite(s) and s > 0 for s in samples)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gemm_call_is_the_product_it_counts(dtype):
    """The call GemmFraction times beside the peak's loop: a seeded (n, n) matrix times
    itself in the type, 2·n³ flops, the product left where it can be read (the call's
    return value), as NumPy computes it (the same BLAS call: bit for bit)."""
    call, flops = ceilings.gemm_call(dtype, n=48)
    product = call()
    assert flops == 2 * 48**3 and product.shape == (48, 48) and product.dtype == np.dtype(dtype)
    a = np.random.default_rng(0).standard_normal((48, 48)).astype(dtype)
    np.testing.assert_array_equal(product, np.dot(a, a))


def test_blas_names_library_and_kernels():
    info = ceilings.blas({})
    assert info["library"] and info["name"] and info["version"]
    assert info["architecture"] and info["threading_layer"]
    assert info["num_threads"] == threads.budget()
    assert info["forced_by"] == {}
    assert "its own choice" in ceilings.blas_summary({})


def test_blas_lists_what_forces_it():
    library = ceilings.blas({})["library"]
    if library not in ceilings.FORCING_VARIABLES:
        pytest.skip(f"no forcing variables known for {library}")
    variable = ceilings.FORCING_VARIABLES[library][0]
    environ = {variable: "Haswell", "OPENBLAS_VERBOSE": "2", "UNRELATED": "1"}
    assert ceilings.blas(environ)["forced_by"] == {variable: "Haswell"}
    assert f"forced by {variable}=Haswell" in ceilings.blas_summary(environ)


def test_unforced_child_environment_leaves_the_parent_alone():
    before = dict(os.environ)
    parent = {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "524288", "PATH": "/bin",
              "MKL_DEBUG_CPU_TYPE": "5"}
    child = ceilings.unforced_environ(parent)
    assert "OPENBLAS_CORETYPE" not in child and "OPENBLAS_L2_SIZE" not in child
    assert "MKL_DEBUG_CPU_TYPE" not in child
    assert child["PATH"] == "/bin"
    assert child["ATTNBENCH_THREADS"] == str(threads.budget())
    assert child["PYTHONPATH"].split(os.pathsep)[0] == ceilings.PACKAGE_PARENT
    assert parent["OPENBLAS_CORETYPE"] == "Haswell"
    assert dict(os.environ) == before


def test_nothing_forced_costs_nothing():
    assert ceilings.gemm_gflops_unforced(np.float32, environ={"PATH": os.environ.get("PATH", "")}) is None


def test_unforced_gemm_runs_in_a_child():
    before = dict(os.environ)
    library = ceilings.blas({})["library"]
    if library not in ceilings.FORCING_VARIABLES:
        pytest.skip(f"no forcing variables known for {library}")
    variable = ceilings.FORCING_VARIABLES[library][0]
    # a value that forces nothing a CPU lacks: the kernels this BLAS already runs
    environ = {**os.environ, variable: ceilings.blas({})["architecture"]}
    samples, architecture = ceilings.gemm_gflops_unforced(np.float32, n=64, repeats=2, environ=environ)
    assert len(samples) == 2 and all(math.isfinite(s) and s > 0 for s in samples)
    assert architecture
    assert dict(os.environ) == before


def test_the_roof_of_a_widened_type_is_float32s():
    assert ceilings.roof_type("float16") == "float32"
    assert ceilings.roof_type("float64") == "float64"
    assert ceilings.roof_type("bfloat16") == ("bfloat16" if ceilings.bf16_dot_pays() else "float32")


def test_bfloat16s_roof_is_the_faster_of_its_two_units():
    """bf16_dot_pays times the two loops for half a millisecond; the peaks here time them for
    a quarter of a second each, alternating.  Only a clear verdict is held to (the loops
    within 25% of each other could go either way on a shared machine)."""
    if ceilings.missing_unit("bfloat16"):
        assert not ceilings.bf16_dot_pays()
        return
    dot, fma = (statistics.median(ceilings.fma_peak_gflops(dtype, threads=1, repeats=3))
                for dtype in ("bfloat16", "float32"))
    if not 0.8 < dot / fma < 1.25:
        assert ceilings.bf16_dot_pays() == (dot > fma)


@pytest.mark.parametrize("nbytes", [8, 8 * 63, 2**20, 2**20 + 8 * 13])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_the_streaming_read_reads_its_bytes_and_sums_them(nbytes, n_threads):
    """A sum of ones: every element read once, through a vector's tail and across the parts
    the threads claim (a part is 64 KiB at least)."""
    with threads.using_budget(n_threads):
        call, read = ceilings.read_loop(nbytes)
        assert read == nbytes
        assert call() == nbytes / 8


def test_the_tables_import_no_numba():
    """bench_spec and the report read this module's tables; only a measurement needs Numba
    (its import is most of a second: ``attnbench report`` should not pay it)."""
    code = "import sys, kernels.bench_spec, kernels.report; print('numba' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True).stdout.strip() == "False"
