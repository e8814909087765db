"""Tile-size sweep for the c_tiled kernel: a plain script, run from the project's environment.

    python csrc/sweep_tiles.py [float32|float64] [heads] [n] [rounds] [QxK,QxK,...]

Builds csrc/ once per (query tile, key tile) with -DATTN_F32_QUERY_TILE=... (or F64)
into a temporary directory, then times every build in a fresh process on q, k, v
(heads, n, 64) at one thread, full and causal.  Builds run in several rounds in shuffled
order and each keeps its best (thread CPU time), so that other load on the machine perturbs
the comparison less.  Prints GFLOP/s as kernels.costs counts them (4·n²·d per head, half
when causal).  The chosen sizes and the figures behind them are recorded at the top of
csrc/attention.c.

Run as a script, its own directory (csrc/) is on sys.path: that is how it imports
build_attention.
"""
import importlib.machinery
import importlib.util
import itertools
import math
import multiprocessing
import pathlib
import random
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

import build_attention
from kernels import costs, threads

QUERY_TILES = (192, 288, 384, 528, 768)   # multiples of every ISA's panels: 48, 24, 8 (f32); 24, 12, 8 (f64)
KEY_TILES = (64, 128, 256)
ROUNDS = 4
HEAD_DIM = 64
CALLS = 2   # timed calls per build and mask, the fastest kept: the first also touches out's pages


def measure(path, dtype, heads, n):
    """Load the extension build at ``path`` as kernels._attention_c and time
    kernels.rungs.rung4_c_tiled.run on it at one thread: q, k, v (heads, n, HEAD_DIM) of ``dtype``, full
    and causal, each the best of CALLS calls by thread CPU time.  Returns their GFLOP/s
    (full, causal).  Needs an interpreter that has not loaded the extension yet (time_build)."""
    if build_attention.MODULE_NAME in sys.modules:
        raise RuntimeError(f"{build_attention.MODULE_NAME} is already loaded: "
                           f"measure() needs a fresh interpreter")
    loader = importlib.machinery.ExtensionFileLoader(build_attention.MODULE_NAME, str(path))
    extension = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    sys.modules[loader.name] = extension
    loader.exec_module(extension)
    from kernels.rungs import rung4_c_tiled as c_tiled   # here, so that it imports the build registered above

    threads.set_budget(1)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((heads, n, HEAD_DIM)).astype(dtype) for _ in range(3))
    out = np.empty_like(q)
    rates = []
    for causal in (False, True):
        best = math.inf
        for _ in range(CALLS):
            start = time.thread_time()
            c_tiled.run(q, k, v, out, causal, HEAD_DIM ** -0.5)
            best = min(best, time.thread_time() - start)
        rates.append(costs.gflops(best, n, n, HEAD_DIM, batch=heads, causal=causal))
    return tuple(rates)


def time_build(path, dtype, heads, n):
    """measure() in a fresh (spawned) interpreter, since a process can load only one build
    under the extension's name; returns its GFLOP/s (full, causal).  As with any spawn, a
    calling script needs the ``if __name__ == "__main__"`` guard."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(measure, path, dtype, heads, n).result()


def main(argv):
    dtype = argv[1] if len(argv) > 1 else "float32"
    heads = int(argv[2]) if len(argv) > 2 else 2
    n = int(argv[3]) if len(argv) > 3 else 4096
    rounds = int(argv[4]) if len(argv) > 4 else ROUNDS
    configs = (list(itertools.product(QUERY_TILES, KEY_TILES)) if len(argv) <= 5 else
               [tuple(int(x) for x in pair.split("x")) for pair in argv[5].split(",")])
    prefix = "ATTN_F32" if dtype == "float32" else "ATTN_F64"
    print(f"{dtype}, {heads} heads, n={n}, d={HEAD_DIM}, 1 thread, best of {rounds} rounds: "
          f"GFLOP/s full / causal", flush=True)
    best = {config: (0.0, 0.0) for config in configs}
    with tempfile.TemporaryDirectory() as tmp:
        builds = {}
        for query_tile, key_tile in configs:
            target = pathlib.Path(tmp, f"q{query_tile}_k{key_tile}")
            target.mkdir()
            builds[query_tile, key_tile] = build_attention.build(
                target, [(f"{prefix}_QUERY_TILE", str(query_tile)), (f"{prefix}_KEY_TILE", str(key_tile))])
        for _ in range(rounds):
            random.shuffle(configs)
            for config in configs:
                best[config] = tuple(map(max, best[config], time_build(builds[config], dtype, heads, n)))
    for (query_tile, key_tile), (full, causal) in sorted(best.items()):
        print(f"query tile {query_tile:4d}  key tile {key_tile:4d}:  {full:6.1f}  {causal:6.1f}")


if __name__ == "__main__":
    main(sys.argv)
