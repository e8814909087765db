# attnbench: `make bench` (the main job) and `make test`; everything lives in .venv.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# what a change to which re-installs the package (and rebuilds the C extension)
SOURCES := setup.py pyproject.toml $(wildcard csrc/*.c csrc/*.h csrc/*.py)

.PHONY: help install bench test verify list timing peers clean

help:
	@echo "make bench   run the benchmarks and write the report (the main job)"
	@echo "make test    run the test suite"
	@echo "make verify  every kernel against the float64 reference"
	@echo "make list    the registered kernels"
	@echo "make peers   install PyTorch (CPU) so torch_sdpa is measured beside our kernels"
	@echo "make clean   remove build products (keeps .venv)"

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# One stamp per install: editable, with the test and bench extras.
$(VENV)/.installed: $(PY) $(SOURCES)
	$(PY) -m pip install --quiet -e ".[test,bench]"
	@touch $@

install: $(VENV)/.installed

test: install
	$(PY) -m pytest

verify: install
	$(PY) -m kernels verify

list: install
	$(PY) -m kernels list

bench: install
	$(PY) -m kernels verify
	$(PY) -m kernels timing --seq-len 256 1024 4096

peers: install
	$(PY) -m pip install --quiet "torch==2.13.0"

clean:
	rm -rf build dist *.egg-info kernels/_attention_c.* .pytest_cache
