"""kernels.viz.figures: every figure writes a PNG; the heatmap refuses unreadable
annotations; the block-averaged picture of a long sequence is the true block mean and
never holds the n × n weights."""
import math
import subprocess
import sys

import numpy as np
import pytest

import kernels
from kernels.layers.similarity import ROW_BLOCK_BYTES
from kernels.memory import format_bytes, peak_extra_bytes
from kernels.viz import figures

SENTENCE = ("The", "cat", "sat", "on", "the", "mat")


def random_weights(rng, *shape):
    return kernels.attention_weights(rng.standard_normal((*shape, 8)), rng.standard_normal((*shape, 8)))


def test_import_draws_in_no_matplotlib():
    # a fresh interpreter: this test process may have imported matplotlib already
    code = ("import sys, kernels, kernels.viz, kernels.viz.figures, kernels.viz.explain; "
            "sys.exit('matplotlib' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_heatmap_writes_png(tmp_path, assert_png):
    weights = random_weights(np.random.default_rng(0), 6)
    path = tmp_path / "heatmap.png"
    assert figures.plot_attention_heatmap(weights, SENTENCE, path, caption="six random tokens") == path
    assert_png(path)


def test_heatmap_refuses_to_annotate_beyond_the_limit_but_draws(tmp_path, assert_png):
    n = figures.ANNOTATE_LIMIT + 1
    weights = random_weights(np.random.default_rng(1), n)
    tokens = [f"t{i}" for i in range(n)]
    with pytest.raises(ValueError, match=f"limit {figures.ANNOTATE_LIMIT}"):
        figures.plot_attention_heatmap(weights, tokens, tmp_path / "refused.png", annotate=True)
    assert not (tmp_path / "refused.png").exists()  # raised before drawing
    assert_png(figures.plot_attention_heatmap(weights, tokens, tmp_path / "plain.png"))


def test_heatmap_rejects_weights_that_do_not_match_the_tokens(tmp_path):
    with pytest.raises(ValueError, match=r"\(6, 6\)"):
        figures.plot_attention_heatmap(np.eye(5), SENTENCE, tmp_path / "x.png")


def test_heads_qkv_and_entropy_write_pngs(tmp_path, assert_png):
    rng = np.random.default_rng(2)
    weights = random_weights(rng, 8, 6)
    assert_png(figures.plot_heads(weights, SENTENCE, tmp_path / "heads.png"))
    q, k, v = rng.standard_normal((3, 6, 5))
    assert_png(figures.plot_qkv_vectors(q, k, v, SENTENCE, tmp_path / "qkv.png", links=3,
                                        features=("a", "b", "c", "d", "e")))
    assert_png(figures.plot_entropy(kernels.attention_entropy(weights), SENTENCE, tmp_path / "entropy.png"))
    assert_png(figures.plot_entropy(kernels.attention_entropy(weights[0]), None, tmp_path / "one_head.png"))


@pytest.fixture
def drawn_texts(monkeypatch):
    """Every title, axis label and legend entry of the figures drawn, as one list per
    figure, instead of writing them."""
    texts = []

    def capture(fig, path, *, caption):
        found = [fig._suptitle.get_text()] if fig._suptitle else []
        for ax in fig.axes:
            found += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        for legend in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]:
            found += [legend.get_title().get_text()] + [text.get_text() for text in legend.get_texts()]
        texts.append(found)
        figures.pyplot().close(fig)
        return path

    monkeypatch.setattr(figures, "save_png", capture)
    return texts


def test_heads_are_numbered_from_0_and_entropy_given_in_nats_out_of_ln_n(tmp_path, drawn_texts):
    weights = random_weights(np.random.default_rng(6), 8, 6)
    entropy = kernels.attention_entropy(weights)
    figures.plot_heads(weights, SENTENCE, tmp_path / "heads.png", title="Eight heads")
    figures.plot_entropy(entropy, SENTENCE, tmp_path / "entropy.png", title="Entropy")
    figures.plot_entropy(entropy[0], None, tmp_path / "one_head.png")
    heads, lines, one = drawn_texts
    # head h is weights[h], as head_mask[h] silences it
    panels = [text for text in heads if text.startswith("head ")]
    assert panels == [f"head {h}: mean entropy {entropy[h].mean():.2f} nats" for h in range(8)]
    assert heads[0].startswith("Eight heads\n") and "numbered from 0" in heads[0]
    assert "nats" in heads[0] and "ln 6 = 1.79" in heads[0]
    assert [text for text in lines if text.startswith("head ")] == [f"head {h}" for h in range(8)]
    assert "heads (from 0)" in lines
    for texts in (lines, one):
        title, subtitle, _, ylabel = texts[:4]
        assert "in nats" in subtitle and "ln 6 = 1.79" in subtitle
        assert ylabel == "entropy of the query's weights (nats; max ln 6 = 1.79)"
        assert "maximum ln 6 = 1.79 (even spread)" in texts
    assert "head 0" not in one and "heads (from 0)" not in one


def test_qkv_rejects_feature_labels_of_the_wrong_width(tmp_path):
    q = k = v = np.zeros((6, 5))
    with pytest.raises(ValueError, match="3 feature labels"):
        figures.plot_qkv_vectors(q, k, v, SENTENCE, tmp_path / "x.png", features=("a", "b", "c"))


@pytest.mark.parametrize("n_q, n_k, max_pixels", [(1000, 1000, 100), (1003, 517, 100), (37, 37, 512)])
def test_block_means_are_the_means_of_the_blocks(n_q, n_k, max_pixels):
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((n_q, 16)), rng.standard_normal((n_k, 16))
    weights = kernels.attention_weights(q, k, causal=True)
    image = figures.block_means(weights, max_pixels=max_pixels)
    b_q, b_k = image.block
    assert image.shape == (n_q, n_k) and (b_q, b_k) == (math.ceil(n_q / max_pixels), math.ceil(n_k / max_pixels))
    # the definition, block by block; the last blocks may be narrower
    expected = np.array([[weights[i : i + b_q, j : j + b_k].mean() for j in range(0, n_k, b_k)]
                         for i in range(0, n_q, b_q)])
    # both sum the same ~b² float64 values in different orders: rounding ~1e-16 relative
    np.testing.assert_allclose(image.means, expected, rtol=1e-12, atol=1e-18)
    # made from q and k a block of rows at a time: the same picture, causal alignment kept
    from_qk = figures.block_means((q, k), causal=True, max_pixels=max_pixels).means
    np.testing.assert_allclose(from_qk, expected, rtol=1e-12, atol=1e-18)


def test_block_means_refuse_causal_for_given_weights():
    with pytest.raises(ValueError, match="made from"):
        figures.block_means(np.eye(4), causal=True)


def test_large_attention_writes_png_from_weights_and_from_q_k(tmp_path, assert_png):
    rng = np.random.default_rng(4)
    q, k = rng.standard_normal((2, 1200, 16))
    assert_png(figures.plot_large_attention((q, k), tmp_path / "from_qk.png", causal=True))
    weights = kernels.attention_weights(q, k)
    assert_png(figures.plot_large_attention(weights, tmp_path / "from_weights.png", log_scale=False,
                                            tick_every=100))


def test_large_attention_never_holds_the_n_by_n_weights(tmp_path, assert_png):
    """Peak memory of the whole call (weights, pooling, drawing) against the 512 MiB the
    8192 × 8192 float64 weights would take.  What it needs is about two blocks of
    ROW_BLOCK_BYTES (16 MiB: the generator makes the next block before the last one is
    released) and matplotlib's drawing, ~60 MiB in all whatever n is; a quarter of n²·8
    leaves a wide margin on both sides."""
    n = 8192
    rng = np.random.default_rng(5)
    q, k = rng.standard_normal((2, n, 64))
    # matplotlib's import and font cache are one-off costs of the process, not of the call
    figures.plot_large_attention((q[:256], k[:256]), tmp_path / "warm_up.png", causal=True)
    try:
        peak = peak_extra_bytes(lambda: figures.plot_large_attention((q, k), tmp_path / "large.png", causal=True))
    except NotImplementedError as reason:
        pytest.skip(str(reason))
    full = n * n * 8
    print(f"peak extra {format_bytes(peak)}, n×n weights {format_bytes(full)}, "
          f"row block {format_bytes(ROW_BLOCK_BYTES)}")
    assert peak < full / 4
    assert_png(tmp_path / "large.png")
