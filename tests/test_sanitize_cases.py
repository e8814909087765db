"""`make sanitize`'s driver (csrc/sanitize/check_attention.c) runs what it should: the
harness's cases, generated from kernels.harness.CASES, and the C kernel's edges at its own
tile sizes (csrc/tiles.h); and it is built from the C sources the extension is.

The tables are read as the C compiler sees them: a small program that includes them prints
every row (a C compiler is all it takes, as for the sanitizer itself).
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest

from kernels.harness import CASES

CC = os.environ.get("CC", "cc")
pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason=f"no C compiler ({CC})")

PRINT_TABLES = r"""
#include <stdio.h>
#include "cases.h"
#include "harness_cases.h"

static void print_table(const char *table, const struct shape *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf("%s\t%s\t%lld\t%lld\t%lld\t%lld\t%lld\t%.17g\t%d\t%u\t%d\t%lld\t%lld\t%lld\n", table,
               s[i].name, (long long)s[i].batch, (long long)s[i].n_q, (long long)s[i].n_k,
               (long long)s[i].d, (long long)s[i].d_v, s[i].logit_scale, (int)s[i].poison,
               s[i].skip_dtypes, s[i].banded, (long long)s[i].band.left, (long long)s[i].band.right,
               (long long)s[i].band.sinks);
}

int main(void)
{
    printf("constants\t%d\t%d\t%d\t%d\t%d\t%u\t%u\n", ATTN_F32_QUERY_TILE, ATTN_F32_KEY_TILE,
           ATTN_F64_QUERY_TILE, ATTN_F64_KEY_TILE, DECODE_MAX_QUERIES, FLOAT32_TILES, FLOAT64_TILES);
    print_table("harness", HARNESS_CASES, sizeof HARNESS_CASES / sizeof HARNESS_CASES[0]);
    print_table("edges", KERNEL_EDGES, sizeof KERNEL_EDGES / sizeof KERNEL_EDGES[0]);
    return 0;
}
"""
POISONS = ["CLEAN", "NAN_Q", "NAN_K", "NAN_V", "INF_Q"]   # enum poison's order, cases.h
HARNESS_POISONS = {None: "CLEAN", "nan_q": "NAN_Q", "nan_k": "NAN_K", "nan_v": "NAN_V",
                   "inf_q": "INF_Q"}


def generate_header(project_root, directory):
    """build/sanitize/harness_cases.h as `make sanitize` writes it, into ``directory``."""
    target = directory / "harness_cases.h"
    subprocess.run([sys.executable, str(project_root / "csrc/sanitize/harness_cases.py"),
                    str(target)], check=True, cwd=directory, capture_output=True, text=True)
    return target


def c_tables(project_root, tmp_path, *macros):
    """The constants, and the rows of HARNESS_CASES and KERNEL_EDGES, as compiled with
    ``macros`` (-D options)."""
    generate_header(project_root, tmp_path)
    (tmp_path / "print_tables.c").write_text(PRINT_TABLES)
    program = tmp_path / "print_tables"
    subprocess.run([CC, "-std=c11", "-Wall", "-Werror", *macros,
                    f"-I{project_root / 'csrc/sanitize'}", f"-I{project_root / 'csrc'}",
                    f"-I{tmp_path}", "-o", str(program), str(tmp_path / "print_tables.c")],
                   check=True, capture_output=True, text=True)
    lines = subprocess.run([str(program)], check=True, capture_output=True,
                           text=True).stdout.splitlines()
    constants = [int(x) for x in lines[0].split("\t")[1:]]
    tables = {"harness": [], "edges": []}
    for line in lines[1:]:
        table, name, *numbers = line.split("\t")
        batch, n_q, n_k, d, d_v = map(int, numbers[:5])
        tables[table].append({"name": name, "batch": batch, "n_q": n_q, "n_k": n_k, "d": d,
                              "d_v": d_v, "logit_scale": float(numbers[5]),
                              "poison": POISONS[int(numbers[6])], "skip": int(numbers[7]),
                              "band": tuple(map(int, numbers[9:12])) if int(numbers[8]) else None})
    names = ("f32_query", "f32_key", "f64_query", "f64_key", "decode_max", "f32_skip", "f64_skip")
    return dict(zip(names, constants)), tables


def test_the_drivers_harness_cases_are_the_harness_cases(project_root, tmp_path):
    _, tables = c_tables(project_root, tmp_path)
    expected = {}   # one row per shape: the driver runs each causal and not
    for case in CASES:
        name = case.name if case.layout == "C" else f"{case.name} (as C)"
        expected.setdefault(name, {
            "name": name, "batch": case.batch, "n_q": case.n_q, "n_k": case.n_k, "d": case.d,
            "d_v": case.d_v, "logit_scale": case.logit_scale,
            "poison": HARNESS_POISONS[case.poison], "skip": 0,
            "band": None if case.window is None else (*(-1 if side is None else side for side in case.window),
                                                      case.sinks)})
    assert tables["harness"] == list(expected.values())


def test_the_driver_includes_the_generated_header_and_copies_no_case(project_root, tmp_path):
    driver = project_root / "csrc/sanitize/check_attention.c"
    text = driver.read_text()
    assert '#include "harness_cases.h"' in text
    assert re.search(r"check_shape\(&HARNESS_CASES\[i\]", text), "the driver must run HARNESS_CASES"
    copied = [case.name for case in CASES if f'"{case.name}' in text
              or f'"{case.name}' in (project_root / "csrc/sanitize/cases.h").read_text()]
    assert not copied, f"harness cases copied by hand into the driver: {copied}"
    # it compiles with the generated header, and not without it
    compile_driver = [CC, "-std=c11", "-fsyntax-only", f"-I{project_root / 'csrc'}", str(driver)]
    generate_header(project_root, tmp_path)
    subprocess.run([*compile_driver, f"-I{tmp_path}"], check=True, capture_output=True)
    assert subprocess.run(compile_driver, capture_output=True).returncode != 0


def test_the_generator_refuses_a_case_the_driver_cannot_run(project_root, monkeypatch):
    monkeypatch.syspath_prepend(str(project_root / "csrc/sanitize"))
    import harness_cases

    with pytest.raises(ValueError, match="poison"):
        harness_cases.header([replace(CASES[0], poison="inf_k")])
    with pytest.raises(ValueError, match="differ"):
        harness_cases.header([CASES[0], replace(CASES[0], d=CASES[0].d + 1)])


@pytest.mark.parametrize("macros", [(), ("-DATTN_F32_QUERY_TILE=96", "-DATTN_F32_KEY_TILE=64",
                                         "-DATTN_F64_QUERY_TILE=48", "-DATTN_F64_KEY_TILE=32",
                                         "-DDECODE_MAX_QUERIES=2")],
                         ids=["kernel's tiles", "other tiles (-D)"])
def test_the_edge_cases_sit_on_the_kernels_tiles(project_root, tmp_path, macros):
    constants, tables = c_tables(project_root, tmp_path, *macros)
    if macros:   # the -D values reached the tables: they are derived, not copied
        assert [constants[k] for k in ("f32_query", "f32_key", "f64_query", "f64_key",
                                       "decode_max")] == [96, 64, 48, 32, 2]
    edges = tables["edges"]
    for prefix in ("f32", "f64"):
        query_tile, key_tile = constants[f"{prefix}_query"], constants[f"{prefix}_key"]
        # at the types that run on these tiles only (float64 has its own), on 4 heads: whole
        # query tiles on one thread (the kernel shrinks them to about four tiles per thread)
        at_these_tiles = {(e["n_q"], e["n_k"]) for e in edges
                          if e["skip"] == constants[f"{prefix}_skip"] and e["batch"] >= 4}
        wanted = {(query_tile, key_tile), (query_tile - 1, key_tile - 1),
                  (query_tile + 1, key_tile + 1), (2 * query_tile + 1, 2 * key_tile + 1),
                  (query_tile + key_tile + 1, query_tile + 1)}
        assert wanted <= at_these_tiles, (prefix, wanted - at_these_tiles)
    decode_max = constants["decode_max"]
    both = [e for e in edges if e["skip"] == 0]
    assert any(e["n_q"] == decode_max and e["n_k"] < decode_max for e in both)   # no key, split-KV
    assert any(e["n_q"] == decode_max + 1 for e in both)   # the first n_q of the query-tile path
    assert {"NAN_Q", "NAN_K", "NAN_V", "INF_Q"} <= {e["poison"] for e in both
                                                      if e["n_q"] == decode_max}
    # windows: at each precision's tiles (one with a NaN value behind it), and decoding
    for skip in (constants["f32_skip"], constants["f64_skip"]):
        banded = [e for e in edges if e["skip"] == skip and e["band"]]
        assert len(banded) >= 3 and any(e["poison"] == "NAN_V" for e in banded)
    assert any(e["band"] and e["band"][0] >= 0 and e["n_q"] <= decode_max for e in both)


def builder(project_root, monkeypatch):
    """csrc/build_attention.py, imported as its own directory's module."""
    monkeypatch.syspath_prepend(str(project_root / "csrc"))
    import build_attention

    return build_attention


def test_the_kernel_takes_its_tiles_from_the_header_the_driver_reads(project_root, monkeypatch):
    attention = (project_root / "csrc/attention.c").read_text()
    assert '#include "tiles.h"' in attention
    assert not re.search(r"#\s*define\s+(ATTN_F(32|64)_(QUERY|KEY)_TILE|DECODE_MAX_QUERIES)\b",
                         attention), "tile sizes defined in attention.c as well as in tiles.h"
    assert "csrc/tiles.h" in builder(project_root, monkeypatch).DEPENDS   # a change rebuilds it


def test_make_and_the_builder_read_one_list_of_sources(project_root, monkeypatch):
    def printed(option):
        return subprocess.run([sys.executable, "csrc/build_attention.py", option], check=True,
                              cwd=project_root, capture_output=True, text=True).stdout.split()

    build_attention = builder(project_root, monkeypatch)
    assert printed("--print-sources") == build_attention.SOURCES
    assert printed("--print-flags") == build_attention.COMPILE_ARGS
    # the Makefile asks the builder (and does not read its text)
    makefile = (project_root / "Makefile").read_text()
    rules = makefile[makefile.index("SANITIZE_SOURCES ="):makefile.index("\nsanitize:")]
    assert "build_attention.py --print-sources" in rules
    assert "build_attention.py --print-flags" in rules
    assert "sed" not in rules and not re.search(r"\$\((shell )?cat|\$\(file", rules)
    # and what make would compile is exactly those sources (each on its own, with those
    # flags) and the driver, linked together in that order
    if not shutil.which("make"):
        pytest.skip("no make")
    dry_run = subprocess.run(["make", "-n", "-B", "build/sanitize/check_attention", f"PY={sys.executable}"],
                             cwd=project_root, check=True, capture_output=True, text=True)
    lines = dry_run.stdout.splitlines()
    compiled = {line.split()[-1]: line.split() for line in lines if " -c -o build/sanitize/" in line}
    assert set(compiled) >= {"csrc/sanitize/check_attention.c", *build_attention.SOURCES}
    for words in compiled.values():
        assert words[1:words.index("-g")] == build_attention.COMPILE_ARGS
    link = next(line for line in lines if " -o build/sanitize/check_attention " in line)
    assert [w for w in link.split() if w.endswith(".o")] == [
        "build/sanitize/check_attention.o",
        *(f"build/sanitize/{pathlib.Path(source).stem}.o" for source in build_attention.SOURCES)]
