"""Every ```python example of README.md runs as written.

The examples are read the way a reader runs them: in README order, in one Python session.
A later example uses what an earlier one defined (``np`` and ``kernels`` are imported
once, by the first), so all of them share one namespace, and each test first runs any
earlier example that has not run yet: a test selected alone (``-k``) still sees what it
builds on.  An example that fails makes the ones after it fail too, naming it.

An example that imports the optional model (``from kernels.models import minilm``) skips,
saying how to install it, when ``minilm.model_folder()`` raises ModelNotInstalled
(``make model``); the examples after it must not need what it defines.
"""
import pathlib
import re
import sys

import pytest

from kernels.models import minilm

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
HEADING = re.compile(r"^#+ (.*)$", re.M)
NEEDS_MODEL = re.compile(r"^\s*from kernels\.models import minilm\b|^\s*import kernels\.models\.minilm\b", re.M)


class Example:
    """One ```python block: its source, the README line it starts on, the heading above it."""

    def __init__(self, text, match):
        self.source = match.group(1)
        self.line = text.count("\n", 0, match.start(1)) + 1
        headings = HEADING.findall(text, 0, match.start())
        self.heading = headings[-1] if headings else "README"
        self.needs_model = bool(NEEDS_MODEL.search(self.source))

    @property
    def name(self):
        return f"README.md:{self.line} ({self.heading})"


def examples(text=None):
    text = README.read_text(encoding="utf-8") if text is None else text
    return [Example(text, match) for match in FENCE.finditer(text)]


EXAMPLES = examples()


def model_missing():
    """Why the model's examples cannot run here (ModelNotInstalled's message), or None."""
    try:
        minilm.model_folder()
    except minilm.ModelNotInstalled as missing:
        return str(missing)
    return None


class Session:
    """One namespace, the examples run into it in order, each at most once."""

    def __init__(self):
        self.namespace = {"__name__": "__readme__"}
        self.outcome = {}  # index -> "ok", "skipped: ..." or "failed: ..."

    def run(self, index):
        """Run the examples before ``index`` that have not run, then ``index`` itself."""
        for earlier in range(index):
            if earlier not in self.outcome:
                try:
                    self._execute(earlier)
                except Exception:
                    pass  # recorded in self.outcome, reported below
            if self.outcome[earlier].startswith("failed"):
                pytest.fail(f"{EXAMPLES[earlier].name}, which this example follows, {self.outcome[earlier]}")
        self._execute(index)
        if self.outcome[index] == "skipped":
            pytest.skip(f"{EXAMPLES[index].name} needs the model: {model_missing()}")

    def _execute(self, index):
        example = EXAMPLES[index]
        if example.needs_model and model_missing():
            self.outcome[index] = "skipped"
            return
        try:
            exec(compile(example.source, example.name, "exec"), self.namespace)
        except Exception as error:
            self.outcome[index] = f"failed: {type(error).__name__}: {error}"
            raise
        self.outcome[index] = "ok"


@pytest.fixture(scope="module")
def session():
    return Session()


@pytest.mark.parametrize("index", range(len(EXAMPLES)), ids=[f"line{e.line}" for e in EXAMPLES])
def test_the_readme_example_runs_as_written(session, index):
    session.run(index)


def test_the_readme_has_its_examples():
    """The parsing finds them: the kernels, the layers, the KV cache and the model."""
    sources = [example.source for example in EXAMPLES]
    assert len(EXAMPLES) >= 4
    for call in ("kernels.attention(", "kernels.multi_head_attention(", "kernels.KVCache(", "minilm.encode("):
        assert any(call in source for source in sources), call
    assert [example.needs_model for example in EXAMPLES].count(True) >= 1


def test_a_model_example_skips_saying_how_to_install_the_model(monkeypatch):
    def not_installed():
        raise minilm.ModelNotInstalled(minilm.INSTALL)

    monkeypatch.setattr(minilm, "model_folder", not_installed)
    model_examples = [index for index, example in enumerate(EXAMPLES) if example.needs_model]
    with pytest.raises(pytest.skip.Exception, match="needs the model: all-MiniLM-L6-v2 is not installed: "
                                                     r"run `make model`"):
        Session().run(model_examples[0])


def test_a_failing_example_fails_the_ones_after_it(monkeypatch):
    text = "# A\n\n```python\nx = 1\n```\n\n## B\n\n```python\nraise ValueError('no')\n```\n\n```python\nx\n```\n"
    monkeypatch.setattr(sys.modules[__name__], "EXAMPLES", examples(text))
    assert [(e.line, e.heading) for e in EXAMPLES] == [(4, "A"), (10, "B"), (14, "B")]
    session = Session()
    session.run(0)
    assert session.namespace["x"] == 1
    with pytest.raises(pytest.fail.Exception, match=r"README.md:10 \(B\), which this example follows, "
                                                    r"failed: ValueError: no"):
        session.run(2)
