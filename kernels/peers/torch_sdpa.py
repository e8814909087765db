"""External peer ``torch_sdpa``: PyTorch's ``scaled_dot_product_attention`` on the CPU.

Not a rung of ours: the baseline the fastest rung is measured against.  Registered
only when PyTorch is installed (``pip install 'attnbench[peers]'``).  The inputs are
handed over as 4-D (1, B, n, d) tensors sharing NumPy's memory: with 3-D input
PyTorch falls back to its unfused math path (about 4x slower on this machine).

Causal attention is passed as an explicit bottom-right boolean mask when n_q != n_k
(``is_causal`` aligns top-left), and rows that see no key are zeroed afterwards
(PyTorch returns NaN for them).

Half precision: bfloat16 and float16 inputs are handed over as PyTorch's own bfloat16
and float16 tensors, sharing NumPy's memory (``torch.from_numpy`` does not know
ml_dtypes' bfloat16: its bits go through a uint16 view and ``.view(torch.bfloat16)``),
so PyTorch runs its own half-precision kernel; its half result is widened into ``out``
(``copy_``, exact).  What it computes in (PyTorch 2.13, this AVX2 CPU; the dispatcher
picks the fused CPU flash kernel, ``torch._fused_sdp_choice`` = 1, for every form we
call, whenever d == d_v): ``aten/src/ATen/native/cpu/FlashAttentionKernel.cpp``
accumulates in ``opmath_type`` = float32: q·kᵀ is a bf16/f16 × bf16/f16 product into
float32 scores, softmax (max, exp, sums) in float32, then the probabilities P are
rounded to the input type before P·V (a bf16/f16 product, accumulated in float32), and
the float32 sum is divided by the row sum and rounded to the input type once.  These
are exactly the two 16-bit roundings the harness budget allows (P and the output):
on the harness cases its error is at most 0.34 unit roundoff of the 16-bit type, and
on a one-block case (bfloat16, n = 193) 87% of its outputs equal those of an exact
computation with P rounded to bfloat16, 61% those of one without.  With d != d_v the
flash kernel refuses ("Q/K/V should have the same head size") and PyTorch's math path runs, which widens
half inputs to float32 on the CPU and rounds the result once.
"""
import warnings

import numpy as np
import torch

from ..reference import causal_mask, first_seeing_row
from ..threads import budget

# NumPy dtype name -> (torch dtype, NumPy view dtype torch.from_numpy takes for its bits)
_HALF = {"bfloat16": (torch.bfloat16, np.uint16), "float16": (torch.float16, None)}


def _tensor(array):
    """``array`` (B, n, d) as a (1, B, n, d) tensor of its own type, sharing its memory."""
    torch_type, bits = _HALF.get(array.dtype.name, (None, None))
    if bits is not None:
        return torch.from_numpy(array.view(bits)).view(torch_type).unsqueeze(0)
    return torch.from_numpy(array).unsqueeze(0)


def run(q, k, v, out, causal, scale):
    if torch.get_num_threads() != budget():  # resizing the pool is not free: only on change
        torch.set_num_threads(budget())
    n_q, n_k = q.shape[1], k.shape[1]
    with warnings.catch_warnings():
        # read-only inputs are fine: PyTorch only reads them (out is a fresh tensor)
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        tq, tk, tv = (_tensor(a) for a in (q, k, v))
    mask, is_causal = None, False
    if causal and n_q == n_k:
        is_causal = True
    elif causal:
        mask = torch.from_numpy(causal_mask(n_q, n_k))
    with torch.inference_mode():
        result = torch.nn.functional.scaled_dot_product_attention(
            tq, tk, tv, attn_mask=mask, is_causal=is_causal, scale=scale
        )
        torch.from_numpy(out).copy_(result.squeeze(0))  # half -> float32: exact
    out[:, : first_seeing_row(n_q, n_k, causal)] = 0.0


def version():
    return torch.__version__
