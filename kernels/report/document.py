"""What a report section is made of: a heading and blocks of prose, tables and plots."""
from dataclasses import dataclass, field
from typing import Callable, Optional


@dataclass(frozen=True)
class Plot:
    """A PNG beside REPORT.md: ``draw(path)`` writes it to ``path`` (``out_dir / file``,
    whole, through ``kernels.output.save_png``), REPORT.md links it as ``file``."""

    file: str
    alt: str
    draw: Callable

    def markdown(self):
        return f"![{self.alt}]({self.file})"


@dataclass(frozen=True)
class Section:
    """A part of REPORT.md under ``heading`` (None: no heading of its own).

    ``blocks`` are paragraphs in order: Markdown text, ``kernels.output.Table`` (rendered
    and written as CSV) or ``Plot`` (drawn and linked); ``data`` are tables written as CSV
    only, for the cases a Markdown table leaves out.
    """

    heading: Optional[str]
    blocks: list
    data: list = field(default_factory=list)
