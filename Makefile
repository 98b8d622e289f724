# Two commands for a new user: `make run` (set up, then run the workbook on seed-mlp) and
# `make test`. Both create .venv on first use; later calls reuse it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=
PYTEST_ARGS ?=

.PHONY: setup run test lint

setup: $(STAMP)

# torch is pinned to the CPU build that matches CI; an unpinned torch pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "torch==2.13.0" -e ".[test]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/workbench run $(ARGS)

test: $(STAMP)
	$(BIN)/ruff format --check workbench tests benchmarks tools
	$(BIN)/ruff check workbench tests benchmarks tools
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff format workbench tests benchmarks tools
	$(BIN)/ruff check --fix workbench tests benchmarks tools
