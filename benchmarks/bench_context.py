"""Kernels where users run them: between two matrix products, as inside a model, and beside
a busy process, each against the same call alone and on one thread.

A parallel call is only as fast as the threads it waits for.  Inside a model NumPy's
OpenBLAS leaves its workers spinning on the other cores for ~0.1 s after every product;
on a shared machine another process holds a core.  ``kernels.threads`` says how our pool
copes; this measures it, for every kernel, the peers included.

Contexts (all threads):
- ``between_matmuls``: x (n, 384) @ w (384, 384) before and after each call, untimed: a
  MiniLM projection at the call's n;
- ``between_matmuls_blas_sleeps``: the same, measured in a child process whose OpenBLAS
  loaded with ``OPENBLAS_THREAD_TIMEOUT=20`` (its workers sleep after 2^20 cycles): what
  a user gains by asking the BLAS not to spin;
- ``busy_process``: a process spinning on one core, started by ``setup``, stopped
  (SIGSTOP) while the quiet blocks run and killed by ``teardown``.
Shapes (float32): ``tiny``, one head at n = 64, d = 64, where a call's fixed cost shows;
``layer``, 12 heads at n = 512, d = 32, one MiniLM layer's attention.

Each round times three blocks of calls, each call on its own: alone (all threads, after a
pause long enough for the BLAS workers of the last product to sleep), on one thread, and
in the context.  A figure is the median (and spread) over the rounds of the context
block's median time ÷ the alone (or one-thread) block's, so that load coming and going
between rounds falls on both.  ``naive`` is left out: pure Python is not what a model runs.
"""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

import kernels
from kernels import bench_spec as spec
from kernels.spread import asv_samples
from kernels.threads import BLAS_SPIN_VARIABLE

from .common import ThreadBudget, check_runs, make_inputs

BLAS_CALM_SECONDS = 0.3  # OpenBLAS's workers spin 2^28 cycles (0.1-0.15 s) after a product
BUSY_START_SECONDS = 0.02  # for the resumed busy process to be on a core again
BLAS_SLEEPS_AFTER = "20"  # 2^20 cycles, ~0.4 ms: a layer's products still find the workers awake
# The child that measures between_matmuls_blas_sleeps: this module, imported by its own name
# (asv imports the suite as a package through an importer of its own, so the child gets
# the package's parent folder on its path), measuring between_matmuls.
SUITE_PATH = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), *sys.path]
CHILD = """
import importlib, json, sys
module, kernel, shape, baseline = sys.argv[1:]
benchmark = importlib.import_module(module).InContext()
benchmark.setup(kernel, shape, "between_matmuls")
try:
    print(json.dumps(benchmark._rounds(shape, "between_matmuls", baseline)))
finally:
    benchmark.teardown(kernel, shape, "between_matmuls")
"""


class InContext(ThreadBudget):
    """A kernel's call in a context, as a multiple of the same call alone or on one thread."""

    params = [list(spec.CONTEXT_KERNELS), list(spec.CONTEXT_SHAPES), list(spec.CONTEXTS)]
    param_names = ["kernel", "shape", "context"]
    rounds, repeat, warmup_time, timeout = 1, 1, 0.0, 600

    def setup(self, kernel, shape, context):
        heads, seq_len, head_dim = spec.CONTEXT_SHAPES[shape]
        self.use_threads(kernels.threads.available_cpus(), kernel)
        q, k, v = make_inputs(heads, seq_len, spec.CONTEXT_DTYPE, head_dim=head_dim)
        check_runs(kernel, q, k, v)
        self.call = lambda: kernels.attention(q, k, v, kernel=kernel)
        rng = np.random.default_rng(1)
        x = rng.standard_normal((seq_len, spec.MODEL_WIDTH), dtype=np.float32)
        w = rng.standard_normal((spec.MODEL_WIDTH, spec.MODEL_WIDTH), dtype=np.float32)
        self.matmul = lambda: x @ w
        self.record = kernels.KERNELS[kernel]
        self.busy = None
        if context == "busy_process":
            self.busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            os.kill(self.busy.pid, signal.SIGSTOP)
        with kernels.threads.using_budget(1):
            self.call()  # warm-up on one thread too: a peer resizes its pool on a change
        self.call(), self.matmul()  # warm-up: compilation, sessions, pages

    def teardown(self, *params):
        if getattr(self, "busy", None) is not None:
            self.busy.kill()
            self.busy.wait()
        super().teardown(*params)

    def _block(self, calls, between_matmuls=False):
        """Median seconds of ``calls`` calls, each timed on its own."""
        seconds = []
        for _ in range(calls):
            if between_matmuls:
                self.matmul()
            start = time.perf_counter()
            self.call()
            seconds.append(time.perf_counter() - start)
            if between_matmuls:
                self.matmul()
        return float(np.median(seconds))

    def _rounds(self, shape, context, baseline):
        """``asv_samples`` of (context block ÷ ``baseline`` block) over the rounds; ``baseline``
        is "alone" or "one_thread"."""
        if baseline == "one_thread" and not self.record.honours_budget:
            return float("nan")  # its pool cannot be held to one thread: no such time
        if context == "between_matmuls_blas_sleeps":
            return self._in_child(shape, baseline)
        calls = spec.CONTEXT_CALLS[shape]
        ratios = []
        for _ in range(spec.CONTEXT_ROUNDS):
            time.sleep(BLAS_CALM_SECONDS)
            if baseline == "alone":
                reference = self._block(calls)
            else:
                with kernels.threads.using_budget(1):
                    reference = self._block(calls)
            if context == "busy_process":
                os.kill(self.busy.pid, signal.SIGCONT)
                time.sleep(BUSY_START_SECONDS)
                try:
                    seconds = self._block(calls)
                finally:
                    os.kill(self.busy.pid, signal.SIGSTOP)
            else:
                seconds = self._block(calls, between_matmuls=True)
            ratios.append(seconds / reference)
        return asv_samples(ratios)

    def _in_child(self, shape, baseline):
        """``_rounds`` of between_matmuls in a child whose BLAS loads with BLAS_SLEEPS_AFTER."""
        child = subprocess.run(
            [sys.executable, "-c", CHILD, __name__, self.record.name, shape, baseline],
            capture_output=True, text=True, timeout=self.timeout,
            env={**os.environ, BLAS_SPIN_VARIABLE: BLAS_SLEEPS_AFTER, "PYTHONPATH": os.pathsep.join(SUITE_PATH)})
        if child.returncode != 0:
            raise RuntimeError(f"the {BLAS_SPIN_VARIABLE}={BLAS_SLEEPS_AFTER} child failed:\n{child.stderr[-2000:]}")
        return json.loads(child.stdout.splitlines()[-1])

    def track_over_alone(self, kernel, shape, context):
        return self._rounds(shape, context, "alone")

    track_over_alone.unit = "times"

    def track_over_one_thread(self, kernel, shape, context):
        return self._rounds(shape, context, "one_thread")

    track_over_one_thread.unit = "times"
