"""c_tiled's SIMD paths: each one the CPU has (AVX-512, AVX2+FMA, the portable generic
path a CPU without them falls back to) passes the harness, and "auto" picks the best."""
import numpy as np
import pytest

from kernels import harness
from kernels.rungs import rung4_c_tiled as c_tiled



def cpu_flags():
    with open("/proc/cpuinfo") as cpuinfo:
        return next(line for line in cpuinfo if line.startswith("flags")).split()


@pytest.mark.parametrize("dtype", harness.DTYPES, ids=[np.dtype(d).name for d in harness.DTYPES])
def test_every_path_passes_the_harness(isa, dtype):
    assert c_tiled.isa() == isa   # use_isa takes the names isa() reports
    failures = [(o.case.label, o.comparison) for o in harness.verify(["c_tiled"], dtypes=[dtype])
                if o.status != "ok"]
    assert not failures


def test_auto_picks_the_best_simd_the_cpu_has():
    c_tiled.use_isa("auto")
    flags = set(cpu_flags())
    if {"avx512f", "avx512vl"} <= flags:
        expected = "avx512"
    elif {"avx2", "fma"} <= flags:
        expected = "avx2-fma"
    else:
        expected = "generic"
    assert c_tiled.isa() == expected


def test_unknown_isa_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown ISA 'sse9'"):
        c_tiled.use_isa("sse9")
