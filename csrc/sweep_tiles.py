"""Tile-size sweep for the c_tiled kernel: a plain script, run from the project's environment.

    python csrc/sweep_tiles.py [float32|float64] [heads] [n] [rounds] [QxK,QxK,...]

Builds csrc/ once per (query tile, key tile) with -DATTN_F32_QUERY_TILE=... (or F64)
into a temporary directory, then times every build in a fresh process on q, k, v
(heads, n, 64) at one thread, full and causal, each call side by side with the FMA peak
loop (kernels.ceilings.peak_loop) doing as many flops: per pair of calls, the kernel's
GFLOP/s as a fraction of the peak's, so that load on a shared machine coming and going
slows both alike (best-of wall or CPU times moved by 5-10% from one moment to the next,
more than most tile sizes differ by).  Builds run in several rounds in shuffled order;
each prints the median of all its pairs' fractions (flops as kernels.costs counts them:
4·n²·d per head, half when causal).  The chosen sizes and the figures behind them are
recorded at the top of csrc/attention.c.

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
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

import build_attention
from kernels import costs, threads

QUERY_TILES = (288, 528, 792, 1056, 1584)   # multiples of every ISA's panels: 48, 24, 8 (f32); 24, 12, 8 (f64)
KEY_TILES = (64, 128, 256)
ROUNDS = 4
HEAD_DIM = 64
PAIRS = 4   # (peak, kernel) pairs timed per build, mask and round, each going first in turn


def measure(path, dtype, heads, n):
    """Load the extension build at ``path`` as kernels._attention_c and time
    kernels.rungs.rung4_c_tiled.run on it at one thread, q, k, v (heads, n, HEAD_DIM) of
    ``dtype``, full and causal, each call beside one of the peak loop.  Returns the pairs'
    fractions of the peak (full list, causal list).  Needs an interpreter that has not
    loaded the extension yet (time_build)."""
    if build_attention.MODULE_NAME in sys.modules:
        raise RuntimeError(f"{build_attention.MODULE_NAME} is already loaded: "
                           f"measure() needs a fresh interpreter")
    loader = importlib.machinery.ExtensionFileLoader(build_attention.MODULE_NAME, str(path))
    extension = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    sys.modules[loader.name] = extension
    loader.exec_module(extension)
    # here, so that they import the build registered above
    from kernels import ceilings
    from kernels.rungs import rung4_c_tiled as c_tiled

    threads.set_budget(1)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((heads, n, HEAD_DIM)).astype(dtype) for _ in range(3))
    out = np.empty_like(q)
    fractions = []
    for causal in (False, True):
        flops = costs.attention_flops(n, n, HEAD_DIM, batch=heads, causal=causal)
        peak, peak_flops = ceilings.peak_loop(dtype, flops, threads=1)
        kernel = lambda: c_tiled.run(q, k, v, out, causal, HEAD_DIM ** -0.5)
        kernel(), peak()   # each first call untimed (the kernel's also touches out's pages)
        pairs = []
        for pair in range(PAIRS):
            seconds = {}
            for call in (peak, kernel) if pair % 2 == 0 else (kernel, peak):
                start = time.perf_counter()
                call()
                seconds[call] = time.perf_counter() - start
            pairs.append(seconds[peak] / seconds[kernel] * flops / peak_flops)
        fractions.append(pairs)
    return tuple(fractions)


def time_build(path, dtype, heads, n):
    """measure() in a fresh (spawned) interpreter, since a process can load only one build
    under the extension's name; returns its fractions of the peak (full, causal).  As with any spawn, a
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
    print(f"{dtype}, {heads} heads, n={n}, d={HEAD_DIM}, 1 thread, {rounds} rounds of {PAIRS} pairs: "
          f"fraction of the FMA peak (median [quartiles]) full / causal", flush=True)
    pairs = {config: ([], []) for config in configs}
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
                for kept, measured in zip(pairs[config], time_build(builds[config], dtype, heads, n)):
                    kept.extend(measured)
    for (query_tile, key_tile), (full, causal) in sorted(pairs.items()):
        print(f"query tile {query_tile:4d}  key tile {key_tile:4d}:  {spread(full)}  {spread(causal)}")


def spread(values):
    """median [first quartile-third quartile] of values"""
    q1, median, q3 = statistics.quantiles(values, n=4)
    return f"{median:.3f} [{q1:.3f}-{q3:.3f}]"


if __name__ == "__main__":
    main(sys.argv)
