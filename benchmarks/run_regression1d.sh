#!/usr/bin/env bash
# The 1D benchmark in one command (`make bench`): JAX from .venv against eager PyTorch
# 2.13.0 CPU from a side environment, written to results/bench/regression1d.{json,md}.
#
# PyTorch 2.13.0's CPU build may exist only for another Python than the project's, so
# the baseline runs in its own venv: $TORCH_PYTHON if set, else .venv-torch (created on
# first use from $TORCH_BASE_PYTHON, default python3.11, then python3.12).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/bench}

source benchmarks/torch_env.sh

.venv/bin/python benchmarks/regression1d.py --out "$OUT" --torch-python "$TORCH_PYTHON" "$@"
