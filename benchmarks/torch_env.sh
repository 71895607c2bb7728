# Sourced by the benchmark scripts: sets TORCH_PYTHON to a Python with torch 2.13.0 (CPU)
# for the eager PyTorch baselines. $TORCH_PYTHON if set, else .venv-torch, created on
# first use from $TORCH_BASE_PYTHON (default python3.11, then python3.12): PyTorch
# 2.13.0's CPU build may exist only for another Python than the project's.
if [ -z "${TORCH_PYTHON:-}" ]; then
  TORCH_PYTHON=.venv-torch/bin/python
  if ! "$TORCH_PYTHON" -c 'import torch, numpy' >/dev/null 2>&1; then
    base=""
    for p in ${TORCH_BASE_PYTHON:-} python3.11 python3.12 python3; do
      if "$p" -c 'import sys' >/dev/null 2>&1; then base=$p; break; fi
    done
    [ -n "$base" ] || { echo "error: no Python for the PyTorch baseline (set TORCH_PYTHON)"; exit 1; }
    echo "creating .venv-torch with $base (torch==2.13.0, CPU)"
    "$base" -m venv .venv-torch
    .venv-torch/bin/python -m pip install -q --upgrade pip
    .venv-torch/bin/python -m pip install -q torch==2.13.0 numpy
  fi
fi
