"""Machines side by side: the name ``make bench`` gives a machine (kernels.machine_id), the
results it keeps in reports/machines/ (kernels.report.machines.keep_machine), and the
report's Machines section, on copies of the one-machine fixture (tests/fixtures/asv_results,
machine "testbox") given other machines' names and figures."""
import csv
import json
import pathlib
import platform
import shutil

import pytest

from kernels import bench_spec, cli
from kernels.machine_id import isa_of, machine_name
from kernels.report import keep_machine, write_report

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "asv_results"
NEWEST_FILE = pathlib.Path("testbox", "c0ffee12-existing-py.json")
OLDER_FILE = pathlib.Path("testbox", "01dc0de0-existing-py.json")

# -- machine names ------------------------------------------------------------------------


def cpuinfo(model_name, flags):
    """Two processors' entries of /proc/cpuinfo, as Linux writes them on x86."""
    entry = (f"processor\t: {{}}\nvendor_id\t: x\ncpu family\t: 25\nmodel name\t: {model_name}\n"
             f"flags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 {flags}\n")
    return "\n".join(entry.format(i) for i in range(2))


EPYC_AVX2 = cpuinfo("AMD EPYC 7B13", "fma avx avx2 bmi2")
XEON_AVX512 = cpuinfo("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz",
                      "fma avx avx2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni")
EPYC_AVX512_BF16 = cpuinfo("AMD EPYC 9R14 96-Core Processor",
                           "fma avx avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni")


@pytest.mark.parametrize("text, name, isa", [
    (EPYC_AVX2, "amd-epyc-avx2", "avx2"),
    (XEON_AVX512, "intel-xeon-avx512", "avx512"),
    (EPYC_AVX512_BF16, "amd-epyc-avx512-bf16", "avx512-bf16"),
    (cpuinfo("Intel(R) Core(TM) i9-9900K CPU @ 3.60GHz", "avx2"), "intel-core-avx2", "avx2"),
])
def test_machine_name_is_the_cpu_and_its_isa(text, name, isa):
    assert machine_name(text) == name
    assert isa_of(name) == isa


def test_the_three_machines_get_distinct_names():
    assert len({machine_name(text) for text in (EPYC_AVX2, XEON_AVX512, EPYC_AVX512_BF16)}) == 3


def test_without_cpuinfo_the_name_is_the_architecture(monkeypatch):
    """Off Linux (no /proc/cpuinfo) and on ARM's cpuinfo (no model name, "Features")."""
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    assert machine_name("") == "arm64"
    assert machine_name("processor\t: 0\nFeatures\t: fp asimd evtstrm aes\n") == "arm64-neon"
    assert isa_of("vm") is None  # asv's hostname: no ISA to read


def test_machine_name_reads_this_machine():
    name = machine_name()
    assert name and name == name.lower() and " " not in name


# -- other machines' results ----------------------------------------------------------------


def add_machine(results_dir, name, cpu, num_cpu, sgemm, peer_speedup_factor=1.0, commit="feed" * 10):
    """``results_dir``/``name``/: the fixture's newest run measured on another machine,
    committed on 2024-06-01 (before testbox's newest run, which stays the report's), with
    its ``sgemm`` (its quartiles 4% either side) and c_tiled's speed-ups over every peer ×
    ``peer_speedup_factor``; benchmarks.json as the fixture's."""
    folder = pathlib.Path(results_dir) / name
    folder.mkdir(parents=True)
    shutil.copy(FIXTURE / "benchmarks.json", results_dir)
    (folder / "machine.json").write_text(json.dumps(
        {"arch": "x86_64", "cpu": cpu, "machine": name, "num_cpu": str(num_cpu), "os": "Linux 6.1.0",
         "ram": "8589934592", "version": 1}))
    data = json.loads((FIXTURE / NEWEST_FILE).read_text())
    sgemm_row = data["results"][str(bench_spec.SGEMM)]
    # result, params, version, started_at, duration, ci_99_a, ci_99_b, q_25, q_75, number, repeat
    sgemm_row[:] = [[sgemm], *sgemm_row[1:5], [None], [None], [sgemm * 0.96], [sgemm * 1.04], [1], [5]]
    speedups = data["results"][str(bench_spec.PEER_SPEEDUP)]
    speedups[0] = [value * peer_speedup_factor if value == value else value for value in speedups[0]]
    data.update(commit_hash=commit, date=1717243200000, params={**data["params"], "machine": name, "cpu": cpu})
    (folder / f"{commit[:8]}-env.json").write_text(json.dumps(data))
    return folder


def machines_section(out_dir):
    report = (out_dir / "REPORT.md").read_text()
    start = report.index("\n## Machines")
    return report[start:report.index("\n## ", start + 1)]


def row(text, label):
    """The cells after the label of the table row whose label starts with ``label``."""
    rows = [line for line in text.splitlines() if line.startswith(f"| {label}")]
    assert len(rows) == 1, f"{len(rows)} rows start with {label!r}"
    return [cell.strip() for cell in rows[0].strip("|").split("|")][1:]


def medians(text, label):
    """``row``'s cells without their spread ("4.00× ±16%" -> "4.00×")."""
    return [cell.split(" ±")[0] for cell in row(text, label)]


@pytest.fixture
def three_machines(tmp_path):
    """testbox's results with a second machine in the results folder and a third kept
    beside the report, as ``make bench`` on that machine keeps it; -> the report's folder."""
    results = pathlib.Path(shutil.copytree(FIXTURE, tmp_path / "results"))
    add_machine(results, "amd-epyc-avx2", "AMD EPYC 7B13", 2, 80.0, peer_speedup_factor=0.5)
    elsewhere = tmp_path / "measured_elsewhere"
    add_machine(elsewhere, "intel-xeon-avx512", "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", 8, 250.0,
                peer_speedup_factor=2.0)
    out = tmp_path / "reports"
    keep_machine(elsewhere, out, "intel-xeon-avx512")
    write_report(results, out)
    return out


def test_machines_side_by_side_one_column_each(three_machines):
    section = machines_section(three_machines)
    assert "| figure | testbox | amd-epyc-avx2 | intel-xeon-avx512 |" in section  # the report's machine first
    assert row(section, "CPU (") == ["Synthetic CPU @ 3.00GHz", "AMD EPYC 7B13",
                                     "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"]
    assert row(section, "ISA") == ["n/a", "avx2", "avx512"]
    assert row(section, "CPUs") == ["4", "2", "8"]
    assert row(section, "RAM") == ["16.0 GiB", "8.0 GiB", "8.0 GiB"]
    assert row(section, "commit |") == ["c0ffee12", "feedfeed", "feedfeed"]
    assert row(section, "committed") == ["2025-01-01", "2024-06-01", "2024-06-01"]
    # the figures, without their spread (the fixture's own may carry one)
    assert medians(section, "thread budget") == ["4", "4", "4"]
    assert medians(section, "sgemm") == ["125.0", "80.0", "250.0"]  # testbox's newest run, not its older 999
    assert row(section, "sgemm")[1:] == ["80.0 ±4%", "250.0 ±4%"]
    assert medians(section, "dgemm") == ["62.5"] * 3
    # testbox measured a bfloat16 peak; the others' names say they have no AVX512-BF16
    assert row(section, "bfloat16 dot-product peak") == ["320.0 ±5%"] + ["no bfloat16 unit (no AVX512-BF16)"] * 2
    assert medians(section, "headline n") == ["4,096"] * 3
    assert medians(section, "c_tiled GFLOP/s, float32") == ["100.0"] * 3
    assert medians(section, "c_tiled GFLOP/s ÷ the FMA peak") == ["62%"] * 3  # PeakFraction's 0.625, side by side
    assert medians(section, "the BLAS's sgemm GFLOP/s ÷ the FMA peak") == ["78%"] * 3  # GemmFraction's, every thread
    assert medians(section, "c_tiled speed over numpy") == ["4.00×"] * 3
    # c_tiled over torch_sdpa 1.25 at 4 threads; over onnxruntime_attention (× 0.8) the smallest
    assert medians(section, "c_tiled speed over every peer") == ["1.00×", "0.50×", "2.00×"]
    assert medians(section, "c_tiled speed over torch_sdpa") == ["1.25×", "0.62×", "2.50×"]
    assert medians(section, "c_tiled speed over jax_attention") == ["5.00×", "2.50×", "10.00×"]


def test_machines_csvs_hold_raw_values_and_quartiles(three_machines):
    def rows(name):
        with open(three_machines / f"{name}.csv", newline="") as file:
            return {r["figure"]: r for r in csv.DictReader(file)}

    about = rows("machines")
    assert list(about["CPUs"]) == ["figure", "testbox", "amd-epyc-avx2", "intel-xeon-avx512"]  # no spread
    assert about["ISA (from the machine's name)"]["testbox"] == ""  # a gap
    assert float(about["CPUs"]["amd-epyc-avx2"]) == 2
    sgemm = rows("machine_figures")["sgemm, GFLOP/s"]
    assert float(sgemm["testbox"]) == 125.0 and float(sgemm["intel-xeon-avx512"]) == 250.0
    assert float(sgemm["intel-xeon-avx512_q25"]) == 240.0 and float(sgemm["intel-xeon-avx512_q75"]) == 260.0
    bf16_peak = rows("machine_figures")["bfloat16 dot-product peak, GFLOP/s (every thread)"]
    assert float(bf16_peak["testbox"]) == 320.0 and bf16_peak["amd-epyc-avx2"] == "no bfloat16 unit (no AVX512-BF16)"


def test_one_machine_says_so_in_one_line(tmp_path):
    out = tmp_path / "reports"
    write_report(FIXTURE, out)
    assert machines_section(out).strip().splitlines()[1:] == ["", (
        "Only testbox's results are here. `make bench` on another machine keeps its newest run in "
        "`machines/` beside this report (commit it), and the report lays the machines side by side.")]
    assert not (out / "machines.csv").exists() and not (out / "machine_figures.csv").exists()


# -- keeping a machine's results ---------------------------------------------------------------


def test_keeping_replaces_the_machines_older_results_and_leaves_the_others(tmp_path):
    kept = tmp_path / "reports" / "machines"
    (kept / "testbox").mkdir(parents=True)
    shutil.copy(FIXTURE / OLDER_FILE, kept / OLDER_FILE)  # kept by an earlier make bench
    other = add_machine(kept, "amd-epyc-avx2", "AMD EPYC 7B13", 2, 80.0)
    before = {path: path.read_bytes() for path in other.iterdir()}

    path = keep_machine(FIXTURE, tmp_path / "reports", "testbox")

    assert path == kept / "testbox" / "c0ffee12.json"   # the commit's, not asv's interpreter path
    assert sorted(p.name for p in (kept / "testbox").iterdir()) == ["c0ffee12.json", "machine.json"]
    assert path.read_bytes() == (FIXTURE / NEWEST_FILE).read_bytes()
    assert (kept / "benchmarks.json").read_bytes() == (FIXTURE / "benchmarks.json").read_bytes()
    assert {path: path.read_bytes() for path in other.iterdir()} == before


def test_keeping_a_machine_without_results_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="no results of machine 'nobox' in .* \\(it holds testbox\\)"):
        keep_machine(FIXTURE, tmp_path, "nobox")
    assert not (tmp_path / "machines").exists()


def test_the_report_command_keeps_the_machine_after_the_report(tmp_path, capsys):
    out = tmp_path / "reports"
    assert cli.main(["report", "--results", str(FIXTURE), "--out", str(out), "--keep-machine", "testbox"]) == 0
    kept = out / "machines" / "testbox" / "c0ffee12.json"
    assert capsys.readouterr().out.splitlines() == [f"wrote {out / 'REPORT.md'}", f"kept {kept}"]
    assert cli.main(["report", "--results", str(FIXTURE), "--out", str(out), "--keep-machine", "nobox"]) == 1
    assert "attnbench report: no results of machine 'nobox'" in capsys.readouterr().err


def test_an_unreadable_kept_file_is_named_not_a_crash(tmp_path):
    out = tmp_path / "reports"
    keep_machine(FIXTURE, out, "testbox")
    broken = out / "machines" / "testbox" / "c0ffee12-broken.json"
    broken.write_text('{"commit_hash": ')
    report = write_report(FIXTURE, out).read_text()
    assert f"{broken}: not valid JSON" in report[:report.index("\n## ")]
    assert "Only testbox's results are here." in machines_section(out)
