"""``python -m kernels bench`` (what ``make bench`` runs): the asv suite, one benchmark class
at a time, then the report.

    run(Options(quick=True, bench="Startup"))   # -> exit status: 0, 1 (something failed), 130 (stopped)

asv saves a run's results only when the whole run ends, so the suite runs one class at a
time (an ``asv run --bench`` per class, ``--set-commit-hash`` HEAD, each run adding to the
commit's results file): Ctrl-C (or SIGTERM) loses only the class it stops, runs no more,
and the report is still written from what finished; the exit status is then 130.  A class
whose asv run fails (a failed benchmark shows as a gap in the report) does not stop the
ones after it: the report is written, and the exit status is 1.

Step by step, each asv call on this interpreter (``--python=same``):

1. ``describe_machine(NAME)``: asv's description of this machine, as ``asv machine`` keeps
   it; the machine is named after its CPU and ISA
   (``kernels.machine_id``: amd-epyc-avx2, intel-xeon-avx512), not after its hostname
   (asv's default, "vm" on every VM here), or ``--machine NAME``.
2. ``asv run --bench just-discover``: the suite's benchmarks.json, from which
   ``kernels.report.results.benchmark_classes`` picks the classes ``--bench`` selects.
3. Each class, in name order: ``asv run --set-commit-hash HEAD --bench
   "^(?=module\\.Class\\.)(?=.*(?:REGEX))"`` (``ATTNBENCH_PRELOAD_PEERS=0`` for a class none
   of whose parameters names a peer: ``names_a_peer``) between two runs of the calibration workload
   (``kernels.calibration``, before and after, into ``<commit8>-calibration.jsonl`` beside
   the results).  A progress line before and after each: which class, how many of how
   many, the time it took and the time elapsed.
4. ``kernels report --keep-machine NAME`` (``publish_report``), whatever happened above.

``--quick``: ``ATTNBENCH_QUICK=1`` and asv's ``--quick`` (small grids, one sample each),
and unless ``--bench`` says otherwise, neither asv's whole-process ``peakmem_`` (which the
report does not read) nor the minutes-long ``MemoryWall``.  ``--threads N``:
``ATTNBENCH_THREADS=N`` for the benchmarks.  ``--resume``: asv's
``--skip-existing-successful``, and a class whose every selected benchmark already has a
successful result of this commit on this machine is skipped whole (no asv run, no
calibration).  ``--no-calibrate``: no calibration workload (the report then cannot say
which classes ran on a disturbed machine).
"""
import contextlib
import itertools
import os
import pathlib
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

from . import machine_id
from .api import USER_ERRORS
from .processes import run_command, sigterm_as_keyboard_interrupt
from .registry import PEER_NAMES

RESULTS = pathlib.Path(".asv/results")   # asv.conf.json's results_dir
OUT = pathlib.Path("reports")
CONFIG = pathlib.Path("asv.conf.json")
# --quick without --bench: all but asv's whole-process peakmem_ and the memory wall
QUICK_SELECTION = "^(?!.*(peakmem_|MemoryWall))"
INTERRUPTED = 130                        # the shell's status for a run stopped by SIGINT
PRELOAD_PEERS_VARIABLE = "ATTNBENCH_PRELOAD_PEERS"  # "0": asv's forkserver imports no peer (benchmarks/__init__.py)


@dataclass(frozen=True)
class Options:
    """What ``make bench`` passes: QUICK=1, THREADS=n, BENCH=regex, RESUME=1, MACHINE=name,
    CALIBRATE=0."""

    quick: bool = False
    threads: Optional[int] = None
    bench: Optional[str] = None
    resume: bool = False
    machine: Optional[str] = None
    calibrate: bool = True

    @property
    def selection(self):
        """The regular expression that selects the benchmarks ("" selects every one)."""
        return self.bench or (QUICK_SELECTION if self.quick else "")

    @property
    def environment(self):
        """The variables the benchmarks read, added to this process's for each asv run."""
        added = {"ATTNBENCH_QUICK": "1" if self.quick else "0"}
        if self.threads is not None:
            added["ATTNBENCH_THREADS"] = str(self.threads)
        return added

    @property
    def asv_flags(self):
        return ["--python=same", *(["--quick"] if self.quick else []),
                *(["--skip-existing-successful"] if self.resume else [])]


def describe_machine(name):
    """Store asv's description of this machine (OS, architecture, CPU, cores, RAM) under
    ``name`` in ~/.asv-machine.json, which ``asv run --machine name`` copies beside the
    results and the report's opening reads.  (``asv machine --yes --machine NAME`` stores
    only the fields that differ from asv's defaults: the name alone, on a fresh machine.)"""
    from asv.machine import Machine, MachineCollection

    MachineCollection.save(name, {**Machine.get_defaults(), "machine": name})


def asv():
    """The asv command on this interpreter (whose ``--python=same`` is then this one)."""
    return [sys.executable, "-m", "asv"]


def class_selection(name, selection):
    """asv's ``--bench`` for the benchmarks of class ``name`` that ``selection`` selects."""
    return f"^(?={re.escape(name)}\\.)(?=.*(?:{selection}))"


def head_commit():
    """The full hash of HEAD, which every class's results are saved under."""
    try:
        done = subprocess.run(["git", "rev-parse", "--verify", "HEAD"], capture_output=True, text=True)
    except OSError as error:
        raise OSError(f"cannot run git to name the commit the results belong to: {error.strerror}") from None
    if done.returncode:
        raise OSError(f"git rev-parse HEAD failed: {' '.join(done.stderr.split()) or done.returncode}")
    return done.stdout.strip()


def selected_benchmarks(suite, name, selection):
    """The benchmarks of class ``name`` in ``suite`` (benchmarks.json) that asv's
    ``--bench class_selection(name, selection)`` runs: asv matches the regex against each
    benchmark's name and each of its parameter combinations' ("name(p1, p2)")."""
    regex = re.compile(class_selection(name, selection))
    chosen = []
    for benchmark, meta in suite.items():
        if not isinstance(meta, dict):
            continue
        params = meta.get("params") or []
        names = [benchmark] if not params else [
            f"{benchmark}({', '.join(combo)})" for combo in itertools.product(*params)]
        if any(regex.search(full) for full in names):
            chosen.append(benchmark)
    return chosen


def names_a_peer(suite, benchmarks):
    """Whether a parameter of one of ``benchmarks`` (names in ``suite``, benchmarks.json)
    takes a peer's name: only then does a class need the peers' libraries, which asv's
    forkserver otherwise imports for it (seconds, with every peer installed)."""
    peers = {repr(name) for name in PEER_NAMES}
    return any(value in peers for name in benchmarks for values in suite[name].get("params") or ()
               for value in values)


def measured_already(results_dir, machine, commit, python=None):
    """(the benchmarks whose results of ``commit`` on ``machine``, from this interpreter's
    asv environment, asv's ``--skip-existing-successful`` keeps: measured by the benchmark's
    current version, no parameter combination failed, a skipped one counting as done;
    benchmarks.json as {name: meta}).  asv's own reader decides, as ``asv run`` does."""
    from asv import results

    from .report.results import read_suite

    suite = read_suite(results_dir)
    env_name = environment_name(python)
    done = set()
    with contextlib.suppress(OSError):  # OSError: no results of this machine yet
        for result in results.iter_results_for_machine_and_hash(str(results_dir), machine, commit):
            if result.env_name != env_name:
                continue
            for key in result.get_result_keys(suite):
                value = result.get_result_value(key, suite[key]["params"])
                if not (value is None or (isinstance(value, list) and None in value)):
                    done.add(key)
    return done, suite


def environment_name(python=None):
    """The name asv gives the environment of ``--python=same`` run by ``python`` (default:
    this interpreter), as asv.environment.ExistingEnvironment names it."""
    from asv import environment

    executable = os.path.abspath(python or sys.executable)
    return environment.get_env_name("existing", executable.replace(os.path.sep, "_"), {}, {})


def clock(seconds):
    """"4:05", "1:02:03": a duration to the second."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02}:{secs:02}" if hours else f"{minutes}:{secs:02}"


def say(line):
    """A progress line, at once, between asv's (stdout, as asv's are)."""
    print(f"==> {line}", flush=True)


@dataclass
class Outcome:
    """What the run did: each class's fate, and anything else that failed."""

    classes: list = field(default_factory=list)
    done: list = field(default_factory=list)
    failed: list = field(default_factory=list)
    resumed: list = field(default_factory=list)    # skipped by --resume
    stopped: Optional[str] = None                    # the class Ctrl-C stopped
    errors: list = field(default_factory=list)      # the steps that failed besides classes
    interrupted: bool = False

    def fail(self, message):
        """A step other than a class failed: said at once (stderr), and in the summary."""
        print(f"attnbench bench: {message}", file=sys.stderr, flush=True)
        self.errors.append(message)

    @property
    def status(self):
        return INTERRUPTED if self.interrupted else 1 if (self.failed or self.errors) else 0

    def summary(self, seconds):
        total = len(self.classes)
        parts = [f"{len(self.done)} of {total} class{'' if total == 1 else 'es'} done"]
        if self.failed:
            parts.append(f"{len(self.failed)} failed ({', '.join(self.failed)})")
        if self.resumed:
            parts.append(f"{len(self.resumed)} skipped by --resume (results already there)")
        if self.stopped:
            parts.append(f"{self.stopped} interrupted (its results lost)")
        left = total - len(self.done) - len(self.failed) - len(self.resumed) - bool(self.stopped)
        if left:
            parts.append(f"{left} not run")
        text = ", ".join(parts) + f"; {clock(seconds)} in all"
        if self.errors:
            text += "; failed: " + "; ".join(self.errors)
        if self.interrupted and not self.stopped:
            text += "; interrupted"
        return text


@dataclass
class Bench:
    """One ``make bench``: its options, where it saves, the clock it shows."""

    options: Options
    machine: str
    commit: str
    results: pathlib.Path = RESULTS
    out: pathlib.Path = OUT
    now: callable = time.monotonic
    started: float = 0.0
    outcome: Outcome = field(default_factory=Outcome)

    def elapsed(self):
        return clock(self.now() - self.started)

    def asv_run(self, *argv, env=None):
        return run_command([*asv(), "run", *self.options.asv_flags, "--machine", self.machine, *argv],
                           env={**self.options.environment, **(env or {})})

    @property
    def calibration_file(self):
        return self.results / self.machine / f"{self.commit[:8]}-calibration.jsonl"

    def calibrate(self, name, phase):
        if not self.options.calibrate:
            return
        status = run_command([sys.executable, "-m", "kernels.calibration", str(self.calibration_file), name, phase])
        if status:
            say(f"the calibration {phase} {name} failed (exit status {status}): the report cannot say "
                "whether the machine was disturbed while it ran")

    def classes(self):
        """Discover the suite (asv writes benchmarks.json) and pick the classes to run."""
        from .report.results import ResultsError, benchmark_classes

        status = self.asv_run("--bench", "just-discover")
        if status:
            self.outcome.fail(f"asv could not discover the suite (exit status {status})")
            return []
        try:
            classes = benchmark_classes(self.results, self.options.selection)
        except (ResultsError, OSError) as error:
            self.outcome.fail(" ".join(str(error).split()))
            return []
        if not classes:
            self.outcome.fail(f"no benchmark matches {self.options.selection!r}")
        return classes

    def resumed(self, classes):
        """The classes ``--resume`` skips whole: every benchmark asv would run of them
        already has a successful result of this commit on this machine."""
        if not self.options.resume:
            return set()
        try:
            done, suite = measured_already(self.results, self.machine, self.commit)
        except (ImportError, AttributeError, TypeError, KeyError, ValueError) as error:  # another asv
            say(f"cannot tell which classes are measured already ({type(error).__name__}: {error}); "
                "asv skips their benchmarks itself")
            return set()
        return {name for name in classes
                if set(selected_benchmarks(suite, name, self.options.selection)) <= done}

    def run_classes(self):
        from .report.results import read_suite

        outcome = self.outcome
        classes = self.classes()
        outcome.classes = classes
        if not classes:
            return
        resumed, suite = self.resumed(classes), read_suite(self.results)
        count = f"{len(classes)} class{'' if len(classes) == 1 else 'es'}"
        say(f"{count}, {len(resumed)} measured already (--resume skips them): {len(classes) - len(resumed)} to run"
            if resumed else f"{count} to run")
        for number, name in enumerate(classes, 1):
            step = f"[{number}/{len(classes)}] {name}"
            if name in resumed:
                outcome.resumed.append(name)
                say(f"{step}: skipped, every benchmark it would run has results of {self.commit[:8]} (--resume)")
                continue
            say(f"{step} (elapsed {self.elapsed()})")
            start = self.now()
            peers = names_a_peer(suite, selected_benchmarks(suite, name, self.options.selection))
            self.calibrate(name, "before")
            try:
                status = self.asv_run("--set-commit-hash", self.commit,
                                      "--bench", class_selection(name, self.options.selection),
                                      env={PRELOAD_PEERS_VARIABLE: "1" if peers else "0"})
            except KeyboardInterrupt:
                outcome.stopped = name
                say(f"{step} interrupted after {clock(self.now() - start)}: its results are lost, "
                    "those of the classes before it kept")
                with contextlib.suppress(KeyboardInterrupt):  # another Ctrl-C: not even that
                    self.calibrate(name, "after")  # as after every class asv started: each "before" has its "after"
                raise
            self.calibrate(name, "after")
            took = clock(self.now() - start)
            if status:
                outcome.failed.append(name)
                say(f"{step} failed (asv exit status {status}) after {took}; elapsed {self.elapsed()}")
            else:
                outcome.done.append(name)
                say(f"{step} done in {took}; elapsed {self.elapsed()}")

    def report(self):
        """The report, and this machine's newest run kept beside it (``publish_report``)."""
        say(f"the report (elapsed {self.elapsed()})")
        try:
            report, kept = publish_report(self.results, self.out, self.machine)
        except USER_ERRORS as error:
            self.outcome.fail(f"the report: {' '.join(str(error).split())}")
            return
        print(f"wrote {report}")
        print(f"kept {kept}")


def publish_report(results, out, machine):
    """``kernels.report.publish``: REPORT.md, its plots and tables written into ``out`` from
    the asv results folder ``results``, and ``machine``'s newest run kept in
    ``out``/machines/; -> (the report's path, the kept file).  Imported when called: the
    report draws with matplotlib."""
    from .report import publish

    return publish(results, out, machine)


def run(options, results=RESULTS, out=OUT, now=time.monotonic):
    """``make bench``: the suite class by class, then the report; the exit status (0; 1
    when a class, the discovery or the report failed; 130 when stopped by Ctrl-C or
    SIGTERM).  A bad option, or no project here, raises ValueError or OSError before
    anything runs."""
    if options.bench:
        try:
            re.compile(options.bench)
        except re.error as error:
            raise ValueError(f"--bench {options.bench!r} is not a regular expression: {error}") from None
    if not CONFIG.is_file():
        raise OSError(f"no {CONFIG} in {pathlib.Path.cwd()}: run it in the project's folder, as `make bench` does")
    bench = Bench(options, options.machine or machine_id.machine_name(), head_commit(),
                  pathlib.Path(results), pathlib.Path(out), now)
    bench.started = now()
    what = [f"machine {bench.machine}", f"commit {bench.commit[:8]}"]
    what += ["quick"] if options.quick else []
    what += [f"{options.threads} threads"] if options.threads else []
    what += [f"benchmarks matching {options.selection!r}"] if options.selection else []
    what += ["resuming"] if options.resume else []
    what += ["no calibration"] if not options.calibrate else []
    with sigterm_as_keyboard_interrupt():
        try:
            say(f"attnbench bench: {', '.join(what)}")
            describe_machine(bench.machine)
        except KeyboardInterrupt:
            return INTERRUPTED
        outcome = bench.outcome
        try:
            bench.run_classes()
        except KeyboardInterrupt:
            outcome.interrupted = True
        try:
            bench.report()
        except KeyboardInterrupt:
            outcome.interrupted = True
            outcome.errors.append("the report (interrupted)")
        say(f"attnbench bench: {outcome.summary(now() - bench.started)}")
        return outcome.status
