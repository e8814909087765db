"""What the command line does when a user gets something wrong: one line on stderr, a
non-zero exit status (2 for the command line itself, 1 for a value, path, size or build
it cannot work with), no traceback, nothing large allocated first, and no output folder
half written (``kernels.output.staged``); and what its help and output say."""
import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import pytest

import kernels
from kernels import cli, output, threads
from kernels.models import minilm
from kernels.viz import examples, explain, heatmap

GiB = 2**30
FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "asv_results"


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
    (["timing", "--dtype", "int8"], "argument --dtype: invalid choice: 'int8'"),
    (["--threads", "0", "list"], "argument --threads: must be at least 1, got 0"),
    (["--threads", "-1", "list"], "argument --threads: must be at least 1, got -1"),
    (["--threads", "abc", "list"], "argument --threads: 'abc' is not a whole number"),
    (["list", "--threads", "0"], "argument --threads: must be at least 1, got 0"),
    (["timing", "--seq-len", "8", "--threads", "abc"], "argument --threads: 'abc' is not a whole number"),
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


def subcommands():
    """{name: parser} of every subcommand."""
    group = next(action for action in cli._parser()._actions if isinstance(action, argparse._SubParsersAction))
    return group.choices


REQUIRED = {"explain": ["--out", "x"], "heatmap": ["--text", "x", "--out", "x"]}


@pytest.mark.parametrize("command", ["list", "verify", "timing", "bench", "report", "explain", "heatmap"])
def test_threads_is_accepted_before_and_after_every_command(command):
    assert set(subcommands()) == {"list", "verify", "timing", "bench", "report", "explain", "heatmap"}
    parse = cli._parser().parse_args
    required = REQUIRED.get(command, [])
    assert parse(["--threads", "3", command, *required]).threads == 3
    assert parse([command, *required, "--threads", "2"]).threads == 2
    assert parse(["--threads", "3", command, *required, "--threads", "2"]).threads == 2  # the command's wins
    assert not hasattr(parse([command, *required]), "threads")  # neither: the environment's budget


def test_threads_after_the_command_sets_the_budget(capsys, budget_unchanged):
    status, out, _ = run_main(capsys, "timing", "--threads", "1", "--kernel", "numpy", "--seq-len", "16",
                              "--heads", "1", "--head-dim", "8", "--repeat", "1")
    assert status == 0 and threads.budget() == 1
    assert out.splitlines()[0] == "float32, 1 head, d=8, full, threads: 1 thread, median of 1"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_timing_times_a_16_bit_type_once_per_kernel_named(capsys, dtype):
    """The 16-bit inputs are drawn in float32 and rounded (NumPy draws no 16-bit normals),
    and a kernel named twice is one column."""
    status, out, _ = run_main(capsys, "timing", "--kernel", "c_tiled", "--kernel", "numpy", "--kernel", "c_tiled",
                              "--seq-len", "16", "--heads", "1", "--head-dim", "8", "--repeat", "1", "--dtype", dtype)
    lines = out.splitlines()
    assert status == 0 and lines[0].startswith(f"{dtype}, 1 head, d=8, full,")
    assert lines[1].split() == ["n", "c_tiled", "numpy"] and lines[3].split()[0] == "16"


@pytest.mark.parametrize("seconds, flops, text", [
    (2.69e-3, 1.31e5, "2.69 ms 0.0487 GF/s"), (48.6e-6, 2.1e6, "48.6 µs 43.2 GF/s"),
    (1.5, 3e12, "1.5 s 2,000 GF/s"), (0.25, 2.5e10, "250 ms 100 GF/s")])
def test_timing_gives_three_significant_figures_of_a_time_and_its_rate(seconds, flops, text):
    assert cli._timed(seconds, flops) == text


def test_timing_takes_a_window_and_sinks_and_refuses_a_negative_side(capsys):
    status, out, _ = run_main(capsys, "timing", "--kernel", "numpy", "--seq-len", "16", "--heads", "1",
                              "--head-dim", "8", "--repeat", "1", "--window", "4", "none", "--sinks", "1")
    assert status == 0 and out.splitlines()[0].startswith("float32, 1 head, d=8, window (4, None) + 1 sink,")
    with pytest.raises(cli.UsageError, match="--window: must be at least 0, got -1"):
        cli._parser().parse_args(["timing", "--window", "-1", "0"])


def test_every_option_of_every_command_says_what_it_does_and_its_default():
    defaults = {"--seq-len": "(default: [256, 1024, 4096])", "--heads": "(default: 8)", "--head-dim": "(default: 64)",
                "--dtype": "(default: float32)", "--causal": "(default: False,", "--repeat": "(default: 5)",
                "--results": "(default: .asv/results)"}
    for name, parser in subcommands().items():
        assert parser.description, name
        text = parser.format_help()
        for action in parser._actions:
            assert action.help, (name, action.option_strings)
            option = action.option_strings[-1]
            if option in defaults and name in ("timing", "report"):
                assert defaults[option] in " ".join(text.split()), (name, option)
    timing_kernel = next(a.help for a in subcommands()["timing"]._actions if "--kernel" in a.option_strings)
    assert "default: every registered kernel but naive" in timing_kernel and "65,536" in timing_kernel
    explain_kernel = next(a.help for a in subcommands()["explain"]._actions if "--kernel" in a.option_strings)
    assert f"{examples.RETRIEVAL_QUERIES} queries against {max(examples.RETRIEVAL_SIZES):,} keys" in explain_kernel
    sentence_set = next(a.help for a in subcommands()["heatmap"]._actions if "--sentence-set" in a.option_strings)
    assert sentence_set == ("also measure the heads over the 30 bundled sentences, ablate each head, and hold "
                            "them against the 2019 papers (about 5 minutes)")


@pytest.mark.parametrize("number, noun, text", [(1, "kernel", "1 kernel"), (0, "head", "0 heads"),
                                                (8, "head", "8 heads"), (1000, "case", "1,000 cases")])
def test_counts_are_singular_for_one(number, noun, text):
    assert cli._count(number, noun) == text


def test_verify_summary_counts_one_kernel_in_the_singular(capsys, monkeypatch):
    monkeypatch.setattr(cli.harness, "verify", lambda names: iter(()))
    status, out, _ = run_main(capsys, "verify", "--kernel", "numpy")
    assert status == 0
    assert f"(1 kernel × {len(cli.harness.CASES)} cases × {len(cli.harness.DTYPES)} dtypes; threads: " in out


def test_timing_says_when_it_leaves_naive_out(capsys, monkeypatch):
    monkeypatch.setattr(cli, "KERNELS", {name: kernels.KERNELS[name] for name in ("naive", "numpy")})
    argv = ["timing", "--seq-len", "16", "--heads", "1", "--head-dim", "8", "--repeat", "1"]
    status, out, _ = run_main(capsys, *argv)
    assert status == 0 and out.splitlines()[1].split() == ["n", "numpy"]
    assert out.splitlines()[-1] == ("naive left out (pure-Python loops, about a second a call at its size cap "
                                    "B·n_q·n_k ≤ 65,536, so n ≤ 256 at 1 head); --kernel naive to include it")
    status, out, _ = run_main(capsys, *argv, "--kernel", "numpy")
    assert status == 0 and "left out" not in out
    status, out, _ = run_main(capsys, *argv[:3], "--heads", "8", *argv[5:])
    assert "so n ≤ 90 at 8 heads)" in out.splitlines()[-1]


def test_the_kernel_list_stands_on_its_own(capsys):
    status, out, _ = run_main(capsys, "list")
    assert status == 0
    assert "seed" not in out and "§" not in out
    assert "naive" in out and "in pure Python loops" in out


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
    assert "n/a: numpy at n=8192: kernel 'numpy' needs" in out and "the tiled kernels (numba_tiled, c_tiled) hold none" in out


def test_timing_of_naive_above_its_cap_is_one_line(capsys):
    status, _, error = run_main(capsys, "timing", "--kernel", "naive", "--seq-len", "1000")
    assert status == 1 and "kernel 'naive' is capped at" in error


@pytest.fixture
def model_installed(monkeypatch):
    """As if all-MiniLM-L6-v2 were installed (the folder check comes after the model's)."""
    monkeypatch.setattr(minilm, "model_folder", lambda: pathlib.Path("model"))


@pytest.mark.usefixtures("model_installed")
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
    assert error == f"attnbench report: no asv results folder at {tmp_path / 'none'} (run `make bench` first)"
    assert not (tmp_path / "r").exists()  # made to check it, removed again
    (tmp_path / "empty").mkdir()
    status, _, error = run_main(capsys, "report", "--results", str(tmp_path / "empty"), "--out", str(tmp_path / "r"))
    assert status == 1 and error.endswith("run `make bench` first)")
    assert not (tmp_path / "r").exists()


# -- no half-written output folder -------------------------------------------------------


def folder_state(folder):
    """{relative path: bytes} of every file under ``folder``, hidden ones included."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


@pytest.fixture
def old_output(tmp_path):
    """An output folder that already holds an earlier run's files and one of the user's."""
    folder = tmp_path / "out"
    (folder / "sub").mkdir(parents=True)
    (folder / "README.md").write_text("earlier run")
    (folder / "sub" / "figure.png").write_bytes(b"earlier figure")
    (folder / "notes.txt").write_text("the user's own")
    return folder


def test_staged_outputs_replace_their_namesakes_and_leave_the_rest(old_output):
    with output.staged(old_output) as staging:
        assert staging.folder.parent == old_output and staging.folder.name.startswith(".")
        output.write_text(staging.folder / "README.md", "this run")
        (staging.folder / "sub").mkdir()
        (staging.folder / "sub" / "figure.png").write_bytes(b"new figure")
        (staging.folder / "deep" / "er").mkdir(parents=True)
        (staging.folder / "deep" / "er" / "table.csv").write_text("a,b")
        assert folder_state(old_output)["README.md"] == b"earlier run"  # nothing moved yet
        assert staging.final(staging.folder / "sub" / "figure.png") == old_output / "sub" / "figure.png"
    assert folder_state(old_output) == {"README.md": b"this run", "sub/figure.png": b"new figure",
                                        "deep/er/table.csv": b"a,b", "notes.txt": b"the user's own"}


@pytest.mark.parametrize("interrupt", [ValueError("a failure"), KeyboardInterrupt()])
def test_a_failed_staged_command_leaves_the_folder_as_it_was(old_output, interrupt):
    before = folder_state(old_output)
    with pytest.raises(type(interrupt)):
        with output.staged(old_output) as staging:
            output.write_text(staging.folder / "README.md", "half a run")
            raise interrupt
    assert folder_state(old_output) == before
    assert sorted(path.name for path in old_output.iterdir()) == ["README.md", "notes.txt", "sub"]


def test_a_failed_staged_command_removes_the_folders_it_made(tmp_path):
    target = tmp_path / "made" / "for" / "this"
    created = output.missing_folders(target)
    assert created == [target, target.parent, target.parent.parent]
    target.mkdir(parents=True)
    with pytest.raises(ValueError):
        with output.staged(target, created=created) as staging:
            (staging.folder / "figure.png").write_bytes(b"half")
            raise ValueError("a failure")
    assert list(tmp_path.iterdir()) == []


def test_explain_refuses_a_kernel_that_cannot_run_the_page_before_making_anything(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(explain, "write_explanation", lambda *args, **kwargs: pytest.fail("computed"))
    out = tmp_path / "page"
    status, out_text, error = run_main(capsys, "explain", "--out", str(out), "--kernel", "naive")
    assert status == 1 and out_text == ""
    # the page's examples are in float64: the peers that compute it below its precision cannot
    able = ", ".join(name for name, record in kernels.KERNELS.items()
                     if name != "naive" and not record.refusal("float64"))
    assert error == ("attnbench explain: kernel 'naive' cannot compute every example of the page: the "
                     "soft-against-hard retrieval timing at N = 4,000 stored items (1·64·4000 = 256,000 scores) "
                     f"is above its size cap, B·n_q·n_k ≤ 65,536; kernels that can: {able}")
    assert not out.exists()


@pytest.mark.parametrize("peer", ["onnxruntime_attention", "openvino_sdpa", "jax_attention"])
def test_explain_refuses_a_peer_without_float64_saying_why(capsys, tmp_path, peer):
    if peer not in kernels.KERNELS:
        pytest.skip(f"{peer} is not installed (make peers)")
    status, _, error = run_main(capsys, "explain", "--out", str(tmp_path / "page"), "--kernel", peer)
    assert status == 1
    assert error.startswith(f"attnbench explain: kernel '{peer}' cannot compute every example of the page: "
                            f"the 4-token example (1·4·4 = 16 scores) is in float64, and "
                            f"{kernels.KERNELS[peer].refusal('float64')}")
    assert "; kernels that can: numpy, numba_tiled, c_tiled" in error
    assert not (tmp_path / "page").exists()


def half_then_fail(out_dir, **_):
    """A writer that fails half-way, as ``explain --kernel naive`` did at its 8th figure."""
    output.write_text(pathlib.Path(out_dir) / "README.md", "half a page")
    (pathlib.Path(out_dir) / "figure.png").write_bytes(b"a figure")
    raise ValueError("failed half-way")


@pytest.mark.parametrize("existed", [False, True])
def test_a_failed_explain_leaves_no_half_written_folder(capsys, tmp_path, monkeypatch, old_output, existed):
    monkeypatch.setattr(explain, "write_explanation", half_then_fail)
    out = old_output if existed else tmp_path / "new" / "page"
    before = folder_state(out) if existed else None
    status, _, error = run_main(capsys, "explain", "--out", str(out))
    assert status == 1 and error == "attnbench explain: failed half-way"
    if existed:
        assert folder_state(out) == before and len(list(out.iterdir())) == 3
    else:
        assert not (tmp_path / "new").exists()


def test_explain_moves_the_page_into_place_once_written(capsys, monkeypatch, old_output):
    def page(out_dir, *, kernel):
        assert out_dir.parent == old_output and out_dir.name.startswith(".attnbench-staging-")
        (out_dir / "figure.png").write_bytes(kernel.encode())
        return output.write_text(out_dir / "README.md", "the page")

    monkeypatch.setattr(explain, "write_explanation", page)
    status, out, _ = run_main(capsys, "explain", "--out", str(old_output), "--kernel", "numpy")
    assert status == 0 and out == f"wrote {old_output / 'README.md'}\n"
    assert folder_state(old_output) == {"README.md": b"the page", "figure.png": b"numpy",
                                        "sub/figure.png": b"earlier figure", "notes.txt": b"the user's own"}


def test_a_failed_report_leaves_the_existing_reports_as_they_were(capsys, monkeypatch, old_output):
    import kernels.report

    monkeypatch.setattr(kernels.report, "write_report", lambda results, out_dir, **_: half_then_fail(out_dir))
    before = folder_state(old_output)
    status, _, error = run_main(capsys, "report", "--results", str(FIXTURE), "--out", str(old_output))
    assert status == 1 and error == "attnbench report: failed half-way"
    assert folder_state(old_output) == before and len(list(old_output.iterdir())) == 3


def test_the_report_replaces_files_one_by_one_and_names_kept_files_where_they_land(capsys, old_output):
    broken = old_output / "machines" / "testbox" / "c0ffee12-broken.json"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"commit_hash": ')
    status, out, _ = run_main(capsys, "report", "--results", str(FIXTURE), "--out", str(old_output))
    assert status == 0 and out == f"wrote {old_output / 'REPORT.md'}\n"
    report = (old_output / "REPORT.md").read_text()
    assert f"{broken}: not valid JSON" in report and ".attnbench-staging" not in report
    after = folder_state(old_output)
    assert after["README.md"] == b"earlier run" and after["notes.txt"] == b"the user's own"
    assert after["machines/testbox/c0ffee12-broken.json"] == b'{"commit_hash": '
    assert any(name.endswith(".png") for name in after) and any(name.endswith(".csv") for name in after)
    assert not [path for path in old_output.iterdir() if path.name.startswith(".")]


# -- heatmap: text, then model, then folder --------------------------------------------------


def test_heatmap_refuses_a_blank_text_before_anything_else(capsys, tmp_path, a_file):
    status, out, error = run_main(capsys, "heatmap", "--text", "  \n ", "--out", str(a_file / "sub"))
    assert status == 1 and out == ""
    assert error.startswith("attnbench heatmap: the text is empty")


def test_heatmap_without_the_model_is_one_line_and_makes_no_folder(capsys, tmp_path, monkeypatch):
    def missing():
        raise minilm.ModelNotInstalled("all-MiniLM-L6-v2 is not installed:\nrun `make model`")

    monkeypatch.setattr(minilm, "model_folder", missing)
    monkeypatch.setattr(heatmap, "write_heatmap", lambda *args, **kwargs: pytest.fail("written"))
    status, out, error = run_main(capsys, "heatmap", "--text", "The cat sat", "--out", str(tmp_path / "h"))
    assert status == 1 and out == ""
    assert error == "attnbench heatmap: all-MiniLM-L6-v2 is not installed: run `make model`"
    assert not (tmp_path / "h").exists()


@pytest.mark.usefixtures("model_installed")
@pytest.mark.parametrize("sentence_set", [False, True])
def test_heatmap_writes_through_a_staging_folder_with_progress_on_stderr(capsys, tmp_path, monkeypatch,
                                                                         sentence_set):
    calls = []

    def write(text, out_dir, **kwargs):
        calls.append((text, out_dir, kwargs))
        kwargs["progress"]("maps drawn\n(1 of 2)")
        return output.write_text(out_dir / "summary.md", "summary")

    monkeypatch.setattr(heatmap, "write_heatmap", write)
    out = tmp_path / "h"
    assert cli.main(["heatmap", "--text", "The cat sat", "--out", str(out), "--kernel", "numpy"]
                    + ["--sentence-set"] * sentence_set) == 0
    captured = capsys.readouterr()
    assert captured.out == f"wrote {out / 'summary.md'}\n" and captured.err == "maps drawn (1 of 2)\n"
    [(text, staged_dir, kwargs)] = calls
    assert text == "The cat sat" and staged_dir.parent == out and staged_dir.name.startswith(".")
    assert kwargs["kernel"] == "numpy" and kwargs["sentence_set"] is sentence_set
    assert folder_state(out) == {"summary.md": b"summary"}


@pytest.mark.usefixtures("model_installed")
def test_a_failed_heatmap_leaves_no_folder(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(heatmap, "write_heatmap", lambda text, out_dir, **_: half_then_fail(out_dir))
    status, _, error = run_main(capsys, "heatmap", "--text", "The cat sat", "--out", str(tmp_path / "h"))
    assert status == 1 and error == "attnbench heatmap: failed half-way"
    assert list(tmp_path.iterdir()) == []


def test_c_extension_missing_says_how_to_rebuild(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "kernels._attention_c", None)  # as if never built
    monkeypatch.delitem(sys.modules, "kernels.rungs.rung4_c_tiled", raising=False)
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
