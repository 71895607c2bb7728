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

TORCH_PYTHON_GIVEN=${TORCH_PYTHON:-}
source benchmarks/torch_env.sh
if [ -z "$TORCH_PYTHON_GIVEN" ]; then  # our .venv-torch: add OpenCV if missing
  if ! "$TORCH_PYTHON" -c 'import cv2' >/dev/null 2>&1; then
    echo "adding OpenCV to .venv-torch"
    "$TORCH_PYTHON" -m pip install -q "opencv-python-headless>=4.10"
  fi
fi
"$TORCH_PYTHON" -c 'import torch, numpy, cv2' || {
  echo "error: $TORCH_PYTHON needs torch, numpy and cv2 (opencv-python-headless)"; exit 1; }

.venv/bin/python benchmarks/tracking.py --out "$OUT" --torch-python "$TORCH_PYTHON" "$@"
