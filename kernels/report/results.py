"""Reading asv's results: the newest run as tidy records.

    run = load_latest_run(".asv/results")
    run.value(bench_spec.SEQ_LEN_TIME, kernel="numpy", seq_len=1024, dtype="float32")
    run.kernels(bench_spec.SEQ_LEN_TIME)      # the kernels it ran, in ladder order

Every measurement is a float; NaN stands for anything not measured (skipped, failed or
never run), so that gaps flow through tables and plots without special cases.
"""
import ast
import itertools
import json
import math
import pathlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Optional

from ..registry import KERNELS

# The status of one asv value: a number, NaN (NotImplementedError in setup), null (an error).
OK, SKIPPED, FAILED = "ok", "skipped", "failed"


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
    date: datetime                   # the commit's date: asv orders runs by it
    measured_at: Optional[datetime]  # when the last benchmark of the run started
    env_name: str
    machine: dict
    path: pathlib.Path
    records: tuple

    def select(self, benchmark, **params):
        """Records of ``benchmark`` (a ``bench_spec.Benchmark`` or its name) whose params
        include all of ``params``."""
        return [
            record for record in self.records
            if record.benchmark == str(benchmark)
            and all(record.params.get(name) == value for name, value in params.items())
        ]

    def value(self, benchmark, **params):
        """The value at exactly these params; NaN when not measured."""
        matches = [r for r in self.select(benchmark, **params) if len(r.params) == len(params)]
        return matches[0].value if matches else math.nan

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
    def ram_bytes(self):
        return float(self.machine.get("ram") or math.nan)


def load_latest_run(results_dir):
    """The newest asv results file under ``results_dir``, all machines: by the commit's
    "date", then by when its benchmarks last ran.

    Raises FileNotFoundError naming the folder when it holds no results.
    """
    results_dir = pathlib.Path(results_dir)
    if not results_dir.is_dir():
        raise FileNotFoundError(f"no asv results folder at {results_dir} (run `asv run` first)")
    paths = [p for p in results_dir.glob("*/*.json") if p.name != "machine.json"]
    if not paths:
        raise FileNotFoundError(f"the asv results folder {results_dir} holds no results files "
                                "(expected <machine>/<commit>-<env>.json; run `asv run` first)")
    runs = [json.loads(path.read_text()) for path in paths]
    # newest commit first; among results of one commit (several environments, or a
    # re-run), the one measured last
    newest, path = max(zip(runs, paths), key=lambda pair: (
        pair[0].get("date", 0), _last_started(pair[0]) or _datetime(0)))
    return Run(
        commit_hash=newest["commit_hash"],
        date=_datetime(newest["date"]),
        measured_at=_last_started(newest),
        env_name=newest.get("env_name", ""),
        machine=_machine(path.parent, newest),
        path=path,
        records=tuple(_records(newest, _param_names(results_dir))),
    )


def _datetime(milliseconds):
    """asv's timestamps are milliseconds since the epoch, UTC."""
    return datetime.fromtimestamp(milliseconds / 1000, tz=timezone.utc)


def _last_started(results):
    """The latest of asv's per-benchmark start times; None when the file has none."""
    columns = results["result_columns"]
    if "started_at" not in columns:
        return None
    column = columns.index("started_at")
    starts = [row[column] for row in results["results"].values() if len(row) > column and row[column]]
    return _datetime(max(starts)) if starts else None


def _machine(machine_dir, results):
    """machine.json of the run's machine; the results file's own copy fills any gap."""
    machine = dict(results.get("params", {}))
    machine_json = machine_dir / "machine.json"
    if machine_json.is_file():
        machine.update(json.loads(machine_json.read_text()))
    return machine


def _param_names(results_dir):
    """Benchmark name -> its parameter names, from asv's benchmarks.json (empty if absent)."""
    path = results_dir / "benchmarks.json"
    if not path.is_file():
        return {}
    benchmarks = json.loads(path.read_text())
    return {name: meta.get("param_names", []) for name, meta in benchmarks.items()
            if isinstance(meta, dict)}


def _records(results, param_names):
    """Unfold asv's columnar results into one Record per parameter combination.

    asv stores each benchmark as a row of columns ("result", "params", ...); "result" is
    flat over itertools.product of the parameter lists (the first varies slowest), or
    null as a whole when every combination failed.
    """
    columns = results["result_columns"]
    for benchmark, row in results["results"].items():
        cells = dict(zip(columns, row))
        param_lists = cells.get("params") or []
        combos = list(itertools.product(*param_lists))
        values = cells.get("result") or [None] * len(combos)
        if len(values) != len(combos):
            raise ValueError(f"{benchmark}: {len(values)} results for {len(combos)} "
                             "parameter combinations; not an asv 0.6 results file?")
        # asv names unnamed parameters param1, param2, ...
        names = param_names.get(benchmark) or [f"param{i + 1}" for i in range(len(param_lists))]
        for combo, value in zip(combos, values):
            params = {name: _literal(text) for name, text in zip(names, combo)}
            yield Record(benchmark, params, *_value_and_status(value))


def _literal(text):
    """asv stores parameter values as their repr: "'c_tiled'" -> 'c_tiled', "1024" -> 1024."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _value_and_status(value):
    if value is None:
        return math.nan, FAILED
    if math.isnan(value):
        return math.nan, SKIPPED
    return float(value), OK


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
