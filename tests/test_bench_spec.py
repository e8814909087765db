"""The benchmark spec holds the asv suite and the report together: every benchmark the
report reads exists in the suite with the parameters the report expects, and the report
reads nothing the spec does not name."""
import json
import pathlib

import pytest

from kernels import bench_spec as spec
from kernels import report
from kernels.report import gaps, results

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "asv_results"


@pytest.mark.parametrize("benchmark", spec.BENCHMARKS, ids=str)
def test_every_benchmark_of_the_spec_is_in_the_suite(benchmark, bench_modules):
    module, cls, method = benchmark.name.split(".")
    suite_class = getattr(bench_modules[module], cls, None)
    assert suite_class is not None, f"benchmarks/{module}.py has no class {cls}"
    assert callable(getattr(suite_class, method, None)), f"{module}.{cls} has no {method}"
    assert tuple(getattr(suite_class, "param_names", ())) == benchmark.params
    assert len(getattr(suite_class, "params", ())) == len(benchmark.params)


def test_the_report_reads_exactly_the_spec(tmp_path, monkeypatch):
    """Every name a section asks the results for is a spec benchmark, and every spec
    benchmark is read by some section: no string of the report's own, no stale entry.
    (The gaps section asks for every spec benchmark by construction: left out here.)"""
    read = set()
    select = results.Run.select

    def recording_select(self, benchmark, **params):
        read.add(str(benchmark))
        return select(self, benchmark, **params)

    monkeypatch.setattr(results.Run, "select", recording_select)
    monkeypatch.setattr(report, "SECTIONS", tuple(s for s in report.SECTIONS if s is not gaps.gaps))
    report.write_report(FIXTURE, tmp_path)
    assert read == {b.name for b in spec.BENCHMARKS}


def test_the_fixture_declares_the_spec_parameters():
    declared = json.loads((FIXTURE / "benchmarks.json").read_text())
    for benchmark in spec.BENCHMARKS:
        assert declared[benchmark.name]["param_names"] == list(benchmark.params), benchmark.name
