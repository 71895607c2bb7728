#!/usr/bin/env bash
# The SiamFC tracking benchmark in one command: the jitted JAX tracker and train step from
# .venv against eager PyTorch 2.13.0 CPU from a side environment, interleaved, written to
# results/bench/tracking.{json,md}. Extra arguments go to benchmarks/tracking.py
# (e.g. --width 0.5 --repeats 3).
#
# The baseline runs in its own venv: $TORCH_PYTHON if set, else .venv-torch (created on
# first use from $TORCH_BASE_PYTHON, default python3.11, then python3.12; an existing
# .venv-torch without OpenCV gets it added).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/bench}

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
  if ! "$TORCH_PYTHON" -c 'import cv2' >/dev/null 2>&1; then
    echo "adding OpenCV to .venv-torch"
    "$TORCH_PYTHON" -m pip install -q "opencv-python-headless>=4.10"
  fi
fi
"$TORCH_PYTHON" -c 'import torch, numpy, cv2' || {
  echo "error: $TORCH_PYTHON needs torch, numpy and cv2 (opencv-python-headless)"; exit 1; }

.venv/bin/python benchmarks/tracking.py --out "$OUT" --torch-python "$TORCH_PYTHON" "$@"
