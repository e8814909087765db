"""The report's opening: which commit was measured, when, on what machine, with which
thread budget, ceiling and library versions; which of the results folder's runs this is,
and whether anything is missing from it."""
import importlib.metadata
import platform

from .. import bench_spec as spec
from ..output import text
from .document import Section
from .gaps import absent_benchmarks, failed_records
from .plots import ram_text
from .ceilings import ceilings_text

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


def started(run):
    """When the run's last benchmark started, and its first when that was another minute:
    a results file holds the benchmarks of every asv run of its commit (``make bench``
    runs a class at a time; ``BENCH=`` and ``RESUME=1`` runs add to what is there)."""
    last, first = (text(time, lambda t: f"{t:%Y-%m-%d %H:%M} UTC")
                   for time in (run.measured_at, run.first_started))
    return f"last benchmark started {last}" + (f" (the first {first})" if first != last else "")


def folder(run):
    """Lines on the rest of the results folder: the runs not shown, the files not read."""
    lines = []
    if run.others:
        others = sorted(run.others, key=lambda other: (other.date, other.commit_hash), reverse=True)
        listed = ", ".join(f"commit `{other.commit_hash[:8]}` on {other.machine.get('machine', '?')} "
                           f"(committed {other.date:%Y-%m-%d})" for other in others[:3])
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        lines.append(f"- **Results:** the newest of the {len(others) + 1} runs in the results folder (by "
                     f"commit date, then by when it ran); not shown: {listed}{more}.")
    if run.unreadable:
        lines.append("- **Unreadable, skipped:**" + "".join(f"\n  - {line}" for line in run.unreadable))
    return lines


def completeness(run):
    """A line when the run lacks any of the report's benchmarks or cases; else none."""
    absent, failed = absent_benchmarks(run), failed_records(run)
    if not (absent or failed or run.stale):
        return []
    parts = [f"{len(absent)} of the {len(spec.BENCHMARKS)} benchmarks the report reads "
             f"{'is' if len(absent) == 1 else 'are'} not in these results" if absent else "",
             f"{len(failed)} {'case' if len(failed) == 1 else 'cases'} failed" if failed else "",
             f"{len(run.stale)} {'benchmark was' if len(run.stale) == 1 else 'benchmarks were'} "
             "measured by another version of their code, left out" if run.stale else ""]
    return [f"- **Incomplete:** {'; '.join(part for part in parts if part)} (listed under [Gaps](#gaps))."]


def overview(run):
    machine = run.machine
    budget = run.value(spec.THREAD_BUDGET)
    return Section(None, ["\n".join([
        f"- **Measured:** commit `{run.commit_hash}` (committed {run.date:%Y-%m-%d %H:%M} UTC), "
        f"{started(run)}; asv environment: {environment(run)}.",
        *folder(run),
        *completeness(run),
        f"- **Machine:** {machine.get('machine', '?')}: {machine.get('cpu', '?')}, "
        f"{machine.get('num_cpu', '?')} CPUs, {ram_text(run)} RAM, {machine.get('os', '?')} "
        f"({machine.get('arch', '?')}).",
        f"- **Thread budget:** {text(budget, lambda v: f'{v:.0f} threads')} for every kernel "
        "(BLAS and our thread pool alike).",
        *ceilings_text(run),
        "- **Figures:** each timed figure is the median of its samples (asv's repeats of a call, or "
        "the rounds of a side-by-side ratio), followed by ± half their interquartile range as a share of "
        "the median (\"1.19× ±3%\"); the CSVs give the quartiles (`_q25`, `_q75`). Plots draw the "
        "quartiles as a band. A figure without ± is one sample (a quick run).",
        f"- **Versions:** Python {platform.python_version()}, {library_versions()} (read from the "
        "environment that wrote this report).",
    ])])
