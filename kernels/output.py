"""What attnbench writes for a reader: figures (PNG), tables (Markdown and CSV) and the
number formats of their cells.  The report (``kernels.report``) and the pages of
``kernels.viz`` both draw and tabulate through this module, and neither imports the other.

    pyplot()                        matplotlib's pyplot on Agg, imported on first use, so
                                    that importing a module that draws stays light
    save_png(fig, path, caption=)   the one way a figure is saved: DPI dots per inch, the
                                    box cut to what was drawn, ``caption`` (what the figure
                                    was computed from) in grey under it; written whole,
                                    the figure closed
    Table(name, columns, rows)      rows of raw values: .markdown() ("n/a" for a gap) and
                                    .write_csv(out_dir) (an empty cell); Column(key, title, fmt)
    text(value, fmt), interval()    a value as a Markdown cell, with its spread
    missing, has_spread, ratio      a gap, a figure of several samples, a gap-aware quotient
    fmt_seconds, fmt_ratio, …       the number formats of the cells

A figure of several samples (``spread.Measured``) shows its spread in both table forms:
"±3%" in Markdown, its quartiles in two more CSV columns.  Every file is written whole
(``kernels.files.write_whole``, which the command line's staging also builds on): a
reader, or an interrupted run, never sees half a PNG or half a CSV.
"""
import csv
import math
import textwrap
from dataclasses import dataclass
from typing import Callable

from .files import write_whole
from .spread import Measured, bounds, quotient

DPI = 110                 # every PNG: a 13-inch-wide figure is 1,430 pixels
CAPTION_FONT = 8          # points
CAPTION_CHARS_PER_INCH = 15   # about that many characters an inch at CAPTION_FONT
CAPTION_GAP = 0.1         # inches between what was drawn and the caption under it


# -- figures ------------------------------------------------------------------------------

def pyplot():
    """pyplot on the Agg backend, imported on first use."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot
    return matplotlib.pyplot


def save_png(fig, path, *, caption):
    """Write ``fig`` to ``path`` as a PNG of DPI dots per inch with ``caption`` under it
    (none when empty), close it; -> the path.

    The caption is wrapped to the figure's width and set left-aligned, in grey, CAPTION_GAP
    under everything the layout placed (legends outside the axes included); the saved box
    is cut to what was drawn.  A figure legend placed outside the bottom edge would land
    on the caption (the saved area grows downwards and such a legend follows the lower
    edge): put legends on the right, or anchor them to an axes.  The PNG is written whole
    (``write_whole``); the figure is closed even when writing fails.
    """
    try:
        if caption:
            # lay out first, then put the caption under the bounding box of what was drawn.  In
            # figure fractions, because savefig's tight box shifts those (and not inches) onto
            # the canvas.
            fig.draw_without_rendering()
            drawn = fig.get_tightbbox()  # inches
            width, height = fig.get_size_inches()
            lines = textwrap.wrap(caption, int(width * CAPTION_CHARS_PER_INCH))
            fig.text(drawn.x0 / width, (drawn.y0 - CAPTION_GAP) / height, "\n".join(lines),
                     ha="left", va="top", fontsize=CAPTION_FONT, color="0.25")
        return write_whole(path, lambda partial: fig.savefig(partial, format="png", dpi=DPI, bbox_inches="tight"))
    finally:
        pyplot().close(fig)


# -- values and cells ---------------------------------------------------------------------

def missing(value):
    """True for a gap: None or NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def ratio(numerator, denominator):
    """numerator / denominator, NaN when either is missing or the denominator is zero; a
    Measured numerator or denominator gives a Measured with the spread of both."""
    if missing(numerator) or missing(denominator) or denominator == 0:
        return math.nan
    return quotient(numerator, denominator)


def has_spread(value):
    """True for a Measured of more than one sample."""
    return isinstance(value, Measured) and value.n > 1


def text(value, fmt):
    """``fmt(value)``, or "n/a" for a gap; a figure of several samples followed by its
    spread, ± half its interquartile range as a percentage of its median ("1.19× ±3%")."""
    if missing(value):
        return "n/a"
    if has_spread(value):
        return f"{fmt(value)} ±{value.relative_spread / 2:.0%}"
    return fmt(value)


def interval(value, fmt):
    """A Measured's interquartile range, "1.15–1.23" in ``fmt``; "one sample" without one."""
    if missing(value):
        return "n/a"
    if not has_spread(value):
        return "one sample"
    return f"{fmt(value.low)}–{fmt(value.high)}"


# -- tables -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Column:
    key: str                        # CSV header
    title: str                      # Markdown header
    fmt: Callable = str             # raw value -> Markdown cell


@dataclass(frozen=True)
class Table:
    """Rows of raw values, written to ``<name>.csv``."""

    name: str
    columns: tuple
    rows: list

    def markdown(self):
        if not self.rows:
            return "n/a: the benchmarks behind this table are not in the results."
        header = [column.title for column in self.columns]
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for row in self.rows:
            cells = [text(v, c.fmt) for c, v in zip(self.columns, row)]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def write_csv(self, out_dir):
        """``<name>.csv`` in ``out_dir``, written whole; -> its path."""
        # a column holding figures of several samples gets its quartiles beside it
        spread = [any(has_spread(row[i]) for row in self.rows) for i in range(len(self.columns))]
        header = [name for column, has in zip(self.columns, spread)
                  for name in ((column.key, f"{column.key}_q25", f"{column.key}_q75") if has else (column.key,))]

        def cells(row):
            for value, has in zip(row, spread):
                yield "" if missing(value) else float(value) if isinstance(value, Measured) else value
                if has:
                    yield from ("", "") if missing(value) else bounds(value)

        def write(partial):
            with open(partial, "w", newline="") as file:
                writer = csv.writer(file)
                writer.writerow(header)
                writer.writerows(list(cells(row)) for row in self.rows)
        return write_whole(out_dir / f"{self.name}.csv", write)


# -- number formats -----------------------------------------------------------------------

def fmt_seconds(seconds):
    """Three significant digits in the unit that keeps them readable: 0.0123 -> '12.3 ms'."""
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def fmt_gflops(value):
    return f"{value:.1f}"


def fmt_ratio(value):
    return f"{value:,.0f}×" if value >= 100 else f"{value:.2f}×"


def fmt_percent(value):
    return f"{value:.0%}"


def fmt_count(value):
    return f"{value:,}"


def fmt_exponent(value):
    return f"{value:.2f}"


def fmt_number(value):
    return f"{value:.3g}"
