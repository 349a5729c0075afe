# The two commands a newcomer needs:
#   make demo   - create .venv, install pinned dependencies, compile/check/profile the example kernels
#   make test   - the same set-up, then the whole test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint clean setup

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q --upgrade pip
	# torch is pinned: 2.13.0 resolves to the CPU wheel on these machines
	$(BIN)/pip install --disable-pip-version-check -q "torch==2.13.0"
	$(BIN)/pip install --disable-pip-version-check -q -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/vinci demo

test: $(STAMP)
	$(BIN)/ruff check dsl compiler simulator op_library torch_bridge tests bench examples
	$(BIN)/mypy
	$(BIN)/python -m pytest tests -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python bench/run.py

lint: $(STAMP)
	$(BIN)/ruff check dsl compiler simulator op_library torch_bridge
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info
