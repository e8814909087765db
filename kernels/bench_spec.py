"""The benchmark spec: what the asv suite measures and the report reads, in one place.

The suite (``benchmarks/``) takes its grids and fixed configurations from here, and the
report (``kernels.report``) finds its numbers by the ``Benchmark`` names below;
``tests/test_bench_spec.py`` checks that each of them exists in the suite with these
parameter names, so that a renamed benchmark fails a test instead of quietly turning
its tables into n/a.

``ATTNBENCH_QUICK=1`` (``make bench QUICK=1``) shrinks the grids; the report reads
whatever grid the results hold, so it does not look at ``QUICK``.
"""
import os
from dataclasses import dataclass

from .band import CAUSAL, FULL, Band
from .ceilings import PEAK_BITS
from .dtypes import FLOATS, HALF, WIDE
from .registry import PEER_NAMES

QUICK = os.environ.get("ATTNBENCH_QUICK") == "1"

HEAD_DIM = 64                        # d (and d_v) in every benchmark
DTYPES = WIDE                        # the types every section reads
HALF_DTYPES = HALF                   # bfloat16, float16: where the half-precision section reads them
ALL_DTYPES = DTYPES + HALF_DTYPES
ITEMSIZE = {row.name: row.itemsize for row in FLOATS.values()}
PEER = "torch_sdpa"                  # the peer the multi-head, model and decode sections compare with
TILED = ("numba_tiled", "c_tiled")   # the rungs timed side by side against baselines

# SeqLen: one head, full attention, n = 64 .. 16,384, the 16-bit types on our rungs only
# (the peers' are measured beside c_tiled: PeerSpeedup).  Quick: float32 only, and three
# points at n >= 1024 are kept so that the large-n fit still has enough of them.
SEQ_LENS = (64, 256, 1024, 2048, 4096) if QUICK else tuple(2**p for p in range(6, 15))
SEQ_LEN_DTYPES = DTYPES[:1] if QUICK else ALL_DTYPES

# MultiHead, Threads and PeerSpeedup: the shape of the speed goals (Threads in float32,
# full attention, at the headline n).
HEADS = 8
HEADLINE_SEQ_LEN = 1024 if QUICK else 4096
MULTI_HEAD_SEQ_LENS = tuple(sorted({1024, HEADLINE_SEQ_LEN}))
MULTI_HEAD_DTYPES = ALL_DTYPES
THREADS_DTYPE = "float32"

# NumpySpeedup: one head, full, float32, at an n where numpy's n x n scores have long
# left the caches.
NUMPY_SPEEDUP_SEQ_LEN = 2048 if QUICK else 8192
NUMPY_SPEEDUP_DTYPE = "float32"
NUMPY_SPEEDUP_ROUNDS = 7

# MemoryWall: one head, float64, causal, at an n where numpy's n x n scores (32 GiB)
# cannot exist on this machine.
WALL_SEQ_LEN = 65536
WALL_DTYPE = "float64"
WALL_CAUSAL = True


# ModelLayer and ModelForward: all-MiniLM-L6-v2 (make model).  A layer's parts are timed at
# any n on random hidden states (no position table needed); the whole forward pass, on
# random token ids, only up to the model's 512 positions.
MODEL_WIDTH = 384
MODEL_LAYERS = 6  # a window of ±w in each reaches 6·w tokens through them all
MODEL_LAYER_SEQ_LENS = (512, 4096) if QUICK else (128, 256, 512, 1024, 2048, 4096, 8192)
MODEL_LAYER_REPEATS = 3 if QUICK else 5  # each part timed in turn, so many times
MODEL_FORWARD_SEQ_LENS = (64, 512) if QUICK else (64, 128, 256, 512)


# Decode: one new token's query (8 heads, d = 64, float32) against a KV cache of n tokens,
# and the same token by recomputing causal attention over the whole prefix (capped: at
# n = 65,536 that takes minutes; the fitted slope carries it further).  TinyCall: one head,
# n = 64, where a call's fixed cost shows.  Quick: caches up to CACHE_SEQ_LEN's 16,384 tokens
# (each of the 27 processes that reads a cache of 65,536 spends 2-4 s drawing and filling
# its 256 MiB).
DECODE_SEQ_LENS = (256, 4096, 16384) if QUICK else (256, 1024, 4096, 16384, 65536)
RECOMPUTE_SEQ_LENS = tuple(n for n in DECODE_SEQ_LENS if n <= (4096 if QUICK else 16384))
DECODE_DTYPE = "float32"
TINY_SEQ_LEN = 64
# CallCost: what the Python in front of a tiled rung costs a call, side by side with the
# rung's own run on the same arrays: kernels.attention on the tiny call, KVCache.attend on
# one query over a cache of CALL_COST_CACHE tokens (8 heads: 4 MiB, in L3), CALL_COST_CALLS
# calls of each a round (a call of microseconds is below the clock's steadiness alone).
CALL_COST_SHAPES = ("tiny", "decode")
CALL_COST_CACHE = 1024
CALL_COST_CALLS = 20
CALL_COST_ROUNDS = 15 if QUICK else 101
# CachedDecodeReadFraction: a step's read rate ÷ the streaming read's of as many bytes, side
# by side, at the largest n and at CALL_COST_CACHE, in this many rounds of one step and one
# read each (a short cache's step lasts tens of microseconds: more rounds).
DECODE_READ_ROUNDS = 5 if QUICK else 9
DECODE_SHORT_READ_ROUNDS = 25 if QUICK else 201


# Ceilings: the peak of each type that has a loop of its own (float32's and float64's FMAs;
# bfloat16's dot products, where the CPU has AVX512-BF16), on one thread and every CPU.
# PeakFraction: a kernel's GFLOP/s ÷ its type's roof, timed side by side with the roof's
# loop doing as many flops (8 heads at the headline n), in the cases the report reads: the
# tiled rungs in every type, full and causal, on one thread and every CPU (the headline,
# thread scaling, half precision, the roofline; a peer's is c_tiled's ÷ c_tiled's speed over
# it, PeerSpeedup's, side by side too), numpy on every CPU, full (the headline).  Quick:
# the tiled rungs, float32 and bfloat16, full.
PEAK_DTYPES = tuple(PEAK_BITS)
PEAK_FRACTION_KERNELS = TILED if QUICK else ("numpy", *TILED)
PEAK_FRACTION_DTYPES = ("float32", "bfloat16") if QUICK else ALL_DTYPES
PEAK_FRACTION_CAUSAL = (False,) if QUICK else (False, True)


def peak_fraction_case(kernel, dtype, every_thread, causal):
    """Why PeakFraction does not measure this case (a skip's reason), or None when it does."""
    if kernel not in TILED and (causal or not every_thread or dtype not in DTYPES):
        return f"{kernel}: float32 and float64, full, every thread only (the headline's cells)"
    return None


# PeakFraction's rounds, and TileFraction's: c_tiled's tile operations alone
# (ceilings.tile_loop) ÷ the FMA peak of their type, float32 and float64, on one thread and
# every CPU, side by side with the peak's loop as PeakFraction times c_tiled: the roof of
# c_tiled's own design; and CallOverTiles': c_tiled's whole call on the headline's shape ÷
# those tile operations, side by side with their loop.
PEAK_FRACTION_ROUNDS = 3 if QUICK else 7

# GemmFraction: NumPy's gemm (Machine's 2048² product) ÷ the FMA peak of its type, side by
# side with the peak's loop doing as many flops, float32 and float64, on one thread and every
# CPU: the practical roof of a kernel made of matrix products, read as PeakFraction reads the
# kernels.  Each side is called untimed for GEMM_FRACTION_SETTLE seconds first, every round
# (side_by_side's settle): the BLAS's workers spin on after a product, and a peak loop in
# their wake loses a core to them.  Measured (OpenBLAS 0.3.31, 2-core Xeon, 2 threads, two
# runs of 5 rounds each): sgemm read 0.93-1.45 of the peak unsettled, 0.70-0.81 after 0.1 s,
# 0.71-0.75 after 0.3 s.
GEMM_FRACTION_ROUNDS = 3 if QUICK else 7
GEMM_FRACTION_SETTLE = 0.25


# HalfSpeedup: each tiled rung in a 16-bit type over itself in float32, side by side, on
# PeerSpeedup's full and causal shapes (8 heads at the headline n).  HalfFidelity: MiniLM's
# embeddings over the bundled sentences with every attention call in a 16-bit type, against
# float32 (the smallest cosine), on numpy and the tiled rungs.
HALF_SHAPES = ("full",) if QUICK else ("full", "causal")
HALF_ROUNDS = 3 if QUICK else 7
HALF_FIDELITY_KERNELS = ("numpy", *TILED)

# ModelForwardOverNumpy: the whole forward pass on a kernel ÷ on numpy, side by side, at
# the two lengths of the in-context goals.
MODEL_OVER_NUMPY_SEQ_LENS = (64, 512)
MODEL_OVER_NUMPY_ROUNDS = {64: 5, 512: 3} if QUICK else {64: 15, 512: 5}


# InContext: each kernel (but naive: pure Python is not what a model runs) between two
# matrix products of a model's shapes and beside a busy process, against the same call
# alone and on one thread.  Shapes (heads, n, d): a tiny call, and one MiniLM layer's
# attention.  Calls per block: enough for a stable median within a second.
CONTEXT_KERNELS = ("numpy", *TILED, *PEER_NAMES)
CONTEXT_SHAPES = {"tiny": (1, TINY_SEQ_LEN, HEAD_DIM), "layer": (12, 512, 32)}
if QUICK:  # each case is two processes of seconds (a peer's: its library imported in both):
    # our kernels on the layer, the shape of the goals' worst case
    CONTEXT_KERNELS = ("numpy", *TILED)
    CONTEXT_SHAPES = {"layer": CONTEXT_SHAPES["layer"]}
CONTEXTS = ("between_matmuls", "between_matmuls_blas_sleeps", "busy_process")
CONTEXT_DTYPE = "float32"
CONTEXT_CALLS = {"tiny": 21, "layer": 3} if QUICK else {"tiny": 51, "layer": 7}
CONTEXT_ROUNDS = 2 if QUICK else 7


# PeerSpeedup: every peer (installed or not: one grid on every machine) beside each tiled
# rung, side by side, on four shapes: 8 heads at the headline n, full and causal; one
# new token's query against a cache of 65,536 tokens; one head at n = 64.  The decode
# and tiny shapes in float32 only, as the decode benchmarks.  Rounds: each a call of
# both, the ratio their median; the tiny call takes microseconds, so many.
PEERS = PEER_NAMES
# decode: one query over 65,536 cached tokens (beyond the caches); short_decode: over
# CALL_COST_CACHE (in L3), where the call's fixed cost is a part of the step
PEER_SHAPES = ("full", "causal", "decode", "short_decode", "tiny")
# The 16-bit types beside c_tiled only (HALF_PEER_KERNEL): the goals ask no more.
PEER_SHAPE_DTYPES = {"full": ALL_DTYPES, "causal": ALL_DTYPES, "decode": (DECODE_DTYPE,),
                     "short_decode": (DECODE_DTYPE,), "tiny": (DECODE_DTYPE,)}
HALF_PEER_KERNEL = "c_tiled"
PEER_ROUNDS = {"full": 7, "causal": 7, "decode": 9, "short_decode": 32, "tiny": 31}
# Shapes whose rounds are spread over this many placements: both sides' arrays (and our KV
# cache) made anew for each equal share of the rounds, the earlier ones kept, so that each
# lands elsewhere.  A step over a cache held in L3 runs at a speed that depends on where its
# buffers land: c_tiled's short_decode step, six caches made in turn in one process, medians
# of 55.3-61.5 us each (2-core Xeon), while a run timed one placement only gave the ratio over
# PyTorch at 0.93 in one run and 0.96-1.18 in seven probes.
PEER_PLACEMENTS = {"short_decode": 4}
# Each side of a peer comparison is called untimed for this long, then timed for as long (its
# time in a round: the median of those calls; benchmarks.common.side_by_side's settle), so
# that each is timed in its own steady state: after its call a peer's threads spin on,
# holding the other core, and a call of ours made then runs on one thread.  Measured (one
# head, n = 64, c_tiled, 2 threads, medians of 40 rounds): our call came back to its own
# time 2.5-5 ms after PyTorch's, ONNX Runtime's, OpenVINO's and JAX's calls, 5-10 ms after
# ggml's (19 -> 15.4 us after PyTorch's).
PEER_SETTLE_SECONDS = 0.02
PEER_KERNELS = TILED   # our rungs beside the peers (PeerSpeedup, WindowPeers, CachePeers)
if QUICK:
    # a peer's process costs seconds to start (imports, sessions): two shapes, float32, 3
    # rounds, c_tiled alone (and every thread only: benchmarks.common.PEER_THREAD_COUNTS)
    PEER_SHAPES = ("full", "tiny")
    PEER_SHAPE_DTYPES = {shape: DTYPES[:1] for shape in PEER_SHAPES}
    PEER_ROUNDS = {"full": 3, "causal": 3, "decode": 3, "short_decode": 8, "tiny": 9}
    PEER_KERNELS = ("c_tiled",)
PEER_DTYPES = tuple(dtype for dtype in ALL_DTYPES if any(dtype in kept for kept in PEER_SHAPE_DTYPES.values()))
DECODE_PEER_SEQ_LEN = 65536  # the decode shape's cache
# PeerAccuracy: each peer in each of its probed types (``Kernel.probed``: the 16-bit ones,
# whose precision its library picks by CPU) held to the harness on the run's CPU
# (``kernels.harness.probe``), the worst error ÷ budget.  Above 1 it fails the harness
# there: the suite times it all the same (PeerSpeedup, MultiHead), and the report marks
# those rows and measures no goal against them.  Quick runs too: MultiHead times the peers'
# 16-bit calls in them.
PEER_ACCURACY_DTYPES = HALF_DTYPES


# The cache in fewer bytes (§11.2): one new token's query (8 query heads, d = 64) against a
# cache of 65,536 tokens in each format and with 8 or 2 K/V heads, all threads.
# CacheFormats: each kernel in each (format, K/V heads) over itself on the float32 cache
# of 8 K/V heads, side by side, and its read rate; CachePeers: each peer that takes the
# format over our tiled rungs, side by side; CacheGenerate: the seconds to generate
# CACHE_GENERATED tokens after a CACHE_PROMPT-token prompt (the cache growing in place);
# CacheFidelity: each format's output error against float64 (kernels.decode.fidelity):
# one step at CACHE_SEQ_LEN, and the largest over a CACHE_FIDELITY_STEPS-step decode.
CACHE_DTYPES = ("float32", "float16", "bfloat16", "int8", "int4")
CACHE_KV_HEADS = (8, 2)
# Quick: a cache of 16,384 tokens (each of CacheFormats' 20 processes builds and reads one),
# and c_tiled alone beside the peers (CachePeers reads PEER_KERNELS)
CACHE_SEQ_LEN = 16384 if QUICK else 65536
CACHE_KERNELS = TILED if QUICK else ("numpy", *TILED)  # numpy widens 65,536 tokens a call: slow
CACHE_ROUNDS = 5 if QUICK else 11
CACHE_PROMPT, CACHE_GENERATED = (4096, 100) if QUICK else (32768, 1000)
CACHE_FIDELITY_STEPS = 100 if QUICK else 1000
CACHE_FIDELITY_KERNEL = "c_tiled"
CACHE_ERRORS = ("step", "decode")


# Ways out of the quadratic (§11.2): sliding windows and attention sinks, 8 heads, d = 64,
# float32, on the tiled rungs (those that skip the key tiles outside the band).
# WindowSeqLen: one call against n for each band (named by Band.describe(), as asv records
# them); full and causal attention only up to WINDOW_QUADRATIC_MAX (a causal call at 65,536
# takes about a minute on 2 cores, full two: asv takes one sample of such a call, and the
# band's GFLOP/s one too, WINDOW_ONE_SAMPLE_FLOPS).  The fixed window of the goals:
# WINDOW_GOAL_BAND against causal attention at WINDOW_GOAL_SEQ_LEN.
WINDOW_DTYPE = "float32"
WINDOW_KERNELS = TILED
if QUICK:
    WINDOW_BANDS = (FULL, CAUSAL, Band(128, 0), Band(512, 0, sinks=4))
    WINDOW_SEQ_LENS = tuple(2**p for p in range(10, 14))     # 1,024 .. 8,192
    WINDOW_QUADRATIC_MAX = 8192
else:
    WINDOW_BANDS = (FULL, CAUSAL, Band(512, 0), Band(2048, 0), Band(4096, 0, sinks=4))
    WINDOW_SEQ_LENS = tuple(2**p for p in range(13, 18))     # 8,192 .. 131,072
    WINDOW_QUADRATIC_MAX = 65536
WINDOW_SHAPES = {band.describe(): band for band in WINDOW_BANDS}
WINDOW_GOAL_BAND, WINDOW_GOAL_SEQ_LEN = Band(2048, 0), 65536
WINDOW_RATE_REPEATS = 5
WINDOW_ONE_SAMPLE_FLOPS = 1e12  # a call of more band flops (20 s at 50 GFLOP/s) is timed once

# BoundedDecode: one token's step (append its key and value, attend its query) on a bounded
# KVCache(window=BOUNDED_WINDOW, sinks=BOUNDED_SINKS) that has seen N tokens, beside an
# unbounded cache holding exactly N; BoundedOverUnbounded: the bounded step after N tokens
# over the unbounded step on a cache of sinks + window tokens (the bytes the bounded one
# keeps), side by side.  The goal reads the largest N.
BOUNDED_WINDOW, BOUNDED_SINKS = 4096, 4
BOUNDED_SEEN = (4100, 16384) if QUICK else (4100, 16384, 100_000)
BOUNDED_CACHES = ("bounded", "unbounded")
BOUNDED_ROUNDS = 21  # each round appends a token to both caches: 4,100 + 21 tokens at the end

# WindowPeers: each tiled rung's speed over each peer at one windowed shape, side by side.
# WINDOW_NATIVE_PEERS take a window of their own (JAX's local_window_size); the others are
# given the band as an n x n mask (Kernel.window_form says how each takes it).
WINDOW_PEER_SEQ_LEN = 2048 if QUICK else 8192
WINDOW_PEER_BAND = Band(128, 0) if QUICK else Band(512, 0)
WINDOW_NATIVE_PEERS = ("jax_attention",)
WINDOW_PEER_ROUNDS = 3 if QUICK else 7

# WindowFidelity: what a window costs a model trained with full attention: all-MiniLM-L6-v2's
# embeddings with every layer's attention windowed to (w, w), with the first s tokens in view
# besides (s = 1: [CLS], one attention sink) or not, against its full-attention embeddings
# (``kernels.models.fidelity.window_cosines``), on the 30 bundled sentences (5-23 tokens) and
# on the 5 paragraphs made of them (67-95 tokens): the mean and the smallest cosine.  A case
# takes seconds, so a quick run keeps the grid.
WINDOW_FIDELITY_KERNEL = "c_tiled"
WINDOW_FIDELITY_TEXTS = ("sentences", "paragraphs")
WINDOW_FIDELITY_WIDTHS = (2, 8, 32)
WINDOW_FIDELITY_SINKS = (0, 1)


@dataclass(frozen=True)
class Benchmark:
    """One asv benchmark, named as asv names it ("module.Class.method"), the names of its
    parameters in asv's order, and which of them are its sizes: a parameter of one value in
    a run, whose value a quick run shrinks (a cache's n, a decode's steps).  The results then
    say what was measured, and the report labels a quick run's figures with its own sizes
    (``results.Run.size``); ``Run.value`` fills them in."""

    name: str
    params: tuple = ()
    sizes: tuple = ()

    def __str__(self):
        return self.name


_ONE_HEAD = ("kernel", "seq_len", "dtype")
SEQ_LEN_TIME = Benchmark("bench_attention.SeqLen.time_attention", _ONE_HEAD)
SEQ_LEN_MEMORY = Benchmark("bench_attention.SeqLen.track_peak_extra_bytes", _ONE_HEAD)
MULTI_HEAD_TIME = Benchmark("bench_attention.MultiHead.time_attention",
                            ("kernel", "seq_len", "dtype", "causal"))
THREADS_GFLOPS = Benchmark("bench_attention.Threads.track_gflops", ("kernel", "threads"))
PEER_SPEEDUP = Benchmark("bench_peers.PeerSpeedup.track_speedup",
                         ("peer", "kernel", "shape", "threads", "dtype"))
PEER_ACCURACY = Benchmark("bench_peers.PeerAccuracy.track_error_over_budget", ("peer", "dtype"))
NUMPY_SPEEDUP = Benchmark("bench_attention.NumpySpeedup.track_speedup", ("kernel", "seq_len"))
WALL_MEMORY = Benchmark("bench_attention.MemoryWall.track_peak_extra_bytes", ("kernel",))
WALL_SECONDS = Benchmark("bench_attention.MemoryWall.track_seconds", ("kernel",))
FMA_PEAK = Benchmark("bench_machine.Ceilings.track_fma_peak_gflops", ("dtype", "threads"))
PEAK_FRACTION = Benchmark("bench_machine.PeakFraction.track_fraction", ("kernel", "dtype", "threads", "causal"))
GEMM_FRACTION = Benchmark("bench_machine.GemmFraction.track_fraction", ("dtype", "threads"))
TILE_FRACTION = Benchmark("bench_machine.TileFraction.track_fraction", ("dtype", "threads"))
CALL_OVER_TILES = Benchmark("bench_machine.CallOverTiles.track_fraction", ("dtype", "threads"))
BLAS_THREADS = Benchmark("bench_machine.Blas.track_threads", ("blas",))
SGEMM_UNFORCED = Benchmark("bench_machine.Blas.track_sgemm_gflops_unforced", ("blas",))
SGEMM = Benchmark("bench_machine.Machine.track_sgemm_gflops")
DGEMM = Benchmark("bench_machine.Machine.track_dgemm_gflops")
BANDWIDTH = Benchmark("bench_machine.Machine.track_memory_bandwidth")
THREAD_BUDGET = Benchmark("bench_machine.Machine.track_thread_budget")
IMPORT_SECONDS = Benchmark("bench_machine.Startup.track_import_seconds")
COMPILE_SECONDS = Benchmark("bench_machine.Startup.track_numba_compile_seconds")
CACHED_CALL_SECONDS = Benchmark("bench_machine.Startup.track_numba_cached_call_seconds")
MODEL_ATTENTION_SHARE = Benchmark("bench_model.ModelLayer.track_attention_share", ("kernel", "seq_len"))
MODEL_FORWARD_TIME = Benchmark("bench_model.ModelForward.time_forward", ("kernel", "seq_len"))
DECODE_CACHED = Benchmark("bench_decode.CachedDecode.time_token", ("kernel", "seq_len"))
DECODE_READ_RATE = Benchmark("bench_decode.CachedDecode.track_cache_read_gbytes_per_second",
                             ("kernel", "seq_len"))
DECODE_RECOMPUTED = Benchmark("bench_decode.RecomputedDecode.time_token", ("kernel", "seq_len"))
TINY_CALL = Benchmark("bench_decode.TinyCall.time_attention", ("kernel",))
CALL_COST = Benchmark("bench_decode.CallCost.track_over_run", ("kernel", "shape"))
READ_BANDWIDTH = Benchmark("bench_machine.Machine.track_read_bandwidth")
DECODE_READ_FRACTION = Benchmark("bench_decode.CachedDecodeReadFraction.track_fraction", ("kernel", "seq_len"))
_CONTEXT = ("kernel", "shape", "context")
CONTEXT_OVER_ALONE = Benchmark("bench_context.InContext.track_over_alone", _CONTEXT)
CONTEXT_OVER_ONE_THREAD = Benchmark("bench_context.InContext.track_over_one_thread", _CONTEXT)
MODEL_OVER_NUMPY = Benchmark("bench_model.ModelForwardOverNumpy.track_time_over_numpy", ("kernel", "seq_len"))
HALF_SPEEDUP = Benchmark("bench_half.HalfSpeedup.track_speedup", ("kernel", "shape", "threads", "dtype"))
HALF_FIDELITY = Benchmark("bench_half.HalfFidelity.track_min_cosine", ("kernel", "dtype"))
_CACHE = ("kernel", "cache_dtype", "kv_heads", "seq_len")
_SEQ_LEN = ("seq_len",)
CACHE_SPEEDUP = Benchmark("bench_cache.CacheFormats.track_speedup", _CACHE, _SEQ_LEN)
CACHE_READ_RATE = Benchmark("bench_cache.CacheFormats.track_read_gbytes_per_second", _CACHE, _SEQ_LEN)
CACHE_READ_FRACTION = Benchmark("bench_cache.CacheFormats.track_read_fraction", _CACHE, _SEQ_LEN)
CACHE_TOKEN_TIME = Benchmark("bench_cache.CacheFormats.time_token", _CACHE, _SEQ_LEN)
CACHE_PEER_SPEEDUP = Benchmark("bench_cache.CachePeers.track_speedup", ("peer",) + _CACHE, _SEQ_LEN)
CACHE_GENERATE = Benchmark("bench_cache.CacheGenerate.track_seconds",
                           ("kernel", "cache_dtype", "kv_heads", "prompt", "generated"), ("prompt", "generated"))
CACHE_ERROR = Benchmark("bench_cache.CacheFidelity.track_error", ("cache_dtype", "error", "seq_len", "steps"),
                        ("seq_len", "steps"))
KEY_GRANULARITY = Benchmark("bench_cache.KeyGranularity.track_error", ("keys", "granularity"))

_WINDOW = ("kernel", "seq_len", "shape")
WINDOW_TIME = Benchmark("bench_window.WindowSeqLen.time_attention", _WINDOW)
WINDOW_GFLOPS = Benchmark("bench_window.WindowSeqLen.track_band_gflops", _WINDOW)
WINDOW_MEMORY = Benchmark("bench_window.WindowSeqLen.track_peak_extra_bytes", _WINDOW)
_BOUNDED = ("kernel", "cache", "seen")
BOUNDED_STEP = Benchmark("bench_window.BoundedDecode.time_step", _BOUNDED)
BOUNDED_BYTES = Benchmark("bench_window.BoundedDecode.track_cache_bytes", _BOUNDED)
BOUNDED_OVER_UNBOUNDED = Benchmark("bench_window.BoundedOverUnbounded.track_time_over_unbounded",
                                   ("kernel", "seen"))
WINDOW_PEER_SPEEDUP = Benchmark("bench_window.WindowPeers.track_speedup", ("peer", "kernel", "seq_len", "shape"),
                                  ("seq_len", "shape"))
_WINDOW_FIDELITY = ("texts", "width", "sinks")
WINDOW_MEAN_COSINE = Benchmark("bench_window.WindowFidelity.track_mean_cosine", _WINDOW_FIDELITY)
WINDOW_MIN_COSINE = Benchmark("bench_window.WindowFidelity.track_min_cosine", _WINDOW_FIDELITY)

# Every benchmark the report reads, in the order its sections use them.
BENCHMARKS = (SEQ_LEN_TIME, SEQ_LEN_MEMORY, MULTI_HEAD_TIME, THREADS_GFLOPS, PEER_SPEEDUP, PEER_ACCURACY,
              NUMPY_SPEEDUP, WALL_MEMORY, WALL_SECONDS, SGEMM, DGEMM, BANDWIDTH, THREAD_BUDGET,
              IMPORT_SECONDS, COMPILE_SECONDS, CACHED_CALL_SECONDS, MODEL_ATTENTION_SHARE,
              MODEL_FORWARD_TIME, DECODE_CACHED, DECODE_RECOMPUTED, DECODE_READ_RATE, DECODE_READ_FRACTION, TINY_CALL, CALL_COST,
              READ_BANDWIDTH, CONTEXT_OVER_ALONE, CONTEXT_OVER_ONE_THREAD, MODEL_OVER_NUMPY, FMA_PEAK,
              PEAK_FRACTION, GEMM_FRACTION, TILE_FRACTION, CALL_OVER_TILES, BLAS_THREADS, SGEMM_UNFORCED, HALF_SPEEDUP, HALF_FIDELITY,
              CACHE_SPEEDUP, CACHE_READ_RATE, CACHE_READ_FRACTION, CACHE_TOKEN_TIME, CACHE_PEER_SPEEDUP, CACHE_GENERATE, CACHE_ERROR,
              KEY_GRANULARITY, WINDOW_TIME, WINDOW_GFLOPS, WINDOW_MEMORY, BOUNDED_STEP, BOUNDED_BYTES,
              BOUNDED_OVER_UNBOUNDED, WINDOW_PEER_SPEEDUP, WINDOW_MEAN_COSINE, WINDOW_MIN_COSINE)
# The gemm that bounds each dtype's throughput: (its name, the benchmark measuring it).
GEMM = {name: (FLOATS[name].gemm, benchmark) for name, benchmark in (("float32", SGEMM), ("float64", DGEMM))}
