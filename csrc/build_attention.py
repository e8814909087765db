"""cffi (API mode) builder for the c_tiled kernel: the extension module ``kernels._attention_c``.

Used by setuptools as ``cffi_modules=["csrc/build_attention.py:ffibuilder"]`` (paths relative
to the project root, where setup.py runs), or run directly for development::

    python csrc/build_attention.py      # builds kernels/_attention_c*.so in place, from any cwd

and, for the Makefile's sanitizer build (one list of sources and flags, this one)::

    python csrc/build_attention.py --print-sources   # SOURCES, relative to the project root
    python csrc/build_attention.py --print-flags     # COMPILE_ARGS

``attention.h`` is the single source of truth for the interface: its declarations, with
comments and preprocessor lines removed, are the cdef.
"""
import pathlib
import re
import shutil
import sys
import tempfile

import cffi

CSRC = pathlib.Path(__file__).resolve().parent
PROJECT_ROOT = CSRC.parent
MODULE_NAME = "kernels._attention_c"

# The C sources, relative to the project root: the extension's, and those `make sanitize`
# links its driver with (it asks for them with --print-sources).
SOURCES = [
    "csrc/attention.c",
    "csrc/pool.c",
    "csrc/fma_peak.c",
    "csrc/read_peak.c",
    "csrc/tile_ops_generic.c",
    "csrc/tile_ops_avx2_f32.c",
    "csrc/tile_ops_avx2_f64.c",
    "csrc/tile_ops_avx512_f32.c",
    "csrc/tile_ops_avx512_f64.c",
    "csrc/tile_ops_emulated.c",
    "csrc/convert.c",
    "csrc/int8_dot.c",
]
DEPENDS = [
    "csrc/attention.h",
    "csrc/tiles.h",
    "csrc/tile_ops.h",
    "csrc/flash_driver_template.h",
    "csrc/tile_ops_generic_template.h",
    "csrc/tile_ops_simd_template.h",
    "csrc/tile_ops_row_template.h",
    "csrc/tile_ops_bf16_dot.h",
    "csrc/tile_ops_exp.h",
    "csrc/int8_dot_template.h",
]
# IEEE semantics are part of the contract (NaN/Inf propagate, no flush-to-zero), so no
# -ffast-math/-Ofast; no -march=native either: the AVX2 and AVX-512 code is chosen at run time.
# `make sanitize` builds with these too (--print-flags), plus its sanitizers.
COMPILE_ARGS = ["-O3", "-pthread", "-fno-math-errno", "-std=c11", "-Wall", "-Wextra"]
LINK_ARGS = ["-pthread"]


def header_declarations(header_text):
    """The header's C declarations, without comments and preprocessor lines, for cdef."""
    text = re.sub(r"/\*.*?\*/", "", header_text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def make_builder(root, define_macros=()):
    """An FFI builder whose source paths start at ``root`` ("" for relative paths);
    ``define_macros`` e.g. [("ATTN_F32_QUERY_TILE", "96")] for a tile-size sweep."""
    at = lambda path: str(pathlib.Path(root, path)) if root else path
    builder = cffi.FFI()
    builder.cdef(header_declarations((CSRC / "attention.h").read_text()))
    builder.set_source(
        MODULE_NAME,
        '#include "attention.h"',
        sources=[at(path) for path in SOURCES],
        depends=[at(path) for path in DEPENDS],
        include_dirs=[at("csrc")],
        extra_compile_args=COMPILE_ARGS,
        extra_link_args=LINK_ARGS,
        define_macros=list(define_macros),
    )
    return builder


ffibuilder = make_builder("")


def build(target_dir, define_macros=()):
    """Compile in a temporary directory and copy the module into ``target_dir``, replacing
    any earlier build there (an older ``_attention_c.abi3.so`` from setuptools would
    otherwise sit beside this ``_attention_c.cpython-*.so``, one shadowing the other).
    Returns the module's path."""
    with tempfile.TemporaryDirectory() as tmp:
        built = pathlib.Path(make_builder(PROJECT_ROOT, define_macros).compile(tmpdir=tmp, verbose=False))
        for earlier in pathlib.Path(target_dir).glob("_attention_c.*.so"):
            earlier.unlink()
        target = pathlib.Path(target_dir) / built.name
        shutil.copy2(built, target)
    return target


PRINTABLE = {"--print-sources": SOURCES, "--print-flags": COMPILE_ARGS}

if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] in PRINTABLE:
        print(*PRINTABLE[sys.argv[1]])
    elif len(sys.argv) == 1:
        print(build(PROJECT_ROOT / "kernels"), file=sys.stderr)
    else:
        sys.exit(f"usage: {sys.argv[0]} [{' | '.join(PRINTABLE)}]")
