# `make run` and `make test` each bootstrap .venv with Python 3.12 when it is missing
# (or was made with another Python).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LOG := $(VENV)/install.log
IS_312 := import sys; sys.exit(sys.version_info < (3, 12))

# Python 3.12 (or newer): the first interpreter that really runs, also behind pyenv shims.
PYTHON ?= $(shell for p in python3.12 $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.12*/bin/python3.12 /usr/bin/python3.12 /usr/local/bin/python3.12 python3.13 python3; do \
	  "$$p" -c '$(IS_312)' >/dev/null 2>&1 && { echo "$$p"; break; }; done)

.PHONY: run test test-heavy test-slow bench clean check-venv

# A .venv of another Python (e.g. left by `make PYTHON=python3.11`) is rebuilt.
check-venv:
	@if [ -e $(VENV) ] && ! $(PY) -c '$(IS_312)' >/dev/null 2>&1; then \
	  echo "$(VENV) holds $$($(PY) --version 2>&1 | head -n1 || echo 'no working Python'), not >= 3.12: rebuilding it"; \
	  rm -rf $(VENV); fi

$(STAMP): pyproject.toml
	@if [ -z "$(PYTHON)" ]; then echo "error: Python >= 3.12 not found (set PYTHON=/path/to/python3.12)"; exit 1; fi
	@if ! "$(PYTHON)" -c '$(IS_312)' >/dev/null 2>&1; then \
	  echo "error: PYTHON=$(PYTHON) is $$("$(PYTHON)" --version 2>&1 | head -n1), but ebm_jax needs Python >= 3.12"; exit 1; fi
	@if [ ! -x $(PY) ]; then echo "creating $(VENV) with $(PYTHON)"; "$(PYTHON)" -m venv $(VENV) || exit 1; fi
	@echo "installing ebm_jax[dev] into $(VENV) (log: $(LOG))"
	@{ $(PY) -m pip install -q --upgrade pip && $(PY) -m pip install -q -e '.[dev]'; } >$(LOG) 2>&1 || { \
	  tail -n 25 $(LOG); echo; echo "error: installing ebm_jax into $(VENV) failed; the full log is $(LOG)"; exit 1; }
	@touch $(STAMP)

run: check-venv $(STAMP)
	$(VENV)/bin/ebm-jax run experiments/ebm_regression/table1_toy1d.py:quick --out results/table1_toy1d/quick

# A test file's tests run on one worker (--dist loadfile), so that its module-scoped
# fixtures (tiny training runs) are built once, not once per worker.
# PYTEST_FLAGS: more pytest options, e.g. `make test PYTEST_FLAGS="--durations=50 -x"`
PYTEST_FLAGS ?=
test: check-venv $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile -q --durations=10 $(PYTEST_FLAGS)

# the tests of a minute or more (tiny end-to-end runs, whole notebooks); CI runs them
# after `make test`
test-heavy: check-venv $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile -q --durations=10 -m 'heavy and not slow' $(PYTEST_FLAGS)

test-slow: check-venv $(STAMP)
	$(PY) -m pytest -n 2 -q -m slow
	EBM_JAX_FUZZ=long $(PY) -m pytest -n 2 -q tests/test_fuzz_loaders.py

bench: check-venv $(STAMP)
	bash benchmarks/run_regression1d.sh
	$(PY) benchmarks/train_infra.py --out results/bench
	$(PY) benchmarks/contrastive.py --out results/bench
	$(PY) benchmarks/data_pipeline.py --out results/bench
	$(PY) benchmarks/losses.py --out results/bench
	$(PY) benchmarks/langevin_chain.py --out results/bench
	$(PY) benchmarks/detection_ops.py --out results/bench
	$(PY) benchmarks/top_maps.py --out results/bench
	bash benchmarks/run_tracking.sh

clean:
	rm -rf $(VENV) .venv-torch results .pytest_cache
