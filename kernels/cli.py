"""The command line: ``python -m kernels {list,verify,timing,report,explain,heatmap}`` (also ``attnbench``)."""
import argparse
import os
import pathlib
import sys
import tempfile
import time

import numpy as np

from . import harness, threads
from .api import ExtensionNotBuilt, attention, check_resources, planned
from .costs import attention_flops
from .registry import KERNELS

# What a user can get wrong (a value, a path, a size, the build): one line on stderr and
# exit status 1.  Anything else is a bug and keeps its traceback.
USER_ERRORS = (ValueError, OSError, MemoryError, ExtensionNotBuilt)


class UsageError(Exception):
    """A bad command line, as argparse words it."""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors come back to ``main`` (one line, exit status 2) instead of
    printing the whole usage and exiting."""

    def error(self, message):
        raise UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def _positive_int(text):
    """argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _kernel_name(text):
    """argparse type: a registered kernel's name."""
    if text not in KERNELS:
        raise argparse.ArgumentTypeError(f"unknown kernel(s) {text}; known: {', '.join(KERNELS)}")
    return text


def _output_folder(path):
    """Create ``path`` if needed and check that files can be written in it, before any
    work is done; OSError saying which of the two failed otherwise."""
    folder = pathlib.Path(path)
    if folder.exists() and not folder.is_dir():
        raise OSError(f"the output folder {folder} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OSError(f"cannot create the output folder {folder}: {error.strerror}") from None
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise OSError(f"cannot write in the output folder {folder}: {error.strerror}") from None
    return folder


def _table(header, rows):
    """Plain-text table, columns padded to their widest cell."""
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def cmd_list(args):
    rows = [
        [k.name + (" (external)" if k.external else ""), k.memory_class, k.cap, k.description]
        for k in KERNELS.values()
    ]
    print(_table(["kernel", "memory", "cap", "description"], rows))
    return 0


def cmd_verify(args):
    names = args.kernel or list(KERNELS)
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
          f"threads: {threads.describe()})")
    return 1 if failures else 0


def cmd_timing(args):
    """Median wall time of each kernel at a few sequence lengths (the quick look)."""
    dtype = np.dtype(args.dtype)
    names = args.kernel or [name for name in KERNELS if name != "naive"]
    unable = _kernels_unable(names, args, dtype)  # refuses before allocating anything
    rng = np.random.default_rng(0)
    rows = []
    for n in args.seq_len:
        shape = (args.heads, n, args.head_dim)
        q, k, v = (rng.standard_normal(shape, dtype=dtype) for _ in range(3))
        flops = attention_flops(n, n, args.head_dim, batch=args.heads, causal=args.causal)
        row = [str(n)]
        for name in names:
            if (n, name) in unable:
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
        del q, k, v
    print(f"{dtype.name}, {args.heads} heads, d={args.head_dim}, causal={args.causal}, "
          f"threads: {threads.describe()}, median of {args.repeat}")
    print(_table(["n"] + names, rows))
    for (n, name), reason in unable.items():
        print(f"n/a: {name} at n={n}: {reason}")
    return 0


def _kernels_unable(names, args, dtype):
    """{(n, kernel): why} for the kernels that cannot run n (size cap, memory for the
    inputs, output and workspace); raises the reason when no kernel can run some n."""
    unable = {}
    for n in args.seq_len:
        problem = planned((args.heads,), n, n, args.head_dim, args.head_dim, dtype, args.causal)
        reasons = {}
        for name in names:
            try:
                check_resources(KERNELS[name], problem, problem.input_bytes)
            except (ValueError, MemoryError) as reason:
                reasons[name] = reason
        if len(reasons) == len(names):  # say why in our own rung's words, the last one asked for
            raise reasons[([name for name in names if not KERNELS[name].external] or names)[-1]]
        unable.update(((n, name), reason) for name, reason in reasons.items())
    return unable


def cmd_report(args):
    from .report import keep_machine, write_report  # matplotlib only when a report is asked for

    # no results, or a malformed file: ValueError or OSError, one line from main
    out = _output_folder(args.out)
    print(f"wrote {write_report(args.results, out)}")
    if args.keep_machine:
        print(f"kept {keep_machine(args.results, out, args.keep_machine)}")
    return 0


def cmd_explain(args):
    from .viz.explain import write_explanation  # matplotlib only when the page is asked for

    print(f"wrote {write_explanation(_output_folder(args.out), kernel=args.kernel)}")
    return 0


def cmd_heatmap(args):
    from .models.minilm import ModelNotInstalled
    from .viz.heatmap import write_heatmap  # matplotlib and the model only when asked for

    out = _output_folder(args.out)
    try:
        path = write_heatmap(args.text, out, kernel=args.kernel)
    except ModelNotInstalled as missing:
        print(f"attnbench heatmap: {missing}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


def main(argv=None):
    """Run one command; returns its exit status (2: a bad command line, 1: a value, path,
    size or build the command cannot work with, each said in one line on stderr)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as error:
        print(error, file=sys.stderr)
        return 2
    try:
        if args.threads is None:
            threads.default_budget()  # a bad ATTNBENCH_THREADS / OMP_NUM_THREADS, said first
        else:
            threads.set_budget(args.threads)
        return args.func(args)
    except BrokenPipeError:  # whoever read the output stopped (`| head`): nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nor at exit's flush
        return 1
    except USER_ERRORS as error:
        message = " ".join(str(error).split())  # one line, whatever the message held
        print(f"{parser.prog} {args.command}: {message}", file=sys.stderr)
        return 1


def _parser():
    parser = _Parser(prog="attnbench", description=__doc__)
    parser.add_argument("--threads", type=_positive_int,
                        help="thread budget for BLAS and our thread pool (default: ATTNBENCH_THREADS, "
                             "else OMP_NUM_THREADS, else every CPU)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the registered kernels").set_defaults(func=cmd_list)
    verify = sub.add_parser("verify", help="every kernel against the float64 reference")
    verify.add_argument("--kernel", type=_kernel_name, action="append", help="only this kernel (repeatable)")
    verify.add_argument("-v", "--verbose", action="store_true", help="print each row as it finishes")
    verify.set_defaults(func=cmd_verify)
    timing = sub.add_parser("timing", help="median time per kernel at a few sequence lengths")
    timing.add_argument("--kernel", type=_kernel_name, action="append", help="only this kernel (repeatable)")
    timing.add_argument("--seq-len", type=_positive_int, nargs="+", default=[256, 1024, 4096])
    timing.add_argument("--heads", type=_positive_int, default=8)
    timing.add_argument("--head-dim", type=_positive_int, default=64)
    timing.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    timing.add_argument("--causal", action="store_true")
    timing.add_argument("--repeat", type=_positive_int, default=5)
    timing.set_defaults(func=cmd_timing)
    report = sub.add_parser("report", help="REPORT.md, plots and CSV from asv's results")
    report.add_argument("--results", default=".asv/results", help="asv results folder")
    report.add_argument("--out", default="reports", help="where REPORT.md, PNGs and CSVs go")
    report.add_argument("--keep-machine", metavar="NAME",
                        help="after the report, keep machine NAME's newest results file and its machine.json "
                             "in OUT/machines/NAME/ (replacing its older results file there; the suite's "
                             "benchmarks.json in OUT/machines/), so that later reports, on any machine, lay it "
                             "beside the others in a Machines section (make bench does this)")
    report.set_defaults(func=cmd_report)
    explain = sub.add_parser("explain", help="figures of attention and a README.md that reads them")
    explain.add_argument("--out", required=True, help="where README.md and the PNGs go")
    explain.add_argument("--kernel", type=_kernel_name, default="c_tiled",
                         help="the kernel that computes the attention")
    explain.set_defaults(func=cmd_explain)
    heatmap = sub.add_parser("heatmap", help="all-MiniLM-L6-v2's heads on a text: figures, viewer, summary.md")
    heatmap.add_argument("--text", required=True, help="the text whose attention is drawn")
    heatmap.add_argument("--out", required=True, help="where summary.md, the PNGs and viewer.html go")
    heatmap.add_argument("--kernel", type=_kernel_name, default="c_tiled",
                         help="the kernel that computes the attention")
    heatmap.set_defaults(func=cmd_heatmap)
    return parser
