"""The machine's ceilings (kernels.ceilings, csrc/fma_peak.c): the FMA loop counts the flops
it runs, refuses an ISA the CPU lacks, measures on the thread budget only, and the BLAS is
named with what forces it, without touching this process's environment.

No figure is asserted: how fast the machine is gets measured in benchmarks, not here.
"""
import math
import os

import numpy as np
import pytest

from kernels import ceilings, threads

FMA_CHAINS = 12  # csrc/fma_peak.c
LANES = {("avx512", 32): 16, ("avx512", 64): 8, ("avx2-fma", 32): 8, ("avx2-fma", 64): 4,
         ("generic", 32): 4, ("generic", 64): 2}
ALL_ISAS = ("avx512", "avx2-fma", "generic")


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
    assert fma_peak("generic", 16, 1, 1000) == -1


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
