# hierbandit — the two commands of the README are `make run` and `make test`.
# Everything is installed into ./.venv from requirements.lock; only make and a CPython 3.12 are
# needed, and tools/find-python finds one (on PATH, under pyenv, or in the usual folders).

PY_VERSION := 3.12
PYTHON ?= $(shell sh tools/find-python $(PY_VERSION))
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
UV_VERSION := 0.13.9
PYTEST_WORKERS ?= 2

.PHONY: env run demo models test test-slow test-all bench figures docs lint lock clean

env: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	@test -n "$(PYTHON)" || { echo "make: no Python $(PY_VERSION) found (tools/find-python)" >&2; exit 1; }
	$(BIN)/python -c 'import sys; sys.exit("%d.%d" % sys.version_info[:2] != "$(PY_VERSION)")' 2>/dev/null \
		|| { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"
	$(BIN)/uv pip install --quiet --python $(BIN)/python -r requirements.lock
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e .
	touch $(STAMP)

## the main job: the whole workflow on real MovieLens data (fit EB/ML/MCMC priors, diagnose,
## sampling vs closed form, simulate EbmTS vs LinTS), a report in results/quickstart (~3 min)
run: env
	$(BIN)/hierbandit quickstart --out results/quickstart

## a short ebm simulation on the paper's synthetic data-poor setting, into results/demo
demo: env
	$(BIN)/hierbandit demo --out results/demo

## rebuild the default priors in models/ (movielens-eb, movielens-ml, movielens-mcmc)
models: env
	$(BIN)/hierbandit build-models --out models

## the default test suite (what CI runs)
test: env
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) -q

## long statistical checks only
test-slow: env
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) -q -m slow

test-all: env
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) -q -m "slow or not slow"

bench: env
	$(BIN)/python benchmarks/bench_ebm_step.py

## the ebm paper's Figure 1 (both settings) and Figure 2
figures: env
	$(BIN)/hierbandit experiment run ebm-synthetic --scale paper --seeds 20 --out results/ebm

## the documentation site (Sphinx, warnings are errors), into docs/_build/html
docs: env
	$(BIN)/python -m sphinx -W --keep-going -b html docs docs/_build/html

## style, and the layering contracts of pyproject.toml (docs/architecture.md)
lint: env
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

## regenerate requirements.lock from pyproject.toml
lock: env
	$(BIN)/uv pip compile pyproject.toml --extra all --extra dev --python-version $(PY_VERSION) --no-header -o requirements.lock

clean:
	rm -rf $(VENV) results .pytest_cache .ruff_cache
