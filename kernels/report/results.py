"""Reading asv's results: the newest run as tidy records.

    run = load_latest_run(".asv/results")
    run.value(bench_spec.SEQ_LEN_TIME, kernel="numpy", seq_len=1024, dtype="float32")
    run.kernels(bench_spec.SEQ_LEN_TIME)      # the kernels it ran, in ladder order

Every measurement is a float; NaN stands for anything not measured (skipped, failed or
never run), so that gaps flow through tables and plots without special cases.  A value
asv kept samples of is a ``spread.Measured``: the median, with the samples' quartiles.

The run also carries what the report should say about the rest of the folder: the other
runs it holds (older commits, other machines: only the Machines section reads them), the files that could not be read
(skipped, one line each naming the file), and the benchmarks whose results were measured
by another version of the benchmark than benchmarks.json describes (left out, as asv
leaves them out).  Only a folder without one readable run raises: FileNotFoundError when
it holds no results files, ``ResultsError`` (a ValueError) when none of them can be read.
"""
import ast
import dataclasses
import itertools
import json
import math
import pathlib
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Optional

from .. import bench_spec
from ..registry import KERNELS
from ..spread import Measured

# The status of one asv value: a number, NaN (NotImplementedError in setup), null (an error).
OK, SKIPPED, FAILED = "ok", "skipped", "failed"
# The "version" of the results files asv 0.5 and 0.6 write (columns per benchmark).
ASV_FORMAT = 2


class ResultsError(ValueError):
    """A file of the results folder that is not asv's results as this reader knows them;
    the message is one line that names the file and says what is wrong."""


@dataclass(frozen=True)
class Record:
    """One measured value: ``benchmark`` ("module.Class.method"), its ``params`` by name."""

    benchmark: str
    params: dict
    value: float
    status: str


@dataclass(frozen=True)
class Run:
    """The results of one ``asv run``: which commit, when, where, and every record."""

    commit_hash: str
    date: datetime                      # the commit's date: asv orders runs by it
    measured_at: Optional[datetime]     # when the last benchmark of the run started
    first_started: Optional[datetime]   # when the first did
    env_name: str
    machine: dict
    path: pathlib.Path
    records: tuple
    stale: tuple = ()         # benchmarks measured by another version of their code: left out
    others: tuple = ()        # the folder's other readable runs (Run): the Machines section's
    unreadable: tuple = ()    # one line per file of the folder that could not be read
    # the benchmarks ``value`` was asked for since last cleared: whose figures a section read
    reads: set = dataclasses.field(default_factory=set, compare=False, repr=False)
    kept: tuple = ()          # runs kept beside the report (any machine), for its Machines section

    def select(self, benchmark, **params):
        """Records of ``benchmark`` (a ``bench_spec.Benchmark`` or its name) whose params
        include all of ``params``."""
        return [
            record for record in self.records
            if record.benchmark == str(benchmark)
            and all(record.params.get(name) == value for name, value in params.items())
        ]

    def exactly(self, benchmark, **params):
        """Records of ``benchmark`` at exactly these params, its sizes (``Benchmark.sizes``)
        the run's own unless given."""
        for name in getattr(benchmark, "sizes", ()):
            if name not in params and (size := self.size(benchmark, name)) is not None:
                params[name] = size   # (looked up only when not given: value is called in loops)
        return [r for r in self.select(benchmark, **params) if len(r.params) == len(params)]

    def value(self, benchmark, **params):
        """The value at exactly these params (``exactly``); NaN when not measured."""
        self.reads.add(str(benchmark))
        matches = self.exactly(benchmark, **params)
        return matches[0].value if matches else math.nan

    def size(self, benchmark, name, default=None):
        """The one value parameter ``name`` took in ``benchmark`` (a size: the cache's n of
        this run, quick or full); ``default`` when the run did not measure it at one value
        (not run, or results of a suite before it was a parameter)."""
        values = self.param_values(benchmark, name)
        return values[0] if len(values) == 1 else default

    def rounds(self, benchmark, default, **params):
        """The most samples behind any of ``benchmark``'s figures at ``params`` (a side-by-side
        ratio's rounds, which a quick run has fewer of); ``default`` when none kept samples."""
        counts = [r.value.n for r in self.select(benchmark, **params) if isinstance(r.value, Measured)]
        return max(counts, default=default)

    def measured(self, benchmark, **params):
        """Whether any of ``benchmark``'s figures at ``params`` is a number (NaN: not run,
        skipped, failed), so that a label need not count rounds that never ran."""
        return any(not math.isnan(r.value) for r in self.select(benchmark, **params))

    def param_values(self, benchmark, name):
        """The distinct values parameter ``name`` took in ``benchmark``, sorted."""
        return sorted({r.params[name] for r in self.select(benchmark) if name in r.params})

    def series(self, benchmark, **params):
        """(every n ``benchmark`` ran at, its values there with these ``params``, NaN
        where missing)."""
        seq_lens = self.param_values(benchmark, "seq_len")
        return seq_lens, [self.value(benchmark, seq_len=n, **params) for n in seq_lens]

    def kernels(self, *benchmarks):
        """The kernels any of ``benchmarks`` ran with, in ladder order."""
        return kernel_order(v for b in benchmarks for v in self.param_values(b, "kernel"))

    def seq_lens(self, *benchmarks):
        """The sequence lengths any of ``benchmarks`` ran at, sorted."""
        return sorted({v for b in benchmarks for v in self.param_values(b, "seq_len")})

    @property
    def calibration_path(self):
        """Where ``make bench`` kept this run's calibrations (``kernels.calibration``)."""
        return self.path.parent / f"{self.commit_hash[:8]}-calibration.jsonl"

    @property
    def ram_bytes(self):
        return float(self.machine.get("ram") or math.nan)


def load_latest_run(results_dir):
    """The newest readable asv results file under ``results_dir``, all machines: by the
    commit's "date", then by when its benchmarks last ran.

    A file that cannot be read is skipped and named in ``Run.unreadable``.  Raises
    FileNotFoundError naming the folder when it holds no results files, ResultsError
    naming a file when none of them can be read.
    """
    results_dir = pathlib.Path(results_dir)
    if not results_dir.is_dir():
        raise FileNotFoundError(f"no asv results folder at {results_dir} (run `make bench` first)")
    paths = sorted(p for p in results_dir.glob("*/*.json") if p.name != "machine.json")
    if not paths:
        raise FileNotFoundError(f"the asv results folder {results_dir} holds no results files "
                                "(expected <machine>/<commit>-<env>.json; run `make bench` first)")
    notes = []  # the unreadable files besides the results files: benchmarks.json, machine.json
    suite = _suite(results_dir, notes)
    machines = {folder: _machine_json(folder, notes) for folder in sorted({path.parent for path in paths})}
    runs, unreadable = [], []
    for path in paths:
        try:
            runs.append(_read_run(path, suite, machines[path.parent]))
        except ResultsError as error:
            unreadable.append(str(error))
    if not runs:
        more = f" (and {len(unreadable) - 1} more unreadable files)" if len(unreadable) > 1 else ""
        raise ResultsError(f"no readable asv results in {results_dir}: {unreadable[0]}{more}")
    newest = max(runs, key=recency)
    return dataclasses.replace(newest, others=tuple(run for run in runs if run is not newest),
                               unreadable=tuple(notes + unreadable))


def recency(run):
    """The key that orders runs as asv does: newest commit last; among results of one
    commit (several environments, or a re-run), the one measured last."""
    return (run.date, run.measured_at or _datetime(0))


def latest_per_machine(runs):
    """{machine: the newest of ``runs`` measured on it}, machines named by their results
    folder (as asv names them), in name order.  A folder's runs are ``[run, *run.others]``."""
    newest = {}
    for run in sorted(runs, key=recency):
        newest[run.path.parent.name] = run
    return dict(sorted(newest.items()))


def _read_json(path):
    """The JSON in ``path``; ResultsError saying why when it is not readable JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ResultsError(f"{path}: not text (a binary file?), so not asv's JSON") from None
    except json.JSONDecodeError as error:
        raise ResultsError(f"{path}: not valid JSON ({error.msg} at line {error.lineno}, column "
                           f"{error.colno}; cut short by an interrupted write?)") from None
    except OSError as error:
        raise ResultsError(f"{path}: cannot be read ({error.strerror})") from None


def _read_object(path, what):
    """The JSON object in ``path``; ResultsError when it is not one."""
    data = _read_json(path)
    if not isinstance(data, dict):
        raise ResultsError(f"{path}: JSON, but not {what} (a {type(data).__name__}, not an object)")
    return data


def _read_run(path, suite, machine_json):
    """One results file as a Run (without ``others`` and ``unreadable``)."""
    data = _read_object(path, "an asv results file")
    absent = [key for key in ("commit_hash", "date", "result_columns", "results") if key not in data]
    if absent:
        raise ResultsError(f"{path}: not an asv results file (no {', '.join(absent)})")
    if data.get("version") != ASV_FORMAT:
        raise ResultsError(f"{path}: asv results of format version {data.get('version')!r}; this "
                           f"reader knows version {ASV_FORMAT} (asv 0.5 and 0.6)")
    try:
        records, stale = _records(data, suite)
        starts = _started(data)
        return Run(
            commit_hash=str(data["commit_hash"]),
            date=_datetime(data["date"]),
            measured_at=max(starts) if starts else None,
            first_started=min(starts) if starts else None,
            env_name=str(data.get("env_name", "")),
            machine={**data.get("params", {}), **machine_json},
            path=path,
            records=tuple(records),
            stale=tuple(stale),
        )
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError, OSError) as error:
        raise ResultsError(f"{path}: not laid out as asv 0.6 results ({error})") from None


def _datetime(milliseconds):
    """asv's timestamps are milliseconds since the epoch, UTC."""
    return datetime.fromtimestamp(milliseconds / 1000, tz=timezone.utc)


def _started(results):
    """asv's per-benchmark start times; empty when the file has none."""
    columns = results["result_columns"]
    if "started_at" not in columns:
        return []
    column = columns.index("started_at")
    return [_datetime(row[column]) for row in results["results"].values()
            if len(row) > column and row[column]]


def _machine_json(machine_dir, notes):
    """machine.json of a machine's folder ({} when absent or unreadable, noted)."""
    path = machine_dir / "machine.json"
    if not path.is_file():
        return {}
    try:
        machine = _read_object(path, "asv's machine.json")
    except ResultsError as error:
        notes.append(f"{error}; the machine is described by its results files instead")
        return {}
    return machine


def _suite(results_dir, notes):
    """Benchmark name -> its entry in asv's benchmarks.json ("param_names", "version").

    Without a readable benchmarks.json (noted), the parameter names of the benchmarks the
    report reads come from ``kernels.bench_spec``, and versions are not checked.
    """
    path = results_dir / "benchmarks.json"
    try:
        if not path.is_file():
            raise ResultsError(f"{path}: missing")
        benchmarks = _read_object(path, "asv's benchmarks.json")
    except ResultsError as error:
        notes.append(f"{error}; parameter names taken from kernels.bench_spec")
        return {str(b): {"param_names": list(b.params)} for b in bench_spec.BENCHMARKS}
    return {name: meta for name, meta in benchmarks.items() if isinstance(meta, dict)}


def _records(results, suite):
    """(one Record per parameter combination, the stale benchmarks): asv's columnar
    results unfolded.

    asv stores each benchmark as a row of columns ("result", "params", "version", ...);
    "result" is flat over itertools.product of the parameter lists (the first varies
    slowest), or null as a whole when every combination failed.  A benchmark whose
    "version" (a hash of its code) or number of parameters differs from benchmarks.json's
    is stale: its values are not those of the benchmark as the suite now defines it.
    """
    columns = results["result_columns"]
    records, stale = [], []
    for benchmark, row in results["results"].items():
        cells = dict(zip(columns, row))
        param_lists = cells.get("params") or []
        combos = list(itertools.product(*param_lists))
        values = cells.get("result") or [None] * len(combos)
        if len(values) != len(combos):
            raise ValueError(f"{benchmark}: {len(values)} results for {len(combos)} "
                             "parameter combinations")
        meta = suite.get(benchmark, {})
        # asv names unnamed parameters param1, param2, ...
        names = meta.get("param_names") or [f"param{i + 1}" for i in range(len(param_lists))]
        measured_by, suite_has = cells.get("version"), meta.get("version")
        if (measured_by and suite_has and measured_by != suite_has) or len(names) != len(param_lists):
            stale.append(benchmark)
            continue
        quartiles = [cells.get(column) or [None] * len(combos)
                     for column in ("stats_q_25", "stats_q_75", "stats_repeat")]
        for combo, value, *spread in zip(combos, values, *quartiles):
            params = {name: _literal(text) for name, text in zip(names, combo)}
            records.append(Record(benchmark, params, *_value_and_status(value, *spread)))
    return records, stale


def read_suite(results_dir):
    """asv's benchmarks.json in ``results_dir``, as {benchmark name: meta}; ResultsError
    when it is not a JSON object."""
    path = pathlib.Path(results_dir) / "benchmarks.json"
    return {name: meta for name, meta in _read_object(path, "asv's benchmarks.json").items()
            if isinstance(meta, dict)}


def benchmark_classes(results_dir, regex=""):
    """The classes ("module.Class") of asv's benchmarks.json in ``results_dir`` with a
    benchmark that ``asv run --bench regex`` selects, sorted: asv matches the regex against
    the name of each benchmark, and of each parameter combination ("name(p1, p2)").
    ``make bench`` runs the suite a class at a time."""
    benchmarks = read_suite(results_dir)

    def names(name, meta):
        combos = itertools.product(*meta.get("params", []))
        return [f"{name}({', '.join(combo)})" for combo in combos] if meta.get("params") else [name]

    return sorted({name.rsplit(".", 1)[0] for name, meta in benchmarks.items()
                   if any(re.search(regex, full) for full in names(name, meta))})


def _literal(text):
    """asv stores parameter values as their repr: "'c_tiled'" -> 'c_tiled', "1024" -> 1024."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _value_and_status(value, q_25=None, q_75=None, repeat=None):
    """(the value, its status); a value asv kept samples of (a timing, or a track_
    benchmark returning ``spread.asv_samples``) is a Measured with their quartiles."""
    if value is None:
        return math.nan, FAILED
    if math.isnan(value):
        return math.nan, SKIPPED
    if q_25 is None or q_75 is None:
        return float(value), OK
    return Measured(value, q_25, q_75, repeat or 1), OK


# -- kernels -------------------------------------------------------------------------

def kernel_order(names):
    """``names`` in ladder order (the registry's), names the registry lacks last."""
    ladder = list(KERNELS)
    return sorted(set(names), key=lambda name: (ladder.index(name) if name in ladder
                                                else len(ladder), name))


def is_external(name):
    """True for a peer baseline: registered as external, or not one of our rungs at all."""
    return name not in KERNELS or KERNELS[name].external


def materialises(name):
    return name in KERNELS and KERNELS[name].materialises
