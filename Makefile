# Every target installs what it needs into .venv first; the install is skipped when
# pyproject.toml has not changed since the last one.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench lint typecheck fmt clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)  ## the demo: agents at work on the embedded SQLite store, watched live
	$(BIN)/python examples/demo/run.py

test: $(STAMP)  ## the whole suite
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)  ## benchmarks, as ratios to baselines measured in the same run
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist
