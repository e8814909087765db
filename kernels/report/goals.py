"""The goals section: the project's targets, each with where it comes from, against what
the run measured.

Speed against another kernel is always a side-by-side ratio (``PeerSpeedup``,
``NumpySpeedup``), never a ratio of two separately timed benchmarks, and so is a kernel's
fraction of its type's peak (``PeakFraction``: the kernel beside the peak's loop).  The
targets were set as the ladder grew (its speed, decoding, the peers, calls inside a model,
half precision), measured on this project's 2-core machines against the other CPU
attentions and the machine's own ceilings; ``source`` says, in words, why each number is
what it is.
"""
import math
from dataclasses import dataclass
from typing import Callable

from .. import bench_spec as spec
from ..output import Column, Table, fmt_count, fmt_number, interval, missing, ratio, text
from ..spread import bounds
from .cache import (cache_error, cache_speedup, cache_tokens, fidelity_sizes, generate_sizes, generate_speedup,
                    over_fastest_peer, worst_read_fraction)
from .ceilings import (bf16_dot_is_roof, call_over_tiles, gemm_fraction, has_bf16_dot_product, peak_fraction,
                       tile_fraction)
from .decode import CALL_COST_WORDS, cache_read_fraction, call_cost
from .document import Section
from .half import half_min_cosine, half_speedup
from .in_context import forward_over_numpy, in_context
from .multi_head import headline_shape, multihead_seconds
from .peers import peer_speedup, worst_peer_speedup
from .side_by_side import numpy_speedup, numpy_speedup_seq_len
from .thread_scaling import thread_counts, thread_gflops
from .window import (GOAL_SHAPE, band_fraction, bounded_bytes_growth, bounded_over_unbounded, largest_seen,
                     smallest_peer_speedup, window_exponent_error, window_speedup)


@dataclass(frozen=True)
class Goal:
    """``what`` and ``source`` may name {shape} (the headline's heads and n), {peer},
    {numpy_n}, {decode_n} (the largest prefix the cached decode ran), {seen_n} (the most
    tokens a bounded cache was measured after), {cache_n} (the caches' tokens in the cache
    formats' figures), {prompt_n} and {generated_n} (the generation loop's), {fidelity_steps}
    (the formats' decode error's steps), {sgemm_fraction} (NumPy's sgemm ÷ the float32
    FMA peak, side by side, every thread) and {tile_fraction} (a clause giving c_tiled's tile
    operations alone on the same terms, and its whole call's share of their rate, where
    measured): a quick run's sizes are its own."""

    what: str
    measure: Callable     # run -> the measured value, NaN when missing
    target: float
    at_least: bool        # met when measured ≥ target (else when measured ≤ target)
    source: str
    needs_bf16: bool = False   # set for a CPU with AVX512-BF16: elsewhere not applicable
    needs_faster_dot: bool = False   # set for one whose bfloat16 dot products outrun float32's FMAs

    def verdict(self, measured, run):
        """"met", "not met", or "within noise" when the figure's interquartile range holds
        the target (the median may sit on either side of it by chance); NaN when missing;
        "not applicable here" for a bfloat16 goal on a CPU without AVX512-BF16, or for a goal of
        the dot products' speed where they are slower than float32's FMAs (``bf16_dot_is_roof``)."""
        if (self.needs_bf16 or self.needs_faster_dot) and has_bf16_dot_product(run) is False:
            return NOT_APPLICABLE
        if self.needs_faster_dot and has_bf16_dot_product(run) and not bf16_dot_is_roof(run):
            return SLOWER_DOT
        if missing(measured):
            return math.nan
        low, high = bounds(measured)
        if low < self.target < high:
            return WITHIN_NOISE
        return "met" if (measured >= self.target) == self.at_least else "not met"


def _threads(run, all_threads):
    one, every = thread_counts(run, spec.PEER_SPEEDUP)
    return every if all_threads else one


def _over(peer, kernel, shape, dtype, all_threads=True):
    """The kernel's side-by-side speed over ``peer``."""
    return lambda run: peer_speedup(run, peer, kernel, shape, _threads(run, all_threads), dtype)


def _over_every_peer(kernel, shapes, dtype, all_threads, peers=spec.PEERS):
    """The kernel's smallest side-by-side speed over any of ``peers`` measured, on any of
    ``shapes``."""
    def measure(run):
        worst = [worst_peer_speedup(run, kernel, shape, _threads(run, all_threads), dtype, peers)[0]
                 for shape in shapes]
        worst = [value for value in worst if not missing(value)]
        return min(worst) if worst else math.nan
    return measure


def _over_peer(peer, kernel, shapes, dtype):
    """The kernel's smallest side-by-side speed over ``peer`` on ``shapes``, all threads,
    whether or not the peer passes the harness in ``dtype`` on the run's CPU (PeerSpeedup
    times a peer that fails it too; ``_over_every_peer`` reads only those that pass)."""
    def measure(run):
        values = [peer_speedup(run, peer, kernel, shape, _threads(run, True), dtype) for shape in shapes]
        values = [value for value in values if not missing(value)]
        return min(values) if values else math.nan
    return measure


def _smallest_half_speedup(kernel, dtype, shapes=("full", "causal")):
    """The smallest of the kernel's speeds in ``dtype`` over itself in float32 (all threads,
    side by side) on the ``shapes`` measured (a quick run: full only)."""
    def measure(run):
        values = [half_speedup(run, kernel, dtype, shape) for shape in shapes]
        values = [value for value in values if not missing(value)]
        return min(values) if values else math.nan
    return measure


def _decode_over_numpy(kernel):
    """The worst, over every n, of the kernel's cached per-token time ÷ numpy's."""
    def measure(run):
        ratios = [ratio(run.value(spec.DECODE_CACHED, kernel=kernel, seq_len=n),
                        run.value(spec.DECODE_CACHED, kernel="numpy", seq_len=n))
                  for n in run.seq_lens(spec.DECODE_CACHED)]
        ratios = [r for r in ratios if not missing(r)]
        return max(ratios) if ratios else math.nan
    return measure


def _largest_decode(run):
    return max(run.seq_lens(spec.DECODE_CACHED), default=math.nan)


def _worst_in_context(kernel, context, baseline, shapes=tuple(spec.CONTEXT_SHAPES)):
    """The largest of the kernel's in-context ratios over ``shapes``."""
    def measure(run):
        values = [in_context(run, kernel, shape, context, baseline) for shape in shapes]
        values = [value for value in values if not missing(value)]
        return max(values) if values else math.nan
    return measure


def _largest_cosine_loss(dtype):
    """1 − MiniLM's smallest cosine to float32 with attention in ``dtype``, over every kernel
    measured (a figure near 0 shows its digits, where the cosine's would round to 1)."""
    def measure(run):
        values = [half_min_cosine(run, kernel, dtype) for kernel in run.kernels(spec.HALF_FIDELITY)]
        values = [value for value in values if not missing(value)]
        return 1 - min(values) if values else math.nan
    return measure


def _c_tiled_thread_speedup(run):
    one, every = thread_counts(run)
    return ratio(thread_gflops(run, "c_tiled", every), thread_gflops(run, "c_tiled", one))


SIDE_BY_SIDE = "timed side by side"
WITHIN_NOISE = "within noise"
NOT_APPLICABLE = "not applicable here (no AVX512-BF16)"
SLOWER_DOT = "not applicable here (its bfloat16 dot products are slower than float32's FMAs)"
BF16_DOT = ("AVX512-BF16's vdpbf16ps takes two bfloat16 products per float32 lane, twice float32's flops "
            "per instruction, and both products of attention can run on it where it issues at an FMA's "
            "rate; the softmax, in float32 beside them, keeps the gain below 2")
WIDENED = ("on every CPU, the 16-bit types are widened in the tiles (F16C for float16, a shift for "
           "bfloat16) and written by the kernels themselves: that must cost less than the bytes they save")
LEAD = ("a lead over PyTorch's flash-attention CPU kernel, the best CPU attention "
        "measured, larger than a shared machine's run-to-run noise")
EVERY_PEER = ("ahead of every CPU attention a user could pick (PyTorch, ONNX Runtime, OpenVINO, "
              "JAX) by more than a shared machine's noise")
CACHE_BYTES = ("a step reads the cache once, so its time follows the bytes: half the bytes, nearly twice the "
               "speed; a quarter of the K/V heads, nearly four times")
IN_CONTEXT = ("inside a model every call follows a matrix product, whose BLAS workers spin on "
              "the other cores; a call must not wait for them")
GOALS = (
    *(Goal(f"c_tiled speed over every peer (the smallest ratio), float32, {words}, {{shape}}, all threads, "
           + SIDE_BY_SIDE, _over_every_peer("c_tiled", shapes, "float32", True), 1.2, True, EVERY_PEER)
      for words, shapes in (("full", ("full",)), ("causal", ("causal",)))),
    Goal("c_tiled speed over every peer (the smallest ratio), float32, full and causal, {shape}, one thread, "
         + SIDE_BY_SIDE, _over_every_peer("c_tiled", ("full", "causal"), "float32", False), 1.1, True,
         "on one thread a peer's lead would be its micro-kernels', not its threading"),
    Goal("c_tiled speed over every peer taking float64 (the smallest ratio), full and causal, {shape}, "
         "all threads, " + SIDE_BY_SIDE, _over_every_peer("c_tiled", ("full", "causal"), "float64", True),
         1.2, True, LEAD + "; float64 gets the same care"),
    Goal("c_tiled speed over {peer}, float32, full, {shape}, one thread, " + SIDE_BY_SIDE,
         _over(spec.PEER, "c_tiled", "full", "float32", all_threads=False), 1.2, True, LEAD),
    Goal("numba_tiled speed over {peer}, float32, full, {shape}, all threads, " + SIDE_BY_SIDE,
         _over(spec.PEER, "numba_tiled", "full", "float32"), 1.0, True,
         "the compiled rung level with PyTorch (first asked: 0.6), though Numba gives it no intrinsics of its own choosing"),
    Goal("c_tiled GFLOP/s ÷ the FMA peak, float32, full, {shape}, all threads, " + SIDE_BY_SIDE + " with its loop",
         lambda run: peak_fraction(run, "c_tiled", "float32"), 0.80, True,
         "set where a good gemm reached about 0.85 of the FMA peak (once 0.85 of sgemm, but a BLAS's speed is "
         "its own, not the machine's: an environment variable can pin it to an older core's kernels); both "
         "products are gemm-shaped, and the softmax's exp and rescaling cost a little more. This run's sgemm: "
         "{sgemm_fraction} of the same peak, side by side (`GemmFraction`){tile_fraction}"),
    *(Goal(kernel + " speed over numpy, float32, one head, n = {numpy_n}, " + SIDE_BY_SIDE,
           lambda run, kernel=kernel: numpy_speedup(run, kernel), 3, True,
           "tiling pays once numpy's n × n scores have left the caches")
      for kernel in spec.TILED),
    Goal("c_tiled causal ÷ full time, float32, {shape}",
         lambda run: ratio(multihead_seconds(run, "c_tiled", "float32", causal=True),
                           multihead_seconds(run, "c_tiled", "float32")),
         0.6, False, "half the scores, plus the tiles crossing the diagonal"),
    Goal("c_tiled all threads ÷ one thread GFLOP/s, float32, {shape}", _c_tiled_thread_speedup,
         1.8, True, "90% parallel efficiency on this project's 2-core machines"),
    Goal("c_tiled cached decode, n = {decode_n}: cache read rate ÷ the streaming read's, "
         + SIDE_BY_SIDE + " with its loop",
         lambda run: cache_read_fraction(run, "c_tiled"), 0.75, True,
         "one query reads the cached K and V once, so a step is bound by bandwidth"),
    Goal("c_tiled cached decode speed over {peer}, n = " + f"{spec.DECODE_PEER_SEQ_LEN:,}, all threads, "
         + SIDE_BY_SIDE, _over(spec.PEER, "c_tiled", "decode", spec.DECODE_DTYPE), 1.0, True,
         "at least level with the fastest peer on single-query decode"),
    Goal("numba_tiled cached decode speed over {peer}, n = " + f"{spec.DECODE_PEER_SEQ_LEN:,}, all threads, "
         + SIDE_BY_SIDE, _over(spec.PEER, "numba_tiled", "decode", spec.DECODE_DTYPE), 0.7, True,
         "the compiled rung close behind on single-query decode"),
    *(Goal(kernel + " cached decode time ÷ numpy's, the worst n", _decode_over_numpy(kernel), 1.0, False,
           "with one query the tiled rungs split the keys across threads, never slower than numpy")
      for kernel in spec.TILED),
    *(Goal(f"{kernel} decode speed on {'an' if cache_dtype.startswith('int') else 'a'} {cache_dtype} cache of {kv_heads} "
           f"K/V heads over the float32 cache of {spec.HEADS} K/V heads, one query, {spec.HEADS} query heads, "
           "n = {cache_n}, all threads, " + SIDE_BY_SIDE,
           lambda run, kernel=kernel, cache_dtype=cache_dtype, kv_heads=kv_heads:
           cache_speedup(run, kernel, cache_dtype, kv_heads), target, True, CACHE_BYTES)
      for kernel in spec.TILED
      for cache_dtype, kv_heads, target in (("float16", 8, 1.8), ("bfloat16", 8, 1.8), ("int8", 8, 3.0),
                                            ("float32", 2, 3.5),
                                            ("int8", 2, 10.0 if kernel == "c_tiled" else 6.0),
                                            *((("int4", 2, 16.0),) if kernel == "c_tiled" else ()))),
    Goal("c_tiled generating {generated_n} tokens after a {prompt_n}-token prompt: "
         f"the int4 cache of 2 K/V heads over the float32 cache of {spec.HEADS}",
         lambda run: generate_speedup(run, "c_tiled", "int4", 2), 8.0, True,
         "a generation loop gains what the step gains: appending a token is O(d), the step O(n · d)"),
    *(Goal(f"{kernel} decode: the smallest cache read rate ÷ the streaming read's over every format and "
           "grouping, n = {cache_n}, " + SIDE_BY_SIDE + " with its loop",
           lambda run, kernel=kernel: worst_read_fraction(run, kernel),
           target, True, "fewer bytes must not mean a slower read: widening and integer products stay hidden "
           "behind the memory (Numba, with what its vectoriser makes of them, half of it)")
      for kernel, target in (("c_tiled", 0.75), ("numba_tiled", 0.5))),
    *(Goal(f"{kernel} decode speed over the fastest peer taking the same cache (the smallest ratio over "
           "formats and groupings), n = {cache_n}, all threads, " + SIDE_BY_SIDE,
           lambda run, kernel=kernel: over_fastest_peer(run, kernel), target, True,
           "the engines' own caches are the ones to beat, format for format")
      for kernel, target in (("c_tiled", 1.0), ("numba_tiled", 0.8))),
    Goal("int8 cache: the largest norm-wise relative error of a decode step against float64, over "
         "{fidelity_steps} steps", lambda run: cache_error(run, "int8", "decode"), 0.015, False,
         "8-bit codes keep about two significant digits of each row; the output must keep them (KIVI's "
         "per-channel keys reach it where a few channels are wide)"),
    Goal("int4 cache: the largest norm-wise relative error of a decode step against float64, over "
         "{fidelity_steps} steps", lambda run: cache_error(run, "int4", "decode"), 0.06, False,
         "4-bit codes, a scale per 32 values: the output must keep its first digit"),
    Goal(f"c_tiled causal attention ÷ {spec.WINDOW_GOAL_BAND.describe()}, time, {spec.HEADS} heads, "
         f"n = {spec.WINDOW_GOAL_SEQ_LEN:,}, float32", lambda run: window_speedup(run, "c_tiled"), 13, True,
         "each query sees at most 2,049 of up to 65,536 keys: 16× fewer scores, less the tiles that straddle "
         "the window's edge"),
    *(Goal(f"{kernel}: the distance from 1 of the fitted exponent of time against n, "
           f"{spec.WINDOW_GOAL_BAND.describe()}, every n measured",
           lambda run, kernel=kernel: window_exponent_error(run, kernel), 0.1, False,
           "a fixed window does O(n·w) work: linear in n, once n is well past w (a window of half the "
           "smallest n is not: its own counted work grows as n^1.1 there, as the window section's fits show)")
      for kernel in spec.TILED),
    *(Goal(f"{kernel}: {spec.WINDOW_GOAL_BAND.describe()}'s band GFLOP/s ÷ its full attention's, at the "
           "largest n of full attention", lambda run, kernel=kernel: band_fraction(run, kernel, GOAL_SHAPE), target,
           True, "skipping the tiles outside the band must not slow the ones inside: only the tiles straddling "
           "its edges are partly masked (Numba, with less control of its loops, a little more); a narrower "
           "window has more of them for its work (the window section has each window's)")
      for kernel, target in (("c_tiled", 0.9), ("numba_tiled", 0.8))),
    *(Goal(f"{kernel}: a decode step on KVCache(window={spec.BOUNDED_WINDOW}, sinks={spec.BOUNDED_SINKS}) after "
           "{seen_n} tokens ÷ on an unbounded cache of "
           f"{spec.BOUNDED_SINKS + spec.BOUNDED_WINDOW:,}, " + SIDE_BY_SIDE,
           lambda run, kernel=kernel: bounded_over_unbounded(run, kernel), 1.1, False,
           "a bounded cache reads the same rows whatever it has seen: its step is a cache of that size's")
      for kernel in spec.TILED),
    Goal("c_tiled: the bounded cache's bytes after the fewest tokens seen ÷ after the most (1: constant)",
         lambda run: bounded_bytes_growth(run, "c_tiled"), 1.0, True, "memory constant: the ring never grows"),
    Goal("c_tiled with a window over every peer taking a window of its own (JAX's local_window_size; the "
         "smallest ratio), " + SIDE_BY_SIDE, lambda run: smallest_peer_speedup(run, "c_tiled", native=True), 1.2,
         True, EVERY_PEER + ", with a window too"),
    Goal("c_tiled with a window over every peer given the window as an n × n mask (the smallest ratio), "
         + SIDE_BY_SIDE, lambda run: smallest_peer_speedup(run, "c_tiled", native=False), 3.0, True,
         "a mask still costs O(n²): at n = 8,192 and a window of 512 the tiles a window skips are most of the work"),
    Goal("tiny call (one head, n = 64): c_tiled through kernels.attention, speed over {peer} called "
         "directly, all threads, " + SIDE_BY_SIDE,
         _over(spec.PEER, "c_tiled", "tiny", spec.DECODE_DTYPE), 1.5, True,
         "a call this small should not wake a thread pool: a fixed cost of microseconds"),
    Goal(f"one query over {spec.CALL_COST_CACHE:,} cached tokens (in L3): c_tiled through KVCache.attend, "
         "speed over torch_sdpa called directly, all threads, " + SIDE_BY_SIDE
         + f", both sides' arrays in {spec.PEER_PLACEMENTS['short_decode']} placements",
         _over("torch_sdpa", "c_tiled", "short_decode", spec.DECODE_DTYPE), 1.1, True,
         "a short context's step is partly fixed cost: ours must be the smaller"),
    *(Goal(f"{kernel}: {CALL_COST_WORDS[shape]}, ÷ the rung's own run, " + SIDE_BY_SIDE,
           lambda run, kernel=kernel, shape=shape: call_cost(run, kernel, shape), target, False,
           "the checks are decided once per call signature, not paid on every call")
      for kernel in spec.TILED for shape, target in (("tiny", 1.15), ("decode", 1.05))),
    *(Goal(f"{kernel} between two matmuls ÷ alone, {shape} ({', '.join(map(str, spec.CONTEXT_SHAPES[shape]))}: "
           "heads, n, d), all threads", _worst_in_context(kernel, "between_matmuls", "alone", (shape,)), 1.5,
           False, IN_CONTEXT)
      for kernel in spec.TILED for shape in spec.CONTEXT_SHAPES),
    *(Goal(f"{kernel} beside a busy process ÷ its quiet one-thread time, the worst shape, all threads",
           _worst_in_context(kernel, "busy_process", "one_thread"), 1.3, False,
           "the second core is gone; the call must not also wait for it")
      for kernel in spec.TILED),
    *(Goal(f"MiniLM forward pass on {kernel} ÷ on numpy, n = {n}, " + SIDE_BY_SIDE,
           lambda run, kernel=kernel, n=n: forward_over_numpy(run, kernel, n), target, False,
           "a faster kernel must make the model faster, not slower")
      for kernel, target in (("c_tiled", 1.0), ("numba_tiled", 1.1)) for n in spec.MODEL_OVER_NUMPY_SEQ_LENS),
    *(Goal(f"c_tiled speed in bfloat16 over itself in float32, {shape}, {{shape}}, all threads, " + SIDE_BY_SIDE,
           lambda run, shape=shape: half_speedup(run, "c_tiled", "bfloat16", shape), 1.6, True, BF16_DOT,
           needs_faster_dot=True)
      for shape in ("full", "causal")),
    Goal("c_tiled speed over openvino_sdpa in bfloat16 (the smaller ratio of full and causal), {shape}, "
         "all threads, " + SIDE_BY_SIDE, _over_peer("openvino_sdpa", "c_tiled", ("full", "causal"), "bfloat16"),
         1.0, True, "where OpenVINO honours its bfloat16 hint it rounds the scores to bfloat16 and fails the "
         "harness's budget; c_tiled, passing it, must be at least as fast", needs_bf16=True),
    *(Goal(f"c_tiled speed over every peer that passes the harness in bfloat16 (the smallest ratio), full and "
           f"causal, {{shape}}, {threads}, " + SIDE_BY_SIDE,
           _over_every_peer("c_tiled", ("full", "causal"), "bfloat16", every), target, True,
           EVERY_PEER + "; in bfloat16 on its unit too", needs_bf16=True)
      for threads, every, target in (("all threads", True, 1.3), ("one thread", False, 1.1))),
    Goal("c_tiled GFLOP/s ÷ bfloat16's roof (the faster of its dot-product peak and float32's FMA peak), "
         "bfloat16, full, {shape}, all threads, " + SIDE_BY_SIDE + " with its loop",
         lambda run: peak_fraction(run, "c_tiled", "bfloat16"), 0.65, True,
         "float32 reaches 0.75 of its FMA peak; in bfloat16 the packing of K and V in pairs and P's rounding "
         "on the dot-product unit, or the widening on float32's, are extra work beside the products"),
    *(Goal(f"{kernel} speed in {dtype} over itself in float32 (the smaller ratio of full and causal), {{shape}}, "
           "all threads, " + SIDE_BY_SIDE, _smallest_half_speedup(kernel, dtype), 1.0, True, WIDENED)
      for kernel in spec.TILED for dtype in spec.HALF_DTYPES),
    Goal("c_tiled speed over every peer taking float16 (the smallest ratio), full and causal, {shape}, "
         "all threads, " + SIDE_BY_SIDE, _over_every_peer("c_tiled", ("full", "causal"), "float16", True),
         1.2, True, EVERY_PEER + "; in float16 too"),
    Goal("MiniLM's embeddings with every attention call in bfloat16: 1 − the smallest cosine to float32, "
         "over the 30 bundled sentences and every kernel measured (a cosine ≥ 0.999)",
         _largest_cosine_loss("bfloat16"), 0.001, False,
         "rounding q, k, v to 8 significant bits must leave what a sentence means where it was"),
    Goal("first Numba call with an empty cache (compile), seconds",
         lambda run: run.value(spec.COMPILE_SECONDS), 10, False,
         "a first run a user will wait for once"),
    Goal("first Numba call from the cache, seconds",
         lambda run: run.value(spec.CACHED_CALL_SECONDS), 1, False,
         "every later process starts without noticeable delay"),
    Goal("import kernels, seconds", lambda run: run.value(spec.IMPORT_SECONDS), 1, False,
         "importing the package stays light (rungs and peers load on first use)"),
)


def _tile_clause(run):
    """The PeakFraction goal's clause on c_tiled's own roof: its tile operations' fraction of
    the peak (``TileFraction``) and its whole call's share of their rate (``CallOverTiles``),
    each where measured."""
    if not run.measured(spec.TILE_FRACTION):
        return ""
    clause = f"; c_tiled's own tile operations alone: {text(tile_fraction(run), fmt_number)} (`TileFraction`)"
    if run.measured(spec.CALL_OVER_TILES):
        clause += f", its whole call {text(call_over_tiles(run), fmt_number)} of their rate, side by side (`CallOverTiles`)"
    return clause


def goals(run):
    (prompt_n, generated_n), steps = generate_sizes(run), fidelity_sizes(run)[1]
    fields = dict(shape=headline_shape(run), peer=spec.PEER,
                  numpy_n=text(numpy_speedup_seq_len(run), fmt_count),
                  decode_n=text(_largest_decode(run), fmt_count), seen_n=text(largest_seen(run), fmt_count),
                  cache_n=fmt_count(cache_tokens(run)), prompt_n=fmt_count(prompt_n),
                  generated_n=fmt_count(generated_n), fidelity_steps=fmt_count(steps),
                  sgemm_fraction=text(gemm_fraction(run), fmt_number),
                  tile_fraction=_tile_clause(run))
    rows = []
    for goal in GOALS:
        measured = goal.measure(run)
        rows.append([goal.what.format(**fields), measured, interval(measured, fmt_number),
                     ("≥ " if goal.at_least else "≤ ") + fmt_number(goal.target),
                     goal.verdict(measured, run), goal.source.format(**fields)])
    table = Table("goals", (Column("goal", "goal"), Column("measured", "measured (median)", fmt_number),
                            Column("interval", "interquartile range"), Column("target", "target"),
                            Column("verdict", "verdict"), Column("source", "where the target comes from")),
                  rows)
    return Section("Goals", [
        "Each target was set on a 2-core machine as the ladder grew (its speed, decoding, the peers, calls "
        "inside a model), and its last column says why it is what it is; speed against another kernel is a side-by-side ratio "
        "(the peers and side-by-side sections). A goal is met or not met when the figure's interquartile "
        f"range lies wholly on one side of the target, and {WITHIN_NOISE} when it holds the target: the "
        "median alone could fall either side on another run. A figure of one sample has no range; a "
        "figure derived from two (a ratio) spans from the one's quartiles to the other's. The goals of "
        "bfloat16 on its dot-product unit are set for a CPU with AVX512-BF16; on one without it they read "
        f"\"{NOT_APPLICABLE}\", and the speed its dot products buy is a goal only where they outrun "
        f"float32's FMAs (elsewhere c_tiled widens bfloat16 as the other rungs do: \"{SLOWER_DOT}\").",
        table,
    ])
