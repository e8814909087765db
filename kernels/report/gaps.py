"""The closing section: what is missing from the results, and why."""
from .. import bench_spec as spec
from .document import Section
from .results import FAILED, SKIPPED


def _case(record):
    params = ", ".join(f"{name}={value!r}" for name, value in record.params.items())
    return f"`{record.benchmark}`" + (f" ({params})" if params else "")


def gaps(run):
    """Failed cases, the skipped count, and the report's benchmarks absent from the run."""
    failed = [_case(r) for r in run.records if r.status == FAILED]
    skipped = sum(r.status == SKIPPED for r in run.records)
    absent = [f"`{b}`" for b in spec.BENCHMARKS if not run.select(b)]
    return Section("Gaps", ["\n".join([
        f"- Failed (the benchmark raised; see asv's log): {len(failed)}" + "".join(
            f"\n  - {case}" for case in failed),
        f"- Skipped by the benchmarks (a size or dtype a kernel does not take): {skipped} cases.",
        "- Not in the results file: " + (", ".join(absent) if absent else "none") + ".",
    ])])
