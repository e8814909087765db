"""Tables of raw values, rendered as Markdown ("n/a" for a gap) and CSV (an empty cell),
and the formatters that turn a value into a Markdown cell.  A figure of several samples
(``spread.Measured``) shows its spread in both: "±3%" in Markdown, its quartiles in two
more CSV columns."""
import csv
import math
from dataclasses import dataclass
from typing import Callable

from ..files import write_whole
from ..spread import Measured, bounds, quotient


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


@dataclass(frozen=True)
class Column:
    key: str                        # CSV header
    title: str                      # REPORT.md header
    fmt: Callable = str             # raw value -> REPORT.md cell


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
