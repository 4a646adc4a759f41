# kernel_forge developer targets. `make install` once, then `make test` (CPU) or `make test-gpu`.
SHELL := /bin/bash
PY ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
CUDA ?= cu13
OUT ?= gpu-out

TASK ?= matmul_f32

.PHONY: install test test-slow test-all optimize test-gpu bench lint clean

# A virtual environment with kernel_forge and everything it needs from pip (no CUDA toolkit).
.venv/.installed: pyproject.toml
	python3 -m venv .venv
	.venv/bin/python -m pip install -q --upgrade pip
	.venv/bin/python -m pip install -q -e ".[$(CUDA),dev]"
	touch $@

install: .venv/.installed

# The test suite: CPU tests everywhere; GPU tests (marked `gpu`) run where a GPU is present.
# In parallel (pytest-xdist, one worker per core); the GPU tests all in one worker, one at a time.
# `make test` leaves out the tests marked `slow` (host emulation, NVRTC over every setting or every
# kernel of a corpus, whole tuner runs: pyproject.toml's markers); `make test-slow` runs just those,
# `make test-all` both.  CI (.ci/run) runs `make test`, then `make test-slow`.
PYTEST = .venv/bin/python -m pytest -q -n auto --dist loadgroup
test: .venv/.installed
	$(PYTEST) -m "not slow"

test-slow: .venv/.installed
	$(PYTEST) -m slow

test-all: .venv/.installed
	$(PYTEST)

# The main job: optimise one bundled task; evidence goes to runs/run-NNN/.
optimize: .venv/.installed
	.venv/bin/kforge optimize manifests/$(TASK).json

# The GPU suite (the device machine runs exactly this); split across GPUs when there are several.
# Wheels in .whl/ (jsonschema, anthropic, openai and their needs) are installed to /tmp/site first.
test-gpu:
	OUT=$(OUT) PY=$(PY) bash bench/gpu_suite.sh

bench:
	@mkdir -p $(OUT)
	PYTHONPATH=$(CURDIR):/tmp/site PYTHONUNBUFFERED=1 $(PY) bench/run_bench.py --out $(OUT)

lint:
	$(PY) -m compileall -q kernel_forge tests
	$(PY) -m kernel_forge validate manifests/*.json

clean:
	rm -rf build dist *.egg-info .pytest_cache
