"""The closing section: what is missing from the results, and why."""
from .. import bench_spec as spec
from .document import Section
from .results import FAILED, SKIPPED


def _case(record):
    params = ", ".join(f"{name}={value!r}" for name, value in record.params.items())
    return f"`{record.benchmark}`" + (f" ({params})" if params else "")


def failed_records(run):
    return [r for r in run.records if r.status == FAILED]


def absent_benchmarks(run):
    """The report's benchmarks of which the run holds no value at all."""
    return [b for b in spec.BENCHMARKS if not run.select(b)]


def gaps(run):
    """Failed cases, the skipped count, the benchmarks left out as stale, and the report's
    benchmarks absent from the run."""
    failed = [_case(r) for r in failed_records(run)]
    skipped = sum(r.status == SKIPPED for r in run.records)
    absent = [f"`{b}`" for b in absent_benchmarks(run)]
    lines = [
        f"- Failed (the benchmark raised, or its process died; see asv's log): {len(failed)}" + "".join(
            f"\n  - {case}" for case in failed),
        f"- Skipped by the benchmarks (a size or dtype a kernel does not take): {skipped} cases.",
    ]
    if run.stale:
        lines.append("- Left out, measured by another version of the benchmark than the suite's "
                     "benchmarks.json describes (asv leaves these out too; run them again): "
                     + ", ".join(f"`{name}`" for name in run.stale) + ".")
    lines.append("- Not in the results file: " + (", ".join(absent) if absent else "none") + (
        " (not run: an interrupted or filtered (`BENCH=`) run, or a benchmark asv could not load)."
        if absent else "."))
    return Section("Gaps", ["\n".join(lines)])
