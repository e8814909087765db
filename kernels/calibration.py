"""How fast the machine was while each benchmark class ran: a fixed workload timed before
and after it, so that the report can tell a disturbed measurement from a result.

    python -m kernels.calibration FILE LABEL PHASE   # appends one JSON line to FILE
    read_calibration(FILE) -> [Calibration]; disturbed(calibrations) -> {label: slowdown}

``make bench`` runs it before and after each benchmark class (LABEL the class, PHASE
"before" or "after"), into ``<commit8>-calibration.jsonl`` beside the run's asv results.
The workload, about half a second: a float32 gemm of 1024² on NumPy's BLAS threads
(compute, and a core taken by another process) and a streaming sum of 256 MiB on one
thread (memory bandwidth, and a neighbour's traffic), each the median of 7 timings.  A
class ran disturbed when either figure, before or after it, fell more than
``DISTURBED_BELOW`` under the best the run saw: the load that slowed the workload was
there while the class measured.
"""
import json
import math
import pathlib
import sys
import time
from dataclasses import dataclass

import numpy as np

GEMM_N = 1024
READ_BYTES = 256 * 2**20
REPEATS = 7
DISTURBED_BELOW = 0.9   # a figure under 90% of the run's best: the machine ran >10% slower
WORKLOADS = {"gemm_gflops": "float32 gemm, GFLOP/s", "read_gbs": "streaming read, GB/s"}


@dataclass(frozen=True)
class Calibration:
    """One timing of the workload: ``label`` (a benchmark class), ``phase`` ("before" or
    "after"), when, and each workload's median rate (``WORKLOADS`` keys)."""

    label: str
    phase: str
    at: float
    rates: dict


def _median_rate(amount, call):
    call()  # warm-up: threads, pages
    seconds = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return amount / float(np.median(seconds)) / 1e9


def measure():
    """{workload: median rate} of the fixed workload, now."""
    a = np.random.default_rng(0).standard_normal((GEMM_N, GEMM_N), dtype=np.float32)
    values = np.ones(READ_BYTES // 8)
    return {"gemm_gflops": _median_rate(2.0 * GEMM_N**3, lambda: a @ a),
            "read_gbs": _median_rate(values.nbytes, values.sum)}


def record(path, label, phase):
    """Measure and append one line to ``path`` (created with its folder if needed)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"label": label, "phase": phase, "at": time.time(), "rates": measure()})
    with open(path, "a", encoding="utf-8") as file:
        file.write(line + "\n")


def read_calibration(path):
    """The calibrations in ``path``, in order; [] when there is no such file.  A line that
    is not a calibration (an interrupted write) is skipped."""
    path = pathlib.Path(path)
    if not path.is_file():
        return []
    calibrations = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            data = json.loads(line)
            calibrations.append(Calibration(str(data["label"]), str(data["phase"]), float(data["at"]),
                                            {key: float(data["rates"][key]) for key in WORKLOADS}))
        except (ValueError, KeyError, TypeError):
            continue
    return calibrations


def best_rates(calibrations):
    """{workload: the best rate any calibration of the run saw}."""
    return {key: max((c.rates[key] for c in calibrations), default=math.nan) for key in WORKLOADS}


def slowdowns(calibrations):
    """{label: the lowest fraction of the run's best rate, over both workloads and both
    phases}: 1.0 for a class measured on a machine as fast as it ever was in this run.
    A class measured again (``RESUME=1``, ``BENCH=``) is judged by its latest calibrations,
    those around the results the file now holds."""
    best, lowest = best_rates(calibrations), {}
    for c in latest(calibrations):
        fraction = min(c.rates[key] / best[key] for key in WORKLOADS)
        lowest[c.label] = min(fraction, lowest.get(c.label, 1.0))
    return lowest


def latest(calibrations):
    """The last calibration of each (label, phase): those around the results kept now."""
    return list({(c.label, c.phase): c for c in calibrations}.values())


def disturbed(calibrations):
    """{label: its lowest fraction of the best} for the classes that ran disturbed."""
    return {label: fraction for label, fraction in slowdowns(calibrations).items()
            if fraction < DISTURBED_BELOW}


if __name__ == "__main__":
    record(*sys.argv[1:4])
