"""kernels.report (its results reader, fits and sections) on hand-made asv results.

The fixture (tests/fixtures/asv_results, laws in its README.md) is synthetic: times are
exact multiples of n² (or n^1.8), memory of n² or n, and multi-head times follow from
round GFLOP/s figures, so every expected number below is derived by hand from those laws.
"""
import csv
import json
import math
import pathlib
import subprocess
import sys

import pytest

from kernels import KERNELS, costs
from kernels.memory import format_bytes
from kernels.report import fits, results, write_report

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "asv_results"
NEWEST_COMMIT = "c0ffee1234567890abcdef1234567890abcdef12"
OLDER_COMMIT = "01dc0de0000000000000000000000000deadbeef"
HEADLINE_FLOPS = 4 * 4096 * 4096 * 64 * 8  # one full call: 8 heads, n = 4096, d = 64
PLOTS = ("time_vs_n.png", "memory_vs_n.png", "throughput_vs_n.png", "model_attention_share.png",
         "decode_vs_n.png")


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("report")
    assert write_report(FIXTURE, out_dir) == out_dir / "REPORT.md"
    return out_dir


@pytest.fixture(scope="module")
def report(report_dir):
    return (report_dir / "REPORT.md").read_text()


def section(report, heading):
    """The text of the REPORT.md section whose heading starts with ``heading``."""
    start = report.index("\n## " + heading)
    end = report.find("\n## ", start + 1)
    return report[start:] if end < 0 else report[start:end]


def row(text, *first_cells):
    """The cells of the one markdown table row in ``text`` that starts with ``first_cells``."""
    prefix = "| " + " | ".join(first_cells) + " |"
    rows = [line for line in text.splitlines() if line.startswith(prefix)]
    assert len(rows) == 1, f"{len(rows)} rows start with {prefix!r}"
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


def csv_rows(report_dir, name):
    with open(report_dir / f"{name}.csv", newline="") as file:
        return list(csv.DictReader(file))


def csv_row(rows, **cells):
    matches = [r for r in rows if all(r[key] == value for key, value in cells.items())]
    assert len(matches) == 1, f"{len(matches)} rows match {cells}"
    return matches[0]


# -- the report from the fixture --------------------------------------------------------

def test_writes_the_report_plots_and_csvs(report_dir, report, assert_png):
    for plot in PLOTS:
        assert_png(report_dir / plot)
        assert f"]({plot})" in report  # linked relative to REPORT.md
    for name in ("seq_len", "multihead", "fits", "headline", "goals"):
        assert (report_dir / f"{name}.csv").stat().st_size > 0


def test_header_names_the_newest_run_and_its_machine(report):
    header = report[:report.index("\n## ")]
    assert NEWEST_COMMIT in header and OLDER_COMMIT not in report
    assert "committed 2025-01-01 12:00 UTC), last benchmark started 2025-01-01 13:00 UTC" in header
    assert "Synthetic CPU @ 3.00GHz, 4 CPUs, 16.0 GiB RAM, Linux 6.1.0" in header
    assert "Thread budget:** 4 threads" in header
    assert "sgemm 125.0 GFLOP/s, dgemm 62.5 GFLOP/s" in header  # not the older run's 999
    assert "Python 3." in header and "numpy " in header and "matplotlib " in header
    # the environment is described by versions, never by a path on the measuring disk
    # (asv names a --python=same environment after its interpreter's path)
    assert "asv environment: the interpreter that ran asv (`--python=same`)" in header
    assert ".venv" not in report and "existing-py" not in report


@pytest.mark.parametrize("dtype, c_tiled_gflops, gemm", [("float32", 100, 125), ("float64", 50, 62.5)])
def test_headline_numbers(report, dtype, c_tiled_gflops, gemm):
    headline = section(report, "Headline")
    seconds = HEADLINE_FLOPS / (c_tiled_gflops * 1e9)
    assert row(headline, "c_tiled", dtype)[2:] == [
        f"{seconds * 1e3:.3g} ms", f"{c_tiled_gflops:.1f}", f"{c_tiled_gflops / gemm:.0%}",
        "5.00×",   # numpy runs at a fifth of c_tiled's GFLOP/s
        "1.25×",   # torch_sdpa at 0.8 of it
    ]
    assert row(headline, "naive", dtype)[2:] == ["n/a"] * 5  # skipped everywhere


def test_missing_and_failed_values_are_na(report):
    assert row(section(report, "Startup"), "first Numba call, empty cache (compile)") == [
        "first Numba call, empty cache (compile)", "n/a"]
    assert row(section(report, "Startup"), "import kernels") == ["import kernels", "350 ms"]
    assert row(section(report, "Goals"), "first Numba call with an empty cache (compile), seconds")[1:4] == [
        "n/a", "≤ 10", "n/a"]
    gaps = section(report, "Gaps")
    assert "Not in the results file: `bench_machine.Startup.track_numba_compile_seconds`" in gaps
    assert "(kernel='c_tiled', seq_len=2048, dtype='float64')" in gaps


def test_fitted_exponents_recover_the_fixture_laws(report_dir):
    fits = csv_rows(report_dir, "fits")

    def exponent(kernel, quantity, dtype):
        return float(csv_row(fits, kernel=kernel, quantity=quantity, dtype=dtype)["exponent"])

    for dtype in ("float32", "float64"):
        assert exponent("numpy", "time", dtype) == pytest.approx(2.00, abs=0.01)
        assert exponent("c_tiled", "time", dtype) == pytest.approx(2.00, abs=0.01)
        assert exponent("numpy", "peak extra memory", dtype) == pytest.approx(2.00, abs=0.01)
        assert exponent("numba_tiled", "peak extra memory", dtype) == pytest.approx(1.00, abs=0.01)
    assert exponent("torch_sdpa", "time", "float32") == pytest.approx(1.80, abs=0.01)
    # the failed n = 2048 drops out, leaving three points from 1024 to 8192
    c_tiled_f64 = csv_row(fits, kernel="c_tiled", quantity="time", dtype="float64")
    assert (c_tiled_f64["n_min"], c_tiled_f64["n_max"], c_tiled_f64["points"]) == ("1024", "8192", "3")
    # one point (naive) or none (torch_sdpa float64): no fit
    assert csv_row(fits, kernel="naive", quantity="time", dtype="float32")["exponent"] == ""
    assert csv_row(fits, kernel="torch_sdpa", quantity="time", dtype="float64")["exponent"] == ""


def test_seq_len_csv_matches_the_fixture(report_dir):
    rows = csv_rows(report_dir, "seq_len")
    assert len(rows) == 5 * 2 * 5  # kernels × dtypes × seq_lens
    numpy_4096 = csv_row(rows, kernel="numpy", dtype="float32", seq_len="4096")
    assert float(numpy_4096["seconds"]) == pytest.approx(1e-8 * 4096 ** 2, rel=1e-12)
    assert float(numpy_4096["gflops"]) == pytest.approx(4 * 64 / 1e-8 / 1e9)  # 25.6
    assert float(numpy_4096["peak_extra_bytes"]) == 4 * 4096 ** 2
    failed = csv_row(rows, kernel="c_tiled", dtype="float64", seq_len="2048")
    assert failed["seconds"] == failed["gflops"] == ""
    assert float(failed["peak_extra_bytes"]) == 500 * 2048
    skipped = csv_row(rows, kernel="torch_sdpa", dtype="float64", seq_len="1024")
    assert skipped["seconds"] == skipped["peak_extra_bytes"] == ""


def test_multihead_csv_matches_the_fixture(report_dir):
    rows = csv_rows(report_dir, "multihead")
    causal = csv_row(rows, kernel="c_tiled", dtype="float32", seq_len="4096", causal="True")
    assert float(causal["seconds"]) == pytest.approx(0.55 * HEADLINE_FLOPS / 100e9)
    assert float(causal["gflops"]) == pytest.approx(100 / 2 / 0.55)  # half the flops in 0.55 the time
    assert csv_row(rows, kernel="numba_tiled", dtype="float64", seq_len="1024", causal="True")["seconds"] == ""


def test_comparison_tables(report):
    rungs = section(report, "Speed-up between rungs")
    assert row(rungs, "naive", "numpy", "float32") == ["naive", "numpy", "float32", "256",
                                                        f"{15 / (1e-8 * 256 ** 2):,.0f}×"]
    assert row(rungs, "numpy", "numba_tiled", "float32")[3:] == ["8,192", "2.50×"]
    assert row(rungs, "numba_tiled", "c_tiled", "float64")[3:] == ["8,192", "1.60×"]
    assert "torch_sdpa" not in rungs  # the peer is not a rung
    assert row(section(report, "Causal against full"), "c_tiled")[1:] == ["0.55×", "0.55×"]
    assert row(section(report, "Causal against full"), "numpy")[1:] == ["1.00×", "1.00×"]
    assert row(section(report, "float64 against float32"), "c_tiled")[1:] == ["2.00×", "2.00×"]
    assert row(section(report, "Thread scaling"), "c_tiled")[1:] == ["31.0", "100.0", "3.23×", "81%"]


def test_out_of_memory_seq_len(report):
    memory = section(report, "Memory against sequence length")
    assert "**numpy, float32:** the fit reaches RAM at n ≈ 65,536" in memory   # 4·n² = 2³⁴
    assert "**numpy, float64:** the fit reaches RAM at n ≈ 46,341" in memory   # 8·n² = 2³⁴
    assert "numba_tiled, float32" not in memory  # tiled kernels have no wall


def test_memory_wall(report):
    wall = section(report, "The memory wall")
    need = KERNELS["numpy"].workspace_bytes(1, 65536, 65536, 64, 64, 8, True)
    assert row(wall, "numpy")[1:] == ["n/a", "n/a", f"would need {format_bytes(need)} > RAM 16.0 GiB"]
    assert row(wall, "c_tiled")[1:3] == ["4.0 MiB", "20 s"]


def test_side_by_side(report, report_dir):
    table = section(report, "Side by side")
    assert row(table, "c_tiled", "torch_sdpa", "float64", "8", "4,096", "1")[-1] == "1.24×"
    assert row(table, "numba_tiled", "torch_sdpa", "float32", "8", "4,096", "4")[-1] == "0.50×"
    assert row(table, "c_tiled", "numpy", "float32", "1", "8,192", "4")[-1] == "4.00×"
    rows = csv_rows(report_dir, "side_by_side")
    assert len(rows) == 2 * 2 * 2 + 2 + 2  # tiled kernels x dtypes x thread counts, + numpy, + decode
    assert row(table, "c_tiled", "torch_sdpa, one cached query")[-1] == "1.20×"
    assert float(csv_row(rows, kernel="numba_tiled", baseline="numpy")["speedup"]) == 2.5


@pytest.mark.parametrize("goal, measured, met", [
    ("c_tiled speed over torch_sdpa, float32, 8 heads, n = 4,096, all threads, timed side by side",
     "1.25", "yes"),
    ("c_tiled speed over torch_sdpa, float32, 8 heads, n = 4,096, one thread, timed side by side",
     "1.24", "yes"),
    ("numba_tiled speed over torch_sdpa, float32, 8 heads, n = 4,096, all threads, timed side by side",
     "0.5", "no"),
    ("c_tiled ÷ sgemm GFLOP/s, float32, 8 heads, n = 4,096", "0.8", "no"),
    ("numba_tiled speed over numpy, float32, one head, n = 8,192, timed side by side", "2.5", "no"),
    ("c_tiled speed over numpy, float32, one head, n = 8,192, timed side by side", "4", "yes"),
    ("c_tiled causal ÷ full time, float32, 8 heads, n = 4,096", "0.55", "yes"),
    ("import kernels, seconds", "0.35", "yes"),
])
def test_goals(report, goal, measured, met):
    cells = row(section(report, "Goals"), goal)
    assert (cells[1], cells[3]) == (measured, met)


def test_model_attention_share_and_crossover(report, report_dir):
    """The fixture's shares are n / (n + c): one half exactly at n = c, a grid point."""
    model, forward = section(report, "A real transformer").split("The whole forward pass")
    assert "n = 6·d = 2,304" in model
    assert row(model, "numpy")[1:] == ["11%", "20%", "33%", "50%", "67%", "80%", "89%", "1,024"]
    assert row(model, "c_tiled")[-1] == "4,096"
    assert row(model, "torch_sdpa")[-1] == "n/a"  # skipped: no crossover to report
    assert row(forward, "numba_tiled")[1:] == ["1.5 ms", "3 ms", "6 ms", "12 ms"]
    rows = csv_rows(report_dir, "model_attention_share")
    assert float(csv_row(rows, kernel="numba_tiled")["crossover_seq_len"]) == pytest.approx(2048)


def test_decode_slopes_bandwidth_memory_and_tiny_calls(report, report_dir):
    """The fixture's cached steps take bytes / rate (slope 1), recomputation c·n² (slope 2)."""
    decode = section(report, "Decoding")
    assert row(decode, "c_tiled", "1.00")[1:] == ["1.00", "2.00", "2.00", "3.00"]
    assert row(decode, "naive", "n/a", "n/a", "n/a", "n/a") == ["naive"] + ["n/a"] * 4
    assert "streaming-read bandwidth, measured in the same run (25.0 GB/s)" in decode
    seconds = 2 * 65536 * 64 * 8 * 4 / 20e9  # the cache's bytes at 20 GB/s
    assert row(decode, "c_tiled", f"{seconds * 1e3:.3g} ms") == ["c_tiled", f"{seconds * 1e3:.3g} ms", "20.0", "80%"]
    assert "256.0 MiB; the n × n scores it saves recomputing would take 128.0 GiB (512×)" in decode
    assert row(decode, "torch_sdpa", "70 µs") == ["torch_sdpa", "70 µs"]
    assert float(csv_row(csv_rows(report_dir, "decode_slopes"), kernel="numpy")["recomputed_total"]) == \
        pytest.approx(3.0)


@pytest.mark.parametrize("goal, measured, met", [
    ("c_tiled cached decode, n = 65,536: cache read rate ÷ streaming-read bandwidth", "0.8", "yes"),
    ("c_tiled cached decode speed over torch_sdpa, n = 65,536, timed side by side", "1.2", "yes"),
    ("numba_tiled cached decode speed over torch_sdpa, n = 65,536, timed side by side", "0.8", "yes"),
    ("numba_tiled cached decode time ÷ numpy's, the worst n", "0.714", "yes"),
    ("tiny call (one head, n = 64): torch_sdpa time ÷ c_tiled time", "7", "yes"),
])
def test_decode_goals(report, goal, measured, met):
    cells = row(section(report, "Goals"), goal)
    assert (cells[1], cells[3]) == (measured, met)


def test_crossover_interpolates_in_log_n_and_needs_a_bracket():
    from kernels.report.model import crossover

    assert crossover([1000, 4000], [0.25, 0.75]) == pytest.approx(2000)  # halfway in log n
    assert crossover([1000, 2000, 4000], [0.2, math.nan, 0.8]) == pytest.approx(2000)
    assert math.isnan(crossover([1000, 2000], [0.6, 0.7]))   # already above at the first n
    assert math.isnan(crossover([1000, 2000], [0.1, 0.2]))   # never reaches it


# -- degraded input ---------------------------------------------------------------------

def write_results(results_dir, results, param_names=None, date=1):
    """A minimal asv results folder: one machine, one run holding ``results``."""
    machine_dir = results_dir / "box"
    machine_dir.mkdir(parents=True)
    (machine_dir / "machine.json").write_text(json.dumps({"machine": "box", "ram": "1073741824"}))
    (results_dir / "benchmarks.json").write_text(json.dumps(
        {name: {"param_names": names} for name, names in (param_names or {}).items()}))
    (machine_dir / "abcdef12-env.json").write_text(json.dumps({
        "commit_hash": "abcdef12" * 5, "env_name": "env", "date": date, "params": {},
        "result_columns": ["result", "params"], "results": results, "version": 2}))


def test_records_unfold_the_parameter_product(tmp_path):
    write_results(tmp_path, {
        "b.Grid.track_x": [[1.0, 2.0, 3.0, 4.0, 5.0, float("nan")], [["'a'", "'b'"], ["1", "2", "True"]]],
        "b.Plain.track_y": [[7.5], []],
        "b.Broken.track_z": [None, [["1", "2"]]],
    }, {"b.Grid.track_x": ["kernel", "seq_len"]})
    run = results.load_latest_run(tmp_path)
    assert run.value("b.Grid.track_x", kernel="b", seq_len=1) == 4.0  # the first parameter varies slowest
    assert [r.status for r in run.select("b.Grid.track_x", kernel="b")] == ["ok", "ok", "skipped"]
    assert run.value("b.Plain.track_y") == 7.5
    assert [r.params for r in run.select("b.Broken.track_z")] == [{"param1": 1}, {"param1": 2}]
    assert {r.status for r in run.select("b.Broken.track_z")} == {"failed"}
    assert math.isnan(run.value("b.Absent.track_w"))


def test_a_nearly_empty_run_gives_a_report_of_gaps(tmp_path):
    write_results(tmp_path / "results", {"bench_machine.Machine.track_sgemm_gflops": [[80.0], []]})
    report = write_report(tmp_path / "results", tmp_path / "out").read_text()
    assert "sgemm 80.0 GFLOP/s" in report
    assert row(section(report, "Startup"), "import kernels") == ["import kernels", "n/a"]
    assert row(section(report, "Goals"), "import kernels, seconds")[1:4] == ["n/a", "≤ 1", "n/a"]
    for plot in PLOTS:
        assert (tmp_path / "out" / plot).stat().st_size > 0


@pytest.mark.parametrize("make_folder", [False, True], ids=["missing", "empty"])
def test_no_results_is_a_clear_error(tmp_path, make_folder):
    results_dir = tmp_path / "no_results_here"
    if make_folder:
        results_dir.mkdir()
    with pytest.raises(FileNotFoundError, match="no_results_here"):
        write_report(results_dir, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- fits and costs -----------------------------------------------------------------------

def test_fit_power_law_uses_only_large_measured_n():
    seq_lens = [64, 256, 1024, 2048, 4096, 8192, 16384]
    values = [1.0, 1.0] + [3.0 * n ** 1.5 for n in seq_lens[2:]]  # small n off the law
    values[3] = math.nan                                           # a gap
    fit = fits.fit_power_law(seq_lens, values)
    assert (fit.b, fit.a) == (pytest.approx(1.5), pytest.approx(3.0))
    assert (fit.n_min, fit.n_max, fit.points) == (1024, 16384, 4)
    assert fit.solve(3.0 * 2 ** 30) == pytest.approx(2 ** 20)
    assert fits.fit_power_law([1024, 2048, 4096], [1.0, math.nan, 0.0]) is None


def test_largest_fitting_seq_len_is_exact():
    numpy = KERNELS["numpy"]
    n = costs.largest_fitting_seq_len("numpy", 4, 2 ** 30, head_dim=64)
    assert numpy.workspace_bytes(1, n, n, 64, 64, 4, False) <= 2 ** 30
    assert numpy.workspace_bytes(1, n + 1, n + 1, 64, 64, 4, False) > 2 ** 30


def test_import_kernels_does_not_import_matplotlib():
    code = "import sys, kernels, kernels.report; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
