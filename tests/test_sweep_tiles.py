"""csrc/sweep_tiles.py: its timer runs a given build of the C extension in a fresh process."""
import importlib.util
import math
import statistics


def test_time_build_measures_the_in_place_extension(monkeypatch, project_root):
    # as for `python csrc/sweep_tiles.py`, whose own directory Python puts on sys.path;
    # the spawned timer process inherits the path, and imports the script from it
    monkeypatch.syspath_prepend(str(project_root / "csrc"))
    import sweep_tiles

    # the extension already built in place: nothing is compiled
    extension = importlib.util.find_spec("kernels._attention_c").origin
    full, causal = sweep_tiles.time_build(extension, "float32", heads=1, n=128)
    # fractions of the FMA peak, one per pair of calls: positive and finite, their median
    # not far past 1 (a call of 128 rows, timed beside a loop of as many flops, is no faster
    # than the loop).  One pair lasts ~50 us, and a preemption in either call moves it by
    # any factor (2.2 seen beside 0.47-0.49), so the bound is on the median, as the sweep
    # reads them.
    for fractions in (full, causal):
        assert len(fractions) == sweep_tiles.PAIRS, fractions
        assert all(math.isfinite(f) and f > 0 for f in fractions), fractions
        assert statistics.median(fractions) < 1.5, fractions
