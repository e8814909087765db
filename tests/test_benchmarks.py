"""The asv suite loads, survives skipped cases, and the memory measurement it reports is right."""
import dataclasses
import inspect
import itertools
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np
import pytest

import kernels
from kernels import bench_spec
from kernels.memory import peak_extra_bytes


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


def test_asv_check_finds_no_problems(project_root):
    asv = shutil.which("asv", path=str(pathlib.Path(sys.executable).parent))
    assert asv, "asv is installed with the bench extra"
    result = subprocess.run([asv, "check", "--python=same"], cwd=project_root, capture_output=True,
                            text=True)
    assert result.returncode == 0 and "No problems found" in result.stdout, result.stdout + result.stderr


def test_setup_and_teardown_hold_on_every_skipped_case(bench_modules, monkeypatch):
    """asv calls teardown after a setup that raised NotImplementedError (a skip), so every
    parameterised class's pair must hold there, and leave the thread budget as it was.
    Every case is made to skip as on a machine without the optional packages: the peer is
    unregistered, the model missing, and inputs refuse to be prepared."""
    from kernels.models import minilm

    def refuse(*args, **kwargs):
        raise NotImplementedError("skipped by the test")

    def model_missing(*args, **kwargs):
        raise minilm.ModelNotInstalled(minilm.INSTALL)

    for peer in bench_spec.PEERS:
        monkeypatch.delitem(kernels.KERNELS, peer, raising=False)
    monkeypatch.setattr(minilm, "load", model_missing)
    budget = kernels.threads.budget()
    # the machine's ceilings and the cache formats' errors run on any machine: nothing of
    # theirs can skip but bfloat16's peak (test_the_bfloat16_peak_skips_naming_the_unit_this_cpu_lacks)
    classes = [cls for module in bench_modules.values()
               for _, cls in inspect.getmembers(module, inspect.isclass)
               if cls.__module__ == module.__name__ and getattr(cls, "params", None)
               and cls.__name__ not in ("Ceilings", "GemmFraction", "TileFraction", "Blas", "CacheFidelity",
                                        "KeyGranularity")]
    assert {"SeqLen", "Threads", "PeerSpeedup", "MemoryWall", "ModelLayer", "InContext"} <= \
        {cls.__name__ for cls in classes}
    for cls in classes:
        for check in ("prepare", "check_runs", "check_fits"):
            monkeypatch.setattr(inspect.getmodule(cls), check, refuse, raising=False)
        for params in itertools.product(*cls.params):
            benchmark = cls()
            with pytest.raises(NotImplementedError):
                benchmark.setup(*params)
            if hasattr(benchmark, "teardown"):
                benchmark.teardown(*params)
            assert kernels.threads.budget() == budget, (cls.__name__, params)


def test_the_bfloat16_peak_skips_naming_the_unit_this_cpu_lacks(bench_modules):
    """Ceilings' bfloat16 cases need AVX512-BF16; elsewhere asv records a skip whose reason
    names it (the rest of the class runs on any CPU; PeakFraction reads bfloat16 against
    float32's loop there: test_peak_fraction_times_a_rung_beside_its_roofs_loop)."""
    from kernels import ceilings

    reason = ceilings.missing_unit("bfloat16")
    if reason is None:
        pytest.skip("this CPU has AVX512-BF16: its bfloat16 peak is measured, not skipped")
    benchmark, budget = bench_modules["bench_machine"].Ceilings(), kernels.threads.budget()
    with pytest.raises(NotImplementedError, match="^no AVX512-BF16 on this CPU$"):
        benchmark.setup("bfloat16", 1)
    benchmark.teardown("bfloat16", 1)
    assert kernels.threads.budget() == budget


@pytest.mark.parametrize("kernel, dtype, causal", [("c_tiled", "bfloat16", False), ("numba_tiled", "float16", True),
                                                   ("numpy", "float64", False)])
def test_peak_fraction_times_a_rung_beside_its_roofs_loop(bench_modules, monkeypatch, kernel, dtype, causal):
    """Two side-by-side rounds on a small shape: a fraction of the roof of the type's products
    (float16's, and bfloat16's without the unit, float32's FMAs), finite, above 0 and under
    the roof (1 plus the rounds' noise), on one thread, the budget put back."""
    monkeypatch.setattr(bench_spec, "HEADLINE_SEQ_LEN", 512)
    monkeypatch.setattr(bench_spec, "PEAK_FRACTION_ROUNDS", 2)
    benchmark, budget = bench_modules["bench_machine"].PeakFraction(), kernels.threads.budget()
    threads = budget if kernel == "numpy" else 1
    params = (kernel, dtype, threads, causal)
    try:
        benchmark.setup(*params)
        fractions = benchmark.track_fraction(*params)
    finally:
        benchmark.teardown(*params)
    assert len(fractions["samples"]) == 2 and all(0 < f < 1.5 for f in fractions["samples"]), fractions
    assert kernels.threads.budget() == budget


@pytest.mark.parametrize("ceiling", ["GemmFraction", "TileFraction"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_roof_is_timed_beside_the_peaks_loop(bench_modules, monkeypatch, ceiling, dtype):
    """Two side-by-side rounds, one thread: NumPy's gemm (GemmFraction) or c_tiled's tile
    operations alone (TileFraction, sized to a smaller headline) ÷ the FMA peak of its type,
    each above 0 and under the roof (1 plus the rounds' noise), the budget put back."""
    monkeypatch.setattr(bench_spec, "GEMM_FRACTION_ROUNDS", 2)
    monkeypatch.setattr(bench_spec, "PEAK_FRACTION_ROUNDS", 2)
    monkeypatch.setattr(bench_spec, "GEMM_FRACTION_SETTLE", 0.0)   # one thread: no BLAS workers to outwait
    monkeypatch.setattr(bench_spec, "HEADLINE_SEQ_LEN", 512)
    benchmark, budget = getattr(bench_modules["bench_machine"], ceiling)(), kernels.threads.budget()
    try:
        benchmark.setup(dtype, 1)
        fractions = benchmark.track_fraction(dtype, 1)
    finally:
        benchmark.teardown(dtype, 1)
    assert len(fractions["samples"]) == 2 and all(0 < f < 1.5 for f in fractions["samples"]), fractions
    assert kernels.threads.budget() == budget


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_whole_call_is_timed_beside_its_tile_operations(bench_modules, monkeypatch, dtype):
    """Five side-by-side rounds, one thread, a smaller headline: c_tiled's whole call ÷ its
    tile operations alone, each above 0, their median under their rate (1 plus the rounds'
    noise: the call does their work and packs, writes out and walks the tiles besides; one
    round alone can be disturbed, its loop preempted: 3.5 once, beside CI's sanitizers), the
    budget put back."""
    monkeypatch.setattr(bench_spec, "PEAK_FRACTION_ROUNDS", 5)
    monkeypatch.setattr(bench_spec, "HEADLINE_SEQ_LEN", 512)
    benchmark, budget = bench_modules["bench_machine"].CallOverTiles(), kernels.threads.budget()
    try:
        benchmark.setup(dtype, 1)
        fractions = benchmark.track_fraction(dtype, 1)
    finally:
        benchmark.teardown(dtype, 1)
    samples = fractions["samples"]
    assert len(samples) == 5 and all(f > 0 for f in samples) and statistics.median(samples) < 1.5, fractions
    assert kernels.threads.budget() == budget


def test_peak_fraction_measures_only_the_cases_the_report_reads():
    assert bench_spec.peak_fraction_case("c_tiled", "float16", False, True) is None
    assert "numpy" in bench_spec.peak_fraction_case("numpy", "float32", True, True)
    assert "numpy" in bench_spec.peak_fraction_case("numpy", "bfloat16", True, False)
    assert bench_spec.peak_fraction_case("numpy", "float64", True, False) is None


@pytest.mark.parametrize("kernel", ["c_tiled", "numba_tiled"])
@pytest.mark.parametrize("seq_len", [bench_spec.CALL_COST_CACHE, 4096])
def test_a_decode_steps_read_fraction_is_timed_beside_a_read_of_as_many_bytes(bench_modules, monkeypatch,
                                                                              kernel, seq_len):
    """Rounds of one step and one read of the cache's bytes (4 and 16 MiB, in the last-level
    cache, as the step's are): the step's read rate ÷ the read's, each above 0, their median
    under the roof (1 plus the rounds' noise: a read of a 512 MiB buffer here gave the steps
    of a cache in L3 up to 20; one round alone can be disturbed, a read preempted: 4.9 once)."""
    monkeypatch.setattr(bench_spec, "DECODE_READ_ROUNDS", 5)
    monkeypatch.setattr(bench_spec, "DECODE_SHORT_READ_ROUNDS", 5)
    benchmark = bench_modules["bench_decode"].CachedDecodeReadFraction()
    benchmark.setup(kernel, seq_len)
    fractions = benchmark.track_fraction(kernel, seq_len)
    assert len(fractions["samples"]) == 5 and all(f > 0 for f in fractions["samples"]), fractions
    assert statistics.median(fractions["samples"]) < 1.5, fractions


@pytest.mark.parametrize("shape", bench_spec.PEER_SHAPES)
def test_peer_speedup_measures_an_installed_peer(bench_modules, shape):
    """One side-by-side sample per shape against the first installed peer: a ratio of two
    real timings, and the budget put back afterwards."""
    installed = [peer for peer in bench_spec.PEERS if peer in kernels.KERNELS]
    if not installed:
        pytest.skip("no peer installed (make peers)")
    benchmark, budget = bench_modules["bench_peers"].PeerSpeedup(), kernels.threads.budget()
    params = (installed[0], "c_tiled", shape, 1, "float32")
    try:
        benchmark.setup(*params)
        ratios = benchmark.track_speedup(*params)
    finally:
        benchmark.teardown(*params)
    assert ratios["number"] == 1 and len(ratios["samples"]) == bench_spec.PEER_ROUNDS[shape]
    assert all(np.isfinite(r) and r > 0 for r in ratios["samples"]), ratios
    assert kernels.threads.budget() == budget


def test_side_by_side_settles_each_side_before_timing_it(bench_modules):
    """With ``settle``, each round calls each side untimed for that long, then timed for as
    long, the other side right after (so each is timed after its own calls, not the
    other's), the sides taking turns to go first; the sample is the ratio of the two sides'
    median times.  Without, one call a side a round."""
    calls = []

    def side(name, seconds):
        def call():
            start = time.perf_counter()
            time.sleep(seconds)
            calls.append((name, start, time.perf_counter()))
        return call

    # the baseline's calls sleep 2 ms, the candidate's 0.25 ms: a ratio of 8 (a sleep can
    # overrun on a loaded machine, never fall short: above 1.5 unless the candidate's sleeps
    # overran by a whole millisecond at the median)
    ratios = bench_modules["bench_peers"].side_by_side(side("b", 2e-3), side("c", 2.5e-4), 4, settle=0.01)
    assert len(ratios["samples"]) == 4 and all(1.5 < r < 100 for r in ratios["samples"]), ratios
    blocks = [(name, list(run)) for name, run in itertools.groupby(calls, key=lambda call: call[0])]
    # rounds b c | c b | b c | c b: a round's second side runs on into the next round's first
    assert [name for name, _ in blocks] == ["b", "c", "b", "c", "b"]
    for name, run in blocks[:1] + blocks[-1:]:   # one round's side: 10 ms untimed, 10 ms timed
        # each loop ends with the call that ends past its 10 ms, however long the sleeps
        # overran (the margin: the moments between reading the clock and the first sleep)
        assert run[-1][2] - run[0][1] >= 0.0195 and len(run) >= 2, (name, run)
    plain = []
    bench_modules["bench_peers"].side_by_side(lambda: plain.append("b"), lambda: plain.append("c"), 2)
    assert plain == ["b", "c", "c", "b"]


@pytest.mark.parametrize("context", bench_spec.CONTEXTS)
def test_in_context_measures_and_ends_its_busy_process(bench_modules, monkeypatch, context):
    """One short round of each ratio on c_tiled's tiny call: real timings, a finite ratio,
    the busy process (if any) gone after teardown and the budget put back."""
    monkeypatch.setattr(bench_spec, "CONTEXT_ROUNDS", 1)
    monkeypatch.setitem(bench_spec.CONTEXT_CALLS, "tiny", 3)
    benchmark, budget = bench_modules["bench_context"].InContext(), kernels.threads.budget()
    params = ("c_tiled", "tiny", context)
    try:
        benchmark.setup(*params)
        alone, one_thread = benchmark.track_over_alone(*params), benchmark.track_over_one_thread(*params)
    finally:
        benchmark.teardown(*params)
    # a round each (the BLAS-sleeps child, a fresh process, runs the spec's rounds)
    ratios = alone["samples"] + one_thread["samples"]
    assert alone["samples"] and one_thread["samples"] and all(np.isfinite(r) and r > 0 for r in ratios), ratios
    if context == "busy_process":
        assert benchmark.busy.poll() is not None, "the busy process outlived the benchmark"
    assert kernels.threads.budget() == budget


def test_a_peer_sizing_its_own_threads_skips_below_every_cpu(bench_modules, monkeypatch):
    """A peer whose threads the budget does not reach (as XLA's) is not timed at a budget
    below every CPU, where it would still use them all; at every CPU it runs."""
    own_threads = dataclasses.replace(kernels.KERNELS["numpy"], name="own_threads", honours_budget=False,
                                      threading="its own pool")
    monkeypatch.setitem(kernels.KERNELS, "own_threads", own_threads)
    benchmark, budget = bench_modules["bench_attention"].Threads(), kernels.threads.budget()
    with pytest.raises(NotImplementedError, match="own_threads at 1 thread.*its own pool"):
        benchmark.setup("own_threads", 1)
    benchmark.teardown("own_threads", 1)
    assert kernels.threads.budget() == budget
    benchmark.use_threads(kernels.threads.available_cpus(), "own_threads")  # every CPU: taken
    benchmark.teardown()
    assert kernels.threads.budget() == budget


ASV_SAMPLES_SUITE = """
from kernels.spread import asv_samples

def track_ratio():
    return asv_samples([1.0, 2.0, 3.0, 4.0, 5.0])

track_ratio.unit = "times"
track_ratio.rounds = 1

def time_sleep():
    import time
    time.sleep(0.001)

time_sleep.repeat, time_sleep.number, time_sleep.rounds = 3, 1, 1
"""


def test_asv_records_the_spread_of_a_track_benchmark_and_the_report_reads_it(tmp_path):
    """The suite's ratios and throughputs keep their rounds' spread through asv itself: a
    track_ benchmark returning ``asv_samples`` is stored with quartiles, which the results
    reader turns into a Measured (asv's quantiles of 1..5: 2, 3, 4)."""
    from kernels.report.results import load_latest_run
    from kernels.spread import Measured

    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "__init__.py").write_text("")
    (tmp_path / "suite" / "bench_spread.py").write_text(ASV_SAMPLES_SUITE)
    (tmp_path / "asv.conf.json").write_text(
        '{"version": 1, "project": "spread", "repo": ".", "benchmark_dir": "suite", '
        '"results_dir": "results", "html_dir": "html", "environment_type": "existing"}')
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
                    "-m", "x"], cwd=tmp_path, check=True)
    asv = [str(pathlib.Path(sys.executable).parent / "asv"), "--config", str(tmp_path / "asv.conf.json")]
    # asv keeps its machines in ~/.asv-machine.json: a home of the test's own, not the user's
    home = {**os.environ, "HOME": str(tmp_path)}
    subprocess.run([*asv, "machine", "--yes", "--machine", "box"], cwd=tmp_path, check=True, capture_output=True,
                   env=home)
    result = subprocess.run([*asv, "run", "--python=same", "--machine", "box", "--set-commit-hash", "HEAD"],
                            cwd=tmp_path, capture_output=True, text=True, env=home)
    assert result.returncode == 0, result.stdout + result.stderr
    run = load_latest_run(tmp_path / "results")
    ratio = run.value("bench_spread.track_ratio")
    assert isinstance(ratio, Measured) and (float(ratio), ratio.low, ratio.high, ratio.n) == (3.0, 2.0, 4.0, 5)
    sleep = run.value("bench_spread.time_sleep")
    # asv stores the quartiles to 5 significant digits, the median in full: equal medians
    # and quartiles (three close samples) may differ in the sixth digit
    slack = 1e-4
    assert isinstance(sleep, Measured) and sleep.n == 3
    assert sleep.low * (1 - slack) <= sleep <= sleep.high * (1 + slack)


@pytest.mark.parametrize("argv, preloaded", [(["benchmark.py", "run_server", "benchmarks", "socket"], True),
                                             (["benchmark.py", "discover", "benchmarks", "out"], False)])
def test_the_suite_preloads_the_kernels_in_asvs_forkserver_only(project_root, argv, preloaded):
    """In asv's forkserver every benchmark is forked from the suite's import, so the rungs'
    modules (and numba_tiled's compiled code) are loaded there once; anywhere else importing
    the suite stays light."""
    code = (f"import sys; sys.argv = {argv!r}; import benchmarks; "
            "print('kernels.rungs.rung3_numba_tiled' in sys.modules, 'kernels.rungs.rung4_c_tiled' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=project_root, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(preloaded)] * 2


@pytest.mark.parametrize("told, peer_loaded", [(None, True), ("1", True), ("0", False)])
def test_the_forkserver_leaves_the_peers_out_when_told(project_root, told, peer_loaded):
    """ATTNBENCH_PRELOAD_PEERS=0 (make bench's, for a class that times no peer): the server
    loads our rungs and no peer's module.  A registered peer whose module is a small stdlib
    one stands in for the real peers, installed or not."""
    code = ("import sys; import kernels; from kernels.registry import Kernel; "
            "kernels.KERNELS['stand_in_peer'] = Kernel('stand_in_peer', 'a peer', 'O(n)', 'colorsys', external=True); "
            "sys.argv = ['benchmark.py', 'run_server', 'benchmarks', 'socket']; import benchmarks; "
            "print('kernels.rungs.rung4_c_tiled' in sys.modules, 'colorsys' in sys.modules)")
    env = {key: value for key, value in os.environ.items() if key != "ATTNBENCH_PRELOAD_PEERS"}
    result = subprocess.run([sys.executable, "-c", code], cwd=project_root, capture_output=True, text=True,
                            env=env if told is None else {**env, "ATTNBENCH_PRELOAD_PEERS": told})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", str(peer_loaded)]
