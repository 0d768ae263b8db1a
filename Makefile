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

# the newest Python the package supports: its own venv from the same lock, for the fast subset
NEXT_VERSION := 3.13
NEXT_VENV := .venv-$(NEXT_VERSION)
NEXT_STAMP := $(NEXT_VENV)/.installed
# the peer libraries of benchmarks/bench_serving.py (the `bench` extra), added to .venv by
# `make bench` only: requirements-bench.lock pins them with every shared package at its
# requirements.lock version, so no package of the test environment changes
BENCH_STAMP := $(VENV)/.installed-bench
# the online and offline layers (no Bayesian layer, no experiments, no command): docs/install.md
FAST_TESTS := tests/stats tests/ebm tests/sclub tests/cascade tests/boc tests/offline tests/data \
	tests/reliability \
	--ignore=tests/data/test_log_refusals.py \
	--ignore=tests/reliability/test_fit_and_env_inputs.py \
	--ignore=tests/reliability/test_cascade_inputs.py \
	--ignore=tests/reliability/test_hostile_files.py

.PHONY: env env-$(NEXT_VERSION) env-bench run demo models test test-$(NEXT_VERSION) test-slow \
	test-all bench figures docs lint lock clean

env: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	@test -n "$(PYTHON)" || { echo "make: no Python $(PY_VERSION) found (tools/find-python)" >&2; exit 1; }
	$(BIN)/python -c 'import sys; sys.exit("%d.%d" % sys.version_info[:2] != "$(PY_VERSION)")' 2>/dev/null \
		|| { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"
	$(BIN)/uv pip install --quiet --python $(BIN)/python -r requirements.lock
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e .
	touch $(STAMP)

env-$(NEXT_VERSION): $(NEXT_STAMP)

$(NEXT_STAMP): requirements.lock pyproject.toml $(STAMP)
	@next="$$(sh tools/find-python $(NEXT_VERSION))" || { echo "make: no Python $(NEXT_VERSION) found (tools/find-python)" >&2; exit 1; }; \
	$(NEXT_VENV)/bin/python -c 'import sys; sys.exit("%d.%d" % sys.version_info[:2] != "$(NEXT_VERSION)")' 2>/dev/null \
		|| { rm -rf $(NEXT_VENV) && $(BIN)/uv venv --quiet --python "$$next" $(NEXT_VENV); }
	$(BIN)/uv pip install --quiet --python $(NEXT_VENV)/bin/python -r requirements.lock
	$(BIN)/uv pip install --quiet --python $(NEXT_VENV)/bin/python --no-deps -e .
	touch $(NEXT_STAMP)

env-bench: $(BENCH_STAMP)

$(BENCH_STAMP): requirements-bench.lock $(STAMP)
	$(BIN)/uv pip install --quiet --python $(BIN)/python -r requirements-bench.lock
	touch $(BENCH_STAMP)

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

## the default test suite on Python 3.12, then its fast subset on 3.13 (what CI runs)
test: env env-$(NEXT_VERSION)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) -q
	$(NEXT_VENV)/bin/python -m pytest -n $(PYTEST_WORKERS) -q $(FAST_TESTS)

## the fast subset only, on Python 3.13, in .venv-3.13
test-$(NEXT_VERSION): env-$(NEXT_VERSION)
	$(NEXT_VENV)/bin/python -m pytest -n $(PYTEST_WORKERS) -q $(FAST_TESTS)

## long statistical checks only
test-slow: env
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) -q -m slow

test-all: env
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) -q -m "slow or not slow"

## speed benchmarks; bench_serving.py against the peer libraries of the `bench` extra,
## bench_service.py (the decision service under locust)
bench: env env-bench
	$(BIN)/python benchmarks/bench_ebm_step.py
	$(BIN)/python benchmarks/bench_serving.py
	$(BIN)/python benchmarks/bench_service.py

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

## regenerate requirements.lock (and requirements-bench.lock, constrained by it) from pyproject.toml
lock: env
	$(BIN)/uv pip compile pyproject.toml --extra all --extra dev --python-version $(PY_VERSION) --no-header -o requirements.lock
	$(BIN)/uv pip compile pyproject.toml --extra bench --constraint requirements.lock --python-version $(PY_VERSION) --no-header -o requirements-bench.lock

clean:
	rm -rf $(VENV) $(NEXT_VENV) results .pytest_cache .ruff_cache
