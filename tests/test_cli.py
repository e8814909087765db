"""What the command line does when a user gets something wrong: one line on stderr, a
non-zero exit status (2 for the command line itself, 1 for a value, path, size or build
it cannot work with), no traceback, and nothing large allocated first."""
import os
import re
import subprocess
import sys
import tempfile

import pytest

import kernels
from kernels import cli, threads

GiB = 2**30


def run_main(capsys, *argv):
    """(exit status, stdout, the one stderr line) of ``cli.main(argv)``."""
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == (status != 0), captured.err
    return status, captured.out, lines[0] if lines else ""


@pytest.fixture
def budget_unchanged():
    """``--threads`` sets the process's budget: put it back afterwards."""
    before = threads.budget()
    yield
    threads.set_budget(before)


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "a_file"
    path.write_text("not a folder")
    return path


@pytest.mark.parametrize("argv, expected", [
    (["timing", "--kernel", "flash"], "argument --kernel: unknown kernel(s) flash; known: naive, numpy"),
    (["verify", "--kernel", "flash"], "argument --kernel: unknown kernel(s) flash"),
    (["timing", "--seq-len", "-5"], "argument --seq-len: must be at least 1, got -5"),
    (["timing", "--seq-len", "0"], "argument --seq-len: must be at least 1, got 0"),
    (["timing", "--seq-len", "1e3"], "argument --seq-len: '1e3' is not a whole number"),
    (["timing", "--heads", "0"], "argument --heads: must be at least 1, got 0"),
    (["timing", "--head-dim", "-64"], "argument --head-dim: must be at least 1, got -64"),
    (["timing", "--repeat", "0"], "argument --repeat: must be at least 1, got 0"),
    (["timing", "--dtype", "float16"], "argument --dtype: invalid choice: 'float16'"),
    (["--threads", "0", "list"], "argument --threads: must be at least 1, got 0"),
    (["--threads", "-1", "list"], "argument --threads: must be at least 1, got -1"),
    (["--threads", "abc", "list"], "argument --threads: 'abc' is not a whole number"),
    (["benchmark"], "argument command: invalid choice: 'benchmark'"),
    ([], "the following arguments are required: command"),
])
def test_a_bad_command_line_is_one_line_and_status_2(capsys, argv, expected):
    status, out, error = run_main(capsys, *argv)
    assert status == 2 and out == ""
    assert expected in error and "--help" in error


def test_garbage_thread_variables_are_one_line_naming_them(capsys, monkeypatch):
    monkeypatch.setenv("ATTNBENCH_THREADS", "many")
    status, out, error = run_main(capsys, "list")
    assert status == 1 and out == ""
    assert error == "attnbench list: ATTNBENCH_THREADS='many': a thread budget must be a whole number >= 1"
    monkeypatch.delenv("ATTNBENCH_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "0")
    assert run_main(capsys, "list")[2].startswith("attnbench list: OMP_NUM_THREADS='0'")


def test_threads_option_sets_the_budget_and_records_oversubscription(capsys, monkeypatch, budget_unchanged):
    monkeypatch.setattr(threads, "available_cpus", lambda: 2)
    status, out, _ = run_main(capsys, "--threads", "3", "timing", "--kernel", "numpy", "--seq-len", "16",
                              "--heads", "1", "--head-dim", "8", "--repeat", "1")
    assert status == 0 and threads.budget() == 3
    assert "threads: 3 threads, oversubscribed: 2 CPUs" in out.splitlines()[0]


def test_timing_refuses_inputs_that_cannot_fit_before_making_them(capsys, monkeypatch):
    # 8 heads x 10^7 x 64 float32: q, k, v and the output are 76 GiB; were they made, this
    # test would be killed, not failed
    monkeypatch.setattr(kernels.api, "available_bytes", lambda: 8 * GiB)
    status, out, error = run_main(capsys, "timing", "--seq-len", "256", "10000000")
    assert status == 1 and out == ""
    assert re.match(r"attnbench timing: kernel '\w+' needs \d+\.\d [GT]iB", error), error
    assert "n_q=10000000" in error and "only 8.0 GiB is available" in error


def test_timing_marks_a_kernel_whose_scores_cannot_fit_and_says_why(capsys, monkeypatch):
    # numpy's 8192 x 8192 float32 scores (256 MiB) do not fit in 128 MiB; c_tiled's few MiB do
    monkeypatch.setattr(kernels.api, "available_bytes", lambda: 128 * 2**20)
    status, out, _ = run_main(capsys, "timing", "--kernel", "numpy", "--kernel", "c_tiled", "--seq-len", "8192",
                              "--heads", "1", "--head-dim", "8", "--repeat", "1")
    assert status == 0
    row = next(line for line in out.splitlines() if line.startswith("8192"))
    assert row.split()[1] == "n/a" and "GF/s" in row
    assert "n/a: numpy at n=8192: kernel 'numpy' needs" in out and "never materialise" in out


def test_timing_of_naive_above_its_cap_is_one_line(capsys):
    status, _, error = run_main(capsys, "timing", "--kernel", "naive", "--seq-len", "1000")
    assert status == 1 and "kernel 'naive' is capped at" in error


@pytest.mark.parametrize("command", [["explain"], ["heatmap", "--text", "x"],
                                     ["report", "--results", "tests/fixtures/asv_results"]])
def test_an_output_folder_that_is_a_file_or_under_one_is_one_line(capsys, a_file, command):
    status, out, error = run_main(capsys, *command, "--out", str(a_file))
    assert status == 1 and out == ""
    assert error == f"attnbench {command[0]}: the output folder {a_file} is a file, not a folder"
    status, _, error = run_main(capsys, *command, "--out", str(a_file / "sub"))
    assert status == 1
    assert error == f"attnbench {command[0]}: cannot create the output folder {a_file / 'sub'}: Not a directory"


def test_an_output_folder_that_cannot_be_created_or_written_is_one_line(capsys, tmp_path):
    status, _, error = run_main(capsys, "explain", "--out", "/proc/attnbench-out")
    assert status == 1
    assert error.startswith("attnbench explain: cannot create the output folder /proc/attnbench-out: ")
    if os.geteuid() != 0:  # root may write anywhere
        read_only = tmp_path / "read_only"
        read_only.mkdir(mode=0o500)
        status, _, error = run_main(capsys, "explain", "--out", str(read_only))
        assert status == 1
        assert error == f"attnbench explain: cannot write in the output folder {read_only}: Permission denied"


def test_report_without_results_is_one_line(capsys, tmp_path):
    status, _, error = run_main(capsys, "report", "--results", str(tmp_path / "none"), "--out", str(tmp_path / "r"))
    assert status == 1
    assert error.startswith("attnbench report: ") and str(tmp_path / "none") in error


def test_c_extension_missing_says_how_to_rebuild(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "kernels._attention_c", None)  # as if never built
    monkeypatch.delitem(sys.modules, "kernels.c_tiled", raising=False)
    status, _, error = run_main(capsys, "timing", "--kernel", "c_tiled", "--seq-len", "16", "--repeat", "1")
    assert status == 1
    assert error.startswith("attnbench timing: the C extension kernels._attention_c cannot be imported")
    assert "`make install`" in error and "csrc/build_attention.py" in error


def test_a_genuine_bug_keeps_its_traceback(monkeypatch):
    def broken(args):
        raise KeyError("a bug")

    monkeypatch.setattr(cli, "cmd_list", broken)
    with pytest.raises(KeyError, match="a bug"):
        cli.main(["list"])


@pytest.mark.parametrize("argv, env", [
    (["timing", "--seq-len", "-5"], {}),
    (["timing", "--kernel", "flash", "--seq-len", "8"], {}),
    (["verify"], {"ATTNBENCH_THREADS": "abc"}),
    (["explain", "--out", "/proc/attnbench-out"], {}),
])
def test_python_m_kernels_prints_no_traceback(argv, env):
    result = subprocess.run([sys.executable, "-m", "kernels", *argv], capture_output=True, text=True,
                            env={**os.environ, **env}, cwd=tempfile.gettempdir())
    assert result.returncode in (1, 2), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("attnbench")
