"""How far half-precision attention moves MiniLM's sentence embeddings.

    half_cosines("c_tiled", "bfloat16")    (30,) one cosine per sentence of sentences.txt

With ``attention_dtype``, every layer's q, k, v are rounded to the 16-bit type before the
kernel and its output widened back (``kernels.multi_head_attention``'s
``attention_dtype``); everything else stays float32.  Each sentence's embedding so made is
compared with the same kernel's float32 embedding by their cosine: 1 is no change, and
all-MiniLM-L6-v2's embeddings are compared by cosine, so 1 − cosine is the error a user of
them sees.  It grows as u², u the type's unit roundoff (tests/test_half_fidelity.py has
the figures and the bound).
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
