"""The peers section (``PeerSpeedup``): our tiled kernels beside every other CPU attention a
user could pick, each ratio timed side by side in a process of its own; what each peer
is, its version and how it takes the thread budget; and GFLOP/s against n for our
kernels and every peer."""
import importlib.metadata
import math

from .. import bench_spec as spec
from ..output import Column, Table, fmt_count, fmt_ratio
from ..registry import KERNELS, PEER_PACKAGES
from . import plots
from .document import Plot, Section
from .multi_head import headline_seq_len
from .seq_len import SHAPE, one_head_gflops

# The shapes' sizes, as bench_peers builds them: (heads, n), n None for the headline n.
SHAPE_SIZES = {"full": (spec.HEADS, None), "causal": (spec.HEADS, None),
               "decode": (spec.HEADS, spec.DECODE_PEER_SEQ_LEN), "tiny": (1, spec.TINY_SEQ_LEN)}
SHAPE_WORDS = {"full": "full", "causal": "causal", "decode": "one query, cached keys",
               "tiny": "full (a tiny call)"}


def peer_speedup(run, peer, kernel, shape, threads, dtype):
    """The kernel's speed over ``peer`` (the peer's time ÷ the kernel's, side by side)."""
    return run.value(spec.PEER_SPEEDUP, peer=peer, kernel=kernel, shape=shape, threads=threads, dtype=dtype)


def worst_peer_speedup(run, kernel, shape, threads, dtype, peers=spec.PEERS):
    """The smallest of the kernel's speed-ups over ``peers`` measured at this point, and
    that peer; (NaN, None) when none was."""
    measured = [(peer_speedup(run, peer, kernel, shape, threads, dtype), peer) for peer in peers]
    measured = [(value, peer) for value, peer in measured if not math.isnan(value)]
    return min(measured) if measured else (math.nan, None)


def shape_seq_len(run, shape):
    heads, seq_len = SHAPE_SIZES[shape]
    return seq_len or headline_seq_len(run)


def speedup_table(run):
    """One row per (kernel, shape, threads, dtype) that any peer ran; a column per peer."""
    peers = run.param_values(spec.PEER_SPEEDUP, "peer")
    peers = [peer for peer in spec.PEERS if peer in peers]
    rows = []
    for kernel in run.kernels(spec.PEER_SPEEDUP):
        for shape in spec.PEER_SHAPES:
            for threads in run.param_values(spec.PEER_SPEEDUP, "threads"):
                for dtype in spec.ALL_DTYPES:
                    values = [peer_speedup(run, peer, kernel, shape, threads, dtype) for peer in peers]
                    if all(math.isnan(value) for value in values):
                        continue
                    rows.append([kernel, SHAPE_WORDS[shape], SHAPE_SIZES[shape][0],
                                 shape_seq_len(run, shape), threads, dtype] + values)
    columns = (Column("kernel", "kernel"), Column("shape", "shape"), Column("heads", "heads"),
               Column("seq_len", "n", fmt_count), Column("threads", "threads", lambda v: f"{v:.0f}"),
               Column("dtype", "dtype"),
               *(Column(f"over_{peer}", f"over {peer}", fmt_ratio) for peer in peers))
    return Table("peers", columns, rows)


def _version(package):
    try:
        return f"{package} {importlib.metadata.version(package)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{package} not installed"


def peer_table():
    """What each peer is, its packages' versions (as installed when the report was
    written), the dtypes it takes and how it takes the thread budget."""
    rows = []
    for peer, packages in PEER_PACKAGES.items():
        record = KERNELS.get(peer)
        rows.append([peer, ", ".join(_version(package) for package in packages),
                     ", ".join(record.dtypes) if record else "-",
                     record.threading if record else "-",
                     record.description.removeprefix("external peer: ") if record else "not installed (make peers)"])
    return Table("peer_versions", (
        Column("peer", "peer"), Column("packages", "packages"), Column("dtypes", "dtypes"),
        Column("threads", "threads"), Column("what", "what it runs")), rows)


def peers(run):
    def draw(path):
        shown = set(spec.TILED) | set(spec.PEERS)
        plots.plot_against_seq_len(
            run, path, spec.SEQ_LEN_TIME, f"Our tiled kernels and every peer ({SHAPE})",
            "GFLOP/s (4·n²·d flops per call ÷ time; log scale)",
            label=lambda kernel, dtype: plots.kernel_label(kernel),
            to_y=lambda seq_len, seconds: one_head_gflops(seconds, seq_len),
            kernels=lambda kernel: kernel in shown)

    return Section("Peers: every CPU attention a user could pick instead", [
        "Each figure is a tiled kernel's speed over one peer: the peer's time ÷ ours, both "
        "calls alternating in one process (each going first in turn), the median over the "
        "rounds (7 for full and causal, 9 for decode, 301 for the tiny call). Every "
        "(peer, kernel, shape, threads, dtype) runs in a process of its own, so no other "
        "peer's thread pool is still spinning beside it. A peer's call is timed as a user "
        "makes it through `kernels.attention`: ONNX Runtime and OpenVINO bind NumPy's "
        "memory in and out without a copy, PyTorch shares it, JAX's includes handing the "
        "arrays to XLA and copying the result back (O(n·d) against the O(n²·d) work). "
        "n/a: the peer does not take that dtype, does not honour that thread budget, "
        "or is not installed.",
        speedup_table(run),
        "The peers, as installed when this report was written:",
        peer_table(),
        Plot("peers_gflops_vs_n.png", "GFLOP/s against n of our tiled kernels and every peer", draw),
        "The same kernels' throughput on one head against n (the SeqLen benchmark).",
    ])
