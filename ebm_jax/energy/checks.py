"""Argument checks shared by the public functions of `ebm_jax.energy`.

Each check raises `ValueError` naming the argument, the value it got and what is
allowed. They run on static (Python) hyperparameters and on concrete arrays at the
public boundary, never inside traced code.
"""

from __future__ import annotations

import math

import numpy as np


def positive(name: str, value) -> float:
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v


def non_negative(name: str, value) -> float:
    v = float(value)
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return v


def int_at_least(name: str, value, low: int) -> int:
    if isinstance(value, bool) or int(value) != value:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if int(value) < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def positive_steps(name: str, value) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(value, dtype=np.float64))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a number or a 1-D sequence of numbers, got {value!r}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be finite and > 0 in every dimension, got {value!r}")
    return arr


def finite_array(name: str, value) -> np.ndarray:
    arr = np.asarray(value)
    if not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{name} must be numeric, got dtype {arr.dtype}")
    bad = ~np.isfinite(arr)
    if bad.any():
        idx = np.argwhere(bad)[0].tolist()
        raise ValueError(
            f"{name} must be finite (no NaN or inf); found {arr[tuple(idx)]} at index {idx}"
        )
    return arr


def same_batch(x_name: str, x, y_name: str, y) -> int:
    nx, ny = np.shape(x)[0], np.shape(y)[0]
    if nx != ny:
        raise ValueError(
            f"{x_name} and {y_name} must have the same batch size (leading dimension), "
            f"got {nx} and {ny}"
        )
    return nx
