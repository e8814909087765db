"""The memory-wall benchmark checks the memory available before it makes anything, and
skips, saying how much it needs, when a machine (or its other work) leaves too little."""
import importlib

import pytest

from kernels import api, bench_spec

GiB = 2**30


@pytest.fixture
def wall(project_root, monkeypatch):
    """(MemoryWall, the list of prepare() calls it made) on a full (not quick) run, with
    prepare() only recorded: these tests are about what happens before it."""
    monkeypatch.syspath_prepend(str(project_root))  # the suite's relative imports, as asv loads it
    module = importlib.import_module("benchmarks.bench_attention")
    prepared = []
    monkeypatch.setattr(bench_spec, "QUICK", False)
    monkeypatch.setattr(module, "prepare", lambda *args, **kwargs: prepared.append(args) or (None, None, None))
    return module.MemoryWall, prepared


def available(monkeypatch, n_bytes):
    monkeypatch.setattr(api, "available_bytes", lambda: n_bytes)


def test_on_a_24_gib_machine_the_tiled_kernels_run_and_numpy_skips_naming_its_scores(wall, monkeypatch):
    memory_wall, prepared = wall
    available(monkeypatch, 22 * GiB)
    memory_wall().setup("c_tiled")
    assert prepared and prepared[0][:3] == ("c_tiled", 1, bench_spec.WALL_SEQ_LEN)
    with pytest.raises(NotImplementedError, match=r"kernel 'numpy' needs 42\.1 GiB .* "
                                                  r"only 22\.0 GiB is available.*scores or mask it holds"):
        memory_wall().setup("numpy")


def test_short_of_memory_even_a_tiled_kernel_skips_before_making_its_inputs(wall, monkeypatch):
    memory_wall, prepared = wall
    available(monkeypatch, 1 * GiB)  # the inputs and output (128 MiB) fit, the headroom does not
    with pytest.raises(NotImplementedError) as skip:
        memory_wall().setup("c_tiled")
    assert not prepared
    message = str(skip.value)
    assert message.startswith("kernel 'c_tiled' needs 2.1 GiB")
    assert "only 1.0 GiB is available" in message and "2.0 GiB of it headroom" in message
