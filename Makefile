# `make run` and `make test` each bootstrap .venv with Python 3.12 when it is missing.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Python 3.12 (or newer): the first interpreter that really runs, also behind pyenv shims.
PYTHON ?= $(shell for p in python3.12 $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.12*/bin/python3.12 /usr/bin/python3.12 /usr/local/bin/python3.12 python3.13 python3; do \
	  "$$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1 && { echo "$$p"; break; }; done)

.PHONY: run test test-slow bench clean

$(STAMP): pyproject.toml
	@if [ -z "$(PYTHON)" ]; then echo "error: Python >= 3.12 not found (set PYTHON=/path/to/python3.12)"; exit 1; fi
	@if [ ! -x $(PY) ]; then echo "creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); fi
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/ebm-jax regression1d --profile quick --out results/regression1d

test: $(STAMP)
	$(PY) -m pytest -n 2 -q

test-slow: $(STAMP)
	$(PY) -m pytest -n 2 -q -m slow

bench: $(STAMP)
	bash benchmarks/run_regression1d.sh
	$(PY) benchmarks/train_infra.py --out results/bench
	$(PY) benchmarks/contrastive.py --out results/bench
	$(PY) benchmarks/detection_ops.py --out results/bench

clean:
	rm -rf $(VENV) .venv-torch results .pytest_cache
