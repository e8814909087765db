"""kernels.report (its results reader, fits and sections) on hand-made asv results.

The fixture (tests/fixtures/asv_results, laws in its README.md) is synthetic: times are
exact multiples of n² (or n^1.8), memory of n² or n, and multi-head times follow from
round GFLOP/s figures, so every expected number below is derived by hand from those laws.
"""
import csv
import itertools
import json
import math
import pathlib
import shutil
import subprocess
import sys

import pytest

from kernels import KERNELS, bench_spec, costs, fits
from kernels.output import write_text, write_whole
from kernels.memory import format_bytes
from kernels.report import ceilings, gaps, goals, half, overview, results, roofline, write_report
from kernels.report import window as window_section
from kernels.report.peers import worst_peer_speedup

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "asv_results"
NEWEST_COMMIT = "c0ffee1234567890abcdef1234567890abcdef12"
OLDER_COMMIT = "01dc0de0000000000000000000000000deadbeef"
HEADLINE_FLOPS = 4 * 4096 * 4096 * 64 * 8  # one full call: 8 heads, n = 4096, d = 64
PLOTS = ("time_vs_n.png", "memory_vs_n.png", "throughput_vs_n.png", "model_attention_share.png",
         "decode_vs_n.png", "peers_gflops_vs_n.png", "roofline.png", "cache_time_vs_bytes.png", "window_vs_n.png")


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
    for name in ("seq_len", "multihead", "fits", "headline", "goals", "cache_formats", "cache_peers",
                 "cache_generate", "cache_fidelity", "key_granularity"):
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


@pytest.mark.parametrize("dtype, c_tiled_gflops", [("float32", 100), ("float64", 50)])
def test_headline_numbers(report, dtype, c_tiled_gflops):
    headline = section(report, "Headline")
    seconds = HEADLINE_FLOPS / (c_tiled_gflops * 1e9)
    assert row(headline, "c_tiled", dtype)[2:] == [
        f"{seconds * 1e3:.3g} ms", f"{c_tiled_gflops:.1f}",
        "62% ±4%",  # of the FMA peak on every thread, PeakFraction's side by side: 0.625 (0.6–0.65)
        "5.00×",   # numpy runs at a fifth of c_tiled's GFLOP/s
        "1.25×",   # torch_sdpa at 0.8 of it
    ]
    assert row(headline, "naive", dtype)[2:] == ["n/a"] * 5  # skipped everywhere


def test_missing_and_failed_values_are_na(report):
    assert row(section(report, "Startup"), "first Numba call, empty cache (compile)") == [
        "first Numba call, empty cache (compile)", "n/a"]
    assert row(section(report, "Startup"), "import kernels") == ["import kernels", "350 ms"]
    assert row(section(report, "Goals"), "first Numba call with an empty cache (compile), seconds")[1:5] == [
        "n/a", "n/a", "≤ 10", "n/a"]
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
    # and each of the FMA peak on as many threads, PeakFraction's side by side: 0.775 and 0.625 (±4%)
    assert row(section(report, "Thread scaling"), "c_tiled")[1:] == [
        "31.0", "78% ±4%", "100.0", "62% ±4%", "3.23×", "81%"]


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
    assert row(table, "c_tiled", "float32", "1", "8,192", "4")[-1] == "4.00× ±16%"  # quartiles 2.9–4.2
    rows = csv_rows(report_dir, "side_by_side")
    assert len(rows) == 2  # the tiled kernels over numpy
    numba = csv_row(rows, kernel="numba_tiled")
    assert [float(numba[key]) for key in ("speedup", "speedup_q25", "speedup_q75")] == [2.5, 2.4, 2.6]


def test_peers(report, report_dir):
    """Every peer's column; the fixture's ratios are torch_sdpa's × 0.8, 1.5 and 4.  Its
    openvino_sdpa fails the harness in both 16-bit types (PeerAccuracy 44 and 30 budgets):
    its ratios there stand in a row of their own, marked."""
    table = section(report, "Peers")
    assert row(table, "c_tiled", "full", "8", "4,096", "4", "float32", "")[7:] == ["1.25×", "1.00×", "1.88×", "5.00×"]
    assert row(table, "c_tiled", "causal", "8", "4,096", "1", "float32", "")[7:] == ["1.24×", "0.99×", "1.86×", "n/a"]
    assert row(table, "c_tiled", "full", "8", "4,096", "4", "float64", "")[7:] == ["1.25×", "n/a", "n/a", "n/a"]
    assert row(table, "numba_tiled", "one query, cached keys", "8", "65,536", "4")[7:] == \
        ["0.80×", "0.64×", "1.20×", "3.20×"]
    assert row(table, "c_tiled", "full (a tiny call)", "1", "64", "4")[7:] == ["2.50×", "2.00×", "3.75×", "10.00×"]
    assert row(table, "c_tiled", "causal", "8", "4,096", "4", "bfloat16", "")[7:] == ["1.30×", "n/a", "n/a", "2.00×"]
    assert row(table, "c_tiled", "causal", "8", "4,096", "4", "bfloat16", "fails the harness budget here")[7:] == \
        ["n/a", "n/a", "1.50×", "n/a"]
    rows = csv_rows(report_dir, "peers")
    # kernels × (full, causal: threads × dtypes; decode, tiny), and c_tiled in the two 16-bit
    # types, twice: the peers that pass the harness there, and openvino_sdpa
    assert len(rows) == 2 * (2 * 2 + 2 * 2 + 2 + 2) + 2 * 2 * 2 * 2
    assert float(csv_row(rows, kernel="c_tiled", shape="full", threads="4", dtype="float32")
                 ["over_openvino_sdpa"]) == 1.875
    failing = [r for r in rows if r["harness"]]
    assert {r["harness"] for r in failing} == {"fails the harness budget here"}
    assert {r["dtype"] for r in failing} == {"bfloat16", "float16"}
    assert all(r["over_openvino_sdpa"] and not r["over_torch_sdpa"] and not r["over_jax_attention"]
               for r in failing)
    accuracy = section(report, "Peers")
    assert row(accuracy, "openvino_sdpa", "44 (fails the harness budget here)") == [
        "openvino_sdpa", "44 (fails the harness budget here)", "30 (fails the harness budget here)"]
    assert row(accuracy, "torch_sdpa", "0.13") == ["torch_sdpa", "0.13", "0.08"]
    assert row(accuracy, "ggml_flash_attn", "0.13") == ["ggml_flash_attn", "0.13", "n/a"]
    assert row(accuracy, "onnxruntime_attention", "n/a") == [
        "onnxruntime_attention", "n/a", "105 (fails the harness budget here)"]
    assert [r["peer"] for r in csv_rows(report_dir, "peer_accuracy")] == list(bench_spec.PEERS)
    peers = csv_rows(report_dir, "peer_versions")
    assert [r["peer"] for r in peers] == list(bench_spec.PEERS)  # installed or not
    assert "peers_gflops_vs_n.png" in table


@pytest.mark.parametrize("goal, measured, met", [
    ("c_tiled speed over every peer (the smallest ratio), float32, full, 8 heads, n = 4,096, all threads, "
     "timed side by side", "1", "not met"),   # onnxruntime_attention's 1.25 × 0.8
    ("c_tiled speed over every peer (the smallest ratio), float32, causal, 8 heads, n = 4,096, all threads, "
     "timed side by side", "1", "not met"),
    ("c_tiled speed over every peer (the smallest ratio), float32, full and causal, 8 heads, n = 4,096, "
     "one thread, timed side by side", "0.992", "not met"),   # 1.24 × 0.8; jax_attention not at one thread
    ("c_tiled speed over every peer taking float64 (the smallest ratio), full and causal, 8 heads, "
     "n = 4,096, all threads, timed side by side", "1.25", "met"),   # torch_sdpa alone takes float64
    ("c_tiled speed over torch_sdpa, float32, full, 8 heads, n = 4,096, one thread, timed side by side",
     "1.24", "met"),
    ("numba_tiled speed over torch_sdpa, float32, full, 8 heads, n = 4,096, all threads, timed side by side",
     "0.5", "not met"),
    ("numba_tiled speed over numpy, float32, one head, n = 8,192, timed side by side", "2.5 ±4%", "not met"),
    ("c_tiled speed over numpy, float32, one head, n = 8,192, timed side by side", "4 ±16%", "within noise"),
    ("c_tiled causal ÷ full time, float32, 8 heads, n = 4,096", "0.55", "met"),
    ("import kernels, seconds", "0.35", "met"),
    # testbox is not named by kernels.machine_id, and measured a bfloat16 peak: the unit's goals apply
    *((f"c_tiled speed in bfloat16 over itself in float32, {shape}, 8 heads, n = 4,096, all threads, timed "
       "side by side", "1.6 ±3%", "within noise") for shape in ("full", "causal")),   # 1.56–1.64 holds 1.6
    ("c_tiled speed over openvino_sdpa in bfloat16 (the smaller ratio of full and causal), 8 heads, n = 4,096, "
     "all threads, timed side by side", "1.5", "met"),
    ("c_tiled speed over every peer that passes the harness in bfloat16 (the smallest ratio), full and causal, "
     "8 heads, n = 4,096, all threads, timed side by side", "1.3", "met"),   # torch_sdpa's
    ("c_tiled speed over every peer that passes the harness in bfloat16 (the smallest ratio), full and causal, "
     "8 heads, n = 4,096, one thread, timed side by side", "1.17", "met"),   # torch_sdpa's 1.3 × 0.9
    ("c_tiled GFLOP/s ÷ bfloat16's roof (the faster of its dot-product peak and float32's FMA peak), bfloat16, "
     "full, 8 heads, n = 4,096, all threads, timed side by side with its loop", "0.7 ±3%", "met"),   # PeakFraction's 0.68–0.72, over 0.65
    # on every CPU: HalfSpeedup's ratios, full and causal alike (quartiles ± 0.04)
    ("c_tiled speed in float16 over itself in float32 (the smaller ratio of full and causal), 8 heads, "
     "n = 4,096, all threads, timed side by side", "1.02 ±4%", "within noise"),
    ("c_tiled speed in bfloat16 over itself in float32 (the smaller ratio of full and causal), 8 heads, "
     "n = 4,096, all threads, timed side by side", "1.6 ±3%", "met"),
    ("numba_tiled speed in bfloat16 over itself in float32 (the smaller ratio of full and causal), 8 heads, "
     "n = 4,096, all threads, timed side by side", "1.05 ±4%", "met"),
    ("numba_tiled speed in float16 over itself in float32 (the smaller ratio of full and causal), 8 heads, "
     "n = 4,096, all threads, timed side by side", "0.97 ±4%", "within noise"),
    ("c_tiled speed over every peer taking float16 (the smallest ratio), full and causal, 8 heads, "
     "n = 4,096, all threads, timed side by side", "1.17", "not met"),   # torch_sdpa's 1.3 × 0.9
    ("MiniLM's embeddings with every attention call in bfloat16: 1 − the smallest cosine to float32, over "
     "the 30 bundled sentences and every kernel measured (a cosine ≥ 0.999)", "0.0002", "met"),
])
def test_goals(report, goal, measured, met):
    cells = row(section(report, "Goals"), goal)
    assert (cells[1], cells[4]) == (measured, met)


def test_ceilings_are_the_machines_and_every_throughput_a_share_of_the_fma_peak(report, report_dir):
    """The fixture's FMA peak: float32 40 / 160, float64 20 / 80 GFLOP/s (1 / 4 threads),
    quartiles ±5%, and bfloat16's dot-product peak 80 / 320; c_tiled's fraction of the
    float32 peak side by side 0.625 (0.6–0.65); its BLAS is named, forced onto Haswell, with
    an unforced sgemm of 150."""
    opening = report[:report.index("\n## ")]
    assert "float32 40.0 GFLOP/s ±5% on one thread, 160.0 GFLOP/s ±5% on 4" in opening
    assert ("- **bfloat16's roof:** the faster of two units: the dot-product peak (`vdpbf16ps`, AVX512-BF16; "
            "2 flops per bfloat16 product) 80.0 GFLOP/s ±5% on one thread, 320.0 GFLOP/s ±5% on 4, and "
            "float32's FMA peak; here the faster is the dot products, so they are its roof.") in opening
    assert ("OpenBLAS 0.3.0, pthreads, Haswell kernels (forced by OPENBLAS_CORETYPE=Haswell), 4 threads: "
            "sgemm 125.0 GFLOP/s, dgemm 62.5 GFLOP/s; with the forcing variables unset") in opening
    # GemmFraction's, side by side with the same loops: ±half the interquartile range of 0.04
    assert ("Timed side by side with the FMA peak's loop as the kernels are (`GemmFraction`), the practical "
            "roof of a kernel made of matrix products: sgemm 75% ±3% of float32's peak on one thread, "
            "78% ±3% on 4, dgemm 70% ±3% of float64's peak on one thread, 78% ±3% on 4.") in opening
    headline = section(report, "Headline")
    assert row(headline, "c_tiled", "float32")[4] == "62% ±4%"   # PeakFraction's 0.625, side by side
    assert row(headline, "c_tiled", "float64")[4] == "62% ±4%"
    # a peer's: c_tiled's ÷ c_tiled's speed over it (PeerSpeedup, 1.25): 0.5
    assert row(headline, "torch_sdpa", "float32")[4] == "50% ±4%"
    assert row(headline, "numpy", "float32")[4] == "12% ±4%"
    cells = row(section(report, "Goals"), "c_tiled GFLOP/s ÷ the FMA peak, float32, full, 8 heads, n = 4,096, all "
                                          "threads, timed side by side with its loop")
    assert cells[1:5] == ["0.625 ±4%", "0.6–0.65", "≥ 0.8", "not met"]   # PeakFraction's own spread
    assert cells[5].endswith("This run's sgemm: 0.78 ±3% of the same peak, side by side (`GemmFraction`); "
                             "c_tiled's own tile operations alone: 0.8 ±2% (`TileFraction`), its whole call "
                             "0.78 ±3% of their rate, side by side (`CallOverTiles`)")
    # TileFraction's (float32 0.85 / 0.8, float64 0.8 / 0.75, quartiles ±0.02), beside the whole call's,
    # and the whole call's share of their rate (CallOverTiles: float32 0.8 / 0.78, float64 0.85 / 0.8)
    assert ("- **c_tiled's own roof:** its tile operations alone (`TileFraction`: its products and online "
            "softmax on tiles packed once, as a large call walks each key tile; csrc/flash_driver_template.h, "
            "tile_peak), timed side by side with the FMA peak's loop: float32 85% ±2% of its peak on one thread, "
            "80% ±2% on 4, float64 80% ±2% of its peak on one thread, 75% ±3% on 4. Its whole call on the "
            "headline's float32 shape (full, 4 threads) reaches 62% ±4%; timed side by side with the tile "
            "operations' loop instead, it runs at this share of their rate (`CallOverTiles`): float32 80% ±2% on "
            "one thread, 78% ±3% on 4, float64 85% ±2% on one thread, 80% ±2% on 4: the rest goes to packing, "
            "writing out and walking the tiles.") in opening


def test_results_without_the_call_beside_its_tile_operations_leave_that_unsaid(results_copy, tmp_path):
    """Results from before CallOverTiles (a kept machine's): the roof's line and the goal's
    clause as before it, nothing "n/a" about the call's share."""
    edit_json(results_copy / NEWEST_FILE, lambda data: data["results"].pop("bench_machine.CallOverTiles.track_fraction"))
    report = write_report(results_copy, tmp_path / "out").read_text()
    assert "CallOverTiles" not in report[:report.index("\n## ")]
    assert ("Its whole call on the headline's float32 shape (full, 4 threads) reaches 62% ±4%: the rest goes to "
            "packing, writing out and walking the tiles.") in report
    cells = row(section(report, "Goals"), "c_tiled GFLOP/s ÷ the FMA peak, float32, full, 8 heads, n = 4,096, all "
                                          "threads, timed side by side with its loop")
    assert cells[5].endswith("c_tiled's own tile operations alone: 0.8 ±2% (`TileFraction`)")


def test_results_without_the_tile_operations_roof_leave_it_unsaid(results_copy, tmp_path):
    """Results from before TileFraction (a kept machine's): no line, no clause, nothing
    "n/a" about it in the opening or the goals."""
    edit_json(results_copy / NEWEST_FILE, lambda data: data["results"].pop("bench_machine.TileFraction.track_fraction"))
    report = write_report(results_copy, tmp_path / "out").read_text()
    assert "TileFraction" not in report[:report.index("\n## ")] and "own roof" not in report
    cells = row(section(report, "Goals"), "c_tiled GFLOP/s ÷ the FMA peak, float32, full, 8 heads, n = 4,096, all "
                                          "threads, timed side by side with its loop")
    assert cells[5].endswith("This run's sgemm: 0.78 ±3% of the same peak, side by side (`GemmFraction`)")


def test_roofline_places_prefill_under_compute_and_decode_under_bandwidth(report, report_dir):
    rows = csv_rows(report_dir, "roofline")
    full = csv_row(rows, kernel="c_tiled", shape="prefill full, n = 4,096", dtype="float32")
    assert float(full["flops_per_byte"]) == 1024  # n / 4 in float32
    assert float(full["fraction_of_roof"]) == pytest.approx(0.625)  # PeakFraction's, side by side
    causal = csv_row(rows, kernel="c_tiled", shape="prefill causal, n = 4,096", dtype="float32")
    assert float(causal["flops_per_byte"]) == 512
    assert float(causal["fraction_of_roof"]) == pytest.approx(0.5)
    # bfloat16: half the bytes, under its dot-product peak: PeakFraction's 0.7
    bf16 = csv_row(rows, kernel="c_tiled", shape="prefill full, n = 4,096", dtype="bfloat16")
    assert float(bf16["flops_per_byte"]) == 2048
    assert float(bf16["fraction_of_roof"]) == pytest.approx(0.7)
    decode = csv_row(rows, kernel="c_tiled", shape="decode, n = 65,536")
    # ½ flop per byte read at 20 GB/s: 10 GFLOP/s; of the streaming read side by side 0.8
    assert float(decode["flops_per_byte"]) == 0.5
    assert float(decode["gflops"]) == pytest.approx(10)
    assert float(decode["fraction_of_roof"]) == pytest.approx(0.8)
    tiny = csv_row(rows, kernel="c_tiled", shape="tiny call, n = 64, one head")
    assert tiny["fraction_of_roof"] == ""   # timed alone: its bound is the call's cost, not a roof
    assert "roofline.png" in section(report, "The roofline")


def test_sections_reading_a_disturbed_class_say_so(report):
    """The fixture's calibrations: Threads ran with the gemm at 80% of the run's best."""
    trust = section(report, "Trust")
    assert "the float32 gemm ran at 80%–100% of its best and the streaming read ran at 95%–100%" in trust
    assert row(trust, "bench_attention.Threads") == ["bench_attention.Threads", "80%", "disturbed"]
    assert row(trust, "bench_attention.MultiHead") == ["bench_attention.MultiHead", "98%", "quiet"]
    warning = "**Measured on a disturbed machine:** `bench_attention.Threads` (20% slower)"
    assert warning in section(report, "Thread scaling") and warning in section(report, "Goals")
    assert "disturbed machine" not in section(report, "Headline")  # MultiHead ran quiet
    assert row(trust, "c_tiled GFLOP/s, float32, full, all threads: `Threads` against `MultiHead`")[-1] == "agree"


def test_two_disagreeing_figures_name_the_disturbed_one(tmp_path):
    """Threads' 60 GFLOP/s (±1) against MultiHead's 100: load only slows, so Threads was disturbed;
    a decode step above a read of as many bytes timed beside it means the read is not the roof,
    whatever the machine's streaming read measured apart (a cache can sit in L3)."""
    seconds = HEADLINE_FLOPS / 100e9
    write_results(tmp_path / "results", {
        str(bench_spec.THREADS_GFLOPS): [[60.0, 60.0], [["'c_tiled'"], ["1", "2"]]],
        str(bench_spec.MULTI_HEAD_TIME): [[seconds], [["'c_tiled'"], ["4096"], ["'float32'"], ["False"]]],
        str(bench_spec.DECODE_READ_RATE): [[30.0], [["'c_tiled'"], ["65536"]]],
        str(bench_spec.DECODE_READ_FRACTION): [[1.5, 0.9], [["'c_tiled'", "'numba_tiled'"], ["65536"]]],
        str(bench_spec.READ_BANDWIDTH): [[20.0], []],
    }, {str(b): list(b.params) for b in (bench_spec.THREADS_GFLOPS, bench_spec.MULTI_HEAD_TIME,
                                          bench_spec.DECODE_READ_RATE, bench_spec.DECODE_READ_FRACTION)})
    trust = section(write_report(tmp_path / "results", tmp_path / "out").read_text(), "Trust")
    assert "No calibrations beside these results" in trust
    assert row(trust, "c_tiled GFLOP/s, float32, full, all threads: `Threads` against `MultiHead`")[1:] == \
        ["60.0", "100.0", "`Threads` disturbed (lower)"]
    assert row(trust, "c_tiled cached decode read rate ≤ a read of as many bytes, side by side")[1:] == \
        ["150%", "≤ 100%", "the read loop is not this machine's roof"]
    assert row(trust, "numba_tiled cached decode read rate ≤ a read of as many bytes, side by side")[1:] == \
        ["90%", "≤ 100%", "agree"]


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
    # naive's slopes, and its reads (no decode at the largest n or the short one): n/a
    assert decode.count("\n| naive | n/a | n/a | n/a | n/a |\n") == 2
    assert "machine's streaming read (25.0 GB/s alone, of a buffer beyond the caches), its share timed side by side" \
        in decode
    seconds = 2 * 65536 * 64 * 8 * 4 / 20e9  # the cache's bytes at 20 GB/s; 0.8 side by side (±2%)
    assert row(decode, "c_tiled", f"{seconds * 1e3:.3g} ms") == ["c_tiled", f"{seconds * 1e3:.3g} ms", "20.0",
                                                                 "80% ±2%", "n/a"]
    assert "256.0 MiB; the n × n scores it saves recomputing would take 128.0 GiB (512×)" in decode
    assert row(decode, "torch_sdpa", "70 µs") == ["torch_sdpa", "70 µs"]
    assert float(csv_row(csv_rows(report_dir, "decode_slopes"), kernel="numpy")["recomputed_total"]) == \
        pytest.approx(3.0)


@pytest.mark.parametrize("goal, measured, met", [
    ("c_tiled cached decode, n = 65,536: cache read rate ÷ the streaming read's, timed side by side with its loop",
     "0.8 ±2%", "met"),
    ("c_tiled cached decode speed over torch_sdpa, n = 65,536, all threads, timed side by side", "1.2", "met"),
    ("numba_tiled cached decode speed over torch_sdpa, n = 65,536, all threads, timed side by side", "0.8", "met"),
    ("numba_tiled cached decode time ÷ numpy's, the worst n", "0.714", "met"),
    ("tiny call (one head, n = 64): c_tiled through kernels.attention, speed over torch_sdpa called directly, "
     "all threads, timed side by side", "2.5", "met"),
    ("c_tiled: `kernels.attention`, one head, n = 64, ÷ the rung's own run, timed side by side", "1.05 ±1%", "met"),
    ("numba_tiled: `KVCache.attend`, one query over 1,024 cached tokens, ÷ the rung's own run, timed side by side",
     "1.04 ±1%", "within noise"),
])
def test_decode_goals(report, goal, measured, met):
    cells = row(section(report, "Goals"), goal)
    assert (cells[1], cells[4]) == (measured, met)


# The cache in fewer bytes: one query, 8 query heads, d = 64, a cache of 65,536 tokens.  A
# token reads 65,536 · K/V heads · 2 · (64 · bytes per element + 4 for int8's scale) bytes
# at the fixture's rate per kernel and format (GB/s; README: float32 numpy 10, numba_tiled 14,
# c_tiled 20; numpy ½ in the narrow formats, numba_tiled 0.9 in float16 and ½ in int8,
# c_tiled 0.95 in int8); the time is bytes ÷ rate; the speed-up the float32, 8-heads time
# over this one's, quartiles ×0.95 and ×1.05.
CACHE_RATES = {"numpy": dict(float32=10, float16=5, bfloat16=5, int8=5),
               "numba_tiled": dict(float32=14, float16=12.6, bfloat16=14, int8=7),
               "c_tiled": dict(float32=20, float16=20, bfloat16=20, int8=19)}


def cache_bytes(cache_dtype, kv_heads):
    row_bytes = {"float32": 64 * 4, "float16": 64 * 2, "bfloat16": 64 * 2, "int8": 64 + 4}[cache_dtype]
    return 65536 * kv_heads * 2 * row_bytes


def cache_seconds(kernel, cache_dtype, kv_heads):
    return cache_bytes(cache_dtype, kv_heads) / (CACHE_RATES[kernel][cache_dtype] * 1e9)


def cache_part(report, start, end):
    """The text of the cache section from the paragraph starting ``start`` to ``end``'s."""
    text = section(report, "The cache in fewer bytes")
    return text[text.index(start):text.index(end)]


def test_cache_bytes_follow_the_formats():
    from kernels.report import cache

    assert cache_bytes("float32", 8) == 256 * 2 ** 20 == cache.token_bytes("float32", 8, 65536)
    assert cache.token_bytes("int8", 2, 65536) == 17 * 2 ** 20 == 65536 * 2 * 2 * 68
    assert cache.token_bytes("bfloat16", 8, 65536) == cache.token_bytes("float16", 8, 65536) == 128 * 2 ** 20
    assert cache.token_bytes("int4", 2, 16384) == 16384 * 2 * 2 * (32 + 2 * 4)   # 64 codes in 32 bytes, 2 scales


def test_cache_formats_table(report):
    text = cache_part(report, "Time per token against the bytes", "Beside the peers")
    header = "| kernel | format | K/V heads | bytes read per token | time per token | read, GB/s |"
    assert header in text and "cache_time_vs_bytes.png" in text
    assert "the streaming-read bandwidth measured in the same run (25.0 GB/s)" in text
    # 256 MiB at 20 GB/s = 13.4 ms; of the streaming read side by side: the fixture's rate ÷ 25 (±2%)
    assert row(text, "c_tiled", "float32", "8")[3:] == ["256.0 MiB", "13.4 ms", "20.0", "80% ±2%", "1.00× ±5%"]
    # a quarter of the heads: a quarter of the bytes and of the time
    assert row(text, "c_tiled", "float32", "2")[3:] == ["64.0 MiB", "3.36 ms", "20.0", "80% ±2%", "4.00× ±5%"]
    # 65,536 · 2 · 2 · 68 = 17 MiB at 19 GB/s = 938 µs; (256 / 17) · (19 / 20) = 14.31
    assert cache_seconds("c_tiled", "int8", 2) == pytest.approx(938.2e-6, rel=1e-4)
    assert row(text, "c_tiled", "int8", "2")[3:] == ["17.0 MiB", "938 µs", "19.0", "76% ±2%", "14.31× ±5%"]
    # half the bytes at 0.9 the rate: 1.8 times the speed; 12.6 / 25 = 50.4%
    assert row(text, "numba_tiled", "float16", "8")[3:] == ["128.0 MiB", "10.7 ms", "12.6", "50% ±2%", "1.80× ±5%"]
    assert row(text, "numba_tiled", "int8", "8")[3:] == ["68.0 MiB", "10.2 ms", "7.0", "28% ±2%", "1.88× ±5%"]
    # numpy widens first: half the bytes at half the rate, no faster
    assert row(text, "numpy", "bfloat16", "8")[3:] == ["128.0 MiB", "26.8 ms", "5.0", "20% ±2%", "1.00× ±5%"]
    assert row(text, "numpy", "int8", "2")[3:] == ["17.0 MiB", "3.57 ms", "5.0", "20% ±2%", "7.53× ±5%"]


def test_cache_formats_csv(report_dir):
    rows = csv_rows(report_dir, "cache_formats")
    assert len(rows) == 3 * 4 * 2  # kernels × formats × groupings
    for kernel, rates in CACHE_RATES.items():
        for cache_dtype, rate in rates.items():
            for kv_heads in (8, 2):
                cells = csv_row(rows, kernel=kernel, cache_dtype=cache_dtype, kv_heads=str(kv_heads))
                speedup = cache_seconds(kernel, "float32", 8) / cache_seconds(kernel, cache_dtype, kv_heads)
                assert int(cells["bytes_per_token"]) == cache_bytes(cache_dtype, kv_heads)
                assert float(cells["seconds"]) == pytest.approx(cache_seconds(kernel, cache_dtype, kv_heads))
                assert float(cells["gbytes_per_second"]) == rate
                assert float(cells["fraction_of_read_bandwidth"]) == pytest.approx(rate / 25)
                assert [float(cells[f"over_float32_8_heads{q}"]) for q in ("", "_q25", "_q75")] == \
                    pytest.approx([speedup, 0.95 * speedup, 1.05 * speedup])


def test_cache_peers_table(report, report_dir):
    """torch_sdpa alone takes these caches, in float32, float16 and bfloat16, reading at 16,
    4 and 12 GB/s: a rung's ratio over it is the rung's rate ÷ torch_sdpa's."""
    text = cache_part(report, "Beside the peers", "Generating")
    assert "| format | K/V heads | numba_tiled over torch_sdpa | c_tiled over torch_sdpa |" in text
    assert row(text, "float32", "8") == ["float32", "8", "0.88×", "1.25×"]   # 14 / 16, 20 / 16
    assert row(text, "float16", "2") == ["float16", "2", "3.15×", "5.00×"]   # 12.6 / 4, 20 / 4
    assert row(text, "bfloat16", "8") == ["bfloat16", "8", "1.17×", "1.67×"]  # 14 / 12, 20 / 12
    assert "| int8 |" not in text   # no peer takes an int8 cache
    # the peers of no figure get no column of n/a, but a line
    assert "n/a" not in text and "onnxruntime_attention" not in text.split("\n\n")[1]
    unmeasured = ", ".join(peer for peer in bench_spec.PEERS if peer != "torch_sdpa")   # the fixture: torch only
    assert f"No figure for {unmeasured} on any of these caches" in text
    rows = csv_rows(report_dir, "cache_peers")
    assert len(rows) == 3 * 2  # formats torch_sdpa takes × groupings
    assert float(csv_row(rows, cache_dtype="bfloat16", kv_heads="2")["c_tiled_over_torch_sdpa"]) == \
        pytest.approx(20 / 12)


def test_cache_generate_fidelity_and_key_granularity(report, report_dir):
    """CacheGenerate: 1,000 tokens at half the 65,536-token step's time; CacheFidelity: one
    step float32 1e-7, float16 1e-3, bfloat16 1e-2, int8 3e-2, the decode's largest 1.2 ×."""
    generate = cache_part(report, "Generating", "What each format costs")
    assert "Generating 1,000 tokens after a 32,768-token prompt" in generate
    assert row(generate, "c_tiled", "float32", "8")[3] == "6.71"        # 1,000 × 13.4 ms ÷ 2
    assert row(generate, "c_tiled", "int8", "2")[3] == "0.47"           # 1,000 × 938 µs ÷ 2
    assert row(generate, "numba_tiled", "float16", "8")[3] == "5.33"    # 1,000 × 10.65 ms ÷ 2
    assert "| numpy |" not in generate   # the tiled rungs only
    rows = csv_rows(report_dir, "cache_generate")
    assert len(rows) == 2 * 4 * 2
    for kernel in ("numba_tiled", "c_tiled"):
        for cache_dtype in ("float32", "float16", "bfloat16", "int8"):
            for kv_heads in (8, 2):
                seconds = csv_row(rows, kernel=kernel, cache_dtype=cache_dtype, kv_heads=str(kv_heads))["seconds"]
                assert float(seconds) == pytest.approx(1000 * cache_seconds(kernel, cache_dtype, kv_heads) / 2)
    fidelity = cache_part(report, "What each format costs", "Why int8 keys")
    assert row(fidelity, "float32") == ["float32", "4", "1.00e-07", "1.20e-07"]
    assert row(fidelity, "bfloat16") == ["bfloat16", "2", "1.00e-02", "1.20e-02"]
    assert row(fidelity, "int8") == ["int8", "1 + 4 per row", "3.00e-02", "3.60e-02"]
    assert [(r["cache_dtype"], float(r["step"]), float(r["decode"])) for r in csv_rows(report_dir, "cache_fidelity")] \
        == [("float32", 1e-7, 1.2e-7), ("float16", 1e-3, 1.2e-3), ("bfloat16", 1e-2, 1.2e-2), ("int8", 3e-2, 3.6e-2)]
    granularity = section(report, "The cache in fewer bytes").split("Why int8 keys")[1]
    assert row(granularity, "even") == ["even", "3.70e-02", "2.20e-02"]
    assert row(granularity, "outliers") == ["outliers", "1.00e-01", "3.80e-02"]
    assert [(r["keys"], float(r["per_token"]), float(r["per_channel"]))
            for r in csv_rows(report_dir, "key_granularity")] == [("even", 0.037, 0.022), ("outliers", 0.1, 0.038)]


def test_the_cache_section_follows_decoding_and_the_window_section_the_cache(report):
    headings = [line for line in report.splitlines() if line.startswith("## ")]
    at = headings.index("## The cache in fewer bytes")
    assert headings[at - 1].startswith("## Decoding") and headings[at + 1].startswith("## Ways out of the quadratic")
    assert headings[at + 2] == "## Startup"


CACHE_GOAL = ("{} decode speed on {} cache of {} K/V heads over the float32 cache of 8 K/V heads, one query, "
              "8 query heads, n = 65,536, all threads, timed side by side")


@pytest.mark.parametrize("goal, measured, interval, met", [
    # numba_tiled: float16 at 0.9 the rate, 2 × 0.9 = 1.8 ±5% holds the target 1.8
    (CACHE_GOAL.format("numba_tiled", "a float16", 8), "1.8 ±5%", "1.71–1.89", "within noise"),
    (CACHE_GOAL.format("numba_tiled", "a bfloat16", 8), "2 ±5%", "1.9–2.1", "met"),
    (CACHE_GOAL.format("numba_tiled", "an int8", 8), "1.88 ±5%", "1.79–1.98", "not met"),   # (256 / 68) × ½ < 3
    (CACHE_GOAL.format("numba_tiled", "a float32", 2), "4 ±5%", "3.8–4.2", "met"),
    (CACHE_GOAL.format("numba_tiled", "an int8", 2), "7.53 ±5%", "7.15–7.91", "met"),   # numba's target: 6
    (CACHE_GOAL.format("c_tiled", "a float16", 8), "2 ±5%", "1.9–2.1", "met"),
    (CACHE_GOAL.format("c_tiled", "an int8", 8), "3.58 ±5%", "3.4–3.76", "met"),           # (256 / 68) × 0.95
    (CACHE_GOAL.format("c_tiled", "an int8", 2), "14.3 ±5%", "13.6–15", "met"),
    ("numba_tiled decode: the smallest cache read rate ÷ the streaming read's over every format and "
     "grouping, n = 65,536, timed side by side with its loop", "0.28 ±2%", "0.274–0.286", "not met"),  # 7 of 25
    ("c_tiled decode: the smallest cache read rate ÷ the streaming read's over every format and "
     "grouping, n = 65,536, timed side by side with its loop", "0.76 ±2%", "0.745–0.775", "within noise"),
    ("c_tiled decode speed over the fastest peer taking the same cache (the smallest ratio over formats and "
     "groupings), n = 65,536, all threads, timed side by side", "1.25", "one sample", "met"),    # float32: 20 / 16
    ("numba_tiled decode speed over the fastest peer taking the same cache (the smallest ratio over formats and "
     "groupings), n = 65,536, all threads, timed side by side", "0.875", "one sample", "met"),  # 14 / 16 ≥ 0.8
    ("int8 cache: the largest norm-wise relative error of a decode step against float64, over 1,000 steps",
     "0.036", "one sample", "not met"),
])
def test_cache_goals(report, goal, measured, interval, met):
    cells = row(section(report, "Goals"), goal)
    assert (cells[1], cells[2], cells[4]) == (measured, interval, met)


def test_cache_goals_in_the_goals_csv(report_dir):
    rows = csv_rows(report_dir, "goals")
    cell = csv_row(rows, goal=CACHE_GOAL.format("c_tiled", "an int8", 2))
    assert float(cell["measured"]) == pytest.approx((256 / 17) * 0.95)
    assert cell["verdict"] == "met"


def test_in_context_tables(report, report_dir):
    """The fixture's InContext ratios (between tiny, between layer, busy tiny, busy layer)
    over alone and over one thread, and the forward pass over numpy."""
    table, forward = section(report, "In context").split("MiniLM's whole forward pass")
    assert row(table, "c_tiled", "tiny: 1 head, n = 64, d = 64")[2:] == \
        ["1.10×", "1.00×", "1.10×", "1.00×", "1.00×", "1.00×"]
    assert row(table, "c_tiled", "layer: 12 heads, n = 512, d = 32")[2:] == \
        ["1.60×", "0.90×", "1.00×", "0.50×", "1.50×", "1.20×"]
    assert row(table, "torch_sdpa", "tiny: 1 head, n = 64, d = 64")[2:] == \
        ["40.00×", "35.00×", "30.00×", "30.00×", "30.00×", "25.00×"]
    assert "OPENBLAS_THREAD_TIMEOUT=20" in table
    assert row(forward, "numba_tiled")[1:] == ["1.05×", "0.80×"]
    assert row(forward, "torch_sdpa")[1:] == ["n/a", "n/a"]
    rows = csv_rows(report_dir, "in_context")
    assert len(rows) == 4 * 2  # kernels × shapes
    assert float(csv_row(rows, kernel="numba_tiled", shape="layer: 12 heads, n = 512, d = 32")
                 ["busy_process_over_one_thread"]) == 0.9


@pytest.mark.parametrize("goal, measured, met", [
    ("c_tiled between two matmuls ÷ alone, tiny (1, 64, 64: heads, n, d), all threads", "1.1", "met"),
    ("c_tiled between two matmuls ÷ alone, layer (12, 512, 32: heads, n, d), all threads", "1.6", "not met"),
    ("numba_tiled between two matmuls ÷ alone, layer (12, 512, 32: heads, n, d), all threads", "1.4", "met"),
    ("c_tiled beside a busy process ÷ its quiet one-thread time, the worst shape, all threads", "1.2", "met"),
    ("MiniLM forward pass on c_tiled ÷ on numpy, n = 64, timed side by side", "0.95", "met"),
    ("MiniLM forward pass on numba_tiled ÷ on numpy, n = 64, timed side by side", "1.05", "met"),
])
def test_in_context_goals(report, goal, measured, met):
    cells = row(section(report, "Goals"), goal)
    assert (cells[1], cells[4]) == (measured, met)


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
    assert row(section(report, "Goals"), "import kernels, seconds")[1:5] == ["n/a", "n/a", "≤ 1", "n/a"]
    for plot in PLOTS:
        assert (tmp_path / "out" / plot).stat().st_size > 0


@pytest.mark.parametrize("folder", ["missing", "empty", "interrupted"])
def test_no_results_is_a_clear_error(tmp_path, folder):
    """"interrupted": what an asv run stopped before its end leaves, benchmarks.json and
    machine.json but no results file."""
    results_dir = tmp_path / "no_results_here"
    if folder != "missing":
        results_dir.mkdir()
    if folder == "interrupted":
        shutil.copy(FIXTURE / "benchmarks.json", results_dir)
        (results_dir / "testbox").mkdir()
        shutil.copy(FIXTURE / "testbox" / "machine.json", results_dir / "testbox")
    with pytest.raises(FileNotFoundError, match="no_results_here"):
        write_report(results_dir, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- broken results: interrupted runs, other commits and machines, unreadable files -------

NEWEST_FILE = pathlib.Path("testbox", "c0ffee12-existing-py.json")
OLDER_FILE = pathlib.Path("testbox", "01dc0de0-existing-py.json")


def test_half_precision(report, report_dir):
    """The fixture's 16-bit times are float32's × 1.1 (numpy), 1 (numba_tiled), 0.95 (c_tiled);
    HalfSpeedup's ratios numba_tiled 1.05 / 0.97, c_tiled 1.6 / 1.02 (bfloat16 / float16) on
    4 threads, × 0.95 on one; HalfFidelity's cosines."""
    text = section(report, "Half precision")
    # of its type's roof, PeakFraction's side by side: bfloat16 0.7, float16 0.66
    assert row(text, "c_tiled", "bfloat16")[2:] == ["105.3", "70% ±3%", "95.7", "1.60× ±3%", "1.60× ±3%",
                                                   "1.52× ±3%", ""]
    assert row(text, "c_tiled", "float16")[3] == "66% ±4%"
    assert row(text, "c_tiled", "float32")[5:8] == ["1.00×"] * 3
    assert row(text, "numpy", "float16")[2] == "18.2" and row(text, "numpy", "float16")[5] == "n/a"
    assert row(text, "numba_tiled", "0.99985000")[2] == "0.99999800"
    assert row(text, "torch_sdpa", "float32")[5:] == ["n/a"] * 3 + [""]   # no HalfSpeedup of a peer
    assert row(text, "torch_sdpa", "bfloat16")[-1] == ""   # it passes the harness in the fixture
    assert "float32 FMA peak (160.0 GFLOP/s ±5% on every thread)" in text
    # testbox: not a kernels.machine_id name, but its bfloat16 peak was measured
    assert "the run measured its dot-product peak at 320.0 GFLOP/s ±5% on every thread" in text
    assert "timed side by side with its loop (`PeakFraction`): 70% ±3%." in text
    speed = csv_rows(report_dir, "half_speed")
    assert float(csv_row(speed, kernel="numba_tiled", dtype="float16")["over_float32_full"]) == 0.97
    assert float(csv_row(csv_rows(report_dir, "half_fidelity"), kernel="c_tiled")["bfloat16_min_cosine"]) == 0.9998


BF16_UNIT_GOALS = ("in bfloat16 over itself in float32, full,", "in bfloat16 over itself in float32, causal,",
                   "over openvino_sdpa in bfloat16", "passes the harness in bfloat16")


def run_on(tmp_path, machine, bf16_unit):
    """The fixture's newest run as measured on ``machine`` (a kernels.machine_id name); without
    ``bf16_unit``, the bfloat16 cases of Ceilings skipped (NaN), as asv records them on a CPU
    without AVX512-BF16, and PeakFraction's bfloat16 cases against float32's FMA loop there:
    the fixture's fractions × 0.66 / 0.7 (c_tiled's 105.3 GFLOP/s of 160, 0.66)."""
    results_dir = pathlib.Path(shutil.copytree(FIXTURE, tmp_path / "results"))
    (results_dir / "testbox").rename(results_dir / machine)

    def skip_bf16(data):
        for benchmark, factor in ((bench_spec.FMA_PEAK, math.nan), (bench_spec.PEAK_FRACTION, 0.66 / 0.7)):
            record = data["results"][str(benchmark)]
            cases = list(itertools.product(*record[1]))
            for column in (0, 5, 6, 7, 8):   # the result, its ci_99 and its quartiles
                record[column] = [value * factor if "'bfloat16'" in case and value is not None else value
                                  for case, value in zip(cases, record[column])]

    if not bf16_unit:
        edit_json(results_dir / machine / NEWEST_FILE.name, skip_bf16)
    return results.load_latest_run(results_dir)


def markdown(run, *makes):
    """The Markdown of the sections ``makes`` on ``run``, their plots linked but not drawn
    (writing a whole report draws them all: seconds)."""
    return "\n\n".join(block if isinstance(block, str) else block.markdown()
                        for make in makes for block in make(run).blocks)


def test_bfloat16_reads_its_dot_product_peak_on_a_cpu_with_avx512_bf16(tmp_path):
    run = run_on(tmp_path, "amd-epyc-avx512-bf16", bf16_unit=True)
    assert "- **bfloat16's roof:** the faster of two units: the dot-product peak (`vdpbf16ps`, AVX512-BF16; " \
           "2 flops per bfloat16 product) 80.0 GFLOP/s ±5% on one thread, 320.0 GFLOP/s ±5% on 4, and float32's " \
           "FMA peak; here the faster is the dot products, so they are its roof." in markdown(run, overview.overview)
    text = markdown(run, half.half_precision)
    assert "this CPU has AVX512-BF16" in text and "its dot-product peak at 320.0 GFLOP/s ±5%" in text
    assert row(text, "c_tiled", "bfloat16")[3] == "70% ±3%"   # PeakFraction's, against the dot-product loop
    assert row(text, "c_tiled", "float16")[3] == "66% ±4%"    # against float32's FMA loop
    text = markdown(run, roofline.roofline)
    assert "under bfloat16's compute roof: the faster of two units: the dot-product peak" in text
    assert row(text, "c_tiled", "prefill full, n = 4,096", "bfloat16")[5:] == ["70% ±3%"]
    goals_text = markdown(run, goals.goals)
    unit_goals = [line for line in goals_text.splitlines() if any(words in line for words in BF16_UNIT_GOALS)]
    assert len(unit_goals) == 5 and not any(goals.NOT_APPLICABLE in line for line in unit_goals)


def test_bfloat16s_roof_is_float32s_where_its_dot_products_are_the_slower_unit(tmp_path):
    """Sapphire Rapids: vdpbf16ps issues at half an FMA's rate, so the dot-product peak (the
    fixture's 80 / 320 scaled to 40 / 160 × 0.6) is below float32's FMA peak (40 / 160), and
    bfloat16's roof, the faster of the two, is float32's."""
    run = run_on(tmp_path, "intel-xeon-avx512-bf16", bf16_unit=True)
    data_path = run.path
    def slow_dot(data):
        record = data["results"][str(bench_spec.FMA_PEAK)]
        for column in (0, 5, 6, 7, 8):
            record[column] = [value * 0.3 if "'bfloat16'" in case and value is not None else value
                              for case, value in zip(itertools.product(*record[1]), record[column])]
    edit_json(data_path, slow_dot)
    run = results.load_latest_run(data_path.parent.parent)
    assert ceilings.compute_roof(run, "bfloat16") == ceilings.compute_roof(run, "float32")
    assert not ceilings.bf16_dot_is_roof(run)
    assert ("- **bfloat16's roof:** the faster of two units: the dot-product peak (`vdpbf16ps`, AVX512-BF16; 2 flops "
            "per bfloat16 product) 24.0 GFLOP/s ±5% on one thread, 96.0 GFLOP/s ±5% on 4, and float32's FMA peak; "
            "here the faster is float32's FMAs on bfloat16 widened, so float32's FMA peak is its roof (and c_tiled "
            "widens it too).") in markdown(run, overview.overview)
    text = markdown(run, half.half_precision)
    assert "Here float32's FMAs are the faster" in text and "c_tiled's \"auto\" path widens" in text
    # what the dot products would buy is no goal where they are the slower unit; the other bfloat16
    # goals (against the peers, of the roof) still apply
    goals_text = markdown(run, goals.goals)
    for shape in ("full", "causal"):
        assert row(goals_text, f"c_tiled speed in bfloat16 over itself in float32, {shape}, 8 heads, n = 4,096, "
                               "all threads, timed side by side")[4] == goals.SLOWER_DOT
    unit_goals = [line for line in goals_text.splitlines() if any(words in line for words in BF16_UNIT_GOALS)]
    assert sum(goals.SLOWER_DOT in line for line in unit_goals) == 2
    assert not any(goals.NOT_APPLICABLE in line for line in unit_goals)


def test_bfloat16_reads_no_bfloat16_unit_without_avx512_bf16(tmp_path):
    run = run_on(tmp_path, "amd-epyc-avx2", bf16_unit=False)
    assert ("- **bfloat16's roof:** no bfloat16 unit (no AVX512-BF16) on this CPU: bfloat16 is widened to float32, "
            "and float32's FMA peak is its roof.") in markdown(run, overview.overview)
    text = markdown(run, half.half_precision)
    assert "this CPU has no bfloat16 unit (no AVX512-BF16), so no instruction multiplies bfloat16 faster" in text
    assert row(text, "c_tiled", "bfloat16")[3] == "66% ±3%"   # PeakFraction against float32's FMA loop
    text = markdown(run, roofline.roofline)
    assert "under bfloat16's compute roof: no bfloat16 unit (no AVX512-BF16) on this CPU" in text
    assert row(text, "c_tiled", "prefill full, n = 4,096", "bfloat16")[5:] == ["66% ±3%"]
    goals_text = markdown(run, goals.goals)
    unit_goals = [line for line in goals_text.splitlines() if any(words in line for words in BF16_UNIT_GOALS)]
    assert len(unit_goals) == 5 and all(f"| {goals.NOT_APPLICABLE} |" in line for line in unit_goals)
    # bfloat16's roof is float32's here, and c_tiled's fraction of it a goal on every CPU
    assert row(goals_text, "c_tiled GFLOP/s ÷ bfloat16's roof (the faster of its dot-product peak and float32's "
                           "FMA peak), bfloat16, full, 8 heads, n = 4,096, all threads, timed side by side with "
                           "its loop")[1:5] == ["0.66 ±3%", "0.641–0.679", "≥ 0.65", "within noise"]
    # the goals of every CPU still apply
    assert row(goals_text, "c_tiled speed in float16 over itself in float32 (the smaller ratio of full and "
                           "causal), 8 heads, n = 4,096, all threads, timed side by side")[4] == "within noise"
    assert row(goals_text, "c_tiled speed in bfloat16 over itself in float32 (the smaller ratio of full and "
                           "causal), 8 heads, n = 4,096, all threads, timed side by side")[4] == "met"


@pytest.fixture
def results_copy(tmp_path):
    """A copy of the fixture to break."""
    return pathlib.Path(shutil.copytree(FIXTURE, tmp_path / "results"))


def edit_json(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_a_peer_failing_the_harness_is_marked_and_no_lead_is_measured_over_it(results_copy, tmp_path):
    """torch_sdpa measured at 5 budgets in float16 (PeerAccuracy): its half-precision row says
    it fails, its float16 ratios move to the marked rows of the peers table, and the
    smallest ratio over every peer in float16 is over jax_attention (2.0 × 0.9), the one
    peer left that passes there (openvino_sdpa fails in the fixture itself)."""
    def torch_fails_in_float16(data):
        values, params = data["results"][str(bench_spec.PEER_ACCURACY)][:2]
        values[[(peer, dtype) for peer in params[0] for dtype in params[1]].index(("'torch_sdpa'", "'float16'"))] = 5.0
    edit_json(results_copy / NEWEST_FILE, torch_fails_in_float16)
    report = write_report(results_copy, tmp_path / "out").read_text()
    half = section(report, "Half precision")
    assert row(half, "torch_sdpa", "float16")[-1] == "fails the harness budget here"
    assert row(half, "torch_sdpa", "bfloat16")[-1] == ""
    peers = section(report, "Peers")
    assert row(peers, "c_tiled", "full", "8", "4,096", "4", "float16", "fails the harness budget here")[7:] == \
        ["1.17×", "n/a", "1.35×", "n/a"]
    assert row(peers, "c_tiled", "full", "8", "4,096", "4", "float16", "")[7:] == ["n/a", "n/a", "n/a", "1.80×"]
    run = results.load_latest_run(results_copy)
    assert worst_peer_speedup(run, "c_tiled", "full", 4, "float16") == (1.8, "jax_attention")
    value, peer = worst_peer_speedup(run, "c_tiled", "full", 1, "float16")   # jax_attention not at 1 thread
    assert math.isnan(value) and peer is None
    assert worst_peer_speedup(run, "c_tiled", "full", 4, "bfloat16") == (1.3, "torch_sdpa")


def not_in_results(report):
    """The benchmarks the Gaps section lists as not in the results file."""
    line = next(line for line in section(report, "Gaps").splitlines() if "Not in the results file" in line)
    return set(line.split(" (not run")[0].split("`")[1::2])


@pytest.mark.parametrize("module", sorted({str(b).split(".")[0] for b in bench_spec.BENCHMARKS}))
def test_a_run_interrupted_before_a_module_reports_what_finished(results_copy, tmp_path, module, assert_png):
    """As ``make bench`` leaves a run stopped by Ctrl-C: whole classes absent, the rest kept."""
    edit_json(results_copy / NEWEST_FILE, lambda data: data.update(results={
        name: row for name, row in data["results"].items() if not name.startswith(module + ".")}))
    report = write_report(results_copy, tmp_path / "out").read_text()
    absent = {str(b) for b in bench_spec.BENCHMARKS if str(b).startswith(module + ".")}
    absent.add(str(bench_spec.COMPILE_SECONDS))  # absent from the fixture itself
    assert not_in_results(report) == absent
    assert (f"**Incomplete:** {len(absent)} of the {len(bench_spec.BENCHMARKS)} benchmarks the report "
            "reads are not in these results") in report
    for plot in PLOTS:
        assert_png(tmp_path / "out" / plot)
    assert (tmp_path / "out" / "seq_len.csv").is_file()
    # what finished is still there
    kept = "n/a" if module == "bench_machine" else "350 ms"
    assert row(section(report, "Startup"), "import kernels") == ["import kernels", kept]
    headline = section(report, "Headline")
    if module == "bench_attention":
        assert "n/a: the benchmarks behind this table are not in the results." in headline
    else:
        assert row(headline, "c_tiled", "float32")[3] == "100.0"


def test_a_benchmark_whose_every_case_failed_is_listed(results_copy):
    """asv writes null for the whole "result" when a benchmark's process died at every case."""
    name = str(bench_spec.MULTI_HEAD_TIME)
    edit_json(results_copy / NEWEST_FILE, lambda data: data["results"][name].__setitem__(0, None))
    run = results.load_latest_run(results_copy)
    cases = run.select(name)
    assert cases and {r.status for r in cases} == {"failed"}
    assert math.isnan(run.value(name, kernel="c_tiled", seq_len=4096, dtype="float32", causal=False))
    failed = len(cases) + 2  # and the fixture's other two: SeqLen's, and the leftover track_gflops'
    assert f"- Failed (the benchmark raised, or its process died; see asv's log): {failed}" in \
        gaps.gaps(run).blocks[0]
    assert f"{failed} cases failed" in overview.overview(run).blocks[0]


def test_the_newest_run_of_any_machine_is_reported_and_the_others_named(results_copy, tmp_path):
    other = results_copy / "otherbox"
    other.mkdir()
    (other / "machine.json").write_text(json.dumps({"machine": "otherbox", "ram": "1073741824", "version": 1}))
    data = json.loads((results_copy / NEWEST_FILE).read_text())
    data.update(commit_hash="feed" * 10, date=1748779200000,  # 2025-06-01 12:00 UTC
                results={str(bench_spec.SGEMM): [[50.0], [], "v1", 1748782800000, 1.0]})
    (other / "feedfeed-env.json").write_text(json.dumps(data))
    report = write_report(results_copy, tmp_path / "out").read_text()
    header = report[:report.index("\n## ")]
    assert f"commit `{'feed' * 10}` (committed 2025-06-01 12:00 UTC)" in header
    assert "**Machine:** otherbox:" in header and "sgemm 50.0 GFLOP/s, dgemm n/a" in header
    assert ("the newest of the 3 runs in the results folder (by commit date, then by when it ran); not "
            "shown: commit `c0ffee12` on testbox (committed 2025-01-01), commit `01dc0de0` on testbox "
            "(committed 2024-01-01).") in header
    assert str(bench_spec.SEQ_LEN_TIME) in not_in_results(report)


def test_benchmarks_started_far_apart_show_when_the_first_did(results_copy):
    """A results file may gather several asv runs of one commit (make bench's classes, BENCH=)."""
    name = str(bench_spec.SGEMM)
    edit_json(results_copy / NEWEST_FILE, lambda data: data["results"][name].__setitem__(3, 1735725600000))
    run = results.load_latest_run(results_copy)
    assert overview.started(run) == "last benchmark started 2025-01-01 13:00 UTC (the first 2025-01-01 10:00 UTC)"


def one_result_too_many(text):
    data = json.loads(text)
    data["results"][str(bench_spec.SGEMM)][0].append(1.0)
    return json.dumps(data)


# how to break a results file's text -> the start of the reason the reader gives
UNREADABLE = {
    "truncated": (lambda text: text[:len(text) // 2], "not valid JSON ("),
    "empty": (lambda text: "", "not valid JSON (Expecting value at line 1, column 1"),
    "binary": (lambda text: bytes(range(256)), "not text (a binary file?)"),
    "a list": (lambda text: "[1, 2, 3]", "JSON, but not an asv results file (a list, not an object)"),
    "foreign JSON": (lambda text: '{"name": "attnbench"}',
                     "not an asv results file (no commit_hash, date, result_columns, results)"),
    "older format": (lambda text: text.replace('"version": 2', '"version": 1'),
                     "asv results of format version 1; this reader knows version 2"),
    "short row": (one_result_too_many, "not laid out as asv 0.6 results (bench_machine.Machine."
                                       "track_sgemm_gflops: 2 results for 1 parameter combinations)"),
}


def break_file(path, kind):
    text = path.read_text()
    content = UNREADABLE[kind][0](text)
    assert content != text
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


@pytest.mark.parametrize("kind", UNREADABLE)
def test_an_unreadable_results_file_is_skipped_and_named(results_copy, kind):
    """The newest file broken: the report falls back to the older run and names the file."""
    broken = OLDER_FILE if kind == "short row" else NEWEST_FILE  # the older file holds that row
    break_file(results_copy / broken, kind)
    run = results.load_latest_run(results_copy)
    assert run.commit_hash == (NEWEST_COMMIT if broken == OLDER_FILE else OLDER_COMMIT)
    assert run.others == ()
    (line,) = run.unreadable
    assert line.startswith(f"{results_copy / broken}: {UNREADABLE[kind][1]}") and "\n" not in line


@pytest.mark.parametrize("kind", UNREADABLE)
def test_no_readable_results_is_a_one_line_error_naming_the_file(results_copy, kind):
    keep = OLDER_FILE if kind == "short row" else NEWEST_FILE
    (results_copy / (NEWEST_FILE if keep == OLDER_FILE else OLDER_FILE)).unlink()
    break_file(results_copy / keep, kind)
    with pytest.raises(results.ResultsError) as error:
        results.load_latest_run(results_copy)
    assert isinstance(error.value, ValueError)
    message = str(error.value)
    assert f"no readable asv results in {results_copy}: {results_copy / keep}: {UNREADABLE[kind][1]}" in message
    assert "\n" not in message


def test_the_command_line_says_one_line_not_a_traceback(results_copy, tmp_path):
    (results_copy / OLDER_FILE).unlink()
    break_file(results_copy / NEWEST_FILE, "truncated")
    done = subprocess.run([sys.executable, "-m", "kernels", "report", "--results", str(results_copy),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert str(NEWEST_FILE) in done.stderr and "not valid JSON" in done.stderr


def test_the_report_lists_unreadable_files_at_the_top(results_copy, tmp_path):
    break_file(results_copy / NEWEST_FILE, "truncated")
    report = write_report(results_copy, tmp_path / "out").read_text()
    header = report[:report.index("\n## ")]
    assert f"- **Unreadable, skipped:**\n  - {results_copy / NEWEST_FILE}: not valid JSON" in header
    assert f"commit `{OLDER_COMMIT}`" in header and "sgemm 999.0 GFLOP/s" in header


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_without_benchmarks_json_parameter_names_come_from_the_spec(results_copy, damage):
    path = results_copy / "benchmarks.json"
    if damage == "missing":
        path.unlink()
    else:
        path.write_text(path.read_text()[:100])
    run = results.load_latest_run(results_copy)
    full = results.load_latest_run(FIXTURE)
    for benchmark, params in [(bench_spec.MULTI_HEAD_TIME, dict(kernel="c_tiled", seq_len=4096, dtype="float32",
                                                                causal=False)),
                              (bench_spec.SEQ_LEN_MEMORY, dict(kernel="numpy", seq_len=1024, dtype="float64")),
                              (bench_spec.SGEMM, {})]:
        assert run.value(benchmark, **params) == full.value(benchmark, **params) > 0
    (line,) = run.unreadable
    assert line.startswith(f"{path}: ") and line.endswith("parameter names taken from kernels.bench_spec")


def test_an_unreadable_machine_json_leaves_the_results_own_copy(results_copy):
    (results_copy / "testbox" / "machine.json").write_text("{")
    run = results.load_latest_run(results_copy)
    assert run.machine["machine"] == "testbox" and run.ram_bytes == 2 ** 34
    (line,) = run.unreadable
    assert "machine.json: not valid JSON" in line and line.endswith("described by its results files instead")


def test_results_of_another_version_of_a_benchmark_are_left_out_and_listed(results_copy):
    """asv hashes each benchmark's code into "version"; a results file that gathers runs
    before and after a change holds both, and asv leaves out the older ones."""
    name = str(bench_spec.SEQ_LEN_TIME)
    edit_json(results_copy / NEWEST_FILE, lambda data: data["results"][name].__setitem__(2, "v0"))
    run = results.load_latest_run(results_copy)
    assert run.stale == (name,) and run.select(name) == []
    assert run.value(bench_spec.SEQ_LEN_MEMORY, kernel="numpy", seq_len=1024, dtype="float32") == 4 * 1024 ** 2
    assert f"Left out, measured by another version of the benchmark than the suite's benchmarks.json " \
        f"describes (asv leaves these out too; run them again): `{name}`." in gaps.gaps(run).blocks[0]
    assert "1 benchmark was measured by another version of their code, left out" in overview.overview(run).blocks[0]


def test_a_quick_runs_sizes_label_its_figures(results_copy, tmp_path):
    """The sizes a quick run shrinks are parameters of one value (``Benchmark.sizes``), so a
    quick run's report says what it measured: caches of 16,384 tokens (a token's bytes from
    those, never from the full run's 65,536), 100 tokens generated after 4,096, 100 decode
    steps, the window peers at n = 2,048 with a (128, 0) window; and its rounds (the
    samples behind a side-by-side ratio) are its own too."""
    quick = {"seq_len": "16384", "prompt": "4096", "generated": "100", "steps": "100",
             "shape": "'window (128, 0)'"}

    def shrink(data):
        for benchmark in bench_spec.BENCHMARKS:
            for name in benchmark.sizes:
                size = "2048" if benchmark is bench_spec.WINDOW_PEER_SPEEDUP and name == "seq_len" else quick[name]
                data["results"][str(benchmark)][1][benchmark.params.index(name)] = [size]
        columns = data["result_columns"]
        for benchmark, rounds in ((bench_spec.CALL_COST, 15), (bench_spec.WINDOW_PEER_SPEEDUP, 3)):
            cells = data["results"][str(benchmark)]
            repeats = cells[columns.index("stats_repeat")]
            cells[columns.index("stats_repeat")] = [rounds if r is not None else None for r in repeats]
    edit_json(results_copy / NEWEST_FILE, shrink)
    report = write_report(results_copy, tmp_path / "out").read_text()
    cache = section(report, "The cache in fewer bytes")
    assert "65,536" not in cache and "32,768" not in cache and "1,000" not in cache
    assert "a cache of 16,384 tokens, all threads" in cache
    # a quarter of the tokens, a quarter of the bytes; the times are the fixture's own
    speeds = cache_part(report, "Time per token against", "Beside the peers")
    assert row(speeds, "c_tiled", "float32", "8")[3:5] == ["64.0 MiB", "13.4 ms"]
    assert row(speeds, "c_tiled", "int8", "2")[3] == "4.2 MiB"   # 16,384 · 2 · 2 · 68 bytes
    assert "Generating 100 tokens after a 4,096-token prompt" in cache
    assert "| one step, n = 16,384 | largest over 100 steps |" in cache
    assert row(cache, "int8")[2:] == ["3.00e-02", "3.60e-02"]
    goals_text = section(report, "Goals")
    formats = [line for line in goals_text.splitlines() if "cache of" in line or "formats and grouping" in line]
    assert len(formats) == 16 and not any("65,536" in line for line in formats)
    assert row(goals_text, "c_tiled decode speed on an int8 cache of 2 K/V heads over the float32 cache of 8 K/V "
                           "heads, one query, 8 query heads, n = 16,384, all threads, timed side by side")[1] == "14.3 ±5%"
    assert row(goals_text, "c_tiled generating 100 tokens after a 4,096-token prompt: the int4 cache of 2 K/V "
                           "heads over the float32 cache of 8")
    assert row(goals_text, "int8 cache: the largest norm-wise relative error of a decode step against float64, "
                           "over 100 steps")[1] == "0.036"
    assert "The peers with a window (8 heads, n = 2,048, window (128, 0), float32, all threads): each peer's " \
        "time ÷ our kernel's, side by side (3 rounds)" in section(report, "Ways out of the quadratic")
    assert "side by side (15 rounds of 20 calls each)" in section(report, "Decoding")
    # the full run's sizes where the results hold none (a suite before they were parameters)
    run = results.load_latest_run(FIXTURE)
    assert run.size(bench_spec.CACHE_TOKEN_TIME, "seq_len") == 65536
    assert run.size(bench_spec.SEQ_LEN_TIME, "seq_len") is None   # many values: no one size
    assert run.size(bench_spec.SEQ_LEN_TIME, "seq_len", 7) == 7


def test_the_peers_rounds_name_only_the_shapes_measured(results_copy, tmp_path):
    """The peers paragraph names the rounds of the shapes the run has figures for: the
    fixture's full, causal, decode and tiny call (it has no short decode); a run without any
    peer's figure (none installed) names none, never the spec's counts for rounds not run,
    and neither does the window peers' line."""
    def paragraphs(results_dir, out):
        report = write_report(results_dir, out).read_text()
        peers = section(report, "Peers: every CPU")
        windows = section(report, "Ways out of the quadratic")
        return (peers[peers.index("the median over the rounds"):peers.index("In each round")],
                windows[windows.index("The peers with a window"):windows.index("JAX takes a window")])

    peers, windows = paragraphs(FIXTURE, tmp_path / "fixture")
    assert "(7 for full and causal, 9 for decode, 31 for the tiny call)" in peers
    assert "short decode" not in peers
    assert "side by side (7 rounds)." in windows

    def no_peer(data):
        for benchmark in (bench_spec.PEER_SPEEDUP, bench_spec.WINDOW_PEER_SPEEDUP):
            cells = data["results"][str(benchmark)]
            cells[0] = [None] * len(cells[0])
    edit_json(results_copy / NEWEST_FILE, no_peer)
    peers, windows = paragraphs(results_copy, tmp_path / "none")
    assert "(none in these results: no peer was measured)" in peers
    assert not any(char.isdigit() for char in peers)
    assert "side by side (no peer measured in these results)." in windows


def test_benchmark_classes_select_as_asv_does():
    """asv's --bench matches a name, or a name with one combination of its parameters."""
    everything = results.benchmark_classes(FIXTURE)
    suite = json.loads((FIXTURE / "benchmarks.json").read_text())
    assert everything == sorted({name.rsplit(".", 1)[0] for name in suite if name != "version"})
    assert results.benchmark_classes(FIXTURE, "^(?!.*peakmem_)") == everything
    assert results.benchmark_classes(FIXTURE, "float64") == [
        "bench_attention.MultiHead", "bench_attention.SeqLen", "bench_machine.CallOverTiles", "bench_machine.Ceilings",
        "bench_machine.GemmFraction", "bench_machine.PeakFraction", "bench_machine.TileFraction",
        "bench_peers.PeerSpeedup"]
    assert results.benchmark_classes(FIXTURE, "nothing like it") == []


# -- files written whole ------------------------------------------------------------------

@pytest.mark.parametrize("interruption", [OSError("disk full"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_a_write_that_fails_half_way_leaves_the_old_file_and_no_partial(tmp_path, interruption):
    path = write_text(tmp_path / "REPORT.md", "the old report\n")

    def write_half(partial):
        partial.write_text("the new rep")
        raise interruption

    with pytest.raises(type(interruption)):
        write_whole(path, write_half)
    assert path.read_text() == "the old report\n"
    assert list(tmp_path.iterdir()) == [path]
    assert write_text(path, "the new report\n").read_text() == "the new report\n"
    assert list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("fails", ["csv", "png"])
def test_an_interrupted_report_leaves_every_file_whole(report_dir, tmp_path, monkeypatch, fails):
    """Ctrl-C while the report writes its first CSV or PNG: every file keeps what it held."""
    out_dir = pathlib.Path(shutil.copytree(report_dir, tmp_path / "out"))
    before = {path.name: path.read_bytes() for path in out_dir.iterdir()}
    if fails == "csv":
        class HalfWriter:
            def __init__(self, file):
                self.file = file

            def writerow(self, cells):
                self.file.write(",".join(map(str, cells)))
                raise KeyboardInterrupt

        monkeypatch.setattr(csv, "writer", HalfWriter)
    else:
        figure = pytest.importorskip("matplotlib.figure").Figure

        def half_png(self, path, **kwargs):
            pathlib.Path(path).write_bytes(b"\x89PNG\r\n\x1a\n")
            raise KeyboardInterrupt

        monkeypatch.setattr(figure, "savefig", half_png)
    with pytest.raises(KeyboardInterrupt):
        write_report(FIXTURE, out_dir)
    assert {path.name: path.read_bytes() for path in out_dir.iterdir()} == before


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


# -- ways out of the quadratic (bench_window) ----------------------------------------------

def test_window_section_times_against_n_with_what_was_not_measured(report):
    window = section(report, "Ways out of the quadratic")
    # the band's flops (4·d·Σ seen keys, 8 heads) over c_tiled's 93 GFLOP/s at n = 8,192
    flops = costs.band_flops(bench_spec.WINDOW_SHAPES["window (512, 0)"], 8192, 8192, 64, batch=8)
    assert len(row(window, "c_tiled", "window (512, 0)", f"{flops / 93e9 * 1e3:.3g} ms ±3%")) == 7
    full = row(window, "c_tiled", "full", f"{costs.attention_flops(8192, 8192, 64, batch=8) / 100e9:.3g} s ±3%")
    assert full[5] == f"{costs.attention_flops(65536, 65536, 64, batch=8) / 100e9:.3g} s"  # one sample: no spread
    assert full[6].startswith("not measured: skipped (full and causal attention stop at a smaller n")
    assert "full and causal attention run up to n = 65,536" in window


def test_window_exponents_and_their_spread(report, report_dir):
    window = section(report, "Ways out of the quadratic")
    assert row(window, "c_tiled", "full", "2.00", "one sample")[4:] == ["8,192", "65,536", "4"]
    linear = row(window, "c_tiled", "window (512, 0)", "1.01 ±2%")
    assert linear[4:] == ["8,192", "131,072", "5"]
    low, high = map(float, linear[3].split("–"))
    assert low < 1.01 < high and high - low == pytest.approx(2 * math.log(1.03 / 0.97) / math.log(16), abs=0.01)
    assert (report_dir / "window_fits.csv").stat().st_size > 0 and (report_dir / "window.csv").stat().st_size > 0


def test_window_ratios_throughput_decode_and_peers(report):
    window = section(report, "Ways out of the quadratic")
    assert row(window, "c_tiled", "46.3 s")[-1] == "16.42× ±3%"  # causal ÷ window (2048, 0) at 65,536
    assert row(window, "numba_tiled", "window (512, 0)", "65,536")[3:] == ["30.0 ±3%", "40.0", "75% ±3%"]
    assert row(window, "c_tiled", "100,000")[2:] == ["870 µs ±2%", "20.5 ms ±2%", "16.0 MiB", "390.6 MiB",
                                                     "1.03× ±3%"]
    assert row(window, "jax_attention", "its own window")[3:] == ["0.75× ±4%", "1.50× ±4%"]
    assert row(window, "onnxruntime_attention", "a mask")[3].startswith("not measured: skipped (not installed")


@pytest.mark.parametrize("goal, verdict", [
    ("c_tiled causal attention ÷ window (2048, 0), time", "met"),
    ("c_tiled: the distance from 1 of the fitted exponent", "met"),
    ("numba_tiled: the distance from 1 of the fitted exponent", "met"),
    ("c_tiled: window (2048, 0)'s band GFLOP/s", "met"),
    ("numba_tiled: window (2048, 0)'s band GFLOP/s", "met"),
    ("c_tiled: a decode step on KVCache(window=4096, sinks=4) after 100,000 tokens", "met"),
    ("numba_tiled: a decode step on KVCache(window=4096, sinks=4) after 100,000 tokens", "within noise"),
    ("c_tiled: the bounded cache's bytes", "met"),
    ("c_tiled with a window over every peer taking a window of its own", "met"),
    ("c_tiled with a window over every peer given the window as an n × n mask", "not met"),
])
def test_window_goals(report, goal, verdict):
    rows = [line for line in section(report, "Goals").splitlines() if line.startswith("| " + goal)]
    assert len(rows) == 1, goal
    assert rows[0].split(" | ")[4] == verdict


def test_what_a_window_costs_minilm(report, report_dir):
    """The fixture's WindowFidelity cosines (README): rows width × sinks, each set of texts'
    mean and smallest cosine, the reach of six layers of the window beside them."""
    window = section(report, "Ways out of the quadratic")
    assert "What a window costs MiniLM" in window and "6 layers of ±w reach 6·w tokens" in window
    assert "StreamingLLM found for decoders" in window
    assert row(window, "±2 tokens", "none") == ["±2 tokens", "none", "±12 tokens", "0.580", "0.360", "0.240",
                                                "0.090"]
    assert row(window, "±8 tokens", "[CLS]")[2:] == ["±48 tokens", "0.980", "0.950", "0.840", "0.750"]
    assert row(window, "±32 tokens", "[CLS]")[3:] == ["1.000", "1.000", "0.960", "0.930"]
    fidelity = csv_rows(report_dir, "window_fidelity")
    assert len(fidelity) == 6 and float(csv_row(fidelity, width="2", sinks="1")["paragraphs_mean_cosine"]) == 0.71


def test_window_fidelity_skipped_without_the_model_says_why(results_copy):
    """asv records a skip (the model not installed) as NaN: each cell says so."""
    def skipped(data):
        for method in ("track_mean_cosine", "track_min_cosine"):
            cases = data["results"][f"bench_window.WindowFidelity.{method}"][0]
            cases[:] = [math.nan] * len(cases)

    edit_json(results_copy / NEWEST_FILE, skipped)
    window = window_section.window(results.load_latest_run(results_copy))
    table = next(block for block in window.blocks if getattr(block, "name", "") == "window_fidelity")
    cells = row(table.markdown(), "±8 tokens", "none")[3:]
    assert cells == ["not measured: skipped (all-MiniLM-L6-v2 was not installed (`make model`), or c_tiled took "
                     "no window, when this ran)"] * 4


def test_window_section_without_its_results_says_not_measured(tmp_path):
    """Results without any window benchmark (an older or partial run): the section renders,
    its goals read n/a, nothing crashes."""
    shutil.copytree(FIXTURE, tmp_path / "results")
    path = tmp_path / "results" / "testbox" / "c0ffee12-existing-py.json"
    data = json.loads(path.read_text())
    data["results"] = {name: row for name, row in data["results"].items() if not name.startswith("bench_window.")}
    path.write_text(json.dumps(data))
    text = write_report(tmp_path / "results", tmp_path / "out").read_text()
    window = section(text, "Ways out of the quadratic")
    assert "full and causal attention not measured in these results" in window
    assert row(window, "torch_sdpa", "a mask")[3:] == ["not measured: not in these results (a quick run measures "
                                                       "smaller sizes)"] * 2
    assert row(window, "±8 tokens", "[CLS]", "±48 tokens")[3:] == ["not measured: not in these results (a quick "
                                                                   "run measures smaller sizes)"] * 4
    assert row(section(text, "Goals"), "c_tiled causal attention ÷ window (2048, 0), time, 8 heads, n = 65,536, "
                                       "float32")[1:5] == ["n/a", "n/a", "≥ 13", "n/a"]


def test_a_failed_window_case_says_so(results_copy):
    name = str(bench_spec.WINDOW_TIME)
    cases = results.load_latest_run(results_copy).select(name)
    failed = cases.index(next(r for r in cases if r.params == dict(kernel="c_tiled", seq_len=131072,
                                                                    shape="window (2048, 0)")))
    edit_json(results_copy / NEWEST_FILE, lambda data: data["results"][name][0].__setitem__(failed, None))
    window = window_section.window(results.load_latest_run(results_copy))
    time_table = next(block for block in window.blocks if getattr(block, "name", "") == "window_time")
    assert row(time_table.markdown(), "c_tiled", "window (2048, 0)")[6] == "not measured: failed (see Gaps)"


def test_a_kept_run_from_before_peak_fraction_took_threads_and_causal_still_reads(results_copy):
    """Results kept from before PeakFraction took threads and causal hold (kernel, dtype) alone:
    c_tiled on every thread, full; the report reads them there and nowhere else."""
    name = str(bench_spec.PEAK_FRACTION)
    old = [[0.81, 0.9], [["'c_tiled'"], ["'float32'", "'bfloat16'"]], "v1", 1735732800000, 1.0]
    edit_json(results_copy / NEWEST_FILE, lambda data: data["results"].__setitem__(name, old))
    edit_json(results_copy / "benchmarks.json",
              lambda data: data[name].update(param_names=["kernel", "dtype"], params=old[1]))
    run = results.load_latest_run(results_copy)
    assert ceilings.peak_fraction(run, "c_tiled", "float32") == 0.81
    assert math.isnan(ceilings.peak_fraction(run, "c_tiled", "float32", causal=True))
    assert math.isnan(ceilings.peak_fraction(run, "c_tiled", "float32", threads=1))
