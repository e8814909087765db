"""kernels.models.head_analysis on hand-made weights with known answers, the ablation and
``python -m kernels heatmap`` on the real model (skipped, saying how to install it,
without ``make model``), and the command's one-line message when the model is missing."""
import math

import numpy as np
import pytest

from kernels import cli
from kernels.models import head_analysis, minilm
from kernels.viz import heatmap

TOKENS = ["[CLS]", "the", "cat", "sat", ",", "on", "mat", "[SEP]"]
N = len(TOKENS)
EXACT = 1e-12  # float64 sums of eight 0s and 1s: exact but for rounding


def one_head(rows):
    """A (1, 1, n, n) map whose row i puts all its weight on key rows[i]."""
    weights = np.zeros((1, 1, N, N))
    weights[0, 0, np.arange(N), rows] = 1.0
    return weights


def test_previous_token_diagonal_is_positional_and_diagonal():
    # row 0 ([CLS]) has no previous token and attends to itself
    measures = head_analysis.head_measures([(TOKENS, one_head([0] + list(range(N - 1))))])
    assert measures.previous[0, 0] == pytest.approx(1, abs=EXACT)
    assert measures.next[0, 0] == pytest.approx(0, abs=EXACT)
    assert measures.entropy[0, 0] == pytest.approx(0, abs=EXACT)
    assert measures.confidence[0, 0] == pytest.approx(1, abs=EXACT)
    assert measures.positional[0, 0] == 1 and measures.offset[0, 0] == -1 and measures.is_positional[0, 0]
    # rows 0 and 1 land on [CLS]: 2 of 8 vertical; the other 6 on content tokens at i − 1
    assert measures.vertical[0, 0] == pytest.approx(2 / N, abs=EXACT)
    assert measures.diagonal[0, 0] == pytest.approx(6 / N, abs=EXACT)
    assert measures.classes[0, 0] == "diagonal"


def test_all_weight_on_sep_is_vertical_with_zero_entropy():
    measures = head_analysis.head_measures([(TOKENS, one_head([N - 1] * N))])
    assert measures.sep[0, 0] == pytest.approx(1, abs=EXACT) and measures.cls[0, 0] == 0
    assert measures.entropy[0, 0] == pytest.approx(0, abs=EXACT)
    assert measures.classes[0, 0] == "vertical"
    assert not measures.is_positional[0, 0]


def test_even_spread_has_entropy_ln_n_and_its_masses_are_shares_of_keys():
    measures = head_analysis.head_measures([(TOKENS, np.full((1, 1, N, N), 1 / N))])
    assert measures.entropy[0, 0] == pytest.approx(math.log(N), abs=1e-12)
    assert measures.punctuation[0, 0] == pytest.approx(1 / N, abs=EXACT)   # "," alone
    assert measures.confidence[0, 0] == pytest.approx(1 / N, abs=EXACT)
    # ±BLOCK_WINDOW covers most of 8 tokens, so by the stated rule an even spread is a block
    assert measures.local[0, 0] >= head_analysis.MAJORITY_SHARE and measures.classes[0, 0] == "block"


def test_classes_follow_the_stated_thresholds_in_order():
    share = head_analysis.MIXED_SHARE
    classes = head_analysis.classify(vertical=np.array([share, 0.6, 0.1, 0.0, 0.2]),
                                     diagonal=np.array([share, 0.1, 0.6, 0.2, 0.2]),
                                     local=np.array([0.5, 0.2, 0.7, 0.6, 0.4]))
    assert list(classes) == ["vertical + diagonal", "vertical", "diagonal", "block", "heterogeneous"]


def test_punctuation_is_tokens_of_punctuation_only():
    assert [head_analysis.is_punctuation(t) for t in (",", "...", "##.", "[SEP]", "9:30", "cat")] == [
        True, True, True, False, False, False]


def test_the_sentence_set_is_fixed_and_holds_the_seed_sentence():
    texts = head_analysis.sentences()
    assert len(texts) == 30 and len(set(texts)) == 30
    assert "The cat sat on the mat." in texts


@pytest.mark.usefixtures("minilm_model")
def test_ablation_gives_a_positive_change_per_head():
    texts = head_analysis.sentences()[:2]
    ablation = head_analysis.ablate_heads(texts, kernel="numpy")
    assert ablation.texts == texts and ablation.distance.shape == (minilm.LAYERS, minilm.HEADS)
    # every head contributes something; none can turn an embedding further than orthogonal
    assert (ablation.distance > 0).all() and (ablation.distance < 1).all()
    assert ablation.ranked()[0][2] == ablation.distance.max()


def test_the_ablation_sentences_are_always_the_same_third_of_the_set():
    assert head_analysis.sentences()[::head_analysis.ABLATION_STRIDE][:2] == (
        head_analysis.sentences()[0], head_analysis.sentences()[3])
    assert len(head_analysis.sentences()[::head_analysis.ABLATION_STRIDE]) == 10


@pytest.mark.usefixtures("minilm_model")
def test_heatmap_command_writes_summary_figures_and_viewer_of_the_text_alone(tmp_path, capsys, assert_png):
    out = tmp_path / "heatmap"
    assert cli.main(["heatmap", "--text", "The cat sat on the mat", "--out", str(out),
                     "--kernel", "numpy"]) == 0
    captured = capsys.readouterr()
    assert str(out / "summary.md") in captured.out
    assert "attention of the text: 8 tokens" in captured.err    # progress, as each step ends
    summary = (out / "summary.md").read_text()
    for name in heatmap.TEXT_FIGURES.values():
        assert_png(out / name)
        assert f"]({name})" in summary
    # the bundled sentences are neither measured nor drawn unless asked for, and it says so
    assert not any((out / name).exists() for name in heatmap.SENTENCE_FIGURES.values())
    assert "Every figure and table comes from this text alone." in summary and "--sentence-set" in summary
    assert (out / heatmap.VIEWER).stat().st_size > 0 and (out / f"{heatmap.FOCUS}.csv").exists()
    for section in ("Where each token looks most", "Entropy per head", "Anomalous columns",
                    "Pattern of each head", 'Does "sat" attend to "cat"?'):
        assert section in summary
    assert "kept" not in summary   # nothing was cut


@pytest.mark.usefixtures("minilm_model")
def test_heatmap_with_the_sentence_set_adds_its_figures_ablation_and_the_papers(tmp_path, assert_png,
                                                                                 monkeypatch):
    three = head_analysis.sentences()[:3]
    monkeypatch.setattr(head_analysis, "sentences", lambda: three)
    monkeypatch.setattr(head_analysis, "ABLATION_STRIDE", 3)  # ablate one sentence: 72 passes, not 720
    lines = []
    heatmap.write_heatmap("The cat sat on the mat", tmp_path, kernel="numpy", sentence_set=True,
                          progress=lines.append)
    summary = (tmp_path / "summary.md").read_text()
    for name in {**heatmap.TEXT_FIGURES, **heatmap.SENTENCE_FIGURES}.values():
        assert_png(tmp_path / name)
        assert f"]({name})" in summary
    assert "## Over the 3 bundled sentences" in summary and "Held against the published findings" in summary
    assert any(line.startswith("ablation: 72 of 72 heads") for line in lines)


def test_the_text_figures_come_from_the_text(tmp_path, minilm_model):
    """Two texts give two different entropy figures (they once came from the sentence set)."""
    first, second = tmp_path / "a", tmp_path / "b"
    heatmap.write_heatmap("The cat sat on the mat", first, kernel="numpy")
    heatmap.write_heatmap("Birds fly south in winter, and come back in spring.", second, kernel="numpy")
    for name in ("entropy", "mass", "classes"):
        assert (first / heatmap.TEXT_FIGURES[name]).read_bytes() != (second / heatmap.TEXT_FIGURES[name]).read_bytes()


@pytest.mark.usefixtures("minilm_model")
def test_a_long_text_is_cut_and_every_output_says_so_legibly(tmp_path, assert_png):
    text = " ".join(["word"] * 700)
    lines = []
    heatmap.write_heatmap(text, tmp_path, kernel="c_tiled", progress=lines.append)
    said = f"kept {minilm.MAX_SEQ_LENGTH} of 702 tokens"       # 700 words, [CLS] and [SEP]
    summary = (tmp_path / "summary.md").read_text()
    assert said in lines[0] and said in summary and said in (tmp_path / heatmap.VIEWER).read_text()
    # legible at any length: a short heading, no line a page wide outside the tables, the
    # focus tables cut at FOCUS_ROWS query tokens (all in focus.csv), a figure of fixed size
    heading = summary.splitlines()[0]
    assert heading.startswith("# ") and len(heading) <= heatmap.EXCERPT_CHARS + 40
    prose = [line for line in summary.splitlines() if not line.startswith("|")]
    assert max(map(len, prose)) < 600
    assert f"The first {heatmap.FOCUS_ROWS} of the 256 query tokens" in summary
    assert len((tmp_path / f"{heatmap.FOCUS}.csv").read_text().splitlines()) == 1 + 6 * 256
    width, height = assert_png(tmp_path / heatmap.TEXT_FIGURES["maps"])
    assert width < 2600 and height < 1500    # 2,276 × 1,298 at 256 tokens, 2,196 × 1,201 at 8


def test_minilm_warns_when_it_cuts_a_text(minilm_model):
    with pytest.warns(minilm.Truncated, match="kept 256 of 702 tokens"):
        tokens, weights = minilm.attentions(" ".join(["word"] * 700), kernel="numpy")
    assert len(tokens) == 256 and tokens[-1] == "[SEP]" and weights.shape[-1] == 256
    assert minilm.token_count(" ".join(["word"] * 700)) == 702


@pytest.mark.parametrize("text", ["", "   ", "\n\t "])
def test_a_blank_text_is_refused_before_anything_loads(text, monkeypatch):
    monkeypatch.setattr(minilm, "load", lambda *a, **k: pytest.fail("loaded the model for a blank text"))
    with pytest.raises(ValueError, match="the text is empty"):
        heatmap.check_text(text)
    with pytest.raises(ValueError, match="the text is empty"):
        heatmap.write_heatmap(text, "/nonexistent/never-written")


def test_the_excerpt_is_one_short_line_cut_at_a_word():
    assert heatmap.excerpt("The cat\nsat") == "The cat sat"
    long = heatmap.excerpt("alpha beta " * 40)
    assert len(long) <= heatmap.EXCERPT_CHARS and long.endswith(" …") and "\n" not in long


def test_heatmap_command_without_the_model_says_how_to_install_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(minilm.importlib.util, "find_spec", lambda name: None)
    minilm.load.cache_clear()
    try:
        assert cli.main(["heatmap", "--text", "The cat sat", "--out", str(tmp_path)]) == 1
    finally:
        minilm.load.cache_clear()
    err = capsys.readouterr().err
    assert "not installed: run `make model`" in err and len(err.strip().splitlines()) == 1


def test_heatmap_command_rejects_an_unknown_kernel(tmp_path, capsys):
    assert cli.main(["heatmap", "--text", "x", "--out", str(tmp_path), "--kernel", "nope"]) == 2
    assert "unknown kernel(s) nope; known: naive" in capsys.readouterr().err
