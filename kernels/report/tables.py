"""Tables of raw values, rendered as Markdown ("n/a" for a gap) and CSV (an empty cell),
and the formatters that turn a value into a Markdown cell."""
import csv
import math
from dataclasses import dataclass
from typing import Callable

from ..files import write_whole


def missing(value):
    """True for a gap: None or NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def ratio(numerator, denominator):
    """numerator / denominator, NaN when either is missing or the denominator is zero."""
    if missing(numerator) or missing(denominator) or denominator == 0:
        return math.nan
    return numerator / denominator


def text(value, fmt):
    """``fmt(value)``, or "n/a" for a gap."""
    return "n/a" if missing(value) else fmt(value)


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
        def write(partial):
            with open(partial, "w", newline="") as file:
                writer = csv.writer(file)
                writer.writerow([column.key for column in self.columns])
                writer.writerows(["" if missing(v) else v for v in row] for row in self.rows)
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
