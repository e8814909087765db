"""Tile-size sweep for the c_tiled kernel: a plain script, not an asv benchmark.

    python benchmarks/sweep_tiles.py [float32|float64] [heads] [n] [rounds] [QxK,QxK,...]

Builds csrc/ once per (query tile, key tile) with -DATTN_F32_QUERY_TILE=... (or F64)
into a temporary directory, then times every build in a fresh process on (heads, n, d=64)
at one thread, full and causal.  Builds run in several rounds in shuffled order and each
keeps its best (thread CPU time), so that other load on the machine perturbs the
comparison less.  Prints GFLOP/s = 4·n²·d·heads / time (halved for causal).  The chosen
sizes and the figures behind them are recorded at the top of csrc/attention.c.
"""
import itertools
import pathlib
import random
import subprocess
import sys
import tempfile

QUERY_TILES = (96, 144, 192, 264)   # multiples of the 24-query (f32) / 12-query (f64) panels
KEY_TILES = (64, 128, 192, 256)
ROUNDS = 4

# Runs in a fresh interpreter: loads one build of the extension and times it.
TIMER = r"""
import importlib.machinery, importlib.util, sys, time
import numpy as np
name = "kernels._attention_c"
loader = importlib.machinery.ExtensionFileLoader(name, sys.argv[1])
module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
loader.exec_module(module)
ffi, lib = module.ffi, module.lib
dtype, heads, n, d = np.dtype(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), 64
forward, pointer = ((lib.attn_forward_f32, "float *") if dtype == np.float32
                    else (lib.attn_forward_f64, "double *"))
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((heads, n, d)).astype(dtype) for _ in range(3))
out = np.empty_like(q)
args = [ffi.cast(pointer, ffi.from_buffer(a)) for a in (q, k, v, out)]
rates = []
for causal in (0, 1):
    best = float("inf")
    for _ in range(2):
        start = time.thread_time()
        forward(*args, heads, n, n, d, d, causal, d ** -0.5, 1)
        best = min(best, time.thread_time() - start)
    rates.append(4 * n * n * d * heads / (2 if causal else 1) / best / 1e9)
print(*rates)
"""


def main(argv):
    root = pathlib.Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "csrc"))
    import build_attention

    dtype = argv[1] if len(argv) > 1 else "float32"
    heads = argv[2] if len(argv) > 2 else "2"
    n = argv[3] if len(argv) > 3 else "4096"
    rounds = int(argv[4]) if len(argv) > 4 else ROUNDS
    configs = (list(itertools.product(QUERY_TILES, KEY_TILES)) if len(argv) <= 5 else
               [tuple(int(x) for x in pair.split("x")) for pair in argv[5].split(",")])
    prefix = "ATTN_F32" if dtype == "float32" else "ATTN_F64"
    print(f"{dtype}, {heads} heads, n={n}, d=64, 1 thread, best of {rounds} rounds: "
          f"GFLOP/s full / causal", flush=True)
    best = {config: [0.0, 0.0] for config in configs}
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
                rates = subprocess.run([sys.executable, "-c", TIMER, str(builds[config]), dtype, heads, n],
                                       capture_output=True, text=True, check=True).stdout.split()
                best[config] = [max(b, float(r)) for b, r in zip(best[config], rates)]
    for (query_tile, key_tile), (full, causal) in sorted(best.items()):
        print(f"query tile {query_tile:4d}  key tile {key_tile:4d}:  {full:6.1f}  {causal:6.1f}")


if __name__ == "__main__":
    main(sys.argv)
