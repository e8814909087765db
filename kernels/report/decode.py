"""The decode section (``CachedDecode``, ``RecomputedDecode``, ``TinyCall``, ``CallCost``): where §11.2
begins.  With a KV cache a new token costs O(n·d) and reads the cache once; recomputing
the prefix costs O(n²·d) per token.  Summed over n generated tokens: O(n²) against O(n³).
"""
import math

from .. import bench_spec as spec
from ..fits import FIT_MIN_N, fit_power_law
from ..memory import format_bytes
from ..output import Column, Table, fmt_exponent, fmt_percent, fmt_ratio, fmt_seconds, missing, pyplot, save_png
from . import plots
from .document import Plot, Section

SHAPE = f"{spec.HEADS} heads, d = {spec.HEAD_DIM}, {spec.DECODE_DTYPE}"


def decode_fits(run):
    """kernel -> (fit of cached per-token time, fit of recomputed per-token time)."""
    return {kernel: tuple(fit_power_law(*run.series(benchmark, kernel=kernel))
                          for benchmark in (spec.DECODE_CACHED, spec.DECODE_RECOMPUTED))
            for kernel in run.kernels(spec.DECODE_CACHED, spec.DECODE_RECOMPUTED)}


def cache_read_fraction(run, kernel, seq_len=None):
    """A cached step's read rate of the cache ÷ the streaming read's of as many bytes, the
    step and the read's own loop alternating round by round (``CachedDecodeReadFraction``,
    at ``seq_len``, default the largest n)."""
    seq_len = seq_len or max(run.seq_lens(spec.DECODE_READ_FRACTION), default=math.nan)
    return run.value(spec.DECODE_READ_FRACTION, kernel=kernel, seq_len=seq_len)


def call_cost(run, kernel, shape):
    """``CallCost``: ours as users call it (``kernels.attention``, ``KVCache.attend``) ÷ the
    rung's own ``run`` on the same arrays, side by side."""
    return run.value(spec.CALL_COST, kernel=kernel, shape=shape)


CALL_COST_WORDS = {"tiny": f"`kernels.attention`, one head, n = {spec.TINY_SEQ_LEN}",
                   "decode": f"`KVCache.attend`, one query over {spec.CALL_COST_CACHE:,} cached tokens"}


def decode(run):
    fits = decode_fits(run)
    exponent = lambda fit: fit.b if fit else math.nan
    slopes = Table("decode_slopes", (
        Column("kernel", "kernel"),
        Column("cached_per_token", "per token, cached", fmt_exponent),
        Column("recomputed_per_token", "per token, recomputed", fmt_exponent),
        Column("cached_total", "n tokens, cached", fmt_exponent),
        Column("recomputed_total", "n tokens, recomputed", fmt_exponent)),
        [[kernel, exponent(cached), exponent(recomputed), exponent(cached) + 1, exponent(recomputed) + 1]
         for kernel, (cached, recomputed) in fits.items()])
    largest = max(run.seq_lens(spec.DECODE_READ_RATE), default=math.nan)
    bandwidth = run.value(spec.READ_BANDWIDTH)
    reads = Table("decode_bandwidth", (
        Column("kernel", "kernel"), Column("seconds", "time per token", fmt_seconds),
        Column("gbytes_per_second", "cache read, GB/s", lambda v: f"{v:.1f}"),
        Column("fraction_of_read_bandwidth", "of the streaming read (side by side)", fmt_percent),
        Column("short_fraction_of_read_bandwidth", f"n = {spec.CALL_COST_CACHE:,}: of the read", fmt_percent)),
        [[kernel, run.value(spec.DECODE_CACHED, kernel=kernel, seq_len=largest),
          run.value(spec.DECODE_READ_RATE, kernel=kernel, seq_len=largest), cache_read_fraction(run, kernel),
          cache_read_fraction(run, kernel, spec.CALL_COST_CACHE)]
         for kernel in run.kernels(spec.DECODE_READ_RATE)])
    tiny = Table("tiny_call", (Column("kernel", "kernel"), Column("seconds", "time per call", fmt_seconds)),
                 [[kernel, run.value(spec.TINY_CALL, kernel=kernel)] for kernel in run.kernels(spec.TINY_CALL)])
    costs = Table("call_cost", (Column("kernel", "kernel"), Column("call", "the call"),
                                Column("over_run", "÷ the rung's own run", fmt_ratio)),
                  [[kernel, CALL_COST_WORDS[shape], call_cost(run, kernel, shape)]
                   for kernel in run.kernels(spec.CALL_COST) for shape in spec.CALL_COST_SHAPES])
    n_text = "n/a" if missing(largest) else f"{largest:,}"
    if missing(largest):
        memory = "No cached decode in these results."
    else:
        itemsize = spec.ITEMSIZE[spec.DECODE_DTYPE]
        cache_bytes = 2 * largest * spec.HEAD_DIM * spec.HEADS * itemsize
        score_bytes = spec.HEADS * largest * largest * itemsize
        memory = (f"At n = {n_text} the cache holds 2·n·d·heads·{itemsize} B = {format_bytes(cache_bytes)}; "
                  f"the n × n scores it saves recomputing would take {format_bytes(score_bytes)} "
                  f"({score_bytes / cache_bytes:,.0f}×).")

    def draw(path):
        plot_decode(run, fits, path)

    return Section("Decoding: the bridge to §11.2", [
        "Generating text one token at a time, each new token's query attends to every earlier "
        "token. Recomputing the prefix's causal attention for each new token costs O(n²·d); "
        "keeping the keys and values in a cache (`kernels.KVCache`) costs O(n·d): the new query "
        "reads the cache once, so a step is bound by memory bandwidth, not arithmetic. "
        f"Measured per token ({SHAPE}), against the prefix length n:",
        Plot("decode_vs_n.png", "Time per generated token against n, with and without a KV cache", draw),
        f"Fitted exponents (n ≥ {FIT_MIN_N:,}): per token ≈ 1 with the cache and ≈ 2 without; "
        "summed over n generated tokens, one more (≈ 2 against ≈ 3).",
        slopes,
        f"A cached step at n = {n_text} reads the cache's keys and values once; against the "
        f"machine's streaming read ({'n/a' if missing(bandwidth) else f'{bandwidth:.1f} GB/s'} "
        "alone, of a buffer beyond the caches), its share timed side by side: each round one step "
        "and one call of the read's own loop over as many bytes as the step reads (so that both "
        "find their bytes in the same level of the caches), each going first in turn "
        "(`CachedDecodeReadFraction`), so that a disturbed minute moves both; the same at "
        f"n = {spec.CALL_COST_CACHE:,}, a cache in L3, where the step's arithmetic and fixed cost "
        "show beside its reading. The read runs on our pool: a peer whose threads spin on after its "
        "call (PyTorch's OpenMP, ONNX Runtime's pool) holds the core the read's second thread then "
        "needs, so a peer's share can pass 100%; ours cannot, and the trust section checks it:",
        reads,
        memory,
        f"A tiny call (one head, n = {spec.TINY_SEQ_LEN}, d = {spec.HEAD_DIM}: about a megaflop) "
        "is all fixed cost: validation, dispatch and waking threads. A decoder makes one per "
        "token and layer. Each is timed as its users call it: ours through `kernels.attention`, "
        "with every check it makes; a peer through its own API on tensors of its own, made "
        "beforehand (no conversion or check of ours in its time).",
        tiny,
        "What the Python in front of a tiled rung costs a call: ours as users call it ÷ the rung's "
        "own `run` on the same arrays, its output made beforehand, side by side "
        f"({run.rounds(spec.CALL_COST, spec.CALL_COST_ROUNDS)} rounds of {spec.CALL_COST_CALLS} calls each). "
        "`kernels.attention` "
        "checks a call's signature once and keeps what it decided, and for c_tiled a step that "
        "passes the arrays to C with every other argument worked out at the first call; so does "
        "`KVCache.attend`, whose kept step passes the cache's buffers as worked out at its first "
        "call (the rung's `run` here works out shapes, band and layout every call, so the ratio can "
        "be below 1): after a step has streamed the cache through L2, each Python operation costs "
        "several times its warm cost.",
        costs,
    ])


def plot_decode(run, fits, path):
    """decode_vs_n.png: seconds per token against n, log-log, cached (solid) and recomputed
    (dotted) per kernel, with the fitted exponents."""
    fig, ax = pyplot().subplots(figsize=(9, 6))
    fig.suptitle(f"Time per generated token vs prefix length ({SHAPE})", fontsize=10)
    styles = plots.kernel_styles(run)
    drawn = []
    for kernel, (cached_fit, recomputed_fit) in fits.items():
        for benchmark, fit, linestyle, how in ((spec.DECODE_CACHED, cached_fit, "-", "cached"),
                                              (spec.DECODE_RECOMPUTED, recomputed_fit, ":", "recomputed")):
            seq_lens, seconds = run.series(benchmark, kernel=kernel)
            points = [(n, s) for n, s in zip(seq_lens, seconds) if not missing(s) and s > 0]
            if not points:
                continue
            slope = f"n^{{{fit.b:.2f}}}" if fit else "too few points to fit"
            ax.plot(*zip(*points), label=f"{plots.kernel_label(kernel)}, {how}: ${slope}$"
                    if fit else f"{plots.kernel_label(kernel)}, {how}: {slope}",
                    **dict(styles[kernel], linestyle=linestyle))
            plots.band(ax, *zip(*points), lambda n, s: s, styles[kernel]["color"])
            drawn += [n for n, _ in points]
    if not drawn:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no data in these results", transform=ax.transAxes, ha="center")
    else:
        plots.seq_len_axis(ax, min(drawn), max(drawn))
        ax.set_yscale("log")
        ax.set_ylabel("seconds per generated token (log scale)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    save_png(fig, path, caption=plots.machine_caption(run))
