"""The report's opening: which commit was measured, when, on what machine, with which
thread budget, ceiling and library versions."""
import importlib.metadata
import platform

from .. import bench_spec as spec
from .document import Section
from .plots import ram_text
from .tables import text

LIBRARIES = ("numpy", "numba", "cffi", "matplotlib", "asv", "torch")


def library_versions():
    """'numpy 2.4.6, ..., torch not installed', from the current environment's metadata."""
    def version(name):
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            return f"{name} not installed"
    return ", ".join(version(name) for name in LIBRARIES)


def environment(run):
    """The asv environment, described by what it is rather than where it lives: asv names
    a ``--python=same`` run after the interpreter's path, a managed one after its
    Python version and requirements."""
    if run.env_name.startswith("existing"):
        return "the interpreter that ran asv (`--python=same`)"
    return f"`{run.env_name}`"


def overview(run):
    machine = run.machine
    budget = run.value(spec.THREAD_BUDGET)
    ceiling = ", ".join(f"{gemm} {text(run.value(benchmark), lambda v: f'{v:.1f} GFLOP/s')}"
                        for gemm, benchmark in spec.GEMM.values())
    return Section(None, ["\n".join([
        f"- **Measured:** commit `{run.commit_hash}` (committed {run.date:%Y-%m-%d %H:%M} UTC), "
        f"last benchmark started {text(run.measured_at, lambda t: f'{t:%Y-%m-%d %H:%M} UTC')}; "
        f"asv environment: {environment(run)}.",
        f"- **Machine:** {machine.get('machine', '?')}: {machine.get('cpu', '?')}, "
        f"{machine.get('num_cpu', '?')} CPUs, {ram_text(run)} RAM, {machine.get('os', '?')} "
        f"({machine.get('arch', '?')}).",
        f"- **Thread budget:** {text(budget, lambda v: f'{v:.0f} threads')} for every kernel "
        "(BLAS, Numba and OpenMP alike).",
        f"- **Ceiling, measured in the same run:** {ceiling} (installed BLAS); memory bandwidth "
        f"{text(run.value(spec.BANDWIDTH), lambda v: f'{v:.1f} GB/s')} (copy, one thread), "
        f"{text(run.value(spec.READ_BANDWIDTH), lambda v: f'{v:.1f} GB/s')} (streaming read, every thread).",
        f"- **Versions:** Python {platform.python_version()}, {library_versions()} (read from the "
        "environment that wrote this report).",
    ])])
