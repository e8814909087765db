"""How far half-precision attention, or a sliding window, moves MiniLM's sentence embeddings.

    half_cosines("c_tiled", "bfloat16")    (30,) one cosine per sentence of sentences.txt
    window_cosines("c_tiled", 8)           (30,) the same, every layer attending to ±8 tokens
    window_cosines("c_tiled", 8, paragraphs())   (5,) on five paragraphs of ~90 tokens

With ``attention_dtype``, every layer's q, k, v are rounded to the 16-bit type before the
kernel and its output widened back (``kernels.multi_head_attention``'s
``attention_dtype``); everything else stays float32.  Each sentence's embedding so made is
compared with the same kernel's float32 embedding by their cosine: 1 is no change, and
all-MiniLM-L6-v2's embeddings are compared by cosine, so 1 − cosine is the error a user of
them sees.  It grows as u², u the type's unit roundoff (tests/test_half_fidelity.py has
the figures and the bound).

A window (``window_cosines``): every layer's attention sees the w tokens on either side of
each token only (``kernels.attention``'s window=(w, w)), the cost of attention falling from
O(n²) to O(n·w).  The model was trained with full attention, so the cosine against its full
embedding is what the window takes from it: what a token can no longer retrieve in one layer
it may still reach through the six layers' stacked windows (6·w tokens away), and not beyond.
"""
import numpy as np

from ..layers.multi_head import attention_type
from . import minilm
from .head_analysis import sentences


def half_cosines(kernel, attention_dtype, texts=None):
    """cosine(embedding with attention in ``attention_dtype``, embedding in float32) per
    text of ``texts`` (default: the 30 of ``sentences()``) -> float64 (len(texts),), both
    made by ``kernel`` on the float32 model.

    Cost: two forward passes per text, each 6 layers of 24·n·d² + 4·n²·d flops (d = 384)
    and the roundings, O(n·d): for the 30 sentences (5 to 23 tokens), on one thread,
    about 2 s on numpy or a tiled kernel, 10 s on naive (pure Python).
    ValueError when the kernel does not take the dtype, or a text above its size cap;
    TypeError for an ``attention_dtype`` other than bfloat16 or float16 (None too: it would
    compare float32 with itself).
    """
    if attention_dtype is None:
        raise TypeError("attention_dtype must be bfloat16 or float16, got None")
    attention_type(attention_dtype)
    texts = list(sentences() if texts is None else texts)
    single = minilm.encode(texts, kernel=kernel).astype(np.float64)
    half = minilm.encode(texts, kernel=kernel, attention_dtype=attention_dtype).astype(np.float64)
    return np.einsum("ij,ij->i", single, half) / (np.linalg.norm(single, axis=1) * np.linalg.norm(half, axis=1))


PARAGRAPH = 6  # sentences joined into one of the long texts


def paragraphs():
    """The bundled sentences joined, PARAGRAPH at a time, into five longer texts (67-95
    tokens): where a window of a few tokens leaves most of a text out of each token's reach."""
    texts = sentences()
    return tuple(" ".join(texts[i:i + PARAGRAPH]) for i in range(0, len(texts), PARAGRAPH))


def window_cosines(kernel, width, texts=None, sinks=0):
    """cosine(embedding with every layer's attention windowed to (width, width), and the first
    ``sinks`` tokens besides ([CLS], for 1), full-attention embedding) per text of ``texts`` (default: the 30 of ``sentences()``) -> float64
    (len(texts),), both made by ``kernel`` (one that takes a window: ``Kernel.windows``).

    Cost: two forward passes per text (the windowed one's attention O(n·width) instead of
    O(n²)), about 2 s for the 30 sentences and 1 s for the paragraphs on a tiled kernel.
    ValueError for a width below 0 or a kernel that takes no window."""
    texts = list(sentences() if texts is None else texts)
    full = minilm.encode(texts, kernel=kernel).astype(np.float64)
    windowed = minilm.encode(texts, kernel=kernel, window=(width, width), sinks=sinks).astype(np.float64)
    return np.einsum("ij,ij->i", full, windowed) / (np.linalg.norm(full, axis=1) * np.linalg.norm(windowed, axis=1))
