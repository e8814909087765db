"""kernels.output: one way to save a figure (one dpi, the caption under it, written whole,
the figure closed), and the report and the pages sharing it rather than each other."""
import ast
import pathlib
import struct

import pytest

import kernels
from kernels import output

PACKAGE = pathlib.Path(kernels.__file__).parent


def png_dpi(path):
    """The dots per inch a PNG's pHYs chunk records (matplotlib writes it)."""
    data = pathlib.Path(path).read_bytes()
    at = data.index(b"pHYs")
    per_metre_x, per_metre_y, unit = struct.unpack(">IIB", data[at + 4 : at + 13])
    assert unit == 1 and per_metre_x == per_metre_y
    return per_metre_x * 0.0254


def figure():
    fig, ax = output.pyplot().subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1])
    ax.set_title("a line")
    return fig


def test_save_png_writes_one_dpi_with_the_caption_under_the_figure(tmp_path, assert_png):
    plain = output.save_png(figure(), tmp_path / "plain.png", caption="")
    captioned_fig = figure()
    captioned = output.save_png(captioned_fig, tmp_path / "captioned.png",
                                caption="Computed from two points; a caption long enough to wrap. " * 3)
    for path in (plain, captioned):
        assert_png(path, min_side=200, min_bytes=5_000)
        assert png_dpi(path) == pytest.approx(output.DPI, abs=0.01)
    (_, plain_height), (_, height) = (assert_png(p, min_side=200, min_bytes=5_000) for p in (plain, captioned))
    assert height > plain_height + 2 * output.CAPTION_FONT  # the caption's lines are under it
    assert not output.pyplot().fignum_exists(captioned_fig.number)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["captioned.png", "plain.png"]


def test_save_png_closes_the_figure_and_leaves_no_file_when_writing_fails(tmp_path):
    fig = figure()
    with pytest.raises(OSError):
        output.save_png(fig, tmp_path / "no such folder" / "x.png", caption="never written")
    assert not output.pyplot().fignum_exists(fig.number)
    assert list(tmp_path.iterdir()) == []


def imported_modules(path):
    """The absolute names of the kernels modules that ``path`` (under kernels/) imports."""
    package = ["kernels", *path.parent.relative_to(PACKAGE).parts]
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return names


@pytest.mark.parametrize("folder, other", [("viz", "report"), ("report", "viz")])
def test_the_report_and_the_pages_never_import_each_other(folder, other):
    offenders = [f"{path.name} imports {name}" for path in sorted((PACKAGE / folder).glob("*.py"))
                 for name in imported_modules(path) if name.startswith(f"kernels.{other}")]
    assert offenders == []
    assert any("kernels.output" in imported_modules(path) for path in (PACKAGE / folder).glob("*.py"))


def test_every_figure_is_saved_by_save_png():
    savers = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                    if ".savefig(" in path.read_text(encoding="utf-8"))
    assert savers == ["output.py"]
