"""MiniLM with its attention in half precision (issue 21): every committed sentence's
embedding stays within a bound of its float32 self, on every kernel that takes the type;
without ``attention_dtype`` the model is exactly what it was.

The bound.  For unit vectors 1 − cos(a, b) = |a − b|²/2, and the embedding moves linearly
in the roundings of q, k, v and the output, each at most the type's unit roundoff u
(2⁻⁸ bfloat16, 2⁻¹¹ float16): so 1 − cos grows as u².  Measured on the 30 sentences
(float32 model, 2 shared cores), 1 − the smallest cosine, in u², on one thread / two:

                   bfloat16        float16
    numpy          0.194 / 0.193   0.197 / 0.169      (min cosine 0.9999970 / 0.99999995)
    naive          0.194 / 0.193   0.196 / 0.176
    c_tiled        0.194 / 0.193   0.197 / 0.153
    numba_tiled    0.194 / 0.193   0.197 / 0.161
    torch_sdpa     0.165 / 0.170   0.129 / 0.156

The floor that rounding alone sets, float64 attention on the rounded inputs rounded once,
measured 0.194 u² (bfloat16) and 0.195 u² (float16): a float32 kernel lands on it to within
its summation order, which rounds some values the other way (so does the BLAS's: one
thread or two moved float16's worst by up to 30%).  The bound, 1 − cos <= 0.4·u², is
twice the worst of them: room for another kernel's or machine's order, while errors 1.4 times one rounding's fail it
(bfloat16 output truncated instead of rounded measured 0.52 u²; q, k, v each off by
another u at random, 0.49 u²).  In bfloat16 it is cos >= 0.9999939, far above the issue's
goal of 0.999.
"""
import dataclasses

import numpy as np
import pytest

import kernels
from kernels import dtypes
from kernels.models import fidelity, minilm
from kernels.models.head_analysis import sentences

BOUND_IN_U_SQUARED = 0.4   # 1 − min cosine <= this · u² (the module's docstring derives it)
NAIVE_STRIDE = 3           # pure Python takes ~10 s per type on the 30 sentences: every third


@pytest.fixture(autouse=True)
def one_thread():
    """MiniLM's products here are small (n <= 23 tokens): a second thread gains nothing, and
    on a shared machine a BLAS worker waiting for a busy core made them 6 times slower.  The
    figures move with it only by the BLAS's summation order (the module's docstring)."""
    with kernels.threads.using_budget(1):
        yield


def routes():
    """(kernel, dtype) for every registered kernel that takes each 16-bit type."""
    return [(name, dtype) for dtype in dtypes.HALF for name in kernels.KERNELS
            if kernels.KERNELS[name].refusal(dtype) is None]


def texts_taken(kernel):
    """The sentences ``kernel`` is measured on: all but above its size cap, and every
    NAIVE_STRIDE-th for naive; -> (texts, why any were left out)."""
    texts = sentences()[::NAIVE_STRIDE] if kernel == "naive" else sentences()
    record = kernels.KERNELS[kernel]
    taken = [text for text in texts if record.fits(minilm.HEADS, *(minilm.token_count(text),) * 2)]
    left = len(texts) - len(taken)
    return taken, f"{left} sentences above {kernel}'s cap {record.cap} left out" if left else ""


@pytest.mark.usefixtures("minilm_model")
@pytest.mark.parametrize("kernel, dtype", routes(), ids=[f"{k}-{d}" for k, d in routes()])
def test_half_attention_keeps_every_sentence_embedding(kernel, dtype):
    texts, left_out = texts_taken(kernel)
    if not texts:
        pytest.skip(left_out)
    cosines = fidelity.half_cosines(kernel, dtype, texts)
    u = dtypes.FLOATS[dtype].unit_roundoff
    assert cosines.shape == (len(texts),)
    assert cosines.min() >= 1 - BOUND_IN_U_SQUARED * u**2
    assert cosines.max() <= 1 + 1e-12


@pytest.mark.usefixtures("minilm_model")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_without_attention_dtype_the_model_is_what_it_was(dtype):
    """attention_dtype=None runs today's forward pass (written out below) bit for bit."""
    model = minilm.load(dtype)
    texts = sentences()[:4]
    embeddings = minilm.encode(texts, kernel="numpy", dtype=dtype, attention_dtype=None)
    np.testing.assert_array_equal(embeddings, minilm.encode(texts, kernel="numpy", dtype=dtype))
    for text, embedding in zip(texts, embeddings):
        ids = minilm.tokenize(text)[0]
        x = minilm.layer_norm(model.word[ids] + model.position[:len(ids)] + model.token_type[0],
                              *model.embedding_norm)
        for layer in model.layers:
            attended = kernels.multi_head_attention(x, *layer.attention, heads=minilm.HEADS, kernel="numpy",
                                                    biases=layer.biases)
            x = minilm.layer_norm(x + attended, *layer.attention_norm)
            x = minilm.layer_norm(x + minilm.feed_forward(layer, x), *layer.output_norm)
        pooled = x.mean(axis=0)
        np.testing.assert_array_equal(embedding, pooled / np.linalg.norm(pooled))


@pytest.mark.usefixtures("minilm_model")
def test_half_attention_keeps_the_head_mask():
    mask = np.ones((minilm.LAYERS, minilm.HEADS))
    mask[2, 5] = mask[4, :3] = 0
    text = "The cat sat on the mat"
    half = minilm.encode(text, kernel="numpy", attention_dtype="bfloat16", head_mask=mask)
    masked = minilm.encode(text, kernel="numpy", head_mask=mask)
    unmasked = minilm.encode(text, kernel="numpy", attention_dtype="bfloat16")
    assert 1 - float(half[0] @ masked[0]) < 1e-5 < 1 - float(half[0] @ unmasked[0])


@pytest.mark.usefixtures("model_missing")
@pytest.mark.parametrize("bad", ["float32", np.float64, np.int8, "bf16", np.dtype(np.float32)])
def test_a_bad_attention_dtype_is_a_type_error_before_the_model_is_loaded(bad):
    taken = r"has dtype \w+; half-precision attention takes bfloat16 or float16"
    with pytest.raises(TypeError, match="attention_dtype " + taken):
        minilm.encode("text", attention_dtype=bad)
    with pytest.raises(TypeError, match="attention_dtype " + taken):
        fidelity.half_cosines("numpy", bad)
    with pytest.raises(TypeError, match="attention_dtype must be bfloat16 or float16, got None"):
        fidelity.half_cosines("numpy", None)


@pytest.mark.usefixtures("minilm_model")
def test_the_benchmark_tracks_the_smallest_cosine_and_skips_a_refused_type(bench_modules, monkeypatch):
    benchmark = bench_modules["bench_half"].HalfFidelity()
    benchmark.setup("numpy", "float16")
    measured = benchmark.track_min_cosine("numpy", "float16")
    assert measured == fidelity.half_cosines("numpy", "float16").min()
    refusing = dataclasses.replace(kernels.KERNELS["c_tiled"], dtypes=dtypes.WIDE, dtype_note="not yet")
    monkeypatch.setitem(kernels.KERNELS, "c_tiled", refusing)
    with pytest.raises(NotImplementedError, match="c_tiled takes float32, float64 only: not yet"):
        benchmark.setup("c_tiled", "bfloat16")
