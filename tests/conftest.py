"""What several test files share: the project's root, a test per registered kernel, and
the asv suite's modules imported as asv imports them."""
import importlib
import pathlib
import sys

import pytest

import kernels

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def project_root():
    return ROOT


@pytest.fixture(params=list(kernels.KERNELS))
def kernel_name(request):
    """Every registered kernel, external peers included: a test taking this runs once each."""
    return request.param


@pytest.fixture(params=[name for name, record in kernels.KERNELS.items() if not record.external])
def own_kernel_name(request):
    """Every rung of ours (not the external peers)."""
    return request.param


@pytest.fixture(scope="session")
def bench_modules():
    """name -> module of each ``benchmarks/bench_*.py``, imported from the project's root
    (the suite is a package of relative imports, as asv loads it)."""
    sys.path.insert(0, str(ROOT))
    try:
        return {path.stem: importlib.import_module(f"benchmarks.{path.stem}")
                for path in sorted((ROOT / "benchmarks").glob("bench_*.py"))}
    finally:
        sys.path.remove(str(ROOT))
