"""Files written whole, and outputs that appear only when the whole command succeeded: a
reader, or a run interrupted half-way, never sees half a file or half a folder.

    write_whole(path, write)    write(partial) fills a file beside path; it is then
                                renamed onto path
    write_text(path, text)      UTF-8 text, the same way
    missing_folders(path)       the folders a mkdir -p of path would create
    staged(target, ...)         a context: every output goes into a hidden folder inside
                                target, moved into target file by file on success,
                                removed on failure (target left as it was)

The report (REPORT.md, its CSVs and PNGs) and ``kernels.viz`` write every file through
``write_whole`` (figures and tables by way of ``kernels.output``); the command line
(``kernels.cli``) writes each command's outputs into a ``staged`` folder.
"""
import contextlib
import os
import pathlib
import shutil
import tempfile

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
def staged(target, *, created=(), carry=()):
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

    ``carry``: names of files or subfolders of ``target`` the command reads and may change
    or prune (the report's kept ``machines/``).  They are copied into the staging folder
    first; on success the target's copy becomes the staged one, files the command removed
    from the staged copy removed from ``target`` as well.
    """
    target = pathlib.Path(target)
    folder = pathlib.Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=target))
    try:
        for name in carry:
            source = target / name
            if source.is_dir():
                shutil.copytree(source, folder / name)
            elif source.is_file():
                shutil.copy2(source, folder / name)
        yield Staging(folder, target)
        _move_into(folder, target, carry)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        for made in created:
            with contextlib.suppress(OSError):  # not empty: something else is in it now
                pathlib.Path(made).rmdir()
        raise
    shutil.rmtree(folder, ignore_errors=True)


def _move_into(folder, target, carry):
    """Every file under ``folder`` onto its namesake under ``target``; then, under each
    ``carry`` name, the target's files that are no longer in ``folder`` removed."""
    staged_files = sorted(path for path in folder.rglob("*") if not path.is_dir())
    for path in staged_files:
        destination = target / path.relative_to(folder)
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, destination)
    kept = {path.relative_to(folder) for path in staged_files}
    for name in carry:
        carried = target / name
        if carried.is_dir():
            for path in sorted(carried.rglob("*")):
                if not path.is_dir() and path.relative_to(target) not in kept:
                    path.unlink()
        elif carried.is_file() and pathlib.Path(name) not in kept:
            carried.unlink()
