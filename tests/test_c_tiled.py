"""c_tiled's portable path: a CPU without AVX2/FMA still gets exact results."""
import numpy as np
import pytest

from kernels import c_tiled, harness


@pytest.fixture
def generic_isa():
    c_tiled.use_isa("generic")
    yield
    c_tiled.use_isa("auto")


@pytest.mark.parametrize("dtype", harness.DTYPES, ids=[np.dtype(d).name for d in harness.DTYPES])
def test_generic_path_passes_the_harness(generic_isa, dtype):
    assert c_tiled.isa() == "generic"
    failures = [(o.case.label, o.comparison) for o in harness.verify(["c_tiled"], dtypes=[dtype])
                if o.status != "ok"]
    assert not failures


def test_auto_picks_simd_when_the_cpu_has_it():
    c_tiled.use_isa("auto")
    with open("/proc/cpuinfo") as cpuinfo:
        flags = cpuinfo.read()
    expected = "avx2-fma" if (" avx2" in flags and " fma" in flags) else "generic"
    assert c_tiled.isa() == expected


def test_unknown_isa_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown ISA 'avx512'"):
        c_tiled.use_isa("avx512")
