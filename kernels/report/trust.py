"""How far the run's figures can be trusted: was the machine disturbed while a benchmark
class ran (``kernels.calibration``), and do two benchmarks that measure the same thing
agree within their spreads?

Load on a shared machine only ever slows a measurement down, so of two figures of one
configuration that disagree, the lower is the disturbed one; and a decode step cannot read
its cache faster than a plain read of as many bytes, timed beside it (the same level of
the caches, the same moment), so a step "above the read" means the read is not the roof.
"""
import math

from .. import bench_spec as spec
from ..calibration import (DISTURBED_BELOW, WORKLOADS, best_rates, disturbed, latest, read_calibration,
                           slowdowns)
from ..output import Column, Table, fmt_gflops, fmt_percent, missing, text
from ..spread import bounds
from .decode import cache_read_fraction
from .document import Section
from .multi_head import headline_shape, multihead_gflops
from .thread_scaling import thread_counts, thread_gflops


def disturbed_classes(run):
    """{benchmark class: the lowest fraction of the run's best calibration} for the classes
    measured while the machine ran more than 10% slower than its best; {} without
    calibrations (a run made by ``asv run`` directly)."""
    return disturbed(read_calibration(run.calibration_path))


def notice(run, classes):
    """The warning a section gets when it read a disturbed class's figures; None if none."""
    hit = {label: fraction for label, fraction in disturbed_classes(run).items() if label in classes}
    if not hit:
        return None
    listed = ", ".join(f"`{label}` ({1 - fraction:.0%} slower)" for label, fraction in sorted(hit.items()))
    return (f"> **Measured on a disturbed machine:** {listed} ran while the calibration workload ran more "
            f"than {1 - DISTURBED_BELOW:.0%} under the run's best; read these figures as lower bounds, not "
            "as the kernels' speed (see [Trust](#trust-disturbance-and-agreement)).")


def agree(a, b):
    """True when the interquartile ranges of a and b overlap (a single sample is its own
    range); NaN when either is missing."""
    if missing(a) or missing(b):
        return math.nan
    (a_low, a_high), (b_low, b_high) = bounds(a), bounds(b)
    slack = 1e-9 * max(abs(a_high), abs(b_high))  # one figure derived from a time: rounding
    return a_low <= b_high + slack and b_low <= a_high + slack


def _agreement_rows(run):
    """[what, figure A, figure B, verdict] for each pair of benchmarks measuring one configuration."""
    rows = []
    every = thread_counts(run)[1]
    for kernel in spec.TILED:
        threads, multihead = thread_gflops(run, kernel, every), multihead_gflops(run, kernel, spec.THREADS_DTYPE)
        verdict = agree(threads, multihead)
        if verdict is False:
            verdict = "`Threads` disturbed (lower)" if threads < multihead else "`MultiHead` disturbed (lower)"
        rows.append([f"{kernel} GFLOP/s, {spec.THREADS_DTYPE}, full, all threads: `Threads` against `MultiHead`",
                     text(threads, fmt_gflops), text(multihead, fmt_gflops), _verdict(verdict)])
    for kernel in spec.TILED:
        # not the machine's streaming read, measured apart over 2 GiB: a cache of 256 MiB
        # sits in the L3 of a Xeon with 480 MiB of it, and is read faster than memory
        fraction = cache_read_fraction(run, kernel)
        verdict = math.nan if missing(fraction) else bounds(fraction)[0] <= 1.0
        if verdict is False:
            verdict = "the read loop is not this machine's roof"
        rows.append([f"{kernel} cached decode read rate ≤ a read of as many bytes, side by side",
                     text(fraction, fmt_percent), "≤ 100%", _verdict(verdict)])
    return rows


def _lowest(calibrations, key):
    return min(c.rates[key] for c in latest(calibrations))


def _verdict(value):
    if value is True:
        return "agree"
    return "n/a" if missing(value) else value


def trust(run):
    calibrations = read_calibration(run.calibration_path)
    blocks = []
    if calibrations:
        best, lowest, flagged = best_rates(calibrations), slowdowns(calibrations), disturbed(calibrations)
        rows = [[label, fraction, "disturbed" if label in flagged else "quiet"]
                for label, fraction in sorted(lowest.items())]
        blocks += [
            "Before and after each benchmark class, `make bench` timed a fixed workload ("
            + " and ".join(WORKLOADS.values()) + f"; best this run: {best['gemm_gflops']:.1f} GFLOP/s and "
            f"{best['read_gbs']:.1f} GB/s). A class ran disturbed when either figure fell under "
            f"{DISTURBED_BELOW:.0%} of that best; the sections reading its figures say so. The run's drift: "
            + " and ".join(f"the {name.split(',')[0]} ran at {_lowest(calibrations, key) / best[key]:.0%}–100% "
                           "of its best" for key, name in WORKLOADS.items())
            + f"; {len(flagged)} of {len(rows)} classes ran disturbed.",
            Table("calibration", (Column("class", "benchmark class"),
                                  Column("lowest", "slowest calibration ÷ best", fmt_percent),
                                  Column("state", "machine")), rows),
        ]
    else:
        blocks.append("No calibrations beside these results (they come from `make bench`), so the run's "
                      "drift is unknown.")
    blocks += [
        f"Where two benchmarks measure one configuration ({headline_shape(run)}), their interquartile "
        "ranges must overlap; load only slows a measurement, so the lower of two that do not is the "
        "disturbed one.",
        Table("agreement", (Column("what", "the same configuration"), Column("a", "figure"),
                            Column("b", "against"), Column("verdict", "verdict")), _agreement_rows(run)),
    ]
    return Section("Trust: disturbance and agreement", blocks)
