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
def test_heatmap_command_writes_summary_figures_and_viewer(tmp_path, capsys, assert_png, monkeypatch):
    monkeypatch.setattr(head_analysis, "ABLATION_STRIDE", 30)  # ablate one sentence: 72 passes, not 720
    out = tmp_path / "heatmap"
    assert cli.main(["heatmap", "--text", "The cat sat on the mat", "--out", str(out),
                     "--kernel", "numpy"]) == 0
    assert str(out / "summary.md") in capsys.readouterr().out
    summary = (out / "summary.md").read_text()
    for name in heatmap.FIGURES.values():
        assert_png(out / name)
        assert f"]({name})" in summary
    assert (out / heatmap.VIEWER).stat().st_size > 0
    for section in ("Where each token looks most", "Entropy per head", "Anomalous columns",
                    'Does "sat" attend to "cat"?', "Held against the published findings"):
        assert section in summary


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
