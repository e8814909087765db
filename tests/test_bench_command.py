"""``python -m kernels bench`` (``make bench``): the asv suite class by class, then the
report.  asv is replaced by a fake (``bench_run.run_command``, the one place a process is
started) that answers as asv would: discovery writes benchmarks.json (the fixture suite's),
a class run succeeds, fails or is stopped by Ctrl-C; the calibration runs are recorded, and
the report (``bench_run.publish_report``) too.  The clock is the fake's: each class takes 65 s."""
import json
import os
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import sys

import pytest

from kernels import bench_run, cli, processes
from kernels.report.results import benchmark_classes

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "asv_results"
COMMIT = "c0ffee1234567890abcdef1234567890abcdef12"   # the fixture's newest run
EVERY_CLASS = benchmark_classes(FIXTURE)
CLASSES = len(EVERY_CLASS)
CLASS_SECONDS = 65


class FakeAsv:
    """``run_command`` as asv and the calibration would answer; records every call."""

    def __init__(self, results, fail=(), interrupt=(), discovery_status=0, terminate=()):
        self.results = results
        self.fail, self.interrupt, self.terminate = set(fail), set(interrupt), set(terminate)
        self.discovery_status = discovery_status
        self.calls = []         # (what, argv, env): what is "machine", "discover", a class or "calibrate"
        self.seconds = 0.0

    def now(self):
        return self.seconds

    def __call__(self, argv, env=None, quiet=False):
        argv = list(argv)
        if argv[1:3] == ["-m", "kernels.calibration"]:
            self.calls.append(("calibrate", argv[3:], env))
            return 0
        assert argv[:3] == [sys.executable, "-m", "asv"], argv
        regex = argv[argv.index("--bench") + 1]
        if regex == "just-discover":
            self.calls.append(("discover", argv[3:], env))
            if not self.discovery_status:
                self.results.mkdir(parents=True, exist_ok=True)
                shutil.copy(FIXTURE / "benchmarks.json", self.results / "benchmarks.json")
            return self.discovery_status
        name = re.match(r"\^\(\?=(.*?)\\\.\)", regex).group(1).replace("\\", "")
        self.calls.append((name, argv[3:], env))
        self.seconds += CLASS_SECONDS
        if name in self.interrupt:
            raise KeyboardInterrupt
        if name in self.terminate:
            os.kill(os.getpid(), signal.SIGTERM)
        return 2 if name in self.fail else 0

    def classes(self):
        return [what for what, _, _ in self.calls if what not in ("machine", "discover", "calibrate")]

    def sequence(self):
        """Every call in order: the class name, or ("calibrate", label, phase), or the step."""
        return [("calibrate", *argv) if what == "calibrate" else what for what, argv, _ in self.calls]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """An empty project folder to run in (asv.conf.json present), HEAD the fixture's commit,
    the report recorded instead of written; -> (the fake asv factory, the report's calls)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "asv.conf.json").write_text("{}")
    monkeypatch.setattr(bench_run, "head_commit", lambda: COMMIT)
    reports = []

    def report(results, out, machine):
        reports.append({"results": str(results), "out": str(out), "keep_machine": machine})
        return out / "REPORT.md", out / "machines" / machine / f"{COMMIT[:8]}.json"

    monkeypatch.setattr(bench_run, "publish_report", report)

    def fake(**kwargs):
        asv = FakeAsv(tmp_path / ".asv" / "results", **kwargs)
        monkeypatch.setattr(bench_run, "run_command", asv)
        monkeypatch.setattr(bench_run, "describe_machine",
                            lambda name: asv.calls.append(("machine", ["--machine", name], None)))
        return asv

    return fake, reports


def bench(asv, capsys, **options):
    """(exit status, our progress lines, stderr) of one run, on the fake's clock."""
    status = bench_run.run(bench_run.Options(machine="testbox", **options), now=asv.now)
    captured = capsys.readouterr()
    return status, [line[4:] for line in captured.out.splitlines() if line.startswith("==> ")], captured.err


def test_every_class_runs_in_name_order_between_its_calibrations_then_the_report(project, capsys):
    fake, reports = project
    asv = fake()
    status, _, err = bench(asv, capsys)
    assert status == 0 and err == ""
    assert asv.classes() == EVERY_CLASS == sorted(EVERY_CLASS)
    calibration = f".asv/results/testbox/{COMMIT[:8]}-calibration.jsonl"
    assert asv.sequence() == ["machine", "discover"] + [
        step for name in EVERY_CLASS
        for step in (("calibrate", calibration, name, "before"), name, ("calibrate", calibration, name, "after"))]
    assert reports == [{"results": ".asv/results", "out": "reports", "keep_machine": "testbox"}]


def test_asv_is_called_as_the_makefile_called_it(project, capsys):
    fake, _ = project
    asv = fake()
    bench(asv, capsys)
    (_, machine, _), (_, discover, env), (_, calibrate, _), (name, run, class_env) = asv.calls[:4]
    assert machine == ["--machine", "testbox"]
    assert discover == ["run", "--python=same", "--machine", "testbox", "--bench", "just-discover"]
    assert env == {"ATTNBENCH_QUICK": "0"}
    assert name == "bench_attention.MemoryWall"
    assert class_env == {"ATTNBENCH_QUICK": "0", "ATTNBENCH_PRELOAD_PEERS": "1"}   # it times torch_sdpa
    assert run == ["run", "--python=same", "--machine", "testbox", "--set-commit-hash", COMMIT,
                   "--bench", r"^(?=bench_attention\.MemoryWall\.)(?=.*(?:))"]


def test_the_machine_is_described_in_full_under_its_name(tmp_path, monkeypatch):
    """The report's opening names the CPU, cores, RAM and OS from the machine.json asv copies
    out of ~/.asv-machine.json: every field of asv's own description is stored, on a fresh
    machine too, and the other machines there are kept."""
    from asv.machine import Machine

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".asv-machine.json").write_text('{"other": {"machine": "other"}, "version": 1}')
    bench_run.describe_machine("testbox")
    stored = json.loads((tmp_path / ".asv-machine.json").read_text())
    assert stored["testbox"] == {**Machine.get_defaults(), "machine": "testbox"}
    assert set(Machine.get_defaults()) >= {"cpu", "num_cpu", "ram", "os", "arch"}
    assert stored["other"] == {"machine": "other"}


def test_the_machine_is_named_after_its_cpu_in_every_asv_command_and_the_report_keeps_it(project, capsys,
                                                                                         monkeypatch):
    fake, reports = project
    monkeypatch.setattr(bench_run.machine_id, "machine_name", lambda: "intel-xeon-avx512")
    asv = fake()
    assert bench_run.run(bench_run.Options(bench="Startup"), now=asv.now) == 0
    assert [(what, argv[argv.index("--machine") + 1]) for what, argv, _ in asv.calls if what != "calibrate"] == [
        ("machine", "intel-xeon-avx512"), ("discover", "intel-xeon-avx512"),
        ("bench_machine.Startup", "intel-xeon-avx512")]
    assert {argv[0] for what, argv, _ in asv.calls if what == "calibrate"} == {
        f".asv/results/intel-xeon-avx512/{COMMIT[:8]}-calibration.jsonl"}
    assert reports[0]["keep_machine"] == "intel-xeon-avx512"


def test_quick_leaves_out_peakmem_and_the_memory_wall_and_says_so_to_asv_and_the_suite(project, capsys):
    fake, _ = project
    asv = fake()
    status, lines, _ = bench(asv, capsys, quick=True, threads=3)
    assert status == 0 and "quick" in lines[0] and "3 threads" in lines[0]
    assert asv.classes() == benchmark_classes(FIXTURE, bench_run.QUICK_SELECTION)
    assert "bench_attention.MemoryWall" not in asv.classes()
    what, run, env = asv.calls[3]
    assert run[:3] == ["run", "--python=same", "--quick"]
    assert run[-1] == rf"^(?={re.escape(what)}\.)(?=.*(?:^(?!.*(peakmem_|MemoryWall))))"
    assert all({key: value for key, value in env.items() if key != "ATTNBENCH_PRELOAD_PEERS"}
               == {"ATTNBENCH_QUICK": "1", "ATTNBENCH_THREADS": "3"}
               for what, _, env in asv.calls if what not in ("machine", "calibrate"))


def test_asvs_server_preloads_the_peers_only_for_a_class_whose_parameters_name_one(project, capsys):
    """A class none of whose benchmarks takes a peer's name is run with
    ATTNBENCH_PRELOAD_PEERS=0 (benchmarks/__init__.py: the forkserver then imports our rungs
    only); one that times a peer, and asv's discovery, are not told to leave them out."""
    fake, _ = project
    asv = fake()
    bench(asv, capsys)
    suite = json.loads((FIXTURE / "benchmarks.json").read_text())
    told = {what: env.get("ATTNBENCH_PRELOAD_PEERS") for what, _, env in asv.calls
            if what not in ("machine", "calibrate")}
    assert told.pop("discover") is None
    with_peers = {name.rsplit(".", 1)[0] for name, meta in suite.items() if isinstance(meta, dict)
                  and any("'torch_sdpa'" in values for values in meta.get("params") or ())}
    assert {"bench_attention.SeqLen", "bench_peers.PeerSpeedup"} <= with_peers
    assert {"bench_machine.Startup", "bench_machine.Ceilings"} <= set(told) - with_peers
    assert told == {name: "1" if name in with_peers else "0" for name in EVERY_CLASS}


def test_bench_selects_the_classes_as_asv_selects_benchmarks(project, capsys):
    fake, _ = project
    asv = fake()
    status, _, _ = bench(asv, capsys, quick=True, bench="float64")
    assert status == 0
    assert asv.classes() == benchmark_classes(FIXTURE, "float64") != EVERY_CLASS
    assert asv.calls[3][1][-1].endswith("(?=.*(?:float64))")  # --bench replaces quick's selection


def test_progress_names_each_class_its_number_and_the_time(project, capsys):
    fake, _ = project
    asv = fake(fail={"bench_machine.Startup"})
    status, lines, err = bench(asv, capsys, bench="Startup|Ceilings|Blas")
    assert status == 1
    assert lines == [
        f"attnbench bench: machine testbox, commit {COMMIT[:8]}, benchmarks matching 'Startup|Ceilings|Blas'",
        "3 classes to run",
        "[1/3] bench_machine.Blas (elapsed 0:00)",
        "[1/3] bench_machine.Blas done in 1:05; elapsed 1:05",
        "[2/3] bench_machine.Ceilings (elapsed 1:05)",
        "[2/3] bench_machine.Ceilings done in 1:05; elapsed 2:10",
        "[3/3] bench_machine.Startup (elapsed 2:10)",
        "[3/3] bench_machine.Startup failed (asv exit status 2) after 1:05; elapsed 3:15",
        "the report (elapsed 3:15)",
        "attnbench bench: 2 of 3 classes done, 1 failed (bench_machine.Startup); 3:15 in all",
    ]
    assert err == ""


def test_a_failed_class_does_not_stop_the_others_and_the_run_fails_after_the_report(project, capsys):
    fake, reports = project
    asv = fake(fail={"bench_attention.MultiHead"})
    status, lines, _ = bench(asv, capsys)
    assert status == 1 and asv.classes() == EVERY_CLASS and len(reports) == 1
    assert lines[-1].startswith(f"attnbench bench: {CLASSES - 1} of {CLASSES} classes done, 1 failed (bench_attention.MultiHead); ")


def test_ctrl_c_keeps_the_classes_before_it_writes_the_report_and_exits_130(project, capsys):
    fake, reports = project
    asv = fake(interrupt={EVERY_CLASS[2]})
    status, lines, _ = bench(asv, capsys)
    assert status == bench_run.INTERRUPTED == 130
    assert asv.classes() == EVERY_CLASS[:3] and len(reports) == 1
    calibrations = [step[2:] for step in asv.sequence() if step[0] == "calibrate"]
    assert calibrations[-2:] == [(EVERY_CLASS[2], "before"), (EVERY_CLASS[2], "after")]  # pairs kept
    assert f"[3/{CLASSES}] {EVERY_CLASS[2]} interrupted after 1:05: its results are lost, those of the classes " \
           "before it kept" in lines
    assert lines[-1] == (f"attnbench bench: 2 of {CLASSES} classes done, {EVERY_CLASS[2]} interrupted (its results "
                         f"lost), {CLASSES - 3} not run; 3:15 in all")


def test_sigterm_is_handled_as_ctrl_c_and_its_handler_put_back(project, capsys):
    fake, reports = project
    before = signal.getsignal(signal.SIGTERM)
    asv = fake(terminate={EVERY_CLASS[0]})
    status, _, _ = bench(asv, capsys)
    assert status == 130 and asv.classes() == EVERY_CLASS[:1] and len(reports) == 1
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_report_that_fails_fails_the_run(project, capsys, monkeypatch):
    fake, _ = project
    asv = fake()

    def no_results(results, out, machine):
        raise FileNotFoundError("no asv results folder at .asv/results (run `make bench` first)")

    monkeypatch.setattr(bench_run, "publish_report", no_results)
    status, lines, err = bench(asv, capsys, bench="Startup")
    assert status == 1
    assert err == "attnbench bench: the report: no asv results folder at .asv/results (run `make bench` first)\n"
    assert lines[-1].startswith("attnbench bench: 1 of 1 class done; 1:05 in all; failed: the report: ")


def test_a_selection_of_nothing_or_a_failed_discovery_runs_no_class_and_still_reports(project, capsys):
    fake, reports = project
    asv = fake()
    status, _, err = bench(asv, capsys, bench="nothing like it")
    assert status == 1 and asv.classes() == [] and len(reports) == 1
    assert err == "attnbench bench: no benchmark matches 'nothing like it'\n"
    asv = fake(discovery_status=1)
    status, _, err = bench(asv, capsys)
    assert status == 1 and asv.classes() == [] and len(reports) == 2
    assert err == "attnbench bench: asv could not discover the suite (exit status 1)\n"


def test_without_calibration_only_asv_runs(project, capsys):
    fake, _ = project
    asv = fake()
    assert bench(asv, capsys, bench="Startup|Ceilings", calibrate=False)[0] == 0
    assert asv.sequence() == ["machine", "discover", "bench_machine.Ceilings", "bench_machine.Startup"]


def measured(results, env_name=None, commit=COMMIT):
    """The fixture's newest run, as asv on this interpreter (or ``env_name``) saved it for ``commit``."""
    env_name = env_name or bench_run.environment_name()
    folder = results / "testbox"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURE / "testbox" / "machine.json", folder)
    data = json.loads((FIXTURE / "testbox" / f"{COMMIT[:8]}-existing-py.json").read_text())
    data.update(env_name=env_name, commit_hash=commit)
    (folder / f"{commit[:8]}-{env_name}.json").write_text(json.dumps(data))


def test_resume_skips_the_classes_measured_already_and_asks_asv_to_skip_the_rest(project, capsys):
    fake, reports = project
    asv = fake()
    measured(asv.results)
    status, lines, _ = bench(asv, capsys, resume=True)
    assert status == 0 and len(reports) == 1
    run = asv.classes()
    # Startup: a benchmark that did not run (track_numba_compile_seconds); SeqLen and
    # MultiHead: a failed parameter combination; the others all measured (skips count)
    assert run == ["bench_attention.MultiHead", "bench_attention.SeqLen", "bench_machine.Startup"]
    assert all("--skip-existing-successful" in argv for what, argv, _ in asv.calls if what in run)
    skipped = [name for name in EVERY_CLASS if name not in run]
    assert [step for step in asv.sequence() if step[0] == "calibrate" and step[2] in skipped] == []
    assert f"[1/{CLASSES}] bench_attention.MemoryWall: skipped, every benchmark it would run has results of " \
           f"{COMMIT[:8]} (--resume)" in lines
    assert lines[1] == f"{CLASSES} classes, {CLASSES - 3} measured already (--resume skips them): 3 to run"
    assert lines[-1] == f"attnbench bench: 3 of {CLASSES} classes done, {CLASSES - 3} skipped by --resume (results already there); " \
                        "3:15 in all"


def test_resume_counts_only_this_commit_and_this_interpreter(project, capsys):
    fake, _ = project
    asv = fake()
    measured(asv.results, env_name="virtualenv-py3.11-numpy")
    measured(asv.results, commit="01dc0de0" + COMMIT[8:])
    assert bench(asv, capsys, resume=True)[0] == 0
    assert asv.classes() == EVERY_CLASS


def test_resume_within_a_selection_looks_at_the_selected_benchmarks_only(project, capsys):
    fake, _ = project
    asv = fake()
    measured(asv.results)
    # Startup's compile time never ran; its import time did
    bench(asv, capsys, resume=True, bench="Startup.track_import|Ceilings")
    assert asv.classes() == []


@pytest.mark.parametrize("argv, options", [
    (["bench"], bench_run.Options()),
    (["bench", "--quick", "--threads", "2", "--bench", "MultiHead", "--resume", "--machine", "box",
      "--no-calibrate"],
     bench_run.Options(quick=True, threads=2, bench="MultiHead", resume=True, machine="box", calibrate=False)),
    (["--threads", "4", "bench", "--bench", ""], bench_run.Options(threads=4)),
])
def test_the_command_line_maps_to_the_options(argv, options, monkeypatch):
    given = []
    monkeypatch.setattr(bench_run, "run", lambda options: given.append(options) or 7)
    before = cli.threads.budget()
    try:
        assert cli.main(argv) == 7
    finally:
        cli.threads.set_budget(before)
    assert given == [options]


# the variables, and those by which a make that runs the tests (make test) would pass its own
MAKE_VARIABLES = ("QUICK", "THREADS", "BENCH", "RESUME", "MACHINE", "CALIBRATE", "MAKEFLAGS", "MFLAGS",
                  "MAKELEVEL", "MAKEOVERRIDES")


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
@pytest.mark.parametrize("variables, options", [
    ([], bench_run.Options()),
    (["QUICK=1", "THREADS=2", "BENCH=^(?!.*peakmem_)Multi", "RESUME=1", "MACHINE=box", "CALIBRATE=0"],
     bench_run.Options(quick=True, threads=2, bench="^(?!.*peakmem_)Multi", resume=True, machine="box",
                       calibrate=False)),
    (["CALIBRATE=1"], bench_run.Options()),
])
def test_make_bench_passes_its_variables_as_options(project_root, variables, options, monkeypatch):
    env = {key: value for key, value in os.environ.items() if key not in MAKE_VARIABLES}
    dry = subprocess.run(["make", "-n", "-s", "--no-print-directory", "-C", str(project_root), "bench", *variables],
                         capture_output=True, text=True, env=env, check=True)
    command = shlex.split(dry.stdout.strip().splitlines()[-1])
    assert command[:4] == [".venv/bin/python", "-m", "kernels", "bench"]
    given = []
    monkeypatch.setattr(bench_run, "run", lambda options: given.append(options) or 0)
    before = cli.threads.budget()
    try:
        assert cli.main(command[3:]) == 0
    finally:
        cli.threads.set_budget(before)
    assert given == [options]


def test_a_bad_regex_or_no_project_is_one_line_before_anything_runs(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench_run, "run_command", lambda *a, **k: pytest.fail("ran something"))
    assert cli.main(["bench", "--bench", "(Multi"]) == 1
    assert capsys.readouterr().err == ("attnbench bench: --bench '(Multi' is not a regular expression: "
                                       "missing ), unterminated subpattern at position 0\n")
    assert cli.main(["bench"]) == 1
    assert capsys.readouterr().err == (f"attnbench bench: no asv.conf.json in {tmp_path}: run it in the "
                                       "project's folder, as `make bench` does\n")


def test_run_command_passes_the_status_and_the_variables():
    code = "import os, sys; sys.exit(int(os.environ['ATTNBENCH_QUICK']) + 2)"
    assert processes.run_command([sys.executable, "-c", code], env={"ATTNBENCH_QUICK": "1"}) == 3


@pytest.mark.parametrize("signalled", [True, False])
@pytest.mark.parametrize("ignores, killed_by", [(False, -signal.SIGINT), (True, -signal.SIGTERM)])
def test_a_stopped_child_is_sent_sigint_then_sigterm(monkeypatch, signalled, ignores, killed_by):
    """After Ctrl-C, a child still running (the terminal's SIGINT did not reach it, or it
    ignores it) is sent SIGINT, then SIGTERM, and waited for; after SIGTERM (which reached
    this process only) SIGINT at once."""
    monkeypatch.setattr(processes, "GRACE_SECONDS", 0.05)
    code = ("import signal, sys, time\n"
            f"signal.signal(signal.SIGINT, signal.SIG_IGN if {ignores} else signal.SIG_DFL)\n"
            "print('ready', flush=True)\n"
            "time.sleep(600)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "ready\n"
    processes._stop(child, signalled=signalled)
    child.stdout.close()
    assert child.returncode == killed_by


@pytest.mark.parametrize("seconds, text", [(0, "0:00"), (65, "1:05"), (599.6, "10:00"), (3723, "1:02:03")])
def test_clock(seconds, text):
    assert bench_run.clock(seconds) == text
