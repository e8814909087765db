"""The command line: ``python -m kernels {list,verify,timing,bench,report,explain,heatmap}`` (also ``attnbench``)."""
import argparse
import math
import os
import sys
import time

import numpy as np

from . import bench_run, dtypes, harness, output, threads
from .api import USER_ERRORS, attention, planned, unable_calls
from .band import Band
from .costs import attention_flops, band_flops
from .registry import KERNELS

DESCRIPTION = (
    "attnbench: self-attention, softmax(Q Kᵀ/√d) V, on the CPU as a ladder of kernels (pure-Python "
    "loops, NumPy, Numba, C with SIMD), every one held to one float64 reference, timed against "
    "sequence length beside the peers (PyTorch, ONNX Runtime, OpenVINO, JAX, ggml), and reported.")

# left out of timing's default set, saying so: pure-Python loops, slow and size-capped
LEFT_OUT_BY_DEFAULT = ("naive",)

class UsageError(Exception):
    """A bad command line, as argparse words it."""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors come back to ``main`` (one line, exit status 2) instead of
    printing the whole usage and exiting."""

    def error(self, message):
        raise UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def _positive_int(text, least=1):
    """argparse type: a whole number >= 1 (>= ``least``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
    return value


def _non_negative_int(text):
    """argparse type: a whole number >= 0."""
    return _positive_int(text, least=0)


def _window_side(text):
    """argparse type of a --window side: a whole number >= 0, or "none" (unbounded)."""
    return None if text.lower() == "none" else _non_negative_int(text)


def _kernel_name(text):
    """argparse type: a registered kernel's name."""
    if text not in KERNELS:
        raise argparse.ArgumentTypeError(f"unknown kernel(s) {text}; known: {', '.join(KERNELS)}")
    return text


def _count(number, noun):
    """ "1 kernel", "3 kernels": ``number`` and ``noun``, plural unless it is 1."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


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


def _named(kernels):
    """The kernels a repeatable --kernel named, each once, in the order first named."""
    return list(dict.fromkeys(kernels or ()))


def cmd_verify(args):
    names = _named(args.kernel) or list(KERNELS)
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
          f"({_count(len(names), 'kernel')} × {_count(len(harness.CASES), 'case')} × "
          f"{_count(len(harness.DTYPES), 'dtype')}; threads: {threads.describe()})")
    return 1 if failures else 0


def cmd_timing(args):
    """Median wall time of each kernel at a few sequence lengths (the quick look)."""
    dtype = np.dtype(args.dtype)
    compute = dtypes.float_type(dtype).compute   # (standard_normal draws float32 or float64 only)
    names = _named(args.kernel) or [name for name in KERNELS if name not in LEFT_OUT_BY_DEFAULT]
    unable = _kernels_unable(names, args, dtype)  # refuses before allocating anything
    rng = np.random.default_rng(0)
    rows = []
    for n in args.seq_len:
        shape = (args.heads, n, args.head_dim)
        q, k, v = (rng.standard_normal(shape, dtype=compute).astype(dtype, copy=False) for _ in range(3))
        band = _band(args)
        flops = (band_flops(band, n, n, args.head_dim, batch=args.heads) if band.windowed
                 else attention_flops(n, n, args.head_dim, batch=args.heads, causal=args.causal))
        row = [str(n)]
        for name in names:
            if (n, name) in unable:
                row.append("n/a")
                continue
            attention(q, k, v, kernel=name, **_call_band(args))  # warm-up: JIT, caches, pages
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                attention(q, k, v, kernel=name, **_call_band(args))
                times.append(time.perf_counter() - start)
            median = float(np.median(times))
            row.append(_timed(median, flops))
        rows.append(row)
        del q, k, v
    print(f"{dtype.name}, {_count(args.heads, 'head')}, d={args.head_dim}, {_band(args).describe()}, "
          f"threads: {threads.describe()}, median of {args.repeat}")
    print(_table(["n"] + names, rows))
    for (n, name), reason in unable.items():
        print(f"n/a: {name} at n={n}: {reason}")
    if not args.kernel:
        for name in LEFT_OUT_BY_DEFAULT:
            if name in KERNELS:
                print(_left_out(KERNELS[name], args.heads))
    return 0


def _timed(seconds, flops):
    """A median and its rate, three significant figures each ("48.6 µs 43.1 GF/s"): a
    small call's time and a slow kernel's rate read as more than 0.0."""
    figure = lambda x: f"{x:,.0f}" if x >= 100 else f"{x:.3g}"
    unit, scale = ("s", 1) if seconds >= 1 else ("ms", 1e3) if seconds >= 1e-3 else ("µs", 1e6)
    return f"{figure(seconds * scale)} {unit} {figure(flops / seconds / 1e9)} GF/s"


def _left_out(kernel, heads):
    """One line: ``kernel`` was left out of timing's default set, why, and how to time it."""
    largest = math.isqrt(kernel.max_scores // heads) if kernel.max_scores else None
    reach = f", so n ≤ {largest:,} at {_count(heads, 'head')}" if largest else ""
    return (f"{kernel.name} left out (pure-Python loops, about a second a call at its size cap "
            f"{kernel.cap}{reach}); --kernel {kernel.name} to include it")


def _kernels_unable(names, args, dtype):
    """{(n, kernel): why} for the kernels that cannot run n (size cap, memory for the
    inputs, output and workspace); raises the reason when no kernel can run some n."""
    unable = unable_calls(names, [(n, planned((args.heads,), n, n, args.head_dim, args.head_dim, dtype,
                                              **_call_band(args)))
                             for n in args.seq_len])
    for n in args.seq_len:
        if all((n, name) in unable for name in names):  # say why in our own rung's words, the last one asked for
            raise unable[n, ([name for name in names if not KERNELS[name].external] or names)[-1]]
    return unable


def _call_band(args):
    """The band keywords of ``kernels.attention`` that timing's arguments give."""
    return dict(causal=args.causal, window=args.window, sinks=args.sinks)


def _band(args):
    return Band.of(**_call_band(args))


def cmd_bench(args):
    """The asv suite class by class, then the report (``make bench``; kernels.bench_run)."""
    options = bench_run.Options(quick=args.quick, threads=getattr(args, "threads", None), bench=args.bench or None,
                                resume=args.resume, machine=args.machine or None, calibrate=args.calibrate)
    return bench_run.run(options)


def cmd_report(args):
    from .report import publish  # matplotlib only when a report is asked for

    # no results, or a malformed file: ValueError or OSError, one line from main.  The
    # report reads the machines kept in OUT/machines/ where they are; --keep-machine then
    # adds this machine's newest run there, each file written whole.
    report, kept = publish(args.results, args.out, args.keep_machine)
    print(f"wrote {report}")
    if kept:
        print(f"kept {kept}")
    return 0


def cmd_explain(args):
    from .viz.examples import refuse_unfit_kernel
    from .viz.explain import write_explanation  # matplotlib only when the page is asked for

    refuse_unfit_kernel(args.kernel)  # before any folder is made
    with output.staged_output(args.out) as staging:
        page = write_explanation(staging.folder, kernel=args.kernel)
    print(f"wrote {staging.final(page)}")
    return 0


def _progress(line):
    """A long command's progress: one line on stderr, at once."""
    print(" ".join(str(line).split()), file=sys.stderr, flush=True)


def cmd_heatmap(args):
    from .models.minilm import ModelNotInstalled, model_folder
    from .viz.heatmap import check_text, write_heatmap  # matplotlib and the model only when asked for

    check_text(args.text)  # empty or blank: ValueError, one line from main
    try:
        model_folder()  # missing: said before any folder is made
        with output.staged_output(args.out) as staging:
            summary = write_heatmap(args.text, staging.folder, kernel=args.kernel,
                                    sentence_set=args.sentence_set, progress=_progress)
    except ModelNotInstalled as missing:
        print(f"attnbench heatmap: {' '.join(str(missing).split())}", file=sys.stderr)
        return 1
    print(f"wrote {staging.final(summary)}")
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
        if getattr(args, "threads", None) is None:  # given neither before nor after the command
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
    # one --threads for every command, accepted before it and after it: SUPPRESS leaves
    # it out of the namespace unless given, so that the command's own, when given, wins
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--threads", type=_positive_int, default=argparse.SUPPRESS,
                        help="thread budget for BLAS and our thread pool, before or after the command "
                             "(default: ATTNBENCH_THREADS, else OMP_NUM_THREADS, else every CPU)")
    parser = _Parser(prog="attnbench", description=DESCRIPTION, parents=[common])
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name, func, summary, description=None):
        """A subcommand: ``summary`` in the command list, ``description`` (or the summary) in its --help."""
        parsed = sub.add_parser(name, help=summary, description=description or summary, parents=[common])
        parsed.set_defaults(func=func)
        return parsed

    command("list", cmd_list, "the registered kernels: what each adds, its extra memory and its size cap")
    verify = command("verify", cmd_verify, "every kernel against the float64 reference",
                     f"Runs every kernel on the same {len(harness.CASES)} cases in each of the "
                     f"{len(harness.DTYPES)} types it may take ({dtypes.TAKEN}: "
                     f"{len(harness.CASES) * len(harness.DTYPES)} checks a kernel, a type it does not take "
                     "skipped with the reason) and holds each output "
                     "to the float64 reference (kernels.reference), within an error budget set by the type's "
                     "rounding; exit status 1 when any fails.")
    verify.add_argument("--kernel", type=_kernel_name, action="append",
                        help="only this kernel (repeatable; default: every registered kernel, naive included)")
    verify.add_argument("-v", "--verbose", action="store_true", help="print each row as it finishes")
    timing = command("timing", cmd_timing, "median time per kernel at a few sequence lengths",
                     "The quick look: median wall time and GFLOP/s of each kernel on random inputs "
                     "(heads × n × head-dim, queries = keys = values in length) at each sequence length, "
                     "after one untimed warm-up call.  The full measurements are `make bench`'s.")
    naive = KERNELS.get("naive")
    timing.add_argument("--kernel", type=_kernel_name, action="append",
                        help="only this kernel (repeatable; default: every registered kernel but naive"
                             + (f", whose pure-Python loops take about a second a call and are capped at {naive.cap}"
                                if naive else "") + ")")
    timing.add_argument("--seq-len", type=_positive_int, nargs="+", default=[256, 1024, 4096], metavar="N",
                        help="the sequence lengths n to time, queries and keys alike (default: %(default)s)")
    timing.add_argument("--heads", type=_positive_int, default=8,
                        help="heads per call, each its own n × n attention (default: %(default)s)")
    timing.add_argument("--head-dim", type=_positive_int, default=64, metavar="D",
                        help="d, the width of each head's queries, keys and values (default: %(default)s)")
    timing.add_argument("--dtype", choices=list(dtypes.NAMES), default="float32",
                        help="the inputs' floating-point type (default: %(default)s)")
    timing.add_argument("--causal", action="store_true",
                        help="causal attention, query i seeing keys 0 to i only (default: %(default)s, "
                             "every query sees every key)")
    timing.add_argument("--window", type=_window_side, nargs=2, metavar=("LEFT", "RIGHT"),
                        help="a sliding window: each query sees the LEFT keys before it and the RIGHT after "
                             "(none: unbounded; FlashAttention's window_size, aligned as causal is; GF/s count "
                             "the window's scores only) (default: none, every key)")
    timing.add_argument("--sinks", type=_non_negative_int, default=0,
                        help="with --window, the first keys every query also sees (default: %(default)s)")
    timing.add_argument("--repeat", type=_positive_int, default=5,
                        help="timed calls per kernel and n, of which the median is shown (default: %(default)s)")
    bench = command("bench", cmd_bench, "the asv suite, one class at a time, then the report (make bench)",
                    "The asv suite on this interpreter, one benchmark class at a time (Ctrl-C loses only the "
                    "class it stops; the report is still written, and the exit status is 130), the calibration "
                    "workload before and after each class, then `report --keep-machine`.  A progress line "
                    "before and after each class: which, how many of how many, the time taken and elapsed.  "
                    "Exit status 1 when a class, asv's discovery or the report failed (the other classes still "
                    "run).  Run it in the project's folder: results in .asv/results, the report in reports/.  "
                    "--threads N sets ATTNBENCH_THREADS=N for the benchmarks.")
    bench.add_argument("--quick", action="store_true",
                       help="small grids, one sample each (ATTNBENCH_QUICK=1, asv --quick), and unless --bench "
                            "says otherwise neither asv's peakmem_ nor MemoryWall; a few minutes (default: %(default)s)")
    bench.add_argument("--bench", metavar="REGEX",
                       help="only the benchmarks this regular expression finds in their name or a parameter "
                            "combination's, as asv run --bench: MultiHead runs one class (default: every "
                            f"benchmark; with --quick, {bench_run.QUICK_SELECTION!r})")
    bench.add_argument("--resume", action="store_true",
                       help="skip what already has results of this commit on this machine: whole classes, "
                            "and within the others asv's --skip-existing-successful (default: %(default)s)")
    bench.add_argument("--machine", metavar="NAME",
                       help="the machine's name in asv's results (default: its CPU and ISA, kernels.machine_id, "
                            "such as amd-epyc-avx2)")
    bench.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                       help="no calibration workload around the classes (about a second each; the report then "
                            "cannot mark the classes measured on a disturbed machine) (default: calibrate)")
    report = command("report", cmd_report, "REPORT.md, plots and CSV tables from asv's results",
                     "REPORT.md, its plots (PNG) and tables (CSV) from the newest asv results; `make bench` "
                     "runs the benchmarks and then this.  Files are written into a hidden folder first and "
                     "replace their namesakes in the output folder only when the whole report is written; "
                     "other files there are left alone.")
    report.add_argument("--results", default=".asv/results", help="asv's results folder (default: %(default)s)")
    report.add_argument("--out", default="reports",
                        help="where REPORT.md, the PNGs and CSVs go (default: %(default)s)")
    report.add_argument("--keep-machine", metavar="NAME",
                        help="after the report, keep machine NAME's newest results file and its machine.json "
                             "in OUT/machines/NAME/ (replacing its older results file there; the suite's "
                             "benchmarks.json in OUT/machines/), so that later reports, on any machine, lay it "
                             "beside the others in a Machines section (make bench does this)")
    explain = command("explain", cmd_explain, "figures of attention and a README.md that reads them",
                      "Figures and numbers of attention on small worked examples (four 2-D tokens, a hand-built "
                      "sentence, eight random heads, an attention sink, 2,048 tokens, soft against hard "
                      "retrieval), computed by our kernels, and a README.md that reads them; about 10 s.  "
                      "Nothing appears in the output folder unless the whole page is written.")
    explain.add_argument("--out", required=True, help="where README.md and the PNGs go (made if missing)")
    explain.add_argument("--kernel", type=_kernel_name, default="c_tiled",
                         help="the kernel that computes every attention on the page, all in float64, the "
                              "largest 64 queries against 64,000 keys: checked before anything is written "
                              "(default: %(default)s)")
    heatmap = command("heatmap", cmd_heatmap, "all-MiniLM-L6-v2's heads on a text: figures, viewer, summary.md",
                      "all-MiniLM-L6-v2's 72 attention heads on a text: their maps, an interactive viewer "
                      "(viewer.html) and summary.md, which reads them (needs the model: `make model`).  "
                      "Nothing appears in the output folder unless the whole summary is written.")
    heatmap.add_argument("--text", required=True,
                         help="the text whose attention is drawn (the model reads at most 256 tokens: a longer "
                              "text is cut, and every output says so)")
    heatmap.add_argument("--out", required=True, help="where summary.md, the PNGs and viewer.html go (made if missing)")
    heatmap.add_argument("--kernel", type=_kernel_name, default="c_tiled",
                         help="the kernel that computes the attention (default: %(default)s)")
    heatmap.add_argument("--sentence-set", action="store_true",
                         help="also measure the heads over the 30 bundled sentences, ablate each head, and hold "
                              "them against the 2019 papers (about 5 minutes)")
    return parser
