"""The peers section (``PeerSpeedup``, ``PeerAccuracy``): our tiled kernels beside every
other CPU attention a user could pick, each ratio timed side by side in a process of its
own; whether each peer's 16-bit types meet the harness's budget on the run's CPU (a peer
that fails it there is timed all the same, its figures shown in rows of their own and
never counted as a peer a goal is measured against); what each peer is, its version and
how it takes the thread budget; and GFLOP/s against n for our kernels and every peer."""
import importlib.metadata
import math

from .. import bench_spec as spec
from ..dtypes import listing
from ..output import Column, Table, fmt_count, fmt_number, fmt_ratio, missing
from ..registry import KERNELS, PEER_PACKAGES
from . import plots
from .document import Plot, Section
from .multi_head import headline_seq_len
from .seq_len import SHAPE, one_head_gflops

# The shapes' sizes, as bench_peers builds them: (heads, n), n None for the headline n.
SHAPE_SIZES = {"full": (spec.HEADS, None), "causal": (spec.HEADS, None),
               "decode": (spec.HEADS, spec.DECODE_PEER_SEQ_LEN),
               "short_decode": (spec.HEADS, spec.CALL_COST_CACHE), "tiny": (1, spec.TINY_SEQ_LEN)}
SHAPE_WORDS = {"full": "full", "causal": "causal", "decode": "one query, cached keys",
               "short_decode": "one query, cached keys (in L3)", "tiny": "full (a tiny call)"}


FAILS = "fails the harness budget here"  # the mark of a peer's figures in a type it fails


def peer_speedup(run, peer, kernel, shape, threads, dtype):
    """The kernel's speed over ``peer`` (the peer's time ÷ the kernel's, side by side)."""
    return run.value(spec.PEER_SPEEDUP, peer=peer, kernel=kernel, shape=shape, threads=threads, dtype=dtype)


def peer_error_over_budget(run, peer, dtype):
    """``PeerAccuracy``: the peer's worst error ÷ the harness's budget in ``dtype`` on the
    run's CPU; NaN where not measured (not a probed type, not installed, not run)."""
    return run.value(spec.PEER_ACCURACY, peer=peer, dtype=dtype)


def fails_harness(run, peer, dtype):
    """True when ``peer`` (any kernel's name may be asked) was measured above the harness's
    budget in ``dtype`` on the run's CPU; False where it met it or was not measured."""
    return peer_error_over_budget(run, peer, dtype) > 1


def worst_peer_speedup(run, kernel, shape, threads, dtype, peers=spec.PEERS):
    """The smallest of the kernel's speed-ups over ``peers`` measured at this point, and
    that peer; (NaN, None) when none was.  A peer that fails the harness's budget in
    ``dtype`` on the run's CPU is left out: a lead is measured over results that hold."""
    measured = [(peer_speedup(run, peer, kernel, shape, threads, dtype), peer) for peer in peers
                if not fails_harness(run, peer, dtype)]
    measured = [(value, peer) for value, peer in measured if not math.isnan(value)]
    return min(measured) if measured else (math.nan, None)


def shape_seq_len(run, shape):
    heads, seq_len = SHAPE_SIZES[shape]
    return seq_len or headline_seq_len(run)


def speedup_table(run):
    """One row per (kernel, shape, threads, dtype) that any peer ran; a column per peer.
    The figures of the peers that fail the harness's budget in that dtype on the run's CPU
    stand in a second row of that point, marked ``FAILS``."""
    peers = run.param_values(spec.PEER_SPEEDUP, "peer")
    peers = [peer for peer in spec.PEERS if peer in peers]
    rows = []
    for kernel in run.kernels(spec.PEER_SPEEDUP):
        for shape in spec.PEER_SHAPES:
            for threads in run.param_values(spec.PEER_SPEEDUP, "threads"):
                for dtype in spec.ALL_DTYPES:
                    values = [peer_speedup(run, peer, kernel, shape, threads, dtype) for peer in peers]
                    failing = [fails_harness(run, peer, dtype) for peer in peers]
                    for fails in (False, True):
                        shown = [value if peer_fails == fails else math.nan
                                 for value, peer_fails in zip(values, failing)]
                        if all(math.isnan(value) for value in shown):
                            continue
                        rows.append([kernel, SHAPE_WORDS[shape], SHAPE_SIZES[shape][0], shape_seq_len(run, shape),
                                     threads, dtype, FAILS if fails else ""] + shown)
    columns = (Column("kernel", "kernel"), Column("shape", "shape"), Column("heads", "heads"),
               Column("seq_len", "n", fmt_count), Column("threads", "threads", lambda v: f"{v:.0f}"),
               Column("dtype", "dtype"), Column("harness", "the harness"),
               *(Column(f"over_{peer}", f"over {peer}", fmt_ratio) for peer in peers))
    return Table("peers", columns, rows)


def accuracy_table(run):
    """Each peer's worst error ÷ budget in each type it is held to the harness in, on the
    run's CPU (``PeerAccuracy``)."""
    peers = [peer for peer in spec.PEERS
             if any(not missing(peer_error_over_budget(run, peer, dtype)) for dtype in spec.PEER_ACCURACY_DTYPES)]
    return Table("peer_accuracy", (Column("peer", "peer"), *(
        Column(f"{dtype}_error_over_budget", f"{dtype}: error ÷ budget",
               lambda value: fmt_number(value) + (f" ({FAILS})" if value > 1 else ""))
        for dtype in spec.PEER_ACCURACY_DTYPES)),
        [[peer] + [peer_error_over_budget(run, peer, dtype) for dtype in spec.PEER_ACCURACY_DTYPES]
         for peer in peers])


def _version(package):
    """"ggml 0.0.45": the version of the distribution that installs the import ``package``
    (ggml-python installs ggml), or "ggml not installed"."""
    for distribution in importlib.metadata.packages_distributions().get(package, [package]):
        try:
            return f"{package} {importlib.metadata.version(distribution)}"
        except importlib.metadata.PackageNotFoundError:
            pass
    return f"{package} not installed"


def peer_table():
    """What each peer is, its packages' versions (as installed when the report was
    written), the dtypes it takes and how it takes the thread budget."""
    rows = []
    for peer, packages in PEER_PACKAGES.items():
        record = KERNELS.get(peer)
        rows.append([peer, ", ".join(_version(package) for package in packages),
                     _declared(record) if record else "-",
                     record.threading if record else "-",
                     record.description.removeprefix("external peer: ") if record else "not installed (make peers)"])
    return Table("peer_versions", (
        Column("peer", "peer"), Column("packages", "packages"), Column("dtypes", "dtypes"),
        Column("threads", "threads"), Column("what", "what it runs")), rows)


def _declared(record):
    """The dtypes a peer declares: "float32; bfloat16, float16 held to the harness on the
    CPU" (the types of ``probed`` taken where they meet its budget)."""
    fixed = [dtype for dtype in record.dtypes if dtype not in record.probed]
    probed = [dtype for dtype in record.dtypes if dtype in record.probed]
    return ", ".join(fixed) + (f"; {', '.join(probed)} held to the harness on the CPU" if probed else "")


def _rounds(run):
    """The rounds behind the run's peer figures, shape by shape ("7 for full and causal, 9 for
    decode, ..."; the spec's count for figures that kept no samples), naming only the shapes
    the run has a figure for: without a peer installed it has none, and the spec's counts
    would describe rounds that never ran."""
    names = {"full": "full", "causal": "causal", "decode": "decode", "short_decode": "the short decode",
             "tiny": "the tiny call"}
    counts = {}   # rounds -> the shapes measured with that many, in the spec's order
    for shape, default in spec.PEER_ROUNDS.items():
        if run.measured(spec.PEER_SPEEDUP, shape=shape):
            counts.setdefault(run.rounds(spec.PEER_SPEEDUP, default, shape=shape), []).append(names[shape])
    if not counts:
        return "none in these results: no peer was measured"
    return ", ".join(f"{n} for {listing(shapes, 'and')}" for n, shapes in counts.items())


def peers(run):
    def draw(path):
        shown = set(spec.TILED) | set(spec.PEERS)
        plots.plot_against_seq_len(
            run, path, spec.SEQ_LEN_TIME, f"Our tiled kernels and every peer ({SHAPE})",
            "GFLOP/s (4·n²·d flops per call ÷ time; log scale)",
            label=lambda kernel, dtype: plots.kernel_label(kernel),
            to_y=lambda seq_len, seconds: one_head_gflops(seconds, seq_len),
            kernels=lambda kernel: kernel in shown)

    rounds = _rounds(run)
    return Section("Peers: every CPU attention a user could pick instead", [
        "Each figure is a tiled kernel's speed over one peer: the peer's time ÷ ours, both "
        "calls alternating in one process (each going first in turn), the median over the "
        f"rounds ({rounds}). In each round each side is called untimed for "
        f"{spec.PEER_SETTLE_SECONDS * 1e3:.0f} ms, then timed for as long (at least one call; its time the "
        "median of those calls), so that each is timed in its own steady state, as its users calling it in a loop find it, not in the other's wake: a peer's "
        "threads spin on for milliseconds after its call, holding the other core, and a call made then "
        "runs on one thread (ours, one head at n = 64: 19 µs in PyTorch's wake, 15.4 µs 5 ms later). Every "
        "(peer, kernel, shape, threads, dtype) runs in a process of its own, so no other "
        "peer's thread pool is still spinning beside it. Each call is timed as its own users "
        "make it: ours through `kernels.attention` (a decode step through `KVCache.attend`), "
        "with every check it makes; a peer through its own API on tensors of its own, made "
        "before the timing: PyTorch's `scaled_dot_product_attention` on torch tensors, an ONNX "
        "Runtime session with its inputs and output bound, a compiled OpenVINO infer request, "
        "a jitted JAX function on device arrays (waiting for its result), a built ggml graph; "
        "no conversion or check of ours is in a peer's time. "
        "n/a: the peer does not take that dtype, does not honour that thread budget, "
        f"or is not installed. A peer whose 16-bit results fail the harness's budget on this CPU "
        f"(below) is refused that type by `kernels.attention`, but timed all the same: its "
        f"figures stand in a row of their own, marked \"{FAILS}\", to "
        "show what its rounding buys; no goal is measured against them.",
        speedup_table(run),
        "Each peer's 16-bit types held to the harness on this CPU (PeerAccuracy: "
        "`kernels.harness.probe`, which `kernels.attention` runs at a peer's first call in such a "
        "type): the peer on the harness's hardest cases for a kernel that rounds its scores or its "
        "sums to 16 bits (large logits ×30 at n = 700; n = 1,031), the larger of its errors against "
        "float64 ÷ that case's budget. Above 1 it fails: the CPU's library computes that type below "
        "the precision our rungs are held to. n/a: not measured (a type the peer never takes, or "
        "a peer not installed).",
        accuracy_table(run),
        "The peers, as installed when this report was written:",
        peer_table(),
        Plot("peers_gflops_vs_n.png", "GFLOP/s against n of our tiled kernels and every peer", draw),
        "The same kernels' throughput on one head against n (the SeqLen benchmark).",
    ])
