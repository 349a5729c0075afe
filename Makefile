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

# On a host above x86-64-v3 (AVX-512, AMX) the suites that compile and run native code run a second
# time on the x86-64-v3 (AVX2) target, so a developer there meets what an AVX2 machine would; on an
# AVX2 host the first run already is that run (test_stress and test_cross_targets cover every level
# the host can run or compile for).
NATIVE_TESTS := tests/compiler/test_kernels.py tests/compiler/test_cube_native.py tests/compiler/test_interpret.py \
	tests/compiler/test_interpret_cube.py tests/compiler/test_forwarding.py tests/compiler/test_host.py \
	tests/compiler/test_vmath.py tests/compiler/test_stream.py tests/op_library tests/test_examples.py \
	tests/compiler/test_gather.py tests/compiler/test_atomic.py tests/compiler/test_transpose.py \
	tests/compiler/test_runtime_tiles.py tests/compiler/test_rng.py tests/compiler/test_l1_panels.py \
	tests/compiler/test_ub_economy.py tests/test_natural_kernels.py

# pytest-xdist: one worker per core (TEST_WORKERS=0 runs in one process)
TEST_WORKERS ?= auto

test: $(STAMP)
	$(BIN)/ruff check dsl compiler simulator op_library torch_bridge tests bench examples
	$(BIN)/mypy
	$(BIN)/python -m pytest tests -p no:cacheprovider -n $(TEST_WORKERS)
	@if $(BIN)/python -m compiler.host --above x86-64-v3; then \
		echo "VINCI_HOST_ISA=x86-64-v3 pytest $(NATIVE_TESTS)"; \
		VINCI_HOST_ISA=x86-64-v3 $(BIN)/python -m pytest -p no:cacheprovider -n $(TEST_WORKERS) $(NATIVE_TESTS); \
	else \
		echo "this host runs nothing above x86-64-v3: the run above was already the x86-64-v3 run"; \
	fi

# Benchmarks on the host's own ISA, then capped at x86-64-v3 (torch capped alike): ratios, no asserts.
bench: $(STAMP)
	$(BIN)/python bench/run.py
	VINCI_HOST_ISA=$$($(BIN)/python -m compiler.host --at-most x86-64-v3) $(BIN)/python bench/run.py
	$(BIN)/python bench/ops.py
	VINCI_THREADS=1 $(BIN)/python bench/overhead.py
	VINCI_THREADS=1 $(BIN)/python bench/torch_ops_overhead.py
	$(BIN)/python bench/train.py

lint: $(STAMP)
	$(BIN)/ruff check dsl compiler simulator op_library torch_bridge
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info
