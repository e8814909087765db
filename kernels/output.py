"""Everything attnbench writes to disk: files written whole, a command's outputs staged,
figures (PNG), tables (Markdown and CSV) and the number formats of their cells.  The
report (``kernels.report``), the pages of ``kernels.viz`` and the command line all write
through this module, and report/ and viz/ never import each other.

    write_whole(path, write)        write(partial) fills a file beside path, then renamed
                                    onto it: a reader never sees half a file
    write_text(path, text)          UTF-8 text, the same way
    missing_folders(path)           the folders a mkdir -p of path would create
    staged(target, ...)             a context: a command's outputs go into a hidden folder
                                    inside target, moved in file by file on success,
                                    removed on failure (target left as it was)
    staged_output(path)             the same for a command's output folder, created and
                                    checked writable first (``output_folder``)

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
(``write_whole``): a reader, or an interrupted run, never sees half a PNG or half a CSV.
"""
import contextlib
import csv
import math
import os
import pathlib
import shutil
import tempfile
import textwrap
from dataclasses import dataclass
from typing import Callable

from .spread import Measured, bounds, quotient

DPI = 110                 # every PNG: a 13-inch-wide figure is 1,430 pixels
CAPTION_FONT = 8          # points
CAPTION_CHARS_PER_INCH = 15   # about that many characters an inch at CAPTION_FONT
CAPTION_GAP = 0.1         # inches between what was drawn and the caption under it


# -- files written whole, outputs staged ---------------------------------------------

STAGING_PREFIX = ".attnbench-staging-"


def write_whole(path, write):
    """``write(partial)`` writes a file beside ``path``, which then replaces ``path`` in
    one step (``os.replace`` within a folder); -> the path.

    When ``write`` raises, or the process is interrupted (Ctrl-C), ``path`` keeps what it
    held and the partial file is removed; only a killed process leaves it behind, hidden
    (".<stem>.partial<suffix>"), and the next write of ``path`` reuses it.  The partial
    file keeps ``path``'s suffix, so a writer that picks the format by the suffix
    (matplotlib's ``savefig``) picks the right one.
    """
    path = pathlib.Path(path)
    partial = path.with_name(f".{path.stem}.partial{path.suffix}")
    try:
        write(partial)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return path


def write_text(path, text):
    """``text`` to ``path`` in UTF-8, whole (``write_whole``)."""
    return write_whole(path, lambda partial: partial.write_text(text, encoding="utf-8"))


def missing_folders(path):
    """The folders ``path.mkdir(parents=True)`` would create, deepest first (empty when
    ``path`` exists): what to remove again, with ``staged(..., created=...)``, when the
    command that created them fails."""
    missing = []
    path = pathlib.Path(path).absolute()
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


class Staging:
    """Where a ``staged`` command writes (``folder``), and where it lands (``target``)."""

    def __init__(self, folder, target):
        self.folder = pathlib.Path(folder)
        self.target = pathlib.Path(target)

    def final(self, path):
        """The path that ``path``, inside ``folder``, has once moved into ``target``."""
        return self.target / pathlib.Path(path).relative_to(self.folder)


@contextlib.contextmanager
def staged(target, *, created=()):
    """Yield a ``Staging`` whose ``folder``, a new hidden folder inside the existing folder
    ``target``, the command writes its outputs into.

    When the block ends normally, every file in the staging folder replaces its namesake in
    ``target`` (``os.replace``, one file at a time, subfolders made as needed); files of
    ``target`` the command did not write are left alone, and the staging folder is removed.
    When the block raises, or is interrupted (Ctrl-C), the staging folder is removed and
    ``target`` is as it was; then each folder in ``created`` (those the caller made for
    this command, deepest first: ``missing_folders`` before the mkdir) is removed again if
    it is empty, so a failure leaves no empty folder behind.  Only a killed process leaves
    the staging folder (".attnbench-staging-*") behind.
    """
    target = pathlib.Path(target)
    folder = pathlib.Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=target))
    try:
        yield Staging(folder, target)
        _move_into(folder, target)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        for made in created:
            with contextlib.suppress(OSError):  # not empty: something else is in it now
                pathlib.Path(made).rmdir()
        raise
    shutil.rmtree(folder, ignore_errors=True)


def output_folder(path):
    """Create ``path`` if needed and check that files can be written in it, before any
    work is done; OSError saying which of the two failed otherwise."""
    folder = pathlib.Path(path)
    if folder.exists() and not folder.is_dir():
        raise OSError(f"the output folder {folder} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OSError(f"cannot create the output folder {folder}: {error.strerror}") from None
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise OSError(f"cannot write in the output folder {folder}: {error.strerror}") from None
    return folder


@contextlib.contextmanager
def staged_output(path):
    """A command's output folder ``path`` checked (``output_folder``), then a ``Staging``
    inside it for the command to write into (``staged``): its files move into ``path`` only
    when the command succeeds; on failure ``path`` is left as it was, and removed again
    (with any parents) if this command created it."""
    created = missing_folders(path)
    try:
        folder = output_folder(path)
    except OSError:
        for made in created:  # created, but cannot be written in
            with contextlib.suppress(OSError):
                made.rmdir()
        raise
    with staged(folder, created=created) as staging:
        yield staging


def _move_into(folder, target):
    """Every file under ``folder`` onto its namesake under ``target``."""
    for path in sorted(path for path in folder.rglob("*") if not path.is_dir()):
        destination = target / path.relative_to(folder)
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, destination)


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
