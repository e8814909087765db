"""The scaling report: asv results -> REPORT.md, PNG plots and CSV tables.

    python -m kernels report [--results .asv/results] [--out reports] [--keep-machine NAME]
    kernels.report.write_report(results_dir, out_dir) -> path of REPORT.md
    kernels.report.keep_machine(results_dir, out_dir, machine)   # out_dir/machines/<machine>/

The report is a list of sections (``SECTIONS``), each a function of the newest asv run
(``results.load_latest_run``) that returns a ``document.Section``: prose, tables (also
written as CSV) and plots (PNG), found by the benchmark names of ``kernels.bench_spec``.
A value that was skipped, failed or never run is a gap in the plots, "n/a" in REPORT.md
and an empty cell in the CSVs.  A new section is one new module and one line below.  The
run also carries the runs kept in ``out_dir/machines/`` (``machines.keep_machine``, which
``make bench`` calls on each machine), which the Machines section lays beside it.

    results.py   the asv results reader        plots.py     what every plot shares
    document.py  Section and Plot              one module per section, in SECTIONS' order

Tables, cell formats and saving a figure are the core's (``kernels.output``), as are the
power-law fits (``kernels.fits``).
"""
import pathlib

from ..output import staged_output, write_text
from ..output import Table
from . import (cache, decode, gaps, goals, half, in_context, machines, memory_wall, model, multi_head, overview, peers,
               roofline, seq_len, side_by_side, startup, thread_scaling, trust, window)
from .document import Plot
from .machines import keep_machine, with_kept_runs
from .results import load_latest_run

__all__ = ["SECTIONS", "keep_machine", "publish", "write_report"]

TITLE = "# Self-attention on the CPU: scaling report"
SECTIONS = (
    overview.overview,
    trust.trust,
    multi_head.headline,
    seq_len.time,
    seq_len.memory,
    seq_len.throughput,
    seq_len.exponents,
    seq_len.rung_speedups,
    multi_head.causal,
    multi_head.precision,
    half.half_precision,
    thread_scaling.thread_scaling,
    side_by_side.side_by_side,
    peers.peers,
    memory_wall.memory_wall,
    model.model,
    in_context.in_context_section,
    roofline.roofline,
    decode.decode,
    cache.cache,
    window.window,
    startup.startup,
    machines.machines,
    goals.goals,
    gaps.gaps,
)


def write_report(results_dir=".asv/results", out_dir="reports", kept_dir=None):
    """Write REPORT.md, the PNG plots and the CSV tables into ``out_dir``; return REPORT.md's path.
    The machines kept by earlier runs are read from ``kept_dir`` (default: ``out_dir``),
    the folder holding machines/: the command line writes into a staging folder and reads
    them where they are.

    Every file is written whole (``kernels.output.write_whole``): an interrupted report
    leaves each file as it was or as it is now, never half written.  Raises
    FileNotFoundError naming ``results_dir`` when it holds no asv results, and
    ``results.ResultsError`` (a ValueError) naming a file when none of them can be read.
    """
    out_dir = pathlib.Path(out_dir)
    run = with_kept_runs(load_latest_run(results_dir), out_dir if kept_dir is None else kept_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paragraphs = [TITLE]
    for make in SECTIONS:
        run.reads.clear()
        section = make(run)
        if section.heading:
            paragraphs.append(f"## {section.heading}")
            # a section that read figures of a class measured while the machine was
            # disturbed says so first (but the section that reports the disturbance)
            warning = trust.notice(run, {name.rsplit(".", 1)[0] for name in run.reads})
            if warning and make is not trust.trust:
                paragraphs.append(warning)
        for block in section.blocks:
            if isinstance(block, Plot):
                block.draw(out_dir / block.file)
            if isinstance(block, (Plot, Table)):
                paragraphs.append(block.markdown())
            else:
                paragraphs.append(block)
        for table in [b for b in section.blocks if isinstance(b, Table)] + section.data:
            table.write_csv(out_dir)
    return write_text(out_dir / "REPORT.md", "\n\n".join(paragraphs) + "\n")


def publish(results_dir, out, keep_machine_name=None):
    """``write_report`` into the folder ``out``, staged (``output.staged_output``: its files
    replace their namesakes only once the whole report is written), then, given a machine's
    name, that machine's newest run kept in ``out``/machines/ (``keep_machine``); -> (the
    report's path, the kept results file or None).  What ``attnbench report`` and ``make
    bench`` do; the errors are ``write_report``'s and ``keep_machine``'s."""
    with staged_output(out) as staging:
        report = write_report(results_dir, staging.folder, kept_dir=staging.target)
    kept = keep_machine(results_dir, staging.target, keep_machine_name) if keep_machine_name else None
    return staging.final(report), kept
