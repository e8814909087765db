"""External peer ``jax_attention``: JAX's ``jax.nn.dot_product_attention``, compiled by XLA
for the CPU.

Not a rung of ours: a baseline the fastest rung is measured against.  Registered only
when ``jax`` is installed (``make peers``).  One jitted function per (causal form,
scale); XLA compiles it once per shape and dtype, and the warm-up call of a benchmark
pays that.

JAX wants (batch, n, heads, d): the (B, n, d) arrays go in as they are and are turned
into (1, n, B, d) inside the compiled function (measured: 25% faster than calling it
with B batches of one head, which costs no transpose), so the timed call includes
handing the arrays to XLA, the transposes and copying the result into ``out``, all
O(n·d) against the O(n²·d) attention.  It needs d_v == d: the narrower of q, k and
v is padded with zero columns inside the function, which changes no result.  Causal attention with n_q == n_k uses
``is_causal``; otherwise (it aligns top-left) a bottom-right mask built inside the
function from two ranges.  Rows that see no key are zeroed afterwards.

Half precision: bfloat16 and float16 arrays (ml_dtypes' and NumPy's) go to JAX as they
are, and JAX's own half-precision path runs; its half result is widened into ``out``.
What it computes in (JAX 0.10, XLA's CPU backend, read from the compiled HLO of a
bfloat16 call): q·kᵀ is a dot with algorithm ``dot_bf16_bf16_f32`` (float32 scores),
scaled, masked and softmaxed in float32; the normalised probabilities P are rounded to
the input type (``probs.astype(key.dtype)``) and widened again, v is widened, P·V is a
float32 product and its result is rounded to the input type: the two 16-bit roundings
the harness budget allows (P and the output).  On the harness's n = 193 case, in both
types, all its outputs equal those of an exact computation with P = softmax rounded to
the input type (57-58% those of one without); its errors stay within 0.62 u.

float16 takes the same path with one difference: ``dot_product_attention`` asks for the
dot algorithm ``F16_F16_F32``, which XLA's CPU backend does not support, and under ``jax.jit`` lowering fails ("The
precision 'F16_F16_F32' is not supported by dot_general on CPU"; its try/except
fallback to the default precision only catches the error when the call is not traced).
So float16 runs eagerly, op by op (each op compiled once and cached by JAX): the
fallback then gives a float16 × float16 dot with float32 scores (XLA's CPU compiler
performs float16 dots in float32), and the rest as for bfloat16.  Eager calls skip
XLA's fusion: every intermediate (scores, exponentials, P) is a whole n_q × n_k array.
bfloat16 goes the same way for the few shapes where XLA turns the dot into elementwise
code that rejects ``dot_bf16_bf16_f32`` (found: B = 1 with n_q = n_k = 1, or with
d = 1 and n_q or n_k = 1; "Algorithm not supported by the ElementalIrEmitter"): such a
call is retried eagerly, and that shape stays eager.

Grouped-query attention (k, v with B_kv = B / g heads, query head b reading K/V head
b // g): ``dot_product_attention`` takes it natively, K/V of (batch, n_k, K heads, d)
against a query of N = g·K heads, and the (1, n, heads, d) layout above hands it the
B query heads against the B_kv K/V heads as they are.  JAX 0.10's XLA implementation
(``jax/_src/nn/functions.py``, ``_dot_product_attention_xla``) reshapes the query to
(B, T, K, G, H), query head n = K index · G + G index, so head b reads K/V head b // g
as the contract says, and vmaps the core over G with K and V unmapped: no copy of K/V
per query head.  The compiled HLO of a grouped call (8 query heads on 2, n_q = 5, n_k =
300) shows it: K is transposed once to (2, 64, 300), B_kv heads, and the score product
is one batched dot f32[2, 20, 300], each K/V head against its g·n_q = 20 query rows
stacked (XLA folds the group into the rows itself).

Memory: O(n²): XLA's implementation holds the whole score matrix (``workspace_bytes``).

Declared limits (``kernels.registry``): float32, bfloat16 and float16 (the 16-bit types
held to the harness on the CPU it runs on, ``kernels.harness.probe``); not float64: with 64-bit
types enabled it returns float64 but computes the scores in float32 (errors ~1e-7
against the reference).  The thread budget is not honoured: XLA sizes its CPU thread
pool itself when the backend starts, and no flag of this version changes it.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..band import Band


def _attend(band, scale):
    """(q, k, v) (B, n, d) -> (B, n_q, d_v) for one band and scale, not compiled.  The band
    as its users give it: is_causal for square causal attention, local_window_size for a
    square window without sinks, else an explicit n_q × n_k mask (the shapes are static
    under jit: the mask is a constant of the compiled function)."""

    def attend(q, k, v):
        n_q, n_k, d, d_v = q.shape[1], k.shape[1], q.shape[2], v.shape[2]
        # it needs d_v == d: zero columns change neither q·k nor the weighted sum
        width = [(0, 0), (0, 0), (0, max(d, d_v) - d)]
        q, k = jnp.pad(q, width), jnp.pad(k, width)
        v = jnp.pad(v, [(0, 0), (0, 0), (0, max(d, d_v) - d_v)])
        form, options = band.library_form(n_q, n_k), {}
        if form == "causal":
            options["is_causal"] = True
        elif form == "mask" and band.windowed and not band.sinks and n_q == n_k:
            options["local_window_size"] = (band.left, n_k if band.right is None else band.right)
        elif form == "mask":
            options["mask"] = band.mask(n_q, n_k)
        heads_last = [jnp.swapaxes(x, 0, 1)[None] for x in (q, k, v)]
        y = jax.nn.dot_product_attention(*heads_last, scale=scale, **options)
        return jnp.swapaxes(y[0], 0, 1)[:, :, :d_v]

    return attend


@functools.lru_cache(maxsize=16)
def _compiled(band, scale):
    """jit of ``_attend``: one compiled function per band and scale."""
    return jax.jit(_attend(band, scale))


_EAGER = set()  # (shapes, band, scale) of bfloat16 calls XLA's CPU compiler rejected


def _unsupported_dot(error):
    """True for XLA's CPU refusal of the dot algorithm dot_product_attention asks for in
    half precision (``BF16_BF16_F32``, ``F16_F16_F32``), which its own fallback handles."""
    return "not supported" in str(error) and "_F32" in str(error)


def prepare(q, k, v, causal, scale, band=None):
    """call(): the jitted function (compiled here, on first use of these shapes) on device
    arrays put here, once -> its result, ready (``block_until_ready``), rows that see no
    key as JAX leaves them.  What a JAX user's call costs: the call times JAX alone."""
    band = band or Band.of(causal)
    arrays = tuple(jax.device_put(x) for x in (q, k, v))
    _, attend = _computed(*arrays, band, scale)
    return lambda: attend(*arrays).block_until_ready()


def run(q, k, v, out, causal, scale, band=None):
    """band: a window and sinks (``kernels.band``; None: full, or causal)."""
    band = band or Band.of(causal)
    result, _ = _computed(q, k, v, band, scale)
    out[...] = np.asarray(result)  # a half result widens exactly
    out[:, :band.first_row(q.shape[1], k.shape[1])] = 0.0


def _computed(q, k, v, band, scale):
    """(the call's result, the function that computed it): compiled, or, for float16 and
    the bfloat16 shapes XLA's CPU compiler rejects, ``_attend`` run eagerly."""
    key = (q.shape, k.shape, v.shape, band, scale)
    if q.dtype == np.float16 or key in _EAGER:
        # not traced: dot_product_attention's own fallback to the default dot precision runs
        attend = _attend(band, scale)
        return attend(q, k, v), attend
    try:
        attend = _compiled(band, scale)
        return attend(q, k, v), attend
    except (ValueError, jax.errors.JaxRuntimeError) as error:
        # bfloat16 when XLA turns a degenerate dot (B = 1, a size of 1) into elementwise code
        if q.dtype.itemsize != 2 or not _unsupported_dot(error):
            raise
        _EAGER.add(key)
        attend = _attend(band, scale)
        return attend(q, k, v), attend


def workspace_bytes(batch, n_q, n_k, d, d_v, itemsize, causal):
    """XLA holds the n_q × n_k scores and their softmax, in float32 whatever the inputs'
    type (measured peak per head, n = 2,048 and 4,096: 2.0-2.2 × the float32 scores in
    float32, and in bfloat16 without a mask; 3.2-3.3 × causal in bfloat16, where the
    rounded P is widened into one more array; up to 4.1 × in float16, run eagerly and
    unfused); bounded here by 5 × (``itemsize``, 4 for all three, cannot tell them apart)."""
    return 5 * batch * n_q * n_k * 4


def version():
    return jax.__version__
