"""The section "The cache in fewer bytes" (``CacheFormats``, ``CachePeers``,
``CacheGenerate``, ``CacheFidelity``, ``KeyGranularity``): decoding one token reads the
whole KV cache, so its time is the cache's bytes over the memory bandwidth, and the way
down is fewer bytes per cached token: fewer K/V heads (grouped-query attention) and
narrower formats (16-bit, int8, int4).  The main figure puts every kernel, format and grouping
on one line of time against bytes, whose slope is the bandwidth."""
import math

from .. import bench_spec as spec
from ..cache_formats import FORMATS
from ..memory import format_bytes
from ..output import (Column, Table, fmt_percent, fmt_ratio, fmt_seconds, missing, pyplot, ratio,
                      save_png, text)
from . import plots
from .document import Plot, Section

BASELINE = ("float32", spec.HEADS)   # the cache every speed-up is over


def cache_tokens(run):
    """The tokens in the caches the run measured (a quick run's are fewer than a full
    run's); the full run's for results of a suite before they were a parameter."""
    return run.size(spec.CACHE_TOKEN_TIME, "seq_len", spec.CACHE_SEQ_LEN)


def cache_shape(run):
    """The decode call the section's figures time, in words."""
    return (f"one query, {spec.HEADS} query heads, d = {spec.HEAD_DIM}, a cache of {cache_tokens(run):,} tokens, "
            "all threads")


def generate_sizes(run):
    """(prompt, generated): CacheGenerate's tokens in the run, or the full run's."""
    return tuple(run.size(spec.CACHE_GENERATE, name, default)
                 for name, default in (("prompt", spec.CACHE_PROMPT), ("generated", spec.CACHE_GENERATED)))


def fidelity_sizes(run):
    """(n, steps): CacheFidelity's cache for one step and its decode's steps, or the full run's."""
    return tuple(run.size(spec.CACHE_ERROR, name, default)
                 for name, default in (("seq_len", spec.CACHE_SEQ_LEN), ("steps", spec.CACHE_FIDELITY_STEPS)))


def token_bytes(cache_dtype, kv_heads, n):
    """Bytes one new token's attention reads from a cache of ``n`` tokens: the cached keys
    and values, scales included."""
    return n * kv_heads * 2 * FORMATS[cache_dtype].row_bytes(spec.HEAD_DIM)


def cells(run):
    """(kernel, cache_dtype, kv_heads) of every CacheFormats cell measured, in ladder order."""
    return [(kernel, cache_dtype, kv_heads) for kernel in run.kernels(spec.CACHE_TOKEN_TIME)
            for cache_dtype in spec.CACHE_DTYPES for kv_heads in spec.CACHE_KV_HEADS
            if not missing(run.value(spec.CACHE_TOKEN_TIME, kernel=kernel, cache_dtype=cache_dtype,
                                     kv_heads=kv_heads))]


def cache_speedup(run, kernel, cache_dtype, kv_heads):
    """The kernel's speed on this cache over the float32 cache of 8 K/V heads, side by side."""
    return run.value(spec.CACHE_SPEEDUP, kernel=kernel, cache_dtype=cache_dtype, kv_heads=kv_heads)


def read_fraction(run, kernel, cache_dtype, kv_heads):
    """The step's read rate of the cache ÷ the streaming read's, the step and the read's own
    loop alternating round by round (``CacheFormats.track_read_fraction``)."""
    return run.value(spec.CACHE_READ_FRACTION, kernel=kernel, cache_dtype=cache_dtype, kv_heads=kv_heads)


def worst_read_fraction(run, kernel):
    """The smallest read fraction of ``kernel`` over every format and grouping measured."""
    fractions = [read_fraction(run, kernel, c, h) for k, c, h in cells(run) if k == kernel]
    fractions = [f for f in fractions if not missing(f)]
    return min(fractions, key=float, default=math.nan)


def peer_speedup(run, peer, kernel, cache_dtype, kv_heads):
    """The kernel's speed over ``peer`` on this cache (the peer's time ÷ ours), side by side."""
    return run.value(spec.CACHE_PEER_SPEEDUP, peer=peer, kernel=kernel, cache_dtype=cache_dtype, kv_heads=kv_heads)


def over_fastest_peer(run, kernel):
    """The kernel's smallest speed over the fastest peer taking the same cache, over every
    format and grouping some peer takes; NaN when no peer was measured."""
    worst = []
    for cache_dtype in spec.CACHE_DTYPES:
        for kv_heads in spec.CACHE_KV_HEADS:
            ratios = [peer_speedup(run, peer, kernel, cache_dtype, kv_heads) for peer in spec.PEERS]
            ratios = [r for r in ratios if not missing(r)]
            if ratios:
                worst.append(min(ratios, key=float))
    return min(worst, key=float, default=math.nan)


def cache_error(run, cache_dtype, error):
    return run.value(spec.CACHE_ERROR, cache_dtype=cache_dtype, error=error)


def generate_speedup(run, kernel, cache_dtype, kv_heads):
    """CacheGenerate's seconds on the float32 cache of 8 K/V heads ÷ on this one."""
    seconds = [run.value(spec.CACHE_GENERATE, kernel=kernel, cache_dtype=c, kv_heads=h)
               for c, h in (BASELINE, (cache_dtype, kv_heads))]
    return ratio(*seconds)


def element_bytes(name):
    """What an element of the format takes, in words: "4", "1 + 4 per row", "0.5 + 4 per 32"."""
    fmt = FORMATS[name]
    size = f"{fmt.bits / 8:g}"
    if not fmt.scaled:
        return size
    return size + (f" + 4 per {fmt.group}" if fmt.group else " + 4 per row")


def cache(run):
    bandwidth = run.value(spec.READ_BANDWIDTH)
    n = cache_tokens(run)
    prompt, new_tokens = generate_sizes(run)
    fidelity_n, steps = fidelity_sizes(run)
    speeds = Table("cache_formats", (
        Column("kernel", "kernel"), Column("cache_dtype", "format"), Column("kv_heads", "K/V heads"),
        Column("bytes_per_token", "bytes read per token", format_bytes),
        Column("seconds", "time per token", fmt_seconds),
        Column("gbytes_per_second", "read, GB/s", lambda v: f"{v:.1f}"),
        Column("fraction_of_read_bandwidth", "of the streaming read (side by side)", fmt_percent),
        Column("over_float32_8_heads", "speed over float32, 8 K/V heads (side by side)", fmt_ratio)),
        [[kernel, cache_dtype, kv_heads, token_bytes(cache_dtype, kv_heads, n),
          run.value(spec.CACHE_TOKEN_TIME, kernel=kernel, cache_dtype=cache_dtype, kv_heads=kv_heads),
          run.value(spec.CACHE_READ_RATE, kernel=kernel, cache_dtype=cache_dtype, kv_heads=kv_heads),
          read_fraction(run, kernel, cache_dtype, kv_heads), cache_speedup(run, kernel, cache_dtype, kv_heads)]
         for kernel, cache_dtype, kv_heads in cells(run)])
    peer_kernels = run.kernels(spec.CACHE_PEER_SPEEDUP)
    # a peer none of whose cells was measured (not installed, or taking none of the formats) gets
    # no column of n/a: it is named under the table
    peers = [p for p in spec.PEERS
             if any(not missing(peer_speedup(run, p, k, c, h)) for k in peer_kernels
                    for c in spec.CACHE_DTYPES for h in spec.CACHE_KV_HEADS)]
    unmeasured = [p for p in spec.PEERS if p not in peers]
    peer_table = Table("cache_peers", (
        Column("cache_dtype", "format"), Column("kv_heads", "K/V heads"),
        *(Column(f"{kernel}_over_{peer}", f"{kernel} over {peer}", fmt_ratio)
          for kernel in peer_kernels for peer in peers)),
        [[cache_dtype, kv_heads, *(peer_speedup(run, peer, kernel, cache_dtype, kv_heads)
                                   for kernel in peer_kernels for peer in peers)]
         for cache_dtype in spec.CACHE_DTYPES for kv_heads in spec.CACHE_KV_HEADS
         if any(not missing(peer_speedup(run, p, k, cache_dtype, kv_heads)) for p in peers for k in peer_kernels)])
    generate = Table("cache_generate", (
        Column("kernel", "kernel"), Column("cache_dtype", "format"), Column("kv_heads", "K/V heads"),
        Column("seconds", f"seconds for {new_tokens:,} tokens", lambda v: f"{v:.2f}")),
        [[kernel, cache_dtype, kv_heads, value] for kernel in run.kernels(spec.CACHE_GENERATE)
         for cache_dtype in spec.CACHE_DTYPES for kv_heads in spec.CACHE_KV_HEADS
         for value in [run.value(spec.CACHE_GENERATE, kernel=kernel, cache_dtype=cache_dtype, kv_heads=kv_heads)]
         if not missing(value)])
    fidelity = Table("cache_fidelity", (
        Column("cache_dtype", "format"), Column("bytes_per_element", "bytes per element (+ scales)"),
        Column("step", f"one step, n = {fidelity_n:,}", lambda v: f"{v:.2e}"),
        Column("decode", f"largest over {steps:,} steps", lambda v: f"{v:.2e}")),
        [[name, element_bytes(name), cache_error(run, name, "step"), cache_error(run, name, "decode")]
         for name in spec.CACHE_DTYPES if not missing(cache_error(run, name, "step"))])
    granularity = Table("key_granularity", (
        Column("keys", "keys"), Column("per_token", "int8 keys per token", lambda v: f"{v:.2e}"),
        Column("per_channel", "per channel (KIVI, groups of 128 tokens)", lambda v: f"{v:.2e}")),
        [[keys, run.value(spec.KEY_GRANULARITY, keys=keys, granularity="per token"),
          run.value(spec.KEY_GRANULARITY, keys=keys, granularity="per channel")]
         for keys in ("even", "outliers") if run.select(spec.KEY_GRANULARITY, keys=keys)])

    def draw(path):
        plot_time_against_bytes(run, bandwidth, path)

    return Section("The cache in fewer bytes", [
        "Decoding one token reads the whole KV cache once, so a step's time is the cache's bytes over "
        "the memory bandwidth: the only way down is fewer bytes per cached token. Two ways, both in "
        "every current engine: fewer K/V heads than query heads (grouped-query attention: each K/V "
        "head serves a group of query heads and is read once for all of them), and narrower formats "
        "(`KVCache(..., kv_heads=, cache_dtype=)`: float16 and bfloat16, 2 bytes per element; int8 "
        "codes with one float32 scale per token and head, 1 byte plus 4 per row; int4 codes, two to "
        "a byte, with a float32 scale per 32 values, half a byte plus 4 per 32). c_tiled reads every "
        "format in place, widening (or multiplying as integers) a block of rows at a time inside "
        "its inner loops, and so does numba_tiled; numpy widens the whole cache first, and its "
        "times show it.",
        f"Time per token against the bytes it reads ({cache_shape(run)}): time = bytes ÷ read rate, so on these "
        "log-log axes every point at one read rate lies on one line of slope 1, the faster the lower; "
        "the dotted line is the streaming-read bandwidth measured in the same run "
        f"({text(bandwidth, lambda v: f'{v:.1f} GB/s')}). A kernel's two groupings of one format are "
        "joined: at one read rate the segment is parallel to the dotted line. "
        "Peers (open markers, dashed) are placed at our c_tiled time times their side-by-side ratio.",
        Plot("cache_time_vs_bytes.png", "Time per token against the bytes it reads", draw),
        "A step's share of the streaming read is timed side by side: each round one step and one call "
        "of the read's own loop, each going first in turn (`CacheFormats.track_read_fraction`). A "
        "cache that fits the CPU's last-level cache reads faster than memory streams, above 100%.",
        speeds,
        "Beside the peers that take the same cache (`Kernel.cache_refusal` says why the others do "
        "not): their time ÷ ours, side by side in one process. ONNX Runtime (float16, int8), "
        "OpenVINO (float32, float16, int8) and ggml (float32, bfloat16, int8, int4) decode from caches "
        "they keep themselves, as their own generation loops do (`Kernel.own_caches`): ONNX "
        "Runtime's GroupQueryAttention with int8 scales per channel, OpenVINO's stateful model with "
        "u8 codes, a scale and a zero point per token, ggml's Q8_0 and Q4_0 blocks of 32 values with "
        "a float16 scale each; each encodes the same values in its own layout before the timing (the "
        "scales differ by a few bytes per row from ours, which the figure ignores).",
        peer_table,
        *([f"No figure for {', '.join(unmeasured)} on any of these caches (not installed, or skipped: asv's "
           "log says why)."] if unmeasured else []),
        f"Generating {new_tokens:,} tokens after a {prompt:,}-token prompt, "
        "each step appending one token (the cache growing in place, read as a strided view) and "
        "attending its query (CacheGenerate; median of ten blocks of a tenth of the steps, ×10):",
        generate,
        "What each format costs: the norm-wise relative error ‖o − o*‖/‖o*‖ of the output against "
        "float64 attention over the float32 values (largest over the 8 heads; 2 K/V heads; "
        "synthetic keys and values, queries ×3 so that each head retrieves a few tokens), one step "
        "and the largest over a decode in which every step appends one token. The error follows "
        "the format's step (float16 2⁻¹¹, bfloat16 2⁻⁸, int8 max|x|/254, int4 max|x|/14 over a group "
        "of 32) and does not drift with "
        "the steps (a stored entry never changes): the largest over a decode is the tail of one "
        "distribution, whose mean over the last hundred steps stays within a quarter of the first "
        "hundred's (tests/test_cache_fidelity.py).",
        fidelity,
        "int4's step is 18 times int8's: a score moves by 18 times as much, and a head that "
        "retrieves a few tokens, as these do, passes its scores' errors on to its few weights. Four "
        "bits suit the values of heads that blend many tokens better than the keys of heads that "
        "retrieve: the table gives the price at these heads' sharpness.",
        "Why int8 keys are quantised per token here although KIVI quantises them per channel: "
        "per channel is more accurate where a few channels are much wider than the rest (as in "
        "large language models' keys), but a channel's scale spans many tokens, so an appended "
        "token waits in float32 (KIVI keeps up to 128 so) or is stuck with a range set before it; "
        "per token, its scale is set when it is appended and never revisited, and a kernel reads a row's codes with its one scale. "
        "Float64 attention over the dequantised values, the mean error of 256 new tokens' outputs (per "
        "channel gains nothing on even keys):",
        granularity,
    ])


def plot_time_against_bytes(run, bandwidth, path):
    """cache_time_vs_bytes.png: seconds per token against bytes read per token, log-log;
    one marker per (kernel, format, K/V heads), coloured by kernel, shaped by format; a
    kernel's two groupings of one format joined (the same read rate lies on a line of
    slope 1, parallel to the bandwidth's); peers as open markers on dashed segments."""
    fig, ax = pyplot().subplots(figsize=(12, 6))
    fig.suptitle(f"Decode: time per token vs bytes read per token ({cache_shape(run)})", fontsize=10)
    n = cache_tokens(run)
    styles = plots.kernel_styles(run)
    markers = {"float32": "o", "float16": "s", "bfloat16": "D", "int8": "^", "int4": "v"}
    drawn = []

    def draw(times, color, label, linestyle, facecolor):
        """times: {(cache_dtype, kv_heads): seconds} of one kernel or peer."""
        for cache_dtype, marker in markers.items():
            points = sorted((token_bytes(cache_dtype, h, n), s) for (c, h), s in times.items() if c == cache_dtype)
            if not points:
                continue
            ax.plot([b for b, _ in points], [s for _, s in points], color=color, linewidth=1, linestyle=linestyle,
                    marker=marker, markerfacecolor=facecolor)
            drawn.extend(points)
        if times:
            ax.plot([], [], color=color, linewidth=1, linestyle=linestyle, label=label)  # its legend entry

    every = cells(run)
    for kernel in dict.fromkeys(k for k, _, _ in every):
        times = {(c, h): float(run.value(spec.CACHE_TOKEN_TIME, kernel=kernel, cache_dtype=c, kv_heads=h))
                 for k, c, h in every if k == kernel}
        color = styles[kernel]["color"]
        draw(times, color, plots.kernel_label(kernel), "-", color)
    reference = "c_tiled"
    for peer in spec.PEERS:
        times = {}
        for cache_dtype in spec.CACHE_DTYPES:
            for kv_heads in spec.CACHE_KV_HEADS:
                over = peer_speedup(run, peer, reference, cache_dtype, kv_heads)
                ours = run.value(spec.CACHE_TOKEN_TIME, kernel=reference, cache_dtype=cache_dtype, kv_heads=kv_heads)
                if not missing(over) and not missing(ours):
                    times[cache_dtype, kv_heads] = float(over) * float(ours)
        if times:
            draw(times, styles.get(peer, {}).get("color", "grey"),
                 f"{peer} (our {reference} time × the side-by-side ratio)", "--", "none")
    if not drawn:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no data in these results", transform=ax.transAxes, ha="center")
    else:
        xs = [b for b, _ in drawn]
        if not missing(bandwidth):
            span = [min(xs) / 1.5, max(xs) * 1.5]
            ax.plot(span, [b / (float(bandwidth) * 1e9) for b in span], color="black", linestyle=":",
                    label=f"streaming read, {float(bandwidth):.1f} GB/s")
        for name, marker in markers.items():
            ax.plot([], [], marker=marker, color="grey", linestyle="none", label=name)
        ticker = pyplot().matplotlib.ticker
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(ticker.LogLocator(base=2))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: format_bytes(value).replace(".0 ", " ")))
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1, 2, 5)))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: fmt_seconds(value)))
        ax.set_xlabel("bytes read per token (log scale): cached keys and values, scales included")
        ax.set_ylabel("seconds per token (log scale)")
        ax.grid(True, alpha=0.3, which="both")
        # beside the axes, not over them: the points fill every corner
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    save_png(fig, path, caption=plots.machine_caption(run))
