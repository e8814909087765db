"""A figure's spread: Measured, derived ratios, the calibration's verdicts, and the goals'."""
import json
import math
import pickle

import numpy as np
import pytest

from kernels import calibration
from kernels.output import interval, ratio, text
from kernels.report.goals import WITHIN_NOISE, Goal
from kernels.report.trust import agree
from kernels.spread import Measured, asv_samples, measured, quotient


def test_measured_is_its_median_with_quartiles():
    figure = measured([5.0, 1.0, 3.0, 2.0, 4.0, math.nan])
    assert (float(figure), figure.low, figure.high, figure.n) == (3.0, 2.0, 4.0, 5)
    assert figure * 2 == 6.0 and not isinstance(figure * 2, Measured)  # arithmetic drops the spread
    assert pickle.loads(pickle.dumps(figure)).high == 4.0
    assert math.isnan(measured([math.nan]))


def test_a_quotient_spans_the_extreme_ratios_of_both_ranges():
    time = Measured(2.0, 1.5, 2.5, 7)
    throughput = quotient(10.0, time)  # 10 / [1.5, 2.5]: the quartiles swap over
    assert (float(throughput), throughput.low, throughput.high, throughput.n) == (5.0, 4.0, 10 / 1.5, 7)
    both = quotient(Measured(4.0, 3.0, 5.0, 3), time)
    assert (both.low, both.high, both.n) == (3.0 / 2.5, 5.0 / 1.5, 3)
    assert type(quotient(4.0, 2.0)) is float
    assert quotient(time, time) == 1.0 and not isinstance(quotient(time, time), Measured)  # no spread against itself
    assert isinstance(ratio(Measured(1.0, 0.9, 1.1, 5), 2.0), Measured)
    assert math.isnan(ratio(Measured(1.0, 0.9, 1.1, 5), 0.0))


def test_a_table_cell_shows_half_the_interquartile_range():
    assert text(Measured(1.19, 1.15, 1.23, 7), lambda v: f"{v:.2f}×") == "1.19× ±3%"
    assert text(Measured(1.19), lambda v: f"{v:.2f}×") == "1.19×"  # one sample: no spread to show
    assert interval(Measured(1.19, 1.15, 1.23, 7), lambda v: f"{v:.2f}") == "1.15–1.23"
    assert interval(2.0, str) == "one sample" and interval(math.nan, str) == "n/a"


def test_asv_samples_is_what_asv_takes_as_samples():
    """asv's runner takes a result carrying ``samples`` and ``number`` as a timing's."""
    result = json.loads(json.dumps(asv_samples(np.array([1, 2], dtype=np.float32))))
    assert result == {"samples": [1.0, 2.0], "number": 1}


@pytest.mark.parametrize("figure, verdict", [
    (Measured(1.3, 1.25, 1.35, 7), "met"),
    (Measured(1.1, 1.05, 1.15, 7), "not met"),
    (Measured(1.19, 1.15, 1.23, 7), WITHIN_NOISE),   # the 1.19 against 1.2
    (Measured(1.21, 1.15, 1.23, 7), WITHIN_NOISE),   # the median over, the range not
    (1.19, "not met"),                               # one sample: no range to hold the target
])
def test_goals_have_three_verdicts(figure, verdict):
    assert Goal("x", lambda run: figure, 1.2, True, "").verdict(figure, None) == verdict
    flipped = {"met": "not met", "not met": "met"}.get(verdict, verdict)
    assert Goal("x", lambda run: figure, 1.2, False, "").verdict(figure, None) == flipped


def test_agreement_is_overlapping_ranges():
    assert agree(Measured(100, 95, 105, 5), Measured(108, 104, 110, 5)) is True
    assert agree(Measured(100, 95, 99, 5), Measured(108, 104, 110, 5)) is False
    assert agree(4e9 / 0.04, 1e11) is True  # a figure derived from a time, rounding aside
    assert math.isnan(agree(math.nan, 1.0))


def calibration_lines(*rows):
    return "".join(json.dumps({"label": label, "phase": phase, "at": i,
                               "rates": {"gemm_gflops": gemm, "read_gbs": read}}) + "\n"
                   for i, (label, phase, gemm, read) in enumerate(rows))


def test_calibration_flags_the_classes_run_more_than_a_tenth_slow(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(calibration_lines(("A", "before", 100, 10), ("A", "after", 95, 10),
                                      ("B", "before", 100, 8.5), ("B", "after", 100, 10),
                                      ("C", "before", 89, 10)) + "{cut short\n")
    calibrations = calibration.read_calibration(path)
    assert len(calibrations) == 5  # the interrupted line skipped
    assert calibration.disturbed(calibrations) == pytest.approx({"B": 0.85, "C": 0.89})
    assert calibration.read_calibration(tmp_path / "absent.jsonl") == []
    # B measured again (RESUME=1) on a quiet machine: its latest calibrations judge it
    path.write_text(calibration_lines(("A", "before", 100, 10), ("B", "before", 100, 8.5),
                                      ("B", "after", 100, 10), ("B", "before", 99, 10), ("B", "after", 100, 9.9)))
    assert calibration.disturbed(calibration.read_calibration(path)) == {}


def test_calibration_records_a_line_of_both_workloads(tmp_path, monkeypatch):
    monkeypatch.setattr(calibration, "READ_BYTES", 2**20)
    monkeypatch.setattr(calibration, "GEMM_N", 64)
    path = tmp_path / "deep" / "c.jsonl"
    calibration.record(path, "bench_x.Y", "before")
    calibration.record(path, "bench_x.Y", "after")
    first, second = calibration.read_calibration(path)
    assert (first.label, first.phase, second.phase) == ("bench_x.Y", "before", "after")
    assert all(rate > 0 and math.isfinite(rate) for c in (first, second) for rate in c.rates.values())
