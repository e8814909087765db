"""What a sliding window costs MiniLM (``kernels.models.fidelity.window_cosines``): a model
trained with full attention, every layer's attention windowed, its embeddings against its
own full-attention ones.  Needs the model (``make model``); skips without it."""
import numpy as np
import pytest

import kernels
from kernels.models import fidelity, minilm
from kernels.models.head_analysis import sentences

KERNELS = [name for name, kernel in kernels.KERNELS.items() if kernel.windows and name not in ("naive",)
           and not kernel.external]


@pytest.fixture(autouse=True)
def one_thread():
    """Small products (n <= 95 tokens): a second thread gains nothing (test_half_fidelity.py)."""
    with kernels.threads.using_budget(1):
        yield


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_window_wider_than_every_sentence_changes_nothing(minilm_model, kernel):
    """The longest bundled sentence has 23 tokens: a window of ±32 is full attention, and the
    tiled kernels walk the same tiles in the same order (float32 roundoff at most)."""
    assert max(map(minilm.token_count, sentences())) <= 32
    np.testing.assert_allclose(fidelity.window_cosines(kernel, 32), 1.0, atol=1e-6)


def test_wider_windows_keep_more_of_the_embedding_and_a_sink_keeps_most(minilm_model):
    """On the five paragraphs (66-95 tokens), measured on numba_tiled: mean cosine 0.24, 0.52,
    0.84 at ±2, ±8, ±32 tokens; keeping [CLS] visible (one sink) lifts ±2 to 0.71, ±8 to 0.84.
    BERT-style models park attention on [CLS] and [SEP]; a window that hides them moves every
    token's output, which a sink gives back (as StreamingLLM found for decoders)."""
    texts = fidelity.paragraphs()
    assert len(texts) == 5 and all(60 <= minilm.token_count(text) <= 100 for text in texts)
    means = [fidelity.window_cosines("numba_tiled", width, texts).mean() for width in (2, 8, 32)]
    assert means[0] < means[1] < means[2] < 1 - 1e-3
    sunk = [fidelity.window_cosines("numba_tiled", width, texts, sinks=1).mean() for width in (2, 8)]
    assert sunk[0] > means[0] + 0.2 and sunk[1] > means[1] + 0.1

