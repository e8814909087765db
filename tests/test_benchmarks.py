"""The asv suite loads and the memory measurement it reports is right."""
import pathlib
import shutil
import subprocess
import sys

import numpy as np

from kernels.memory import peak_extra_bytes

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_peak_extra_bytes_sees_a_known_allocation():
    size = 100 * 2**20
    measured = peak_extra_bytes(lambda: np.ones(size // 8))
    assert abs(measured - size) <= 0.1 * size, measured


def test_peak_extra_bytes_of_a_tiled_kernel_is_small_and_of_numpy_is_the_scores():
    import kernels

    q = np.random.default_rng(0).standard_normal((1, 4096, 64), dtype=np.float32)
    scores = 4096 * 4096 * 4
    kernels.attention(q, q, q, kernel="numpy")
    assert peak_extra_bytes(lambda: kernels.attention(q, q, q, kernel="numpy")) >= 0.9 * scores
    kernels.attention(q, q, q, kernel="c_tiled")
    assert peak_extra_bytes(lambda: kernels.attention(q, q, q, kernel="c_tiled")) < 0.1 * scores


def test_asv_check_finds_no_problems():
    asv = shutil.which("asv", path=str(pathlib.Path(sys.executable).parent))
    assert asv, "asv is installed with the bench extra"
    result = subprocess.run([asv, "check", "--python=same"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0 and "No problems found" in result.stdout, result.stdout + result.stderr
