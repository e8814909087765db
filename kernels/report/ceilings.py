"""The machine's ceilings as the results hold them: the FMA peak per precision and thread
count (``Ceilings``), NumPy's BLAS, named (``Blas``), its gemm, and the bandwidths."""
import math

from .. import bench_spec as spec
from ..output import fmt_number, missing, text


def every_thread_count(run):
    return max(run.param_values(spec.FMA_PEAK, "threads"), default=math.nan)


def fma_peak(run, dtype, threads=None):
    """The measured FMA peak, GFLOP/s, of ``dtype`` on ``threads`` (default: the budget)."""
    return run.value(spec.FMA_PEAK, dtype=dtype, threads=threads or every_thread_count(run))


def blas_name(run):
    """The BLAS the gemm figures are of (``Blas``'s parameter), or "the installed BLAS"."""
    names = run.param_values(spec.BLAS_THREADS, "blas")
    return names[0] if names else "the installed BLAS"


def ceilings_text(run):
    """The ceilings in a sentence each, for the report's opening."""
    def rate(value, unit):
        return text(value, lambda v: f"{v:.1f} {unit}")
    every = every_thread_count(run)
    peaks = "; ".join(f"{dtype} {rate(fma_peak(run, dtype, 1), 'GFLOP/s')} on one thread, "
                      f"{rate(fma_peak(run, dtype, every), 'GFLOP/s')} on {text(every, fmt_number)}"
                      for dtype in spec.DTYPES)
    gemms = ", ".join(f"{gemm} {rate(run.value(benchmark), 'GFLOP/s')}" for gemm, benchmark in spec.GEMM.values())
    unforced = run.value(spec.SGEMM_UNFORCED, blas=blas_name(run))
    unforced_text = ("" if missing(unforced) else
                     f"; with the forcing variables unset (its own choice of kernels) sgemm {rate(unforced, 'GFLOP/s')}")
    return [f"- **Compute roof, the FMA peak** (csrc/fma_peak.c, the best ISA this CPU runs): {peaks}.",
            f"- **BLAS:** {blas_name(run)}: {gemms}{unforced_text}.",
            f"- **Memory roof:** streaming read {rate(run.value(spec.READ_BANDWIDTH), 'GB/s')} (every thread); "
            f"copy {rate(run.value(spec.BANDWIDTH), 'GB/s')} (one thread)."]
