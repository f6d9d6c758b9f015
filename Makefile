# The two commands of the README do all set-up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck layers unit bench clean install

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,torch,ml]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/lowcostgpu demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

layers: $(STAMP)
	$(VENV)/bin/lint-imports

unit: $(STAMP)
	$(VENV)/bin/pytest -q

test: lint typecheck layers unit

bench: $(STAMP)
	$(PY) bench/scheduler.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
