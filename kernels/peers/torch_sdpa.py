"""External peer ``torch_sdpa``: PyTorch's ``scaled_dot_product_attention`` on the CPU.

Not a rung of ours: the baseline the fastest rung is measured against.  Registered
only when PyTorch is installed (``pip install 'attnbench[peers]'``).  The inputs are
handed over as 4-D (1, B, n, d) tensors sharing NumPy's memory: with 3-D input
PyTorch falls back to its unfused math path (about 4x slower on this machine).

Causal attention is passed as an explicit bottom-right boolean mask when n_q != n_k
(``is_causal`` aligns top-left), and rows that see no key are zeroed afterwards
(PyTorch returns NaN for them).
"""
import warnings

import torch

from ..reference import causal_mask, first_seeing_row
from ..threads import budget


def run(q, k, v, out, causal, scale):
    if torch.get_num_threads() != budget():  # resizing the pool is not free: only on change
        torch.set_num_threads(budget())
    n_q, n_k = q.shape[1], k.shape[1]
    with warnings.catch_warnings():
        # read-only inputs are fine: PyTorch only reads them (out is a fresh tensor)
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        tq, tk, tv = (torch.from_numpy(a).unsqueeze(0) for a in (q, k, v))
    mask, is_causal = None, False
    if causal and n_q == n_k:
        is_causal = True
    elif causal:
        mask = torch.from_numpy(causal_mask(n_q, n_k))
    with torch.inference_mode():
        result = torch.nn.functional.scaled_dot_product_attention(
            tq, tk, tv, attn_mask=mask, is_causal=is_causal, scale=scale
        )
    out[...] = result.squeeze(0).numpy()
    out[:, : first_seeing_row(n_q, n_k, causal)] = 0.0


def version():
    return torch.__version__
