"""The half-precision section (``HalfSpeedup``, ``HalfFidelity``, ``MultiHead``'s 16-bit
cells): what bfloat16 and float16 buy in speed, side by side with the same kernel in
float32, and what they cost in a real model's embeddings; against which ceiling.  A peer's
row in a type it fails the harness's budget in on the run's CPU (``PeerAccuracy``) says so."""
import math

from .. import bench_spec as spec
from ..output import Column, Table, fmt_gflops, fmt_number, fmt_percent, fmt_ratio, text
from .ceilings import (NO_BF16_UNIT, SIDE_BY_SIDE_PEAK, bf16_dot_is_roof, fma_peak, gflops_words, has_bf16_dot_product,
                       peak_fraction)
from .document import Section
from .multi_head import headline_shape, multihead_gflops
from .peers import FAILS, fails_harness
from .thread_scaling import thread_counts


def half_speedup(run, kernel, dtype, shape="full", all_threads=True):
    """The kernel's speed in ``dtype`` over its own float32 speed (float32's time ÷ the
    16-bit call's, side by side); NaN when not measured."""
    one, every = thread_counts(run, spec.HALF_SPEEDUP)
    return run.value(spec.HALF_SPEEDUP, kernel=kernel, shape=shape, threads=every if all_threads else one,
                     dtype=dtype)


def half_min_cosine(run, kernel, dtype):
    """MiniLM's smallest embedding cosine with attention in ``dtype`` against float32."""
    return run.value(spec.HALF_FIDELITY, kernel=kernel, dtype=dtype)


def _ceiling_words(run):
    """Which roof each 16-bit type is read against here, and what the run measured of it."""
    float32 = text(fma_peak(run, "float32"), gflops_words)
    widened = (f"float16 is widened to float32 before any product, so its roof is the float32 FMA peak "
               f"({float32} on every thread)")
    bf16 = has_bf16_dot_product(run)
    if bf16 is False:
        return (f"{widened}, and so is bfloat16's: this CPU has {NO_BF16_UNIT}, so no instruction "
                "multiplies bfloat16 faster than float32, and every rung widens it too.")
    if bf16 is None:
        return (f"{widened}. Whether this CPU has a bfloat16 unit (AVX512-BF16) is not known: its results "
                "folder is not named by `kernels.machine_id` and the run measured no bfloat16 peak, so "
                "bfloat16 is read against the float32 peak too.")
    peak = text(fma_peak(run, "bfloat16"), gflops_words)
    fraction = text(peak_fraction(run, "c_tiled", "bfloat16"), fmt_percent)
    if bf16_dot_is_roof(run):
        which = ("Here its dot products are the faster, so they are bfloat16's roof, and c_tiled multiplies "
                 "bfloat16 on that unit (its \"avx512-bf16\" path, `kernels.rungs.rung4_c_tiled.isa()`: "
                 "exact products summed in float32, P rounded to bfloat16 once); the other rungs widen "
                 "bfloat16 to float32, under the float32 peak")
    else:
        which = ("Here float32's FMAs are the faster (the dot products issue at a lower rate than an FMA), "
                 "so float32's FMA peak is bfloat16's roof too, and c_tiled's \"auto\" path widens "
                 "bfloat16 to float32 as the other rungs do (`ceilings.bf16_dot_pays`)")
    return (f"{widened}. bfloat16's roof is the faster of two units: this CPU has AVX512-BF16, whose "
            "`vdpbf16ps` sums two bfloat16 products into each float32 lane, twice float32's flops per "
            f"instruction; the run measured its dot-product peak at {peak} on every thread (`Ceilings`). "
            f"{which}. c_tiled's bfloat16 GFLOP/s as a fraction of that roof, timed "
            f"side by side with its loop (`PeakFraction`): {fraction}.")


def half_precision(run):
    every = thread_counts(run, spec.HALF_SPEEDUP)[1]
    kernels = [k for k in run.kernels(spec.MULTI_HEAD_TIME)
               if any(not math.isnan(multihead_gflops(run, k, dtype)) for dtype in spec.HALF_DTYPES)]
    timed = run.kernels(spec.HALF_SPEEDUP)
    rows = []
    for kernel in kernels:
        for dtype in ("float32", *spec.HALF_DTYPES):
            full, causal = (multihead_gflops(run, kernel, dtype, causal=c) for c in (False, True))
            # float32 over itself: 1 by definition, for the kernels timed so
            side_by_side = [(1.0 if kernel in timed else math.nan) if dtype == "float32"
                            else half_speedup(run, kernel, dtype, shape, all_threads)
                            for shape, all_threads in (("full", True), ("causal", True), ("full", False))]
            rows.append([kernel, dtype, full, peak_fraction(run, kernel, dtype), causal, *side_by_side,
                         FAILS if fails_harness(run, kernel, dtype) else ""])
    speed = Table("half_speed", (
        Column("kernel", "kernel"), Column("dtype", "dtype"),
        Column("gflops_full", "GFLOP/s, full", fmt_gflops),
        Column("fraction_of_roof", "of its type's roof", fmt_percent),
        Column("gflops_causal", "GFLOP/s, causal", fmt_gflops),
        Column("over_float32_full", "speed over float32, full (side by side)", fmt_ratio),
        Column("over_float32_causal", "speed over float32, causal (side by side)", fmt_ratio),
        Column("over_float32_full_one_thread", "… full, one thread", fmt_ratio),
        Column("harness", "the harness")), rows)
    fidelity_kernels = run.kernels(spec.HALF_FIDELITY)
    fidelity = Table("half_fidelity", (Column("kernel", "kernel"),) + tuple(
        Column(f"{dtype}_min_cosine", f"{dtype}: smallest cosine to float32", lambda v: f"{v:.8f}")
        for dtype in spec.HALF_DTYPES), [
        [kernel] + [half_min_cosine(run, kernel, dtype) for dtype in spec.HALF_DTYPES]
        for kernel in fidelity_kernels])
    return Section("Half precision: what it buys, what it costs", [
        "bfloat16 (8 significand bits, float32's range) and float16 (11 bits, a range up to 65,504) "
        "are the types models are stored and run in. Here every rung takes them as inputs and "
        "returns them as output, but computes in float32: scores, softmax, P·V, widened exactly "
        "from the 16-bit inputs and rounded once at the end (numpy widens whole arrays and rounds the "
        "whole output; numba_tiled and c_tiled widen each tile as they load it and round each output "
        "row as they store it). The one exception is c_tiled's bfloat16 on a CPU with AVX512-BF16, "
        "which multiplies bfloat16 itself on the dot-product unit: exact products summed in float32, "
        "each softmax weight rounded to bfloat16 once. What that buys is half the bytes of q, k, v "
        "and the output (a cache or an activation in a model twice as long for the same memory); "
        "what it costs is the rounding of the inputs (and of the weights), which the harness's budget "
        "allows for (2 unit roundoffs of the 16-bit type beyond the float32 budget).",
        _ceiling_words(run),
        f"GFLOP/s at {headline_shape(run)}, d = {spec.HEAD_DIM}, all threads ({text(every, fmt_number)}), "
        "from MultiHead's time; the speed over float32 is the same kernel's float32 call and its "
        "16-bit call alternating in one process (HalfSpeedup), so both see the same load; the roof is "
        f"the peak of the type's products, as above, and the share of it is {SIDE_BY_SIDE_PEAK}. "
        "At n = 4,096 attention is bound by its products, not by reading its inputs, so a 16-bit type "
        "widened to float32 can at best match float32; "
        "only bfloat16 on a dot-product unit faster than float32's FMAs has a higher roof. A peer's row marked "
        f"\"{FAILS}\" is a type whose results fail the harness's budget on this CPU (the peers "
        "section's PeerAccuracy): its library computes it below our rungs' precision, so its "
        "speed shows what that rounding buys, not a rival result.",
        speed,
        "What the rounding costs in a real model: all-MiniLM-L6-v2's sentence embeddings with "
        "every attention call in the 16-bit type (q, k, v rounded before the kernel, the output "
        "widened back; everything else in float32), the smallest cosine with the same kernel's "
        "float32 embeddings over the 30 bundled sentences (HalfFidelity).",
        fidelity,
    ])
