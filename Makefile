# The two commands of the README do all set-up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run demo test lint typecheck layers unit bench bench-sim clean install

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,torch,ml]'
	touch $(STAMP)

install: $(STAMP)

# Workloads run sandboxed where the sandbox can be built (root and Debian's bubblewrap:
# docs/security.md); elsewhere `make run` starts unsandboxed and `serve` says so loudly.
SANDBOX_FLAG ?= $(shell [ "$$(id -u)" = 0 ] && command -v bwrap >/dev/null || echo --no-sandbox)

# Before `serve` blocks: how to use the CLI, and a `lowcostgpu` launcher on PATH where that needs
# no root (scripts/cli-launcher.sh says what it did, or what to type).
run: $(STAMP)
	@sh scripts/cli-launcher.sh $(VENV)
	@echo "(to watch the seed session for real in a throw-away plane instead: make demo, or lowcostgpu demo)"
	$(VENV)/bin/lowcostgpu serve --data-dir ./data $(SANDBOX_FLAG)

demo: $(STAMP)
	$(VENV)/bin/lowcostgpu demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

layers: $(STAMP)
	$(VENV)/bin/lint-imports

# Two pytest-xdist workers: most tests wait on servers, processes and browsers, not on the CPU
# (what that asks of a test: tests/conftest.py). A worker that has run out of tests takes over
# half of what the other one still has queued (worksteal). PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= 2
unit: $(STAMP)
	$(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --dist worksteal

test: lint typecheck layers unit

bench: $(STAMP)
	$(PY) bench/scheduler.py

bench-sim: $(STAMP)
	$(PY) bench/sim.py --fleet-scale 0.02

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
