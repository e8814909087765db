"""What several test files share: the project's root, a test per registered kernel (and per
SIMD path of c_tiled), a peer that fails the harness in half precision on any CPU, the asv
suite's modules imported as asv imports them, a check that a figure is a PNG, the
optional model (a test that needs it skips, saying how to install it), and hypothesis's
profiles."""
import importlib
import os
import pathlib
import struct
import sys

import numpy as np
import pytest
from hypothesis import settings

import kernels
from kernels.dtypes import type_name

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Hypothesis profiles: HYPOTHESIS_PROFILE=ci (the default) or long.  No deadline in
# either: a first call compiles a Numba specialisation (an unaligned or float32 array is
# a new type) or a peer's graph, seconds that say nothing about the example.
#   ci:   the same examples on every run (derandomized, no example database), few enough
#         that tests/test_properties.py takes about half a minute on 2 cores.
#   long: random examples, 20 times as many (about 8 minutes), failures kept in
#         .hypothesis/ and replayed first.
# The external peers take a tenth of these (tests/test_properties.py: FEWER_FOR_PEERS).
settings.register_profile("ci", derandomize=True, max_examples=50, deadline=None, print_blob=True)
settings.register_profile("long", max_examples=1000, deadline=None, print_blob=True)
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(HYPOTHESIS_PROFILE)


def pytest_report_header():
    return (f"hypothesis profile {HYPOTHESIS_PROFILE!r}: {settings().max_examples} examples per "
            f"property test{', derandomized' if settings().derandomize else ''}")


@pytest.fixture(scope="session")
def project_root():
    return ROOT


@pytest.fixture(params=list(kernels.KERNELS))
def kernel_name(request):
    """Every registered kernel, external peers included: a test taking this runs once each."""
    return request.param


@pytest.fixture
def widest_dtype(kernel_name):
    """float64, or float32 for a peer that declares it takes float32 only."""
    return np.float32 if kernels.KERNELS[kernel_name].refusal(np.float64) else np.float64


@pytest.fixture(scope="session")
def skip_refused():
    """``skip_refused(kernel_name, dtype)``: skips the test, with the kernel's own reason,
    when a peer declares it does not take ``dtype`` (test_api checks that it refuses)."""
    def skip(kernel_name, dtype):
        reason = kernels.KERNELS[kernel_name].refusal(dtype)
        if reason:
            pytest.skip(reason)
    return skip


@pytest.fixture(params=[name for name, record in kernels.KERNELS.items() if not record.external])
def own_kernel_name(request):
    """Every rung of ours (not the external peers)."""
    return request.param


@pytest.fixture
def rounding_peer(monkeypatch):
    """The name of a peer registered for one test, on any CPU: ``tests/half_models.py``'s
    ``run``, which takes float32, bfloat16 and float16, the 16-bit types held to the harness
    where it runs (``Kernel.probed``), and rounds its scores to them as some libraries do
    on some CPUs, so that it fails the probe (with ``half_models.ROUNDS_SCORES`` False it
    computes in float32 and passes).  The probe's verdicts start afresh for the test."""
    from kernels import harness
    from kernels.dtypes import HALF

    name = "rounding_peer"
    monkeypatch.setitem(kernels.KERNELS, name, kernels.Kernel(
        name, "external peer: a library that rounds its scores to the 16-bit type", "O(n²)", "half_models",
        external=True, dtypes=("float32",) + HALF, probed=HALF, dtype_note="a test's peer has no float64"))
    monkeypatch.setattr(harness, "_PROBES", {})
    return name


@pytest.fixture(params=["avx512-bf16", "avx512", "avx2-fma", "generic", "avx512-bf16-emulated"])
def isa(request):
    """Each SIMD path of c_tiled this CPU has, selected for the test (skips the others).  The
    emulated AVX512-BF16 path runs on every CPU, but in a test of one type only in bfloat16,
    the type it is there for (its bfloat16 dot-product operations, and the softmax they
    share with float32's); its other types are the avx512 path's template (which the AVX2
    path's shares) or generic float64, at a tenth of the speed."""
    from kernels.rungs import rung4_c_tiled as c_tiled

    dtype = getattr(request.node, "callspec", None) and request.node.callspec.params.get("dtype")
    if request.param == "avx512-bf16-emulated" and dtype is not None and type_name(dtype) != "bfloat16":
        pytest.skip(f"the emulated AVX512-BF16 path runs the bfloat16 tests only, not {type_name(dtype)}")
    try:
        c_tiled.use_isa(request.param)
    except ValueError:
        pytest.skip(f"this CPU lacks {request.param}")
    yield request.param
    c_tiled.use_isa("auto")


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


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _check_png(path, min_side=300, min_bytes=10_000):
    """A whole PNG: the signature, then the IHDR chunk with the image's width and height;
    more than ``min_bytes``, or it is an empty figure.  -> (width, height)."""
    data = pathlib.Path(path).read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    assert min(width, height) >= min_side, f"{path} is only {width}×{height} pixels"
    assert len(data) > min_bytes, f"{path} has {len(data)} bytes: an empty figure?"
    return width, height


@pytest.fixture(scope="session")
def assert_png():
    """``assert_png(path, min_side=300, min_bytes=10_000)``: the file is a real, drawn PNG;
    -> its (width, height) in pixels."""
    return _check_png


@pytest.fixture(scope="session")
def minilm_model():
    """all-MiniLM-L6-v2's weights (float32); skips the test, naming `make model`, without it."""
    from kernels.models import minilm

    try:
        return minilm.load()
    except minilm.ModelNotInstalled as missing:
        pytest.skip(str(missing))


@pytest.fixture
def model_missing(monkeypatch):
    """The model as if not installed (installed or not): for what must not need it."""
    from kernels.models import minilm

    monkeypatch.setattr(minilm.importlib.util, "find_spec", lambda name: None)
    minilm.load.cache_clear()
    yield
    minilm.load.cache_clear()
