"""The Machines section: the newest run of each machine side by side, one column each,
and the results kept beside the report that make it possible.

    keep_machine(".asv/results", "reports", "amd-epyc-avx2")   # make bench, after the report
    with_kept_runs(run, "reports")                             # write_report, before the sections

asv keeps each machine's results in a folder of its own (``make bench`` names the machine
after its CPU and ISA, ``kernels.machine_id``), and a results folder lives on the machine
that measured.  So ``make bench`` keeps this machine's newest results file, its
machine.json and the suite's benchmarks.json in ``<out>/machines/`` (itself an asv results
folder, a few small JSON files to commit), one results file per machine; the report reads
that folder beside the results folder and lays the newest run of every machine found in
either side by side.  With one machine only, the section says so in one line.
"""
import dataclasses
import math
import pathlib
import shutil
from dataclasses import dataclass
from typing import Callable

from .. import bench_spec as spec
from ..output import write_whole
from ..machine_id import isa_of
from ..memory import format_bytes
from ..output import Column, Table, fmt_count, fmt_gflops, fmt_percent, fmt_ratio, text
from .ceilings import (NO_BF16_UNIT, blas_name, call_over_tiles, fma_peak, gemm_fraction, has_bf16_dot_product,
                       peak_fraction, tile_fraction)
from .document import Section
from .multi_head import headline_seq_len, multihead_gflops
from .peers import peer_speedup, worst_peer_speedup
from .results import ResultsError, latest_per_machine, load_latest_run
from .side_by_side import numpy_speedup
from .thread_scaling import thread_counts

KEPT = "machines"  # the folder beside REPORT.md holding each machine's kept results


def keep_machine(results_dir, out_dir, machine):
    """Copy ``machine``'s newest results file, as ``<commit8>.json``, its machine.json and
    the suite's benchmarks.json from the asv results folder into ``out_dir``/machines/,
    then remove that machine's older kept results files (other machines' are left alone);
    -> the kept results file.  (asv names a results file after its environment too, which
    for ``--python=same`` is the path of the interpreter that ran it: a kept file names
    the commit only.)  Each file is written whole.  FileNotFoundError when the results
    folder holds no readable run of ``machine``."""
    newest = load_latest_run(results_dir)
    runs = latest_per_machine([newest, *newest.others])
    if machine not in runs:
        raise FileNotFoundError(f"no results of machine {machine!r} in {results_dir} "
                                f"(it holds {', '.join(runs)})")
    source = runs[machine].path
    kept_dir = pathlib.Path(out_dir) / KEPT / machine
    kept_dir.mkdir(parents=True, exist_ok=True)
    kept = kept_dir / f"{runs[machine].commit_hash[:8]}.json"
    for path, copy in ((source, kept), (source.parent / "machine.json", kept_dir / "machine.json"),
                       (pathlib.Path(results_dir) / "benchmarks.json", kept_dir.parent / "benchmarks.json")):
        if path.is_file():
            write_whole(copy, lambda partial, path=path: shutil.copyfile(path, partial))
    for older in kept_dir.glob("*.json"):
        if older.name not in (kept.name, "machine.json"):
            older.unlink()
    return kept


def with_kept_runs(run, out_dir):
    """``run`` carrying every run kept in ``out_dir``/machines/ (``Run.kept``); the files
    there that cannot be read join ``run.unreadable``, named, as the results folder's do."""
    try:
        newest = load_latest_run(pathlib.Path(out_dir) / KEPT)
    except FileNotFoundError:  # nothing kept yet
        return run
    except ResultsError as error:
        return dataclasses.replace(run, unreadable=run.unreadable + (str(error),))
    return dataclasses.replace(run, kept=(newest, *newest.others),
                               unreadable=run.unreadable + newest.unreadable)


@dataclass(frozen=True)
class Figure:
    """One row of the table: ``measure(run)`` (NaN or None when not measured) in ``fmt``."""

    label: str
    measure: Callable
    fmt: Callable = str


@dataclass(frozen=True)
class FigureTable(Table):
    """A Table of one row per figure, each row in its own format (``formats``), so that
    columns can be machines; the CSV holds the raw values, as every Table's does."""

    formats: tuple = ()

    def markdown(self):
        cells = [[row[0], *(text(value, fmt) for value in row[1:])] for row, fmt in zip(self.rows, self.formats)]
        return Table(self.name, self.columns, cells).markdown()


def _number(value):
    """machine.json's numbers are strings ("4"); NaN when absent."""
    return float(value) if value else math.nan


def _all_threads(run):
    return thread_counts(run, spec.PEER_SPEEDUP)[1]


def _c_tiled_over(peer):
    """c_tiled's side-by-side speed over ``peer``, float32, full, all threads."""
    return lambda run: peer_speedup(run, peer, "c_tiled", "full", _all_threads(run), "float32")


def _c_tiled_gflops(run):
    return multihead_gflops(run, "c_tiled", "float32")


def _whole(value):
    return f"{value:.0f}"


def _bf16_peak(run):
    """bfloat16's dot-product peak on every thread, or the words for a machine without the unit."""
    return NO_BF16_UNIT if has_bf16_dot_product(run) is False else fma_peak(run, "bfloat16")


def _gflops_or_words(value):
    return value if isinstance(value, str) else fmt_gflops(value)


HEADLINE = f"float32, full, {spec.HEADS} heads, headline n"
# What each machine is (asv's machine.json, the run's commit): no spread, so a CSV of its own.
ABOUT = (
    Figure("CPU (asv's machine.json)", lambda run: run.machine.get("cpu")),
    Figure("ISA (from the machine's name)", lambda run: isa_of(run.path.parent.name)),
    Figure("CPUs", lambda run: _number(run.machine.get("num_cpu")), _whole),
    Figure("RAM", lambda run: run.ram_bytes, format_bytes),
    Figure("commit", lambda run: run.commit_hash[:8]),
    Figure("committed", lambda run: f"{run.date:%Y-%m-%d}"),
    Figure("BLAS", blas_name),
)
# What each machine measured: its ceilings and c_tiled's headline figures.
FIGURES = (
    Figure("thread budget", lambda run: run.value(spec.THREAD_BUDGET), _whole),
    Figure("FMA peak float32, GFLOP/s (every thread)", lambda run: fma_peak(run, "float32"), fmt_gflops),
    Figure("FMA peak float64, GFLOP/s (every thread)", lambda run: fma_peak(run, "float64"), fmt_gflops),
    Figure("bfloat16 dot-product peak, GFLOP/s (every thread)", _bf16_peak, _gflops_or_words),
    Figure("sgemm, GFLOP/s", lambda run: run.value(spec.SGEMM), fmt_gflops),
    Figure("dgemm, GFLOP/s", lambda run: run.value(spec.DGEMM), fmt_gflops),
    Figure("streaming read, GB/s (every thread)", lambda run: run.value(spec.READ_BANDWIDTH), fmt_gflops),
    Figure(f"headline n ({spec.HEADS} heads, d = {spec.HEAD_DIM})", headline_seq_len, fmt_count),
    Figure(f"c_tiled GFLOP/s, {HEADLINE}", _c_tiled_gflops, fmt_gflops),
    Figure("c_tiled GFLOP/s ÷ the FMA peak, side by side with its loop",
           lambda run: peak_fraction(run, "c_tiled", "float32"), fmt_percent),
    Figure("the BLAS's sgemm GFLOP/s ÷ the FMA peak, side by side with its loop", gemm_fraction, fmt_percent),
    Figure("c_tiled's tile operations alone ÷ the FMA peak, side by side with its loop", tile_fraction, fmt_percent),
    Figure("c_tiled's whole call ÷ its tile operations alone, side by side", call_over_tiles, fmt_percent),
    Figure("c_tiled speed over numpy, float32, one head", lambda run: numpy_speedup(run, "c_tiled"), fmt_ratio),
    Figure(f"c_tiled speed over every peer (the smallest), {HEADLINE}, all threads",
           lambda run: worst_peer_speedup(run, "c_tiled", "full", _all_threads(run), "float32")[0], fmt_ratio),
    *(Figure(f"c_tiled speed over {peer}, {HEADLINE}, all threads", _c_tiled_over(peer), fmt_ratio)
      for peer in spec.PEERS),
)


def _side_by_side(name, figures, runs, names):
    """A FigureTable of ``figures``, a column for each machine of ``names``."""
    return FigureTable(name, (Column("figure", "figure"), *(Column(machine, machine) for machine in names)),
                       [[figure.label, *(figure.measure(runs[machine]) for machine in names)] for figure in figures],
                       formats=tuple(figure.fmt for figure in figures))


def machines(run):
    """The newest run of each machine in the results folder or kept beside the report:
    a column each, the report's own machine first."""
    runs = latest_per_machine([*run.kept, run, *run.others])
    this = run.path.parent.name
    if len(runs) < 2:
        return Section("Machines", [
            f"Only {this}'s results are here. `make bench` on another machine keeps its newest run in "
            f"`{KEPT}/` beside this report (commit it), and the report lays the machines side by side."])
    names = [this, *(name for name in runs if name != this)]
    return Section("Machines", [
        f"The newest run of each machine, from the results folder and from [{KEPT}/]({KEPT}/) beside "
        f"this report, where `make bench` keeps one run per machine; every other section is {this}'s run. "
        "The ISA is read from the machine's name (`kernels.machine_id`), n/a for a machine named otherwise.",
        _side_by_side("machines", ABOUT, runs, names),
        "What each measured: its ceilings and c_tiled's headline figures, at its own run's sizes (a quick "
        "run's are smaller: the headline n row). Speed over another kernel is timed side by side (the peers "
        "and side-by-side sections); kernels rank differently on other ISAs.",
        _side_by_side("machine_figures", FIGURES, runs, names),
    ])
