"""The command line: ``python -m kernels {list,verify,timing,report,explain,heatmap}`` (also ``attnbench``)."""
import argparse
import sys
import time

import numpy as np

from . import harness, threads
from .api import attention
from .costs import attention_flops
from .registry import KERNELS


def _table(header, rows):
    """Plain-text table, columns padded to their widest cell."""
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _known(*names):
    """True when every name is a registered kernel; else says which are not, on stderr."""
    unknown = [name for name in names if name not in KERNELS]
    if unknown:
        print(f"unknown kernel(s) {', '.join(unknown)}; known: {', '.join(KERNELS)}", file=sys.stderr)
    return not unknown


def cmd_list(args):
    rows = [
        [k.name + (" (external)" if k.external else ""), k.memory_class, k.cap, k.description]
        for k in KERNELS.values()
    ]
    print(_table(["kernel", "memory", "cap", "description"], rows))
    return 0


def cmd_verify(args):
    names = args.kernel or list(KERNELS)
    if not _known(*names):
        return 2
    rows, failures, skips = [], 0, 0
    for outcome in harness.verify(names):
        c = outcome.comparison
        failures += outcome.status == "FAIL"
        skips += outcome.status == "skip"
        if c is None:
            rows.append([outcome.kernel, outcome.case.label, outcome.dtype, "-", "-", "skip", outcome.note])
        else:
            bad = "" if c.ok else f"first bad index {c.first_bad}, max abs {c.max_abs:.2e}"
            rows.append([outcome.kernel, outcome.case.label, outcome.dtype,
                         f"{c.error:.2e}", f"{c.budget:.2e}", outcome.status, bad])
        if args.verbose or outcome.status == "FAIL":
            print("  ".join(rows[-1]), flush=True)
    print(_table(["kernel", "case", "dtype", "error", "budget", "status", "note"], rows))
    total = len(rows)
    print(f"\n{total - failures - skips} passed, {failures} failed, {skips} skipped "
          f"({len(names)} kernels × {len(harness.CASES)} cases × {len(harness.DTYPES)} dtypes; "
          f"threads {threads.budget()})")
    return 1 if failures else 0


def cmd_timing(args):
    """Median wall time of each kernel at a few sequence lengths (the quick look)."""
    dtype = np.dtype(args.dtype)
    names = [n for n in (args.kernel or KERNELS) if n != "naive" or args.kernel]
    rng = np.random.default_rng(0)
    rows = []
    for n in args.seq_len:
        q, k, v = (rng.standard_normal((args.heads, n, args.head_dim)).astype(dtype) for _ in range(3))
        flops = attention_flops(n, n, args.head_dim, batch=args.heads, causal=args.causal)
        row = [str(n)]
        for name in names:
            if not KERNELS[name].fits(args.heads, n, n):
                row.append("n/a")
                continue
            attention(q, k, v, kernel=name, causal=args.causal)  # warm-up: JIT, caches, pages
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                attention(q, k, v, kernel=name, causal=args.causal)
                times.append(time.perf_counter() - start)
            median = float(np.median(times))
            row.append(f"{median * 1e3:.1f} ms {flops / median / 1e9:.1f} GF/s")
        rows.append(row)
    print(f"{dtype.name}, {args.heads} heads, d={args.head_dim}, causal={args.causal}, "
          f"threads {threads.budget()}, median of {args.repeat}")
    print(_table(["n"] + names, rows))
    return 0


def cmd_report(args):
    from .report import write_report  # matplotlib only when a report is asked for

    try:
        path = write_report(args.results, args.out)
    except (FileNotFoundError, ValueError) as error:  # no results, or a malformed file
        print(f"attnbench report: {error}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


def cmd_explain(args):
    if not _known(args.kernel):
        return 2
    from .viz.explain import write_explanation  # matplotlib only when the page is asked for

    print(f"wrote {write_explanation(args.out, kernel=args.kernel)}")
    return 0


def cmd_heatmap(args):
    if not _known(args.kernel):
        return 2
    from .models.minilm import ModelNotInstalled
    from .viz.heatmap import write_heatmap  # matplotlib and the model only when asked for

    try:
        path = write_heatmap(args.text, args.out, kernel=args.kernel)
    except ModelNotInstalled as missing:
        print(f"attnbench heatmap: {missing}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="attnbench", description=__doc__)
    parser.add_argument("--threads", type=int, help="thread budget for BLAS, Numba and OpenMP")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the registered kernels").set_defaults(func=cmd_list)
    verify = sub.add_parser("verify", help="every kernel against the float64 reference")
    verify.add_argument("--kernel", action="append", help="only this kernel (repeatable)")
    verify.add_argument("-v", "--verbose", action="store_true", help="print each row as it finishes")
    verify.set_defaults(func=cmd_verify)
    timing = sub.add_parser("timing", help="median time per kernel at a few sequence lengths")
    timing.add_argument("--kernel", action="append", help="only this kernel (repeatable)")
    timing.add_argument("--seq-len", type=int, nargs="+", default=[256, 1024, 4096])
    timing.add_argument("--heads", type=int, default=8)
    timing.add_argument("--head-dim", type=int, default=64)
    timing.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    timing.add_argument("--causal", action="store_true")
    timing.add_argument("--repeat", type=int, default=5)
    timing.set_defaults(func=cmd_timing)
    report = sub.add_parser("report", help="REPORT.md, plots and CSV from asv's results")
    report.add_argument("--results", default=".asv/results", help="asv results folder")
    report.add_argument("--out", default="reports", help="where REPORT.md, PNGs and CSVs go")
    report.set_defaults(func=cmd_report)
    explain = sub.add_parser("explain", help="figures of attention and a README.md that reads them")
    explain.add_argument("--out", required=True, help="where README.md and the PNGs go")
    explain.add_argument("--kernel", default="c_tiled", help="the kernel that computes the attention")
    explain.set_defaults(func=cmd_explain)
    heatmap = sub.add_parser("heatmap", help="all-MiniLM-L6-v2's heads on a text: figures, viewer, summary.md")
    heatmap.add_argument("--text", required=True, help="the text whose attention is drawn")
    heatmap.add_argument("--out", required=True, help="where summary.md, the PNGs and viewer.html go")
    heatmap.add_argument("--kernel", default="c_tiled", help="the kernel that computes the attention")
    heatmap.set_defaults(func=cmd_heatmap)
    args = parser.parse_args(argv)
    if args.threads:
        threads.set_budget(args.threads)
    return args.func(args)
