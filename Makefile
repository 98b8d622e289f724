# Two commands for a new user: `make run` (set up, then run the workbook on seed-mlp) and
# `make test`. Both create .venv on first use; later calls reuse it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=
PYTEST_ARGS ?=

.PHONY: setup run prewarm test test-main test-fast test-xla test-slurm test-airflow lint xla-venv docs

setup: $(STAMP)

# torch is pinned to the CPU build that matches CI; an unpinned torch pulls a multi-GB CUDA build.
# A line per stage and pip's own progress: the first set-up takes minutes on a busy machine.
$(STAMP): pyproject.toml
	@echo "setup [1/3]: creating $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@echo "setup [2/3]: upgrading pip"
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "setup [3/3]: installing torch 2.13.0 (CPU build) and the workbook with its test tools"
	$(BIN)/python -m pip install --progress-bar on "torch==2.13.0" -e ".[test]"
	touch $(STAMP)
	@echo "setup: done"

run: $(STAMP)
	$(BIN)/workbench run $(ARGS)

# Before a scheduled run on a Trn1: neuron_parallel_compile fills the run's compile cache
# (PREWARM_ARGS, e.g. "--target xla --compile-cache /shared/cache"); elsewhere one sentence says why not.
PREWARM_ARGS ?=
prewarm: $(STAMP)
	$(BIN)/workbench prewarm $(PREWARM_ARGS)

# Both lanes: the CPU environment (torch 2.13: format, lint, type check, tests), then Trn1's software path (torch-xla 2.9 on CPU).
test: test-main test-xla

# pytest-xdist workers; --dist loadscope keeps each test module on one worker, so a module's
# shared fixture (one notebook run, one pinned manifest) is built once. Tests marked `serial`
# time themselves or start their own process trees: they run afterwards, alone, without xdist.
# Each pytest call fails on "no tests collected" (exit 5), as any other failure.
WORKERS ?= auto
XDIST := -n $(WORKERS) --dist loadscope
UNIT_TESTS := tests/unit $(wildcard tests/contract)

# The public-script corpus (tests/corpus) is fetched at pinned commits and checked by sha256;
# where it cannot be fetched (no network, no mirror) its tests skip, naming the command.
test-main: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	-$(BIN)/python -m tests.corpus.materialise
	$(BIN)/python -m pytest $(XDIST) -m "not serial" $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m serial $(PYTEST_ARGS)

# The unit and contract tests only (no notebook, kernel, browser or CLI run): a few minutes.
test-fast: $(STAMP)
	$(BIN)/python -m pytest $(XDIST) -m "not serial" $(UNIT_TESTS) $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m serial $(UNIT_TESTS) $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The Trn1 software path on a plain CPU: torch-xla 2.9 with PJRT_DEVICE=CPU, in its own venv
# (torch-xla declares no torch requirement, and a mismatched torch fails at import).
XLA_VENV ?= .venv-xla
XLA_STAMP := $(XLA_VENV)/.installed

xla-venv: $(XLA_STAMP)

$(XLA_STAMP): pyproject.toml
	$(PYTHON) -m venv $(XLA_VENV)
	$(XLA_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(XLA_VENV)/bin/python -m pip install --quiet "torch==2.9.0" "torch-xla==2.9.0" -e ".[test]"
	touch $(XLA_STAMP)

# The XLA-marked tests, including a whole `workbench run --target xla` on seed-mlp. The venv may
# live outside this checkout (XLA_VENV=...) to be reused; its editable install is pointed here.
test-xla: $(XLA_STAMP)
	$(XLA_VENV)/bin/python -m pip install --quiet --no-deps -e .
	PJRT_DEVICE=CPU $(XLA_VENV)/bin/python -m pytest -m xla $(PYTEST_ARGS)

# The fleet templates on a real single-node Slurm cluster (munged, slurmctld, slurmd from Debian's
# packages): an array over a two-item matrix, then the collect job. Needs root; skips otherwise.
test-slurm: $(STAMP)
	bash tests/slurm/local_cluster.sh

# The fleet DAG under a real Airflow (`airflow dags test`: its mapped item tasks and the collect
# task run real `workbench` commands). Airflow gets its own venv, which may live outside this
# checkout (AIRFLOW_VENV=...) to be reused. Pinned: Airflow's constraint files live on GitHub,
# which only the registries' packages stand in for here.
AIRFLOW_VENV ?= .venv-airflow
AIRFLOW_STAMP := $(AIRFLOW_VENV)/.installed

$(AIRFLOW_STAMP):
	$(PYTHON) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(AIRFLOW_VENV)/bin/python -m pip install --quiet "apache-airflow==3.3.2"
	touch $(AIRFLOW_STAMP)

test-airflow: $(STAMP) $(AIRFLOW_STAMP)
	AIRFLOW_VENV=$(AIRFLOW_VENV) bash tests/airflow/dag_test.sh

# The documentation site (docs/, mkdocs.yml): built strictly, so a broken link or a page missing
# from the navigation fails the build.
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(BIN)/mkdocs build --strict --site-dir $(or $(SITE_DIR),site)
