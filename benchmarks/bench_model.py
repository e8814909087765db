"""A real transformer's cost, all-MiniLM-L6-v2 (``make model``): where attention starts to
dominate.

Per layer the four projections cost 8·n·d² flops and the feed-forward 16·n·d², against
4·n²·d for attention itself (d = 384), so at equal speed attention's share of a layer
crosses one half near n = 6·d = 2,304.  ``ModelLayer`` times the three parts of one
layer side by side at any n (on random hidden states: a layer needs no position table,
so n may pass the model's 512 positions); ``ModelForward`` times the whole forward pass
of random token ids up to 512.  Skipped when the model is not installed.
"""
import numpy as np

import kernels
from kernels import bench_spec as spec
from kernels.layers.multi_head import merge_heads, multi_head_projections
from kernels.spread import asv_samples

from .common import KERNEL_NAMES, check_runs, seconds_each, side_by_side


def load_model():
    from kernels.models import minilm

    try:
        return minilm, minilm.load()
    except minilm.ModelNotInstalled as missing:
        raise NotImplementedError(str(missing)) from None


class ModelLayer:
    """One MiniLM layer at n tokens: the attention core (softmax(Q Kᵀ/√32) V over 12 heads,
    by the kernel) against the four projections and the feed-forward, each the median of
    calls made in turn; the share of attention in their sum."""

    params = [KERNEL_NAMES, list(spec.MODEL_LAYER_SEQ_LENS)]
    param_names = ["kernel", "seq_len"]
    rounds, timeout = 1, 600

    def setup(self, kernel, seq_len):
        minilm, model = load_model()
        layer = model.layers[0]
        x = np.random.default_rng(0).standard_normal((seq_len, spec.MODEL_WIDTH)).astype(np.float32)
        q, k, v = multi_head_projections(x, *layer.attention[:3], heads=minilm.HEADS, biases=layer.biases)
        q, k, v = (np.ascontiguousarray(a) for a in (q, k, v))
        check_runs(kernel, q, k, v)
        w_o, b_o = layer.attention[3], layer.biases[3]
        self.parts = {
            "projections": lambda: merge_heads(multi_head_projections(
                x, *layer.attention[:3], heads=minilm.HEADS, biases=layer.biases)[2]) @ w_o + b_o,
            "attention": lambda: kernels.attention(q, k, v, kernel=kernel),
            "feed_forward": lambda: minilm.feed_forward(layer, x),
        }
        for part in self.parts.values():  # warm-up: JIT, extension, pages
            part()

    def track_attention_share(self, kernel, seq_len):
        seconds = seconds_each(self.parts, spec.MODEL_LAYER_REPEATS)
        layer = [sum(parts) for parts in zip(*seconds.values())]  # each repeat's three parts
        return asv_samples(attention / total for attention, total in zip(seconds["attention"], layer))

    track_attention_share.unit = "fraction"


class ModelForward:
    """The whole forward pass (embeddings, 6 layers) of n random token ids, n <= 512."""

    params = [KERNEL_NAMES, list(spec.MODEL_FORWARD_SEQ_LENS)]
    param_names = ["kernel", "seq_len"]
    rounds, repeat, timeout = 1, (1, 5, 5.0), 600

    def setup(self, kernel, seq_len):
        self.minilm, self.model = load_model()
        check_runs(kernel, *(np.empty((self.minilm.HEADS, seq_len, 32), np.float32),) * 3)
        self.ids = np.random.default_rng(0).integers(1000, 30000, size=seq_len)
        self.kernel = kernel
        self.time_forward(kernel, seq_len)  # warm-up

    def time_forward(self, kernel, seq_len):
        self.minilm.forward(self.model, self.ids, kernel=self.kernel)


class ModelForwardOverNumpy:
    """The whole forward pass on a kernel ÷ the same pass on the numpy rung, timed side by
    side: the model must get faster on a faster kernel, not slower (in the model, every
    call comes right after a matrix product)."""

    params = [[name for name in KERNEL_NAMES if name not in ("naive", "numpy")],
              list(spec.MODEL_OVER_NUMPY_SEQ_LENS)]
    param_names = ["kernel", "seq_len"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 600

    def setup(self, kernel, seq_len):
        minilm, model = load_model()
        check_runs(kernel, *(np.empty((minilm.HEADS, seq_len, 32), np.float32),) * 3)
        ids = np.random.default_rng(0).integers(1000, 30000, size=seq_len)
        self.numpy_pass = lambda: minilm.forward(model, ids, kernel="numpy")
        self.kernel_pass = lambda: minilm.forward(model, ids, kernel=kernel)
        self.numpy_pass(), self.kernel_pass()  # warm-up

    def track_time_over_numpy(self, kernel, seq_len):
        return side_by_side(self.kernel_pass, self.numpy_pass, spec.MODEL_OVER_NUMPY_ROUNDS[seq_len])

    track_time_over_numpy.unit = "times"
