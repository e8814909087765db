"""The machine's ceilings as the results hold them: the peak per precision and thread count
(``Ceilings``: float32's and float64's FMAs; bfloat16's dot products, where the CPU has
AVX512-BF16), a kernel's fraction of its type's peak timed side by side with the peak's loop
(``PeakFraction``; every fraction of a peak the report gives is read here), NumPy's BLAS,
named (``Blas``), its gemm and that gemm's fraction of the same peak timed the same way
(``GemmFraction``: the practical roof of a kernel made of matrix products), c_tiled's tile
operations alone timed the same way (``TileFraction``: the roof of its own design), its whole
call timed beside them (``CallOverTiles``), and the bandwidths.

bfloat16's roof is the machine's question, not a kernel's: the faster of the two ways this
CPU can multiply it, its dot-product unit where it has AVX512-BF16 (``vdpbf16ps``) and
float32's FMAs on it widened, as float16 is everywhere here.  Which is faster is the CPU's
own answer, not its feature flags' (Zen 4's dot products do twice an FMA's flops at its
rate; Sapphire Rapids' at half its rate), and c_tiled's "auto" path takes the same one."""
import math

from .. import bench_spec as spec
from ..ceilings import READ_BYTES
from ..machine_id import isa_of
from ..memory import format_bytes
from ..output import fmt_number, fmt_percent, missing, ratio, text
from .results import is_external

NO_BF16_UNIT = "no bfloat16 unit (no AVX512-BF16)"


def every_thread_count(run):
    return max(run.param_values(spec.FMA_PEAK, "threads"), default=math.nan)


def fma_peak(run, dtype, threads=None):
    """The measured peak, GFLOP/s, of ``dtype`` on ``threads`` (default: the budget): float32's
    and float64's FMAs, bfloat16's dot products (NaN where the CPU has no unit for them)."""
    return run.value(spec.FMA_PEAK, dtype=dtype, threads=threads or every_thread_count(run))


def has_bf16_dot_product(run):
    """Whether the run's CPU has AVX512-BF16: what the machine's name says
    (``kernels.machine_id``), else True where ``Ceilings`` measured a bfloat16 peak (it runs
    only on that unit); None when neither tells."""
    isa = isa_of(run.path.parent.name)
    if isa is not None:
        return "bf16" in isa.split("-")
    return True if not missing(fma_peak(run, "bfloat16")) else None


def compute_roof(run, dtype, threads=None):
    """The peak, GFLOP/s, that bounds a kernel computing in ``dtype``: the type's own for
    float32 and float64; float32's for float16 (widened to float32 before any product); for
    bfloat16 the faster of its dot-product peak and float32's on a CPU with the unit (NaN if
    the run has not measured the dot products), float32's on a CPU without it (or not known
    to have it)."""
    if dtype in spec.DTYPES:
        return fma_peak(run, dtype, threads)
    widened = fma_peak(run, "float32", threads)
    if dtype == "bfloat16" and has_bf16_dot_product(run):
        dot = fma_peak(run, dtype, threads)
        return dot if missing(dot) or missing(widened) else max(dot, widened)
    return widened


def bf16_dot_is_roof(run):
    """Whether bfloat16's roof here is its dot-product peak (the unit measured faster than
    float32's FMAs), not float32's."""
    return bool(has_bf16_dot_product(run)) and fma_peak(run, "bfloat16") > fma_peak(run, "float32")


# How every fraction of a peak in the report was measured, in the words of its sections
SIDE_BY_SIDE_PEAK = ("timed side by side with the peak's own loop, round by round in one process "
                     "(`PeakFraction`; a peer's: c_tiled's ÷ c_tiled's speed over it, `PeerSpeedup`), "
                     "never a rate divided by a peak measured at another moment")


def peak_fraction(run, kernel, dtype, threads=None, causal=False):
    """The kernel's GFLOP/s ÷ its type's compute roof on 8 heads at the headline n, full or
    causal, on ``threads`` (default: the budget), timed side by side with the roof's loop
    (``PeakFraction``).  A peer's is c_tiled's ÷ c_tiled's speed over the peer on the same
    shape (``PeerSpeedup``): two side-by-side ratios, neither divided by a figure of another
    moment.  NaN when not measured."""
    every = every_thread_count(run)
    threads = threads or every
    if is_external(kernel):
        speedup = run.value(spec.PEER_SPEEDUP, peer=kernel, kernel="c_tiled", shape="causal" if causal else "full",
                            threads=threads, dtype=dtype)
        return ratio(peak_fraction(run, "c_tiled", dtype, threads, causal), speedup)
    fraction = run.value(spec.PEAK_FRACTION, kernel=kernel, dtype=dtype, threads=threads, causal=causal)
    if missing(fraction) and not causal and threads == every:
        # results kept from before PeakFraction took threads and causal: every thread, full
        fraction = run.value(spec.PEAK_FRACTION, kernel=kernel, dtype=dtype)
    return fraction


def gemm_fraction(run, dtype="float32", threads=None):
    """NumPy's gemm of ``dtype`` ÷ the type's FMA peak on ``threads`` (default: the budget),
    timed side by side with the peak's loop (``GemmFraction``); NaN when not measured."""
    return run.value(spec.GEMM_FRACTION, dtype=dtype, threads=threads or every_thread_count(run))


def tile_fraction(run, dtype="float32", threads=None):
    """c_tiled's tile operations alone in ``dtype`` ÷ the type's FMA peak on ``threads``
    (default: the budget), timed side by side with the peak's loop (``TileFraction``); NaN
    when not measured."""
    return run.value(spec.TILE_FRACTION, dtype=dtype, threads=threads or every_thread_count(run))


def call_over_tiles(run, dtype="float32", threads=None):
    """c_tiled's whole call on the headline's shape (full) in ``dtype`` ÷ its tile operations
    alone, on ``threads`` (default: the budget), timed side by side (``CallOverTiles``); NaN
    when not measured."""
    return run.value(spec.CALL_OVER_TILES, dtype=dtype, threads=threads or every_thread_count(run))


def tile_roof_text(run):
    """The roof of c_tiled's design in a sentence, beside what its whole call reaches; None
    for results without ``TileFraction`` (it came later than the other ceilings)."""
    if not run.measured(spec.TILE_FRACTION):
        return None
    every = every_thread_count(run)
    fractions = ", ".join(f"{dtype} {text(tile_fraction(run, dtype, 1), fmt_percent)} of its peak on one thread, "
                          f"{text(tile_fraction(run, dtype, every), fmt_percent)} on {text(every, fmt_number)}"
                          for dtype in spec.DTYPES)
    whole = text(peak_fraction(run, "c_tiled", "float32", every), fmt_percent)
    beside = ""
    if run.measured(spec.CALL_OVER_TILES):
        shares = ", ".join(f"{dtype} {text(call_over_tiles(run, dtype, 1), fmt_percent)} on one thread, "
                           f"{text(call_over_tiles(run, dtype, every), fmt_percent)} on {text(every, fmt_number)}"
                           for dtype in spec.DTYPES)
        beside = (f"; timed side by side with the tile operations' loop instead, it runs at this share of their "
                  f"rate (`CallOverTiles`): {shares}")
    return (f"its tile operations alone (`TileFraction`: its products and online softmax on tiles "
            f"packed once, as a large call walks each key tile; csrc/flash_driver_template.h, tile_peak), timed "
            f"side by side with the FMA peak's loop: {fractions}. Its whole call on the headline's float32 shape "
            f"(full, {text(every, fmt_number)} threads) reaches {whole}{beside}: the rest goes to packing, "
            f"writing out and walking the tiles")


def blas_name(run):
    """The BLAS the gemm figures are of (``Blas``'s parameter), or "the installed BLAS"."""
    names = run.param_values(spec.BLAS_THREADS, "blas")
    return names[0] if names else "the installed BLAS"


def gflops_words(value):
    return f"{value:.1f} GFLOP/s"


def bf16_roof_text(run):
    """bfloat16's roof in a sentence: the faster of its dot-product peak and float32's FMA
    peak, "no bfloat16 unit", or unknown."""
    unit = has_bf16_dot_product(run)
    if unit is False:
        return (f"{NO_BF16_UNIT} on this CPU: bfloat16 is widened to float32, and float32's FMA peak "
                "is its roof")
    every = every_thread_count(run)
    if unit is None:
        return ("not measured, and whether this CPU has AVX512-BF16 is not known (its results folder is "
                "not named by `kernels.machine_id`): bfloat16 is read against float32's FMA peak")
    faster = ("the dot products, so they are its roof" if bf16_dot_is_roof(run) else
              "float32's FMAs on bfloat16 widened, so float32's FMA peak is its roof (and c_tiled widens it too)")
    return (f"the faster of two units: the dot-product peak (`vdpbf16ps`, AVX512-BF16; 2 flops per bfloat16 "
            f"product) {text(fma_peak(run, 'bfloat16', 1), gflops_words)} on one thread, "
            f"{text(fma_peak(run, 'bfloat16', every), gflops_words)} on {text(every, fmt_number)}, "
            f"and float32's FMA peak; here the faster is {faster}")


def ceilings_text(run):
    """The ceilings in a sentence each, for the report's opening."""
    every = every_thread_count(run)
    peaks = "; ".join(f"{dtype} {text(fma_peak(run, dtype, 1), gflops_words)} on one thread, "
                      f"{text(fma_peak(run, dtype, every), gflops_words)} on {text(every, fmt_number)}"
                      for dtype in spec.DTYPES)
    gemms = ", ".join(f"{gemm} {text(run.value(benchmark), gflops_words)}" for gemm, benchmark in spec.GEMM.values())
    unforced = run.value(spec.SGEMM_UNFORCED, blas=blas_name(run))
    unforced_text = ("" if missing(unforced) else
                     f"; with the forcing variables unset (its own choice of kernels) sgemm {text(unforced, gflops_words)}")
    fractions = ", ".join(f"{gemm} {text(gemm_fraction(run, dtype, 1), fmt_percent)} of {dtype}'s peak on one "
                          f"thread, {text(gemm_fraction(run, dtype, every), fmt_percent)} on {text(every, fmt_number)}"
                          for dtype, (gemm, _) in spec.GEMM.items())
    return [f"- **Compute roof, the FMA peak** (csrc/fma_peak.c, the best ISA this CPU runs): {peaks}.",
            f"- **bfloat16's roof:** {bf16_roof_text(run)}.",
            f"- **BLAS:** {blas_name(run)}: {gemms}{unforced_text}.  Timed side by side with the FMA peak's loop "
            f"as the kernels are (`GemmFraction`), the practical roof of a kernel made of matrix products: {fractions}.",
            *([f"- **c_tiled's own roof:** {tile_roof}."] if (tile_roof := tile_roof_text(run)) else []),
            f"- **Memory roof:** streaming read {text(run.value(spec.READ_BANDWIDTH), lambda v: f'{v:.1f} GB/s')} "
            f"(csrc/read_peak.c, {format_bytes(READ_BYTES)}, every thread); copy {text(run.value(spec.BANDWIDTH), lambda v: f'{v:.1f} GB/s')} (one thread)."]
