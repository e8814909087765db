"""The machine's compute ceilings, and the BLAS that sets the practical one, named honestly.

    isas()                                  # ["avx2-fma", "generic"]: the FMA loops this CPU runs
    fma_peak_gflops("float32", threads=1)   # [GFLOP/s, ...]: the FMA peak, one sample per call
    fma_peak_gflops("bfloat16")             # the bfloat16 dot-product peak (AVX512-BF16 only)
    missing_unit("bfloat16")                # "no AVX512-BF16 on this CPU", or None where it runs
    peak_loop("float32", flops)             # (call, its flops): the peak's loop, sized to a kernel's call
    tile_loop("float32", flops)             # (call, its flops): c_tiled's tile operations alone, likewise
    roof_type("float16")                    # "float32": the type whose peak bounds a kernel in float16
    bf16_dot_pays()                         # whether bfloat16's dot products beat float32's FMAs here
    read_loop()                             # (call, its bytes): the streaming read over the budget
    gemm_gflops("float32")                  # [GFLOP/s, ...]: NumPy's BLAS on a 2048² product
    gemm_call("float32")                    # (call, its flops): that product, to time beside another call
    blas(), blas_summary()                  # which BLAS, which core kernels, what forced them
    gemm_gflops_unforced("float32")         # the same gemm where nothing forces the kernels

The FMA peak (csrc/fma_peak.c) is the roof no kernel passes: 12 independent vector FMA
chains per thread, nothing loaded or stored, 2 flops per lane per FMA.  bfloat16's roof is
its own where the CPU has AVX512-BF16: the same chains of ``vdpbf16ps``, two bfloat16
products summed into each float32 lane, 2 flops per product (twice float32's flops per
instruction), where those outrun float32's FMAs (not everywhere: Sapphire Rapids issues
them at half an FMA's rate); elsewhere bfloat16 is fastest widened to float32 (as float16
is on every CPU here), so float32's FMA peak is its roof.  The gemm is the roof
a kernel made of matrix products can hope for; c_tiled's tile operations alone (its
products and softmax on tiles already packed, csrc/flash_driver_template.h's tile_peak) are
the roof of its own design, which its whole call falls short of by what packing, writing
out and walking the tiles cost.  They are timed on the thread budget
(``kernels.threads``): the figures of 1 thread and of the budget together say how far a
second core helps, on a machine whose other work they do not control, so each is a list of
samples whose spread shows that.

Which kernels a BLAS runs is chosen when it loads (OpenBLAS: from the CPU's identity, unless
``OPENBLAS_CORETYPE`` names a core), so the figure of a BLAS forced onto a core is not the
BLAS's own: ``gemm_gflops_unforced`` measures it in a child process whose environment
drops the forcing variables.  The parent's environment is never changed.
"""
import functools
import json
import numbers
import os
import subprocess
import sys
import time

import numpy as np

from . import dtypes, threads

# What an ISA's timed call lasts: long against the clock and a helper's wake-up (< 0.1 ms),
# short enough to take several samples in a second
FMA_CALL_SECONDS = 0.075
FMA_CALIBRATION_SECONDS = 0.02   # calibration calls double in length until one lasts this
FMA_FIRST_ITERATIONS = 4096

# The peak loop of each type, by its elements' bits (csrc/fma_peak.c): float32's and
# float64's FMAs, bfloat16's dot products.  float16 has none: it is widened to float32.
PEAK_BITS = {"float32": 32, "float64": 64, "bfloat16": 16}
# The unit a type's loop needs beyond what every CPU has (the generic loop), as a skip
# reason names it.
PEAK_UNITS = {"bfloat16": "AVX512-BF16"}

# The streaming read's buffer: 2 GiB, four times the largest last-level cache of these
# machines (a Xeon's 480 MiB of L3, which a cache of 256 MiB can sit in)
READ_BYTES = 2**31

# Environment variables that make a BLAS run other kernels, or other blocking, than it
# would choose by itself, by threadpoolctl's internal_api.  (OPENBLAS_VERBOSE is not one:
# it prints the choice, it does not make it.)
FORCING_VARIABLES = {
    "openblas": ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"),
    "mkl": ("MKL_ENABLE_INSTRUCTIONS", "MKL_DEBUG_CPU_TYPE", "MKL_CBWR"),
    "blis": ("BLIS_ARCH_TYPE",),
}
LIBRARY_NAMES = {"openblas": "OpenBLAS", "mkl": "MKL", "blis": "BLIS", "flexiblas": "FlexiBLAS"}

# Where the child measuring the unforced gemm finds this package (asv, say, imports it
# through an importer of its own), and what it runs
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNFORCED_CHILD = """
import json, sys
from kernels.ceilings import blas, gemm_gflops
dtype, n, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print(json.dumps({"samples": gemm_gflops(dtype, n, repeats), "architecture": blas()["architecture"]}))
"""


def isas():
    """The ISAs whose FMA loops this CPU runs, best first, named as ``c_tiled.isa()`` names
    its paths: a subset of "avx512-bf16" (AVX-512F and AVX512-BF16: AVX-512's loops and
    bfloat16's), "avx512" (AVX-512F), "avx2-fma", "generic" (portable C)."""
    ffi, lib = _extension()
    names = []
    while (name := lib.attn_fma_isa(len(names))) != ffi.NULL:
        names.append(ffi.string(name).decode())
    return names


def missing_unit(dtype):
    """Why this CPU has no peak loop of ``dtype`` ("no AVX512-BF16 on this CPU"), or None
    when it has one (float32 and float64: every CPU).  TypeError for a type without a
    loop anywhere (``PEAK_BITS``)."""
    if _isas_with(_bits(dtype)):
        return None
    return f"no {PEAK_UNITS[dtypes.type_name(dtype)]} on this CPU"


def fma_peak_gflops(dtype, threads=None, isa=None, repeats=5):
    """The peak of ``dtype`` in GFLOP/s: ``repeats`` samples, each one call of about 75 ms
    in which every one of ``threads`` threads (default: the budget; more than the budget is
    a ValueError) runs its own 12 chains of ``isa``'s vectors (default: the best ISA with a
    loop of the type): FMAs on float32 or float64, ``vdpbf16ps`` on bfloat16 (ValueError
    naming the missing unit on a CPU without AVX512-BF16).  Cost: about 0.1 s of
    calibration and warm-up, then 75 ms per sample, on ``threads`` cores.  Anything else on
    those cores, a BLAS's workers spinning after a product included, lowers the figure."""
    loop = _loop(dtype, threads, isa)

    def call(iterations):
        # Timed here, around the call, not in C: a call lasts ~75 ms, against which the
        # clock and cffi's call (under a microsecond) are nothing; the peak loops stay free
        # of clocks (only attn_bf16_dot_pays, which compares two loops, times them in C);
        # and the interval is what any caller of the pool gets, the helpers' wake-up
        # included.  cffi releases the GIL for the call.
        start = time.perf_counter()
        flops = loop(iterations)
        return flops, time.perf_counter() - start

    iterations = FMA_FIRST_ITERATIONS
    while (seconds := call(iterations)[1]) < FMA_CALIBRATION_SECONDS:
        iterations *= 2
    iterations = max(1, round(iterations * FMA_CALL_SECONDS / seconds))
    call(iterations)  # warm-up at the measured size: helpers awake, clocks up
    return [flops / seconds / 1e9 for flops, seconds in (call(iterations) for _ in range(repeats))]


def peak_loop(dtype, flops, threads=None):
    """(call, its flops): a call of the peak loop of ``dtype`` (the best ISA's, on
    ``threads``, default the budget) doing the whole number of rounds nearest ``flops``
    (at least one), to be timed beside a kernel's call of ``flops``: the kernel's GFLOP/s
    as a fraction of the peak is then (loop's time ÷ kernel's) × (flops ÷ the loop's).
    ValueError as ``fma_peak_gflops``."""
    return _sized(_loop(dtype, threads, None), flops)


def tile_loop(dtype, flops, threads=None, d=64):
    """(call, its flops): c_tiled's tile operations alone in float32 or float64, on the path
    it runs (``attn_tile_peak``: each thread walks one packed key tile over one packed query
    tile of a large call's, qk_tile, the online softmax and pv_tile, with head dimension
    ``d``) on ``threads`` (default the budget), the whole number of rounds nearest ``flops``
    (at least one), to be timed beside the peak's loop as a kernel's call is (``peak_loop``).
    TypeError for another type.  Cost: a query tile and a key tile a thread."""
    bits = PEAK_BITS[dtypes.float_type(dtype, dtypes.WIDE).name]
    lib, n_threads = _extension()[1], _threads(threads)
    loop = functools.partial(lib.attn_tile_peak, bits, d, n_threads)
    if loop(0) < 0:
        raise MemoryError(f"c_tiled's tile operations: no scratch for {n_threads} threads at d={d}")
    return _sized(loop, flops)


def _sized(loop, flops):
    """(call, its flops): ``loop(rounds)``, which returns its flops, for the whole number of
    rounds nearest ``flops`` (at least one)."""
    per_round = loop(1)
    rounds = max(1, round(flops / per_round))
    return functools.partial(loop, rounds), per_round * rounds


def roof_type(dtype):
    """The type whose peak bounds a kernel computing in ``dtype`` on this CPU: its own where
    it has a loop here (float32, float64; bfloat16 where the CPU has AVX512-BF16 and its dot
    products outrun float32's FMAs), float32's for a type best widened to float32 before any
    product (float16; bfloat16 elsewhere).  bfloat16's roof is thus the faster of its two
    units, the one c_tiled's "auto" path multiplies it on (``bf16_dot_pays``)."""
    name = dtypes.type_name(dtype)
    if name == "bfloat16":
        return name if bf16_dot_pays() else "float32"
    return name if name in PEAK_BITS else "float32"


def bf16_dot_pays():
    """Whether this CPU multiplies bfloat16 faster on AVX512-BF16's dot products than widened
    to float32 on its FMAs: the two loops timed once per process on one thread, ~0.5 ms
    (csrc/fma_peak.c, ``attn_bf16_dot_pays``); False without the unit.  Not the feature flag:
    on Sapphire Rapids a ``vdpbf16ps`` issues at half an FMA's rate, on Zen 4 at its rate."""
    return bool(_extension()[1].attn_bf16_dot_pays())


def read_loop(nbytes=READ_BYTES):
    """(call, its bytes): a read of a buffer of ``nbytes`` (float64 ones, summed) on the
    thread budget, in parts claimed from the pool as a decode step's tasks are
    (csrc/read_peak.c): the memory roof a decode step, which reads its cache once, is read
    against; timed alone for the bandwidth, beside a step, over as many bytes as it reads,
    for its fraction.  Cost: ``nbytes`` of memory, its pages touched here."""
    buffer = np.ones(max(1, nbytes // 8))
    ffi, lib = _extension()
    # from_buffer's pointer holds the buffer alive as long as the call holds it
    call = functools.partial(lib.attn_read_sum, ffi.from_buffer("double[]", buffer), buffer.size, threads.budget())
    call()  # warm-up: the pool's helpers, the buffer's pages in the TLB
    return call, buffer.nbytes


def gemm_call(dtype, n=2048):
    """(call, its flops): one (n, n) @ (n, n) product of NumPy's BLAS in float32 (sgemm) or
    float64 (dgemm) on the thread budget, into a buffer of its own, 2·n³ flops, for a
    caller to time (``gemm_gflops``; ``bench_machine.GemmFraction`` beside the peak's
    loop).  TypeError for another type.  Cost: 2 n² elements."""
    dtype = dtypes.float_type(dtype, dtypes.WIDE).dtype
    threads.budget()  # the BLAS's thread count is the budget's from its first reading on
    a = np.random.default_rng(0).standard_normal((n, n)).astype(dtype)
    return functools.partial(np.dot, a, a, out=np.empty_like(a)), 2.0 * n**3


def gemm_gflops(dtype, n=2048, repeats=5):
    """NumPy's BLAS on a (n, n) @ (n, n) product (``gemm_call``) in GFLOP/s: ``repeats``
    samples after one warm-up call, as ``bench_machine.Machine`` measures it.  Cost:
    repeats + 1 products (n = 2048: about 0.1-0.2 s each in float32 on 2 AVX2 cores)."""
    product, flops = gemm_call(dtype, n)
    product()  # warm-up: the BLAS's threads and buffers
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        product()
        samples.append(flops / (time.perf_counter() - start) / 1e9)
    return samples


def blas(environ=None):
    """NumPy's BLAS as threadpoolctl finds it loaded in this process: a dict of
    ``library`` (its internal_api, e.g. "openblas"; None when threadpoolctl finds none),
    ``name`` ("OpenBLAS"), ``filepath``, ``version``, ``threading_layer`` ("pthreads",
    "openmp"), ``architecture`` (the core kernels it runs, e.g. "Haswell"),
    ``num_threads``, and ``forced_by``: {variable: value} of the variables in ``environ``
    (default ``os.environ``) that force its kernels (``FORCING_VARIABLES``).  These were
    read when the BLAS loaded; a variable changed since then shows here, not in the
    BLAS.  Cost: a look through the loaded libraries, a few milliseconds."""
    from threadpoolctl import threadpool_info

    threads.budget()  # its thread count is the budget's
    loaded = [info for info in threadpool_info() if info["user_api"] == "blas"]
    # NumPy's own when several are loaded (a peer's MKL beside it): the one in NumPy's
    # folder or in its wheel's numpy.libs beside it, which the folder's path is a prefix of
    numpy_dir = os.path.dirname(np.__file__)
    ours = [info for info in loaded if info["filepath"].startswith(numpy_dir)] or loaded
    if not ours:
        return {"library": None, "name": None, "filepath": None, "version": None,
                "threading_layer": None, "architecture": None, "num_threads": None, "forced_by": {}}
    info = ours[0]
    library = info["internal_api"]
    environ = os.environ if environ is None else environ
    forcing = FORCING_VARIABLES.get(library, _all_forcing_variables())
    return {
        "library": library,
        "name": LIBRARY_NAMES.get(library, library),
        "filepath": info["filepath"],
        "version": info.get("version"),
        "threading_layer": info.get("threading_layer"),
        "architecture": info.get("architecture"),
        "num_threads": info["num_threads"],
        "forced_by": {name: environ[name] for name in forcing if environ.get(name)},
    }


def blas_summary(environ=None):
    """``blas()`` in one line: "OpenBLAS 0.3.31, pthreads, Haswell kernels (forced by
    OPENBLAS_CORETYPE=Haswell), 2 threads"."""
    info = blas(environ)
    if info["library"] is None:
        return "no BLAS that threadpoolctl knows is loaded"
    forced = ", ".join(f"{name}={value}" for name, value in info["forced_by"].items())
    threads_text = f"{info['num_threads']} thread{'s' if info['num_threads'] != 1 else ''}"
    return (f"{info['name']} {info['version']}, {info['threading_layer']}, "
            f"{info['architecture']} kernels ({f'forced by {forced}' if forced else 'its own choice'}), "
            f"{threads_text}")


def unforced_environ(environ=None):
    """A copy of ``environ`` (default ``os.environ``) for a child whose BLAS chooses its own
    kernels: every ``FORCING_VARIABLES`` entry dropped, the thread budget passed on as
    ``ATTNBENCH_THREADS`` and this package put first on ``PYTHONPATH``.  ``environ`` itself
    is left as it was."""
    environ = os.environ if environ is None else environ
    dropped = _all_forcing_variables()
    child = {name: value for name, value in environ.items() if name not in dropped}
    child["ATTNBENCH_THREADS"] = str(threads.budget())
    child["PYTHONPATH"] = os.pathsep.join(filter(None, (PACKAGE_PARENT, environ.get("PYTHONPATH"))))
    return child


def gemm_gflops_unforced(dtype, n=2048, repeats=5, environ=None):
    """``gemm_gflops(dtype, n, repeats)`` measured in a child Python process whose BLAS
    chose its kernels itself (``unforced_environ``): (samples, the architecture
    threadpoolctl reports in the child).  None, at no cost, when nothing in ``environ``
    (default ``os.environ``) forces this process's BLAS: then ``gemm_gflops`` is already
    the unforced figure.  Cost: a Python start-up and NumPy import (~0.5 s) besides the
    products; meanwhile this process only waits."""
    if not blas(environ)["forced_by"]:
        return None
    child = subprocess.run(
        [sys.executable, "-c", UNFORCED_CHILD, np.dtype(dtype).name, str(n), str(repeats)],
        env=unforced_environ(environ), check=True, capture_output=True, text=True,
    )
    result = json.loads(child.stdout.strip().splitlines()[-1])
    return result["samples"], result["architecture"]


def _extension():
    """(ffi, lib) of the C extension, loaded once, where the pool loads it
    (``ExtensionNotBuilt`` when it is not built)."""
    extension = threads._pool()
    return extension.ffi, extension.lib


def _bits(dtype):
    """The bits of ``dtype``'s peak loop (``PEAK_BITS``); TypeError for another type."""
    return PEAK_BITS[dtypes.float_type(dtype, tuple(PEAK_BITS)).name]


def _isas_with(bits):
    """The ISAs of ``isas()`` with a loop of ``bits``-bit elements, best first (a loop of no
    rounds: 0 flops where it runs, -1 where it does not)."""
    lib = _extension()[1]
    return [isa for isa in isas() if lib.attn_fma_peak(isa.encode(), bits, 1, 0) == 0]


def _loop(dtype, threads, isa):
    """``loop(rounds)``: the peak loop of ``dtype`` on ``isa`` (None: the best with one) and
    ``threads`` (None: the budget), run for ``rounds`` rounds, returning its flops; ValueError
    for an ISA without that loop here, or a CPU without the unit."""
    bits = _bits(dtype)
    n_threads = _threads(threads)
    available = isas()
    if isa is not None and isa not in available:
        raise ValueError(f"ISA {isa!r} is not available on this CPU, which runs {', '.join(available)}")
    with_loop = _isas_with(bits)
    if not with_loop:
        raise ValueError(missing_unit(dtype))
    isa = with_loop[0] if isa is None else isa
    if isa not in with_loop:
        raise ValueError(f"ISA {isa!r} has no {dtypes.type_name(dtype)} loop; {', '.join(with_loop)} here have one")
    lib = _extension()[1]
    return lambda rounds: lib.attn_fma_peak(isa.encode(), bits, n_threads, rounds)


def _threads(requested):
    """``requested`` threads (None: the budget) as an int in [1, budget]; ValueError
    otherwise: a measurement runs on the budget as every kernel does, and a larger one
    is asked for by raising it (``kernels.threads.using_budget(n)``)."""
    allowed = threads.budget()
    if requested is None:
        return allowed
    if not isinstance(requested, numbers.Integral) or isinstance(requested, bool) or requested < 1:
        raise ValueError(f"threads={requested!r}: a thread count is a whole number >= 1")
    if requested > allowed:
        raise ValueError(f"threads={requested} is beyond the thread budget of {allowed}; "
                         f"raise the budget first (kernels.threads.using_budget({requested}))")
    return int(requested)


def _all_forcing_variables():
    return {name for names in FORCING_VARIABLES.values() for name in names}
