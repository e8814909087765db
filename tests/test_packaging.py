"""A plain (non-editable) `pip install .` ships every file and a working C kernel; the CLI works."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import kernels
from kernels import cli


def test_wheel_ships_every_file_and_subpackage_with_a_working_c_kernel(tmp_path, project_root):
    """A plain (non-editable) install, as asv's own environments get it, from the files
    git tracks (as in a clean clone: no build/ folder or in-place extension to reuse)."""
    tracked = [path for path in subprocess.run(["git", "ls-files"], cwd=project_root, check=True,
                                               capture_output=True, text=True).stdout.splitlines()
               if (project_root / path).is_file()]  # not one deleted in the work tree
    source = tmp_path / "source"
    for path in tracked:
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(project_root / path, source / path)
    # build isolation on purpose: it is the path where a missing build requirement
    # (cffi in pyproject.toml) silently yields a wheel without the extension
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
         str(source)],
        check=True, capture_output=True, text=True,
    )
    assert list((target / "kernels").glob("_attention_c*.so")), "the wheel has no C extension"
    tracked = [path for path in tracked if path.startswith("kernels/")]
    unshipped = [path for path in tracked if not (target / path).is_file()]
    assert not unshipped, f"tracked but not in the wheel: {unshipped}"
    subpackages = sorted(str(path.parent.relative_to(project_root)).replace("/", ".")
                         for path in (project_root / "kernels").rglob("__init__.py"))
    script = (
        "import importlib, sys\n"
        "import kernels, kernels.rungs.rung4_c_tiled as c\n"
        "from kernels import harness\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
        "print(kernels.__file__)\n"
        "bad = [o for o in harness.verify(['c_tiled'], harness.CASES[:16]) if o.status != 'ok']\n"
        "print(c.isa(), len(bad))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(target))
    result = subprocess.run([sys.executable, "-c", script, *subpackages], cwd=tmp_path, env=env,
                            check=True, capture_output=True, text=True)
    location, status = result.stdout.strip().splitlines()
    assert location.startswith(str(target)), location
    assert status.split()[1] == "0", result.stdout


def test_cli_list_names_every_kernel(capsys):
    assert cli.main(["list"]) == 0
    listed = capsys.readouterr().out
    for name, record in kernels.KERNELS.items():
        assert name in listed and record.memory_class in listed


def test_cli_verify_passes_and_fails_with_status(capsys, monkeypatch):
    assert cli.main(["verify", "--kernel", "numpy"]) == 0
    assert " 0 failed" in capsys.readouterr().out

    def zeros(q, k, v, out, causal, scale, band=None):
        out[...] = 0.0

    monkeypatch.setattr(kernels.KERNELS["numpy"].implementation, "run", zeros)
    assert cli.main(["verify", "--kernel", "numpy"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_console_script_is_python_m_kernels():
    exe = pathlib.Path(sys.executable).with_name("attnbench")
    if not exe.exists():
        pytest.skip("console script not installed in this environment")
    result = subprocess.run([str(exe), "list"], check=True, capture_output=True, text=True)
    assert "c_tiled" in result.stdout
