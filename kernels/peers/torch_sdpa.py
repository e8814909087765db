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

Grouped-query attention (k, v with B_kv = B / g heads, query head b reading K/V head
b // g): K and V are never copied per query head.  Two forms, both exact to the
contract's bottom-right causal alignment:

- folded: q viewed as (1, B_kv, g·n_q, d), the g query heads of one K/V head stacked as
  rows of one head (a view: they are consecutive in q's memory), against k (1, B_kv,
  n_k, d) as a plain multi-head call; out is viewed the same way.  Exact for
  non-causal calls and for n_q == 1 (one query row sees every key, causal or not); for
  causal calls the (n_q, n_k) mask is tiled g times down the rows (np.tile, g·n_q·n_k
  booleans).
- ``enable_gqa=True`` on (1, B, n_q, d) against (1, B_kv, n_k, d), with ``is_causal``
  (n_q == n_k) or the bottom-right mask.  With d == d_v the dispatcher still picks the
  fused CPU flash kernel (``torch._fused_sdp_choice`` = 1 for GQA inputs in all three
  types; the profiler shows ``aten::_scaled_dot_product_flash_attention_for_cpu`` and
  no ``repeat_interleave``): it reads the K/V head b // g in place.  With d != d_v the
  math path runs and does repeat K/V (``aten::repeat_interleave``, a copy of g × K/V).

Which one (PyTorch 2.13, 2 threads, float32, 8 query heads on 2, d = 64; medians of
15 on a shared machine, so ±20%): the fold is never slower where it needs no mask, and
much faster for decode, where the flash kernel's parallel tasks are (head, query block) and each
streams its whole K/V head: n_q = 1, n_k = 65,536: 25.9 ms with enable_gqa, 10.9 ms
folded (bfloat16 76.6 / 8.2 ms, float16 106.6 / 28.8 ms); n_q = n_k = 2,048: 90 / 86 ms.
Causal: with n_q == n_k, ``is_causal`` lets the flash kernel skip the blocks above the
diagonal and a mask does not (n = 2,048: 56 ms enable_gqa + is_causal, 516 ms folded
with a tiled mask); with n_q != n_k both forms take a mask, and the fold wins while
the g·n_q stacked rows are few (n_q = 4, n_k = 65,536: 51 / 20 ms; n_q = 40, n_k =
8,192: 18 / 15 ms; g·n_q = 256 and 512 about even) and loses above (n_q = 1,500, n_k =
2,048: 76 / 108 ms).  So: folded unless causal with n_q > 1 and (n_q == n_k or g·n_q >
``FOLD_ROWS`` = 256); otherwise ``enable_gqa``.  Group 1 takes the same branches (the
fold is then the call as it was; causal n_q == 1 now goes without a mask, same result).
"""
import warnings

import numpy as np
import torch

from ..band import Band
from ..threads import budget

# NumPy dtype name -> (torch dtype, NumPy view dtype torch.from_numpy takes for its bits)
_HALF = {"bfloat16": (torch.bfloat16, np.uint16), "float16": (torch.float16, None)}


def _tensor(array):
    """``array`` (B, n, d) as a (1, B, n, d) tensor of its own type, sharing its memory."""
    torch_type, bits = _HALF.get(array.dtype.name, (None, None))
    if bits is not None:
        return torch.from_numpy(array.view(bits)).view(torch_type).unsqueeze(0)
    return torch.from_numpy(array).unsqueeze(0)


FOLD_ROWS = 256  # stacked query rows per K/V head up to which a masked causal call is folded


def prepare(q, k, v, causal, scale, band=None):
    """call(): PyTorch's scaled_dot_product_attention on tensors made here, once, from q, k,
    v (sharing their memory), with the mask or is_causal flag that says ``band`` (None:
    full, or causal) -> its (1, ·, ·, d_v) result tensor, rows in ``run``'s order (rows that
    see no key are NaN).  What a PyTorch user's call costs: the call times PyTorch alone."""
    band = band or Band.of(causal)
    if torch.get_num_threads() != budget():  # resizing the pool is not free: only on change
        torch.set_num_threads(budget())
    (batch, n_q, d), (batch_kv, n_k) = q.shape, k.shape[:2]
    group = batch // batch_kv
    form = band.library_form(n_q, n_k)
    with warnings.catch_warnings():
        # read-only inputs are fine: PyTorch only reads them (out is a fresh tensor)
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        tq, tk, tv = (_tensor(a) for a in (q, k, v))
    mask, is_causal, grouped = None, False, {}
    fold = form == "none" or (form == "mask" and group * n_q <= FOLD_ROWS)
    if fold:
        # the g query heads of each K/V head as g·n_q rows of one head (a view)
        tq = tq.view(1, batch_kv, group * n_q, d)
        if form == "mask":
            mask = torch.from_numpy(np.tile(band.mask(n_q, n_k), (group, 1)))
    else:
        if group > 1:
            grouped = {"enable_gqa": True}
        if form == "causal":
            is_causal = True
        else:
            mask = torch.from_numpy(band.mask(n_q, n_k))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return lambda: sdpa(tq, tk, tv, attn_mask=mask, is_causal=is_causal, scale=scale, **grouped)


def run(q, k, v, out, causal, scale, band=None):
    """band: a window and sinks (``kernels.band``; None: full, or causal), as an explicit
    n_q × n_k attn_mask where is_causal (aligned top-left) does not say it."""
    band = band or Band.of(causal)
    call = prepare(q, k, v, causal, scale, band)
    with torch.inference_mode():
        # half -> float32: exact; a folded result's rows are out's rows, in order
        torch.from_numpy(out).copy_(call().reshape(out.shape))
    out[:, :band.first_row(q.shape[1], k.shape[1])] = 0.0


def version():
    return torch.__version__
