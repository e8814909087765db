"""External peer ``jax_attention``: JAX's ``jax.nn.dot_product_attention``, compiled by XLA
for the CPU.

Not a rung of ours: a baseline the fastest rung is measured against.  Registered only
when ``jax`` is installed (``make peers``).  One jitted function per (causal form,
scale); XLA compiles it once per shape, and the warm-up call of a benchmark pays that.

JAX wants (batch, n, heads, d): the (B, n, d) arrays go in as they are and are turned
into (1, n, B, d) inside the compiled function (measured: 25% faster than calling it
with B batches of one head, which costs no transpose), so the timed call includes
handing the arrays to XLA, the transposes and copying the result into ``out``, all
O(n·d) against the O(n²·d) attention.  It needs d_v == d: the narrower of q, k and
v is padded with zero columns inside the function, which changes no result.  Causal attention with n_q == n_k uses
``is_causal``; otherwise (it aligns top-left) a bottom-right mask built inside the
function from two ranges.  Rows that see no key are zeroed afterwards.

Memory: O(n²): XLA's implementation holds the whole score matrix (``workspace_bytes``).

Declared limits (``kernels.registry``): float32 only: with 64-bit types enabled it
returns float64 but computes the scores in float32 (errors ~1e-7 against the
reference).  The thread budget is not honoured: XLA sizes its CPU thread pool itself
when the backend starts, and no flag of this version changes it.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..reference import first_seeing_row


@functools.lru_cache(maxsize=16)
def _compiled(causal, square, scale):
    """jit of (q, k, v) (B, n, d) -> (B, n_q, d_v) for one causal form and scale."""

    def attend(q, k, v):
        n_q, n_k, d, d_v = q.shape[1], k.shape[1], q.shape[2], v.shape[2]
        # it needs d_v == d: zero columns change neither q·k nor the weighted sum
        width = [(0, 0), (0, 0), (0, max(d, d_v) - d)]
        q, k = jnp.pad(q, width), jnp.pad(k, width)
        v = jnp.pad(v, [(0, 0), (0, 0), (0, max(d, d_v) - d_v)])
        mask = None
        if causal and not square:
            mask = jnp.arange(n_k)[None, :] <= jnp.arange(n_q)[:, None] + (n_k - n_q)
        heads_last = [jnp.swapaxes(x, 0, 1)[None] for x in (q, k, v)]
        y = jax.nn.dot_product_attention(*heads_last, mask=mask, scale=scale,
                                         is_causal=causal and square)
        return jnp.swapaxes(y[0], 0, 1)[:, :, :d_v]

    return jax.jit(attend)


def run(q, k, v, out, causal, scale):
    n_q, n_k = q.shape[1], k.shape[1]
    out[...] = np.asarray(_compiled(causal, n_q == n_k, scale)(q, k, v))
    out[:, : first_seeing_row(n_q, n_k, causal)] = 0.0


def workspace_bytes(batch, n_q, n_k, d, d_v, itemsize, causal):
    """XLA holds the n_q × n_k scores and their softmax (measured peak: 2.0-2.1 × the
    float32 scores at n = 2,048 and 4,096); bounded here by 3 ×."""
    return 3 * batch * n_q * n_k * 4


def version():
    return jax.__version__
