"""Sections on the multi-head shape of the speed goals (``MultiHead``): the headline
table, causal against full, float64 against float32."""
import math

from .. import bench_spec as spec
from ..costs import gflops
from ..output import (Column, Table, fmt_count, fmt_gflops, fmt_percent, fmt_ratio, fmt_seconds,
                      ratio, text)
from .ceilings import SIDE_BY_SIDE_PEAK, peak_fraction
from .document import Section


def headline_seq_len(run):
    """The largest n MultiHead ran (Threads and PeerSpeedup use the same n); NaN if none."""
    return max(run.param_values(spec.MULTI_HEAD_TIME, "seq_len"), default=math.nan)


def headline_shape(run):
    return f"{spec.HEADS} heads, n = {text(headline_seq_len(run), fmt_count)}"


def multihead_seconds(run, kernel, dtype, causal=False, seq_len=None):
    """MultiHead's time per call, at the headline n unless ``seq_len`` is given."""
    seq_len = seq_len or headline_seq_len(run)
    return run.value(spec.MULTI_HEAD_TIME, kernel=kernel, seq_len=seq_len, dtype=dtype, causal=causal)


def multihead_gflops(run, kernel, dtype, causal=False, seq_len=None):
    """GFLOP/s from MultiHead's time, so that a table's time and throughput agree."""
    seq_len = seq_len or headline_seq_len(run)
    return gflops(multihead_seconds(run, kernel, dtype, causal, seq_len), seq_len, seq_len,
                  spec.HEAD_DIM, batch=spec.HEADS, causal=causal)


def multihead_table(run):
    """Every kernel × dtype × n × causal with time and GFLOP/s."""
    rows = [[kernel, dtype, seq_len, causal, multihead_seconds(run, kernel, dtype, causal, seq_len),
             multihead_gflops(run, kernel, dtype, causal, seq_len)]
            for kernel in run.kernels(spec.MULTI_HEAD_TIME)
            for dtype in spec.DTYPES
            for seq_len in run.seq_lens(spec.MULTI_HEAD_TIME)
            for causal in (False, True)]
    return Table("multihead", (
        Column("kernel", "kernel"), Column("dtype", "dtype"), Column("seq_len", "n", fmt_count),
        Column("causal", "causal"), Column("seconds", "time per call", fmt_seconds),
        Column("gflops", "GFLOP/s", fmt_gflops)), rows)


def headline(run):
    """At the headline n, full: time, GFLOP/s, share of BLAS gemm, against numpy and the peer."""
    rows = []
    for dtype in spec.DTYPES:
        numpy_seconds = multihead_seconds(run, "numpy", dtype)
        peer_gflops = multihead_gflops(run, spec.PEER, dtype)
        for kernel in run.kernels(spec.MULTI_HEAD_TIME):
            seconds = multihead_seconds(run, kernel, dtype)
            throughput = multihead_gflops(run, kernel, dtype)
            rows.append([kernel, dtype, seconds, throughput, peak_fraction(run, kernel, dtype),
                         ratio(numpy_seconds, seconds), ratio(throughput, peer_gflops)])
    table = Table("headline", (
        Column("kernel", "kernel"), Column("dtype", "dtype"),
        Column("seconds", "time per call", fmt_seconds), Column("gflops", "GFLOP/s", fmt_gflops),
        Column("fraction_of_fma_peak", "of the FMA peak", fmt_percent),
        Column("speedup_over_numpy", "speed-up over numpy", fmt_ratio),
        Column(f"gflops_ratio_to_{spec.PEER}", f"GFLOP/s ÷ {spec.PEER}", fmt_ratio)), rows)
    return Section(f"Headline: {headline_shape(run)}, d = {spec.HEAD_DIM}, full attention", [
        "GFLOP/s counts 4·n²·d flops per head (half that when causal) over asv's time per call. Its share "
        "of the machine's FMA peak in that precision on every thread (the compute roof; see "
        "[the roofline](#the-roofline)) is " + SIDE_BY_SIDE_PEAK + "; "
        "speed-up over numpy is its time ÷ the kernel's. All cases in [multihead.csv](multihead.csv).",
        table,
    ], data=[multihead_table(run)])


def causal(run):
    """Causal time ÷ full time per kernel at the headline n: ideally 0.5."""
    rows = [[kernel] + [ratio(multihead_seconds(run, kernel, dtype, causal=True),
                              multihead_seconds(run, kernel, dtype)) for dtype in spec.DTYPES]
            for kernel in run.kernels(spec.MULTI_HEAD_TIME)]
    table = Table("causal_vs_full", (Column("kernel", "kernel"),) + tuple(
        Column(f"{dtype}_causal_over_full", f"{dtype}: causal ÷ full time", fmt_ratio)
        for dtype in spec.DTYPES), rows)
    return Section("Causal against full", [
        f"Causal time ÷ full time, {headline_shape(run)}: 0.5 when a kernel skips "
        "every masked tile, 1 when it computes them anyway.",
        table,
    ])


def precision(run):
    """float64 time ÷ float32 time per kernel at the headline n: twice the bytes per value."""
    rows = [[kernel] + [ratio(multihead_seconds(run, kernel, "float64", causal),
                              multihead_seconds(run, kernel, "float32", causal))
                        for causal in (False, True)]
            for kernel in run.kernels(spec.MULTI_HEAD_TIME)]
    table = Table("float64_vs_float32", (
        Column("kernel", "kernel"), Column("full", "full: float64 ÷ float32 time", fmt_ratio),
        Column("causal", "causal: float64 ÷ float32 time", fmt_ratio)), rows)
    return Section("float64 against float32", [
        f"float64 time ÷ float32 time, {headline_shape(run)}.",
        table,
    ])
