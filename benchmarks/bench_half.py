"""Half precision: what bfloat16 and float16 buy in speed and cost in a real model.

``HalfSpeedup``: a tiled rung's call in a 16-bit type against the same call in float32,
alternating in one process (``side_by_side``), so that both see the same load: 8 heads at
the headline n, full and causal, one thread and every CPU.

``HalfFidelity``: all-MiniLM-L6-v2's sentence embeddings with every layer's attention core
in bfloat16 or float16 (q, k, v rounded before the kernel, its output widened back),
against the same kernel's float32 embeddings (``kernels.models.fidelity``).  Not timed: the
figure is the smallest cosine over the 30 committed sentences, the same on every run of a
commit but for the BLAS's summation order (its thread count moved the eighth digit), so
one round.  Skipped when the model is not installed (``make model``) or the kernel does
not take the type.
"""
import functools

import numpy as np

import kernels
from kernels import bench_spec as spec
from kernels.dtypes import FLOATS

from .bench_model import load_model
from .common import THREAD_COUNTS, ThreadBudget, check_runs, make_inputs, side_by_side


class HalfSpeedup(ThreadBudget):
    """A rung's speed in a 16-bit type over itself in float32: the float32 call's time ÷ the
    16-bit call's, per round, timed side by side on the same values (the float32 inputs
    rounded to the 16-bit type)."""

    params = [list(spec.TILED), list(spec.HALF_SHAPES), THREAD_COUNTS, list(spec.HALF_DTYPES)]
    param_names = ["kernel", "shape", "threads", "dtype"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 900

    def setup(self, kernel, shape, threads, dtype):
        self.use_threads(threads, kernel)
        causal = shape == "causal"
        single = make_inputs(spec.HEADS, spec.HEADLINE_SEQ_LEN, "float32")
        self.calls = []
        for inputs in (single, tuple(x.astype(FLOATS[dtype].dtype) for x in single)):
            check_runs(kernel, *inputs, causal)
            self.calls.append(functools.partial(kernels.attention, *inputs, kernel=kernel, causal=causal))
            self.calls[-1]()  # warm-up: compilation (numba_tiled compiles per type), pages

    def track_speedup(self, kernel, shape, threads, dtype):
        return side_by_side(*self.calls, spec.HALF_ROUNDS)

    track_speedup.unit = "times"


class HalfFidelity:
    """min over the sentences of cosine(embedding, attention in ``dtype``; embedding, float32)."""

    params = [list(spec.HALF_FIDELITY_KERNELS), list(spec.HALF_DTYPES)]
    param_names = ["kernel", "dtype"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 600

    def setup(self, kernel, dtype):
        minilm, _ = load_model()
        from kernels.models import fidelity

        longest = max(map(minilm.token_count, fidelity.sentences()))
        check_runs(kernel, *(np.empty((minilm.HEADS, longest, 32), FLOATS[dtype].dtype),) * 3)
        self.fidelity = fidelity

    def track_min_cosine(self, kernel, dtype):
        return float(self.fidelity.half_cosines(kernel, dtype).min())

    track_min_cosine.unit = "cosine"
