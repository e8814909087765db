"""Files written whole: a reader, or a run interrupted half-way, never sees half a file.

    write_whole(path, write)    write(partial) fills a file beside path; it is then
                                renamed onto path
    write_text(path, text)      UTF-8 text, the same way

The report (REPORT.md, its CSVs and PNGs) and ``kernels.viz`` write every file through
these.
"""
import os
import pathlib


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
