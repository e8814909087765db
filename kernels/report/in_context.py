"""The in-context section (``InContext``, ``ModelForwardOverNumpy``): each kernel where
users run it, between two matrix products and beside a busy process, as a multiple of the
same call alone and on one thread; and MiniLM's forward pass on each kernel against numpy.
"""
from .. import bench_spec as spec
from ..output import Column, Table, fmt_ratio
from ..threads import BLAS_SPIN_VARIABLE
from .document import Section

CONTEXT_WORDS = {"between_matmuls": "between two matmuls",
                 "between_matmuls_blas_sleeps": "between matmuls, BLAS asked to sleep",
                 "busy_process": "beside a busy process"}


def in_context(run, kernel, shape, context, baseline="alone"):
    """The kernel's call in ``context`` ÷ the same call alone (``baseline="alone"``) or on
    one quiet thread (``"one_thread"``); NaN when not measured."""
    benchmark = spec.CONTEXT_OVER_ALONE if baseline == "alone" else spec.CONTEXT_OVER_ONE_THREAD
    return run.value(benchmark, kernel=kernel, shape=shape, context=context)


def forward_over_numpy(run, kernel, seq_len):
    """MiniLM's forward pass on ``kernel`` ÷ on numpy, side by side; NaN when not measured."""
    return run.value(spec.MODEL_OVER_NUMPY, kernel=kernel, seq_len=seq_len)


def _shape_words(shape):
    heads, seq_len, head_dim = spec.CONTEXT_SHAPES[shape]
    return f"{shape}: {heads} head{'s' if heads > 1 else ''}, n = {seq_len}, d = {head_dim}"


def in_context_section(run):
    rows = []
    for kernel in run.kernels(spec.CONTEXT_OVER_ALONE):
        for shape in [s for s in spec.CONTEXT_SHAPES if s in run.param_values(spec.CONTEXT_OVER_ALONE, "shape")]:
            rows.append([kernel, _shape_words(shape)] + [
                in_context(run, kernel, shape, context, baseline)
                for context in spec.CONTEXTS for baseline in ("alone", "one_thread")])
    table = Table("in_context", (Column("kernel", "kernel"), Column("shape", "shape")) + tuple(
        Column(f"{context}_over_{baseline}", f"{CONTEXT_WORDS[context]} ÷ {words}", fmt_ratio)
        for context in spec.CONTEXTS
        for baseline, words in (("alone", "alone"), ("one_thread", "one thread"))), rows)
    forward_seq_lens = run.seq_lens(spec.MODEL_OVER_NUMPY)
    forward = Table("model_forward_over_numpy", (Column("kernel", "kernel"),) + tuple(
        Column(f"over_numpy_at_{n}", f"n = {n:,}", fmt_ratio) for n in forward_seq_lens), [
        [kernel] + [forward_over_numpy(run, kernel, n) for n in forward_seq_lens]
        for kernel in run.kernels(spec.MODEL_OVER_NUMPY)])
    return Section("In context: between matrix products and beside other work", [
        "A kernel is only as fast as it is where it runs. Inside a model every attention call "
        "comes right after a matrix product, whose BLAS workers keep spinning on the other "
        "cores for about 0.1 s (OpenBLAS's default); on a shared machine another process "
        "holds a core. A fork-join thread pool then waits for a thread that cannot get a "
        "core; ours (`kernels.threads`) lets the calling thread do the work and never waits "
        "for a helper that has not started. Each figure is the median over rounds of a block "
        "of calls in the context ÷ a block alone (all threads, after the BLAS workers slept) "
        "or on one quiet thread, float32, all threads. Below 1.0 ÷ one thread means the "
        "second core still helped; near 1.0 means the call ran at one thread's speed rather "
        "than stalling. Between matmuls the second core belongs to the BLAS's spinning "
        f"worker; \"BLAS asked to sleep\" is the same context in a process started with "
        f"`{BLAS_SPIN_VARIABLE}=20`, whose OpenBLAS workers sleep after 2^20 cycles instead "
        "and give that core back.",
        table,
        "MiniLM's whole forward pass (embeddings and 6 layers, random token ids) on each "
        "kernel ÷ the same pass on numpy, timed side by side: a faster kernel must make the "
        "model faster.",
        forward,
    ])
