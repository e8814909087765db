"""The scaling report: asv results -> REPORT.md, PNG plots and CSV tables.

    python -m kernels report [--results .asv/results] [--out reports]
    kernels.report.write_report(results_dir, out_dir) -> path of REPORT.md

The report is a list of sections (``SECTIONS``), each a function of the newest asv run
(``results.load_latest_run``) that returns a ``document.Section``: prose, tables (also
written as CSV) and plots (PNG), found by the benchmark names of ``kernels.bench_spec``.
A value that was skipped, failed or never run is a gap in the plots, "n/a" in REPORT.md
and an empty cell in the CSVs.  A new section is one new module and one line below.

    results.py   the asv results reader        tables.py    tables and cell formats
    fits.py      power-law fits against n      plots.py     what every plot shares
    document.py  Section and Plot              one module per section, in SECTIONS' order
"""
import pathlib

from ..files import write_text, write_whole
from . import (decode, gaps, goals, in_context, memory_wall, model, multi_head, overview, peers, seq_len,
               side_by_side, startup, thread_scaling)
from .document import Plot
from .results import load_latest_run
from .tables import Table

TITLE = "# Self-attention on the CPU: scaling report"
SECTIONS = (
    overview.overview,
    multi_head.headline,
    seq_len.time,
    seq_len.memory,
    seq_len.throughput,
    seq_len.exponents,
    seq_len.rung_speedups,
    multi_head.causal,
    multi_head.precision,
    thread_scaling.thread_scaling,
    side_by_side.side_by_side,
    peers.peers,
    memory_wall.memory_wall,
    model.model,
    in_context.in_context_section,
    decode.decode,
    startup.startup,
    goals.goals,
    gaps.gaps,
)


def write_report(results_dir=".asv/results", out_dir="reports"):
    """Write REPORT.md, the PNG plots and the CSV tables into ``out_dir``; return REPORT.md's path.

    Every file is written whole (``kernels.files.write_whole``): an interrupted report
    leaves each file as it was or as it is now, never half written.  Raises
    FileNotFoundError naming ``results_dir`` when it holds no asv results, and
    ``results.ResultsError`` (a ValueError) naming a file when none of them can be read.
    """
    run = load_latest_run(results_dir)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paragraphs = [TITLE]
    for section in (make(run) for make in SECTIONS):
        if section.heading:
            paragraphs.append(f"## {section.heading}")
        for block in section.blocks:
            if isinstance(block, Plot):
                write_whole(out_dir / block.file, block.draw)
            if isinstance(block, (Plot, Table)):
                paragraphs.append(block.markdown())
            else:
                paragraphs.append(block)
        for table in [b for b in section.blocks if isinstance(b, Table)] + section.data:
            table.write_csv(out_dir)
    return write_text(out_dir / "REPORT.md", "\n\n".join(paragraphs) + "\n")
