"""The section "Ways out of the quadratic" (``bench_window``: ``WindowSeqLen``,
``BoundedDecode``, ``BoundedOverUnbounded``, ``WindowPeers``, ``WindowFidelity``): §11.2's
first answer to the O(n²) wall.  A sliding window lets each query see its w newest keys:
O(n·w) time for a kernel that skips the tiles outside the band, at the price of everything
further back (attention sinks give back the first few tokens), which ``WindowFidelity``
prices on a trained model; a bounded KV cache is the same idea when decoding, constant time
and bytes per token however long the text.

Every figure a goal reads is measured here: ``window_speedup``, ``window_exponent_error``,
``band_fraction``, ``bounded_over_unbounded``, ``bounded_bytes_growth`` and
``window_peer_speedup``.  A figure that is missing is shown as "not measured", with why
(``not_measured``).
"""
import math

from .. import bench_spec as spec
from ..band import CAUSAL, FULL
from ..fits import exponent_with_spread, fit_power_law
from ..memory import format_bytes
from ..output import (Column, Table, fmt_count, fmt_exponent, fmt_gflops, fmt_percent, fmt_ratio, fmt_seconds,
                      interval, missing, pyplot, ratio, save_png)
from ..registry import KERNELS
from ..spread import Measured, bounds
from . import plots
from .document import Plot, Section
from .results import FAILED, SKIPPED

SHAPE = f"{spec.HEADS} heads, d = {spec.HEAD_DIM}, {spec.WINDOW_DTYPE}"
GOAL_SHAPE = spec.WINDOW_GOAL_BAND.describe()
NO_WINDOW = "the kernel took no window when this ran"
NOT_INSTALLED = "not installed, or the kernel took no window when this ran"
NO_MODEL = f"all-MiniLM-L6-v2 was not installed (`make model`), or {spec.WINDOW_FIDELITY_KERNEL} took no window, " \
           "when this ran"


def not_measured(run, benchmark, skipped_because, **params):
    """Why ``benchmark`` has no value at ``params``: "not measured: ..." naming the reason
    (``skipped_because``, for a case asv skipped: its reason is not kept in the results)."""
    records = run.exactly(benchmark, **params)
    if not records:
        return "not measured: not in these results (a quick run measures smaller sizes)"
    if records[0].status == FAILED:
        return "not measured: failed (see Gaps)"
    return f"not measured: skipped ({skipped_because})" if records[0].status == SKIPPED else ""


def _shown(fmt):
    """A cell format that shows a reason (text) as it is and a figure in ``fmt``."""
    return lambda value: value if isinstance(value, str) else fmt(value)


def _or_reason(value, run, benchmark, skipped_because, **params):
    return not_measured(run, benchmark, skipped_because, **params) if missing(value) else value


def _skip_reason(shape):
    """Why asv skipped a ``WindowSeqLen`` case of ``shape``."""
    if not spec.WINDOW_SHAPES.get(shape, FULL).windowed:
        return "full and causal attention stop at a smaller n: a call there takes minutes"
    return NO_WINDOW


# -- the figures the goals read -------------------------------------------------------------

def window_time(run, kernel, shape, seq_len):
    return run.value(spec.WINDOW_TIME, kernel=kernel, seq_len=seq_len, shape=shape)


def window_speedup(run, kernel):
    """Causal attention's time ÷ the goal's window's (2,048) at n = 65,536: what the window
    saves.  Two separately timed calls (a causal one takes a minute: not side by side)."""
    return ratio(window_time(run, kernel, CAUSAL.describe(), spec.WINDOW_GOAL_SEQ_LEN),
                 window_time(run, kernel, GOAL_SHAPE, spec.WINDOW_GOAL_SEQ_LEN))


def windows(run):
    """The window shapes these results hold, in the spec's order."""
    measured = run.param_values(spec.WINDOW_TIME, "shape")
    return [shape for shape in spec.WINDOW_SHAPES if shape in measured and spec.WINDOW_SHAPES[shape].windowed]


def exponent(run, kernel, shape):
    """(the fitted power law of time against n, its exponent with the spread the times'
    quartiles allow: ``fits.exponent_with_spread``) over every n measured."""
    seq_lens, seconds = run.series(spec.WINDOW_TIME, kernel=kernel, shape=shape)
    fit = fit_power_law(seq_lens, seconds)
    return fit, exponent_with_spread(fit, seq_lens, seconds)


def window_exponent_error(run, kernel, shape=GOAL_SHAPE):
    """|b − 1| of the window's fitted time exponent (default: the goals' window): a fixed
    window is O(n) once n is well past it.  Its range runs from the closest to 1 of the
    exponent's interval to the farthest."""
    b = exponent(run, kernel, shape)[1]
    if missing(b):
        return math.nan
    low, high = bounds(b)
    closest = 0.0 if low <= 1 <= high else min(abs(low - 1), abs(high - 1))
    return Measured(abs(b - 1), min(closest, abs(b - 1)), max(abs(low - 1), abs(high - 1), abs(b - 1)),
                    getattr(b, "n", 1))


def band_gflops(run, kernel, shape, seq_len):
    return run.value(spec.WINDOW_GFLOPS, kernel=kernel, seq_len=seq_len, shape=shape)


def full_seq_len(run, kernel):
    """The largest n at which the kernel's full attention was measured (NaN: none)."""
    seq_lens, values = run.series(spec.WINDOW_GFLOPS, kernel=kernel, shape=FULL.describe())
    return max((n for n, value in zip(seq_lens, values) if not missing(value)), default=math.nan)


def band_fraction(run, kernel, shape, seq_len=None):
    """The window's band GFLOP/s ÷ the same kernel's full-attention GFLOP/s at the same n
    (default: the largest n where full attention ran)."""
    seq_len = full_seq_len(run, kernel) if seq_len is None else seq_len
    return ratio(band_gflops(run, kernel, shape, seq_len), band_gflops(run, kernel, FULL.describe(), seq_len))


def largest_seen(run):
    return max(run.param_values(spec.BOUNDED_OVER_UNBOUNDED, "seen"), default=math.nan)


def bounded_over_unbounded(run, kernel, seen=None):
    """The bounded cache's step after ``seen`` tokens (default: the most) ÷ the unbounded
    step on a cache of sinks + window tokens, side by side."""
    seen = largest_seen(run) if seen is None else seen
    return run.value(spec.BOUNDED_OVER_UNBOUNDED, kernel=kernel, seen=seen)


def bounded_bytes_growth(run, kernel):
    """The bounded cache's bytes after the fewest tokens seen ÷ after the most: 1 when
    constant, below 1 when it grows."""
    seen = run.param_values(spec.BOUNDED_BYTES, "seen")
    if len(seen) < 2:
        return math.nan
    return ratio(*(run.value(spec.BOUNDED_BYTES, kernel=kernel, cache="bounded", seen=n) for n in (seen[0], seen[-1])))


def window_peer_speedup(run, peer, kernel):
    """The kernel's speed over ``peer`` with a window: the peer's time ÷ ours, side by side."""
    return run.value(spec.WINDOW_PEER_SPEEDUP, peer=peer, kernel=kernel)


def smallest_peer_speedup(run, kernel, native):
    """The kernel's smallest speed over the peers that take a window natively (``native``:
    ``bench_spec.WINDOW_NATIVE_PEERS``) or that mask (the others)."""
    values = [window_peer_speedup(run, peer, kernel) for peer in spec.PEERS
              if (peer in spec.WINDOW_NATIVE_PEERS) == native]
    values = [value for value in values if not missing(value)]
    return min(values, key=float) if values else math.nan


# -- tables -------------------------------------------------------------------------------

def time_table(run):
    """One row per (kernel, shape), the time of one call at each n."""
    seq_lens = run.param_values(spec.WINDOW_TIME, "seq_len")
    rows = [[kernel, shape] + [_or_reason(window_time(run, kernel, shape, n), run, spec.WINDOW_TIME,
                                          _skip_reason(shape), kernel=kernel, seq_len=n, shape=shape)
                               for n in seq_lens]
            for kernel in run.kernels(spec.WINDOW_TIME) for shape in _shapes(run)]
    return Table("window_time", (Column("kernel", "kernel"), Column("shape", "attention"),
                                 *(Column(f"seconds_{n}", f"n = {n:,}", _shown(fmt_seconds)) for n in seq_lens)),
                 rows)


def _shapes(run):
    measured = run.param_values(spec.WINDOW_TIME, "shape")
    return [shape for shape in spec.WINDOW_SHAPES if shape in measured]


def data_table(run):
    """Every point: time, band GFLOP/s and peak extra memory (CSV only)."""
    rows = [[kernel, shape, n] + [run.value(benchmark, kernel=kernel, seq_len=n, shape=shape)
                                  for benchmark in (spec.WINDOW_TIME, spec.WINDOW_GFLOPS, spec.WINDOW_MEMORY)]
            for kernel in run.kernels(spec.WINDOW_TIME) for shape in _shapes(run)
            for n in run.param_values(spec.WINDOW_TIME, "seq_len")]
    return Table("window", (Column("kernel", "kernel"), Column("shape", "attention"), Column("seq_len", "n"),
                            Column("seconds", "time per call"), Column("band_gflops", "band GFLOP/s"),
                            Column("peak_extra_bytes", "peak extra memory")), rows)


def fits_table(run):
    rows = []
    for kernel in run.kernels(spec.WINDOW_TIME):
        for shape in _shapes(run):
            fit, b = exponent(run, kernel, shape)
            reason = "not measured: fewer than 3 sizes measured"
            rows.append([kernel, shape, reason if fit is None else b, "" if fit is None else interval(b, fmt_exponent)]
                        + ([fit.n_min, fit.n_max, fit.points] if fit else [math.nan] * 3))
    return Table("window_fits", (
        Column("kernel", "kernel"), Column("shape", "attention"), Column("exponent", "exponent b", _shown(fmt_exponent)),
        Column("interval", "its range (quartiles, tilted)"), Column("n_min", "fit from n", fmt_count),
        Column("n_max", "to n", fmt_count), Column("points", "points")), rows)


def speedup_table(run):
    n, causal = spec.WINDOW_GOAL_SEQ_LEN, CAUSAL.describe()
    rows = []
    for kernel in run.kernels(spec.WINDOW_TIME):
        times = [_or_reason(window_time(run, kernel, shape, n), run, spec.WINDOW_TIME, _skip_reason(shape),
                            kernel=kernel, seq_len=n, shape=shape) for shape in (causal, GOAL_SHAPE)]
        speedup = window_speedup(run, kernel)
        rows.append([kernel, *times, "not measured: needs both times" if missing(speedup) else speedup])
    return Table("window_speedup", (
        Column("kernel", "kernel"), Column("causal_seconds", "causal", _shown(fmt_seconds)),
        Column("window_seconds", GOAL_SHAPE, _shown(fmt_seconds)),
        Column("speedup", "causal ÷ window", _shown(fmt_ratio))), rows)


def throughput_table(run):
    rows = []
    for kernel in run.kernels(spec.WINDOW_GFLOPS):
        n = full_seq_len(run, kernel)
        for shape in windows(run):
            if missing(n):
                rows.append([kernel, shape, math.nan, "not measured: no full attention of this kernel", "", ""])
                continue
            window = _or_reason(band_gflops(run, kernel, shape, n), run, spec.WINDOW_GFLOPS, NO_WINDOW,
                                kernel=kernel, seq_len=n, shape=shape)
            fraction = band_fraction(run, kernel, shape, n)
            rows.append([kernel, shape, n, window, band_gflops(run, kernel, FULL.describe(), n),
                         "not measured" if missing(fraction) else fraction])
    return Table("window_throughput", (
        Column("kernel", "kernel"), Column("shape", "window"), Column("seq_len", "n", fmt_count),
        Column("band_gflops", "band GFLOP/s", _shown(fmt_gflops)),
        Column("full_gflops", "full attention GFLOP/s", _shown(fmt_gflops)),
        Column("fraction", "window ÷ full", _shown(fmt_percent))), rows)


def bounded_table(run):
    rows = []
    for kernel in run.kernels(spec.BOUNDED_STEP, spec.BOUNDED_OVER_UNBOUNDED):
        for seen in sorted(set(run.param_values(spec.BOUNDED_STEP, "seen"))
                           | set(run.param_values(spec.BOUNDED_OVER_UNBOUNDED, "seen"))):
            cells = [_or_reason(run.value(benchmark, kernel=kernel, cache=cache, seen=seen), run, benchmark,
                                NO_WINDOW, kernel=kernel, cache=cache, seen=seen)
                     for benchmark in (spec.BOUNDED_STEP, spec.BOUNDED_BYTES) for cache in spec.BOUNDED_CACHES]
            side_by_side = _or_reason(bounded_over_unbounded(run, kernel, seen), run, spec.BOUNDED_OVER_UNBOUNDED,
                                      NO_WINDOW, kernel=kernel, seen=seen)
            rows.append([kernel, seen, *cells, side_by_side])
    stored = spec.BOUNDED_SINKS + spec.BOUNDED_WINDOW
    return Table("bounded_decode", (
        Column("kernel", "kernel"), Column("seen", "tokens seen N", fmt_count),
        Column("bounded_seconds", "step, bounded", _shown(fmt_seconds)),
        Column("unbounded_seconds", "step, unbounded (N tokens)", _shown(fmt_seconds)),
        Column("bounded_bytes", "bytes, bounded", _shown(format_bytes)),
        Column("unbounded_bytes", "bytes, unbounded", _shown(format_bytes)),
        Column("bounded_over_unbounded", f"bounded ÷ unbounded of {stored:,} tokens, side by side",
               _shown(fmt_ratio))), rows)


def peers_table(run):
    kernels = run.kernels(spec.WINDOW_PEER_SPEEDUP) or list(spec.TILED)
    rows = []
    for peer in spec.PEERS:
        record = KERNELS.get(peer)
        form = record.window_form if record else "(not installed where this report was written)"
        kind = "its own window" if peer in spec.WINDOW_NATIVE_PEERS else "a mask"
        rows.append([peer, kind, form] + [_or_reason(window_peer_speedup(run, peer, kernel), run,
                                                     spec.WINDOW_PEER_SPEEDUP, NOT_INSTALLED, peer=peer, kernel=kernel)
                                          for kernel in kernels])
    return Table("window_peers", (
        Column("peer", "peer"), Column("kind", "takes the window as"), Column("window_form", "how"),
        *(Column(f"over_{kernel}", f"its time ÷ {kernel}'s", _shown(fmt_ratio)) for kernel in kernels)), rows)


def fidelity_table(run):
    """One row per (width, sinks): MiniLM's mean and smallest embedding cosine to full
    attention over the sentences and over the paragraphs (``WindowFidelity``)."""
    widths = run.param_values(spec.WINDOW_MEAN_COSINE, "width") or list(spec.WINDOW_FIDELITY_WIDTHS)
    sinks = run.param_values(spec.WINDOW_MEAN_COSINE, "sinks") or list(spec.WINDOW_FIDELITY_SINKS)
    cosines = {spec.WINDOW_MEAN_COSINE: ("mean_cosine", "mean cosine"),
               spec.WINDOW_MIN_COSINE: ("min_cosine", "smallest")}
    cells = [(texts, benchmark) for texts in spec.WINDOW_FIDELITY_TEXTS for benchmark in cosines]
    rows = [[width, sink, spec.MODEL_LAYERS * width]
            + [_or_reason(run.value(benchmark, texts=texts, width=width, sinks=sink), run, benchmark, NO_MODEL,
                          texts=texts, width=width, sinks=sink) for texts, benchmark in cells]
            for width in widths for sink in sinks]
    cosine = _shown(lambda value: f"{value:.3f}")
    return Table("window_fidelity", (
        Column("width", "window", lambda width: f"±{width} tokens"),
        Column("sinks", "sink", lambda sink: "[CLS]" if sink else "none"),
        Column("reach", f"reach through {spec.MODEL_LAYERS} layers", lambda reach: f"±{reach} tokens"),
        *(Column(f"{texts}_{cosines[benchmark][0]}", f"{texts}: {cosines[benchmark][1]}", cosine)
          for texts, benchmark in cells)), rows)


# -- the section ------------------------------------------------------------------------------

def window(run):
    quadratic = max((n for n in run.param_values(spec.WINDOW_TIME, "seq_len")
                     if any(not missing(window_time(run, kernel, FULL.describe(), n))
                            for kernel in run.kernels(spec.WINDOW_TIME))), default=math.nan)
    quadratic_text = "not measured in these results" if missing(quadratic) else f"run up to n = {quadratic:,}"
    # the peers' n and band as the run measured them (a quick run's are smaller)
    peer_n = run.size(spec.WINDOW_PEER_SPEEDUP, "seq_len", spec.WINDOW_PEER_SEQ_LEN)
    peer_band = run.size(spec.WINDOW_PEER_SPEEDUP, "shape", spec.WINDOW_PEER_BAND.describe())
    peer_rounds = (f"{run.rounds(spec.WINDOW_PEER_SPEEDUP, spec.WINDOW_PEER_ROUNDS)} rounds"
                   if run.measured(spec.WINDOW_PEER_SPEEDUP) else "no peer measured in these results")

    def draw(path):
        plot_window(run, path)

    return Section("Ways out of the quadratic: sliding windows and attention sinks", [
        "§11.2 asks what attention must cost. Every query seeing every key is O(n²); a sliding "
        "window lets query i see only keys i − w … i (`kernels.attention(..., window=(w, 0))`), "
        "and a kernel that skips the key tiles outside that band does O(n·w) work: linear in n "
        "for a fixed w. What it loses is everything further back: a fact w + 1 tokens away cannot "
        "be retrieved at all, however relevant (`python -m kernels explain`, section 8, shows one). "
        "Attention sinks (`sinks=s`) keep the first s tokens in view of every query, where a "
        "trained model parks the weight its softmax must put somewhere (StreamingLLM); they cost "
        "s keys per query, not a return to n. "
        f"Measured ({SHAPE}) on the tiled rungs, one call against n; full and causal attention "
        f"{quadratic_text} (a causal call there takes about a minute on 2 cores, so "
        "asv times it once: no spread).",
        Plot("window_vs_n.png", "Time per call against n, log-log: full, causal and sliding windows per tiled "
             "kernel", draw),
        time_table(run),
        "Fitted exponents of time against n (y ≈ a·n^b, least squares on log-log axes); the range "
        "is the exponents the times' interquartile ranges allow (each fitted again, tilted from "
        "its low quartile at the smallest n to its high quartile at the largest, and back). A "
        "fixed window should give b ≈ 1, full and causal b ≈ 2:",
        fits_table(run),
        f"What the window saves at n = {spec.WINDOW_GOAL_SEQ_LEN:,}: causal attention's time ÷ "
        f"{GOAL_SHAPE}'s (each query sees at most 2,049 keys instead of up to "
        f"{spec.WINDOW_GOAL_SEQ_LEN:,}; the ideal is about 16×):",
        speedup_table(run),
        "What a window costs MiniLM: all-MiniLM-L6-v2 was trained with full attention; here each of "
        f"its {spec.MODEL_LAYERS} layers lets every token see only the w tokens on either side of it (a "
        f"window (w, w), on {spec.WINDOW_FIDELITY_KERNEL}), and its sentence embeddings are compared with "
        "its own full-attention ones by their cosine (1: unchanged; users compare these embeddings by "
        "cosine, so 1 − cosine is the error they see). What a token cannot see in one layer it can "
        f"still hear of through its neighbours in the next, so {spec.MODEL_LAYERS} layers of ±w reach "
        f"{spec.MODEL_LAYERS}·w tokens, passed on from token to token; anything further is lost. The 30 "
        "bundled sentences have 5 to 23 tokens, so a window of ±32 is full attention on them; the 5 "
        "paragraphs (six sentences each, 67 to 95 tokens) are where a small window leaves most of the "
        "text out of reach. Keeping the first token, [CLS], in view of every token (one attention "
        "sink) gives most of it back: a trained model parks much of its attention on [CLS] when a "
        "token has nothing better to look at, and a window that hides it moves every token's output, "
        "as StreamingLLM found for decoders (whose first tokens play that part). The mean and the "
        "smallest cosine over each set of texts (`WindowFidelity`):",
        fidelity_table(run),
        "Does skipping tiles keep the arithmetic units busy? The band's GFLOP/s (4·d·Σ seen keys per "
        "head: only the scores the band keeps) against the same kernel's full attention, at the "
        "largest n where full attention ran. A window loses the tiles that straddle its edges (half "
        "masked) and has short rows for the first w queries:",
        throughput_table(run),
        f"Decoding with a bounded cache (`kernels.KVCache(window={spec.BOUNDED_WINDOW}, "
        f"sinks={spec.BOUNDED_SINKS})`): the first {spec.BOUNDED_SINKS} tokens and the newest "
        f"{spec.BOUNDED_WINDOW:,} in a ring of {spec.BOUNDED_SINKS + spec.BOUNDED_WINDOW:,} rows, "
        "so each step (append one token's key and value, attend its query) reads the same bytes "
        "however many tokens the cache has seen, where an unbounded cache's step grows with N. "
        "The last column is the bounded step ÷ an unbounded step on a cache of as many tokens as "
        f"the bounded one keeps, timed side by side ({run.rounds(spec.BOUNDED_OVER_UNBOUNDED, spec.BOUNDED_ROUNDS)} "
        "rounds):",
        bounded_table(run),
        f"The peers with a window ({spec.HEADS} heads, n = {peer_n:,}, {peer_band}, "
        f"{spec.WINDOW_DTYPE}, all threads): each peer's time ÷ our kernel's, side by side "
        f"({peer_rounds}). JAX takes a window of its "
        "own (`local_window_size`); "
        "the other libraries have none and are given the band as an n × n mask, so they still do "
        "O(n²) work and hold O(n²) bytes. Each is timed as its users call it: ours through "
        "`kernels.attention`, a peer through its own API on tensors (and a mask) of its own, "
        "made before the timing.",
        peers_table(run),
    ], data=[data_table(run)])


def plot_window(run, path):
    """window_vs_n.png: seconds per call against n, log-log, one panel per tiled kernel, a
    line per shape with its fitted exponent, the quartiles as a band."""
    kernels = run.kernels(spec.WINDOW_TIME) or list(spec.WINDOW_KERNELS)
    fig, axes = pyplot().subplots(1, len(kernels), figsize=(6.5 * len(kernels), 5.5), squeeze=False)
    fig.suptitle(f"Time per call vs sequence length: full, causal and sliding windows ({SHAPE})", fontsize=11)
    for kernel, ax in zip(kernels, axes[0]):
        ax.set_title(plots.kernel_label(kernel))
        drawn = []
        for i, shape in enumerate(_shapes(run)):
            seq_lens, seconds = run.series(spec.WINDOW_TIME, kernel=kernel, shape=shape)
            points = [(n, s) for n, s in zip(seq_lens, seconds) if not missing(s) and s > 0]
            if not points:
                continue
            fit, b = exponent(run, kernel, shape)
            slope = f"$n^{{{fit.b:.2f}}}$" if fit else "too few points to fit"
            style = dict(color=f"C{i}", marker="o", markersize=4,
                         linestyle="-" if spec.WINDOW_SHAPES[shape].windowed else "--")
            ax.plot(*zip(*points), label=f"{shape}: {slope}", **style)
            plots.band(ax, *zip(*points), lambda n, s: s, style["color"])
            drawn += [n for n, _ in points]
        if not drawn:
            ax.set_axis_off()
            ax.text(0.5, 0.5, "no data in these results", transform=ax.transAxes, ha="center")
            continue
        plots.seq_len_axis(ax, min(drawn), max(drawn))
        ax.set_yscale("log")
        ax.set_ylabel("time per call (seconds, log scale)")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    save_png(fig, path, caption=plots.machine_caption(run))
