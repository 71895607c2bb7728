"""Density metrics of the 1D regression comparison (the paper's sec. 4.1, Table 1 and
Figure 2): D_KL between the exact p(y|x) and the model's p(y|x; theta) = exp(f(x, y))
/ Z(x, theta), both normalised over y on a grid x grid evaluation grid on [-3, 3]^2.

    energy = energy_fn(graphdef)                  # energy(params, x, y) -> f(x, y)
    kls, best = evaluate_kl(energy, stacked_params, dataset=1, grid=2048)
    summary = top_k_summary(kls, top_k=5)        # the paper reports the mean of the best 5

`grid_scores_bytes` is what one evaluation holds in memory, for the checks made before
training.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ebm_jax import checks
from ebm_jax.data import toy1d

CHUNK = 64  # x values evaluated at once


@functools.lru_cache(maxsize=8)
def make_grid_scores(energy: Callable, grid: int, chunk: int = CHUNK) -> Callable:
    """Jitted `scores(params) -> f(x, y)`, shape (grid, grid), on the evaluation grid of
    `toy1d.eval_grid` (one model), computed `chunk` x values at a time. Cached: the
    same `energy` and sizes give the same (compiled) function."""
    grid = checks.int_at_least("grid", grid, 2)
    xs, ys = toy1d.eval_grid(grid, grid)
    if grid % chunk:
        chunk = math.gcd(grid, chunk)
    xs = jnp.asarray(xs).reshape(-1, chunk)
    ys = jnp.asarray(ys)[:, None]

    @jax.jit
    def scores(params):
        def rows(x_chunk):
            def row(x):
                return jax.vmap(lambda yy: energy(params, x[None], yy))(ys)

            return jax.vmap(row)(x_chunk)

        return jax.lax.map(rows, xs).reshape(grid, grid)

    return scores


def grid_scores_bytes(grid: int, chunk: int = CHUNK, width: int = 10,
                      layers: int = 8) -> int:
    """Bytes one `evaluate_kl` call holds: the float64 ground truth and its float32
    copy, the scores and the log-softmax (grid x grid each), and the activations of
    `chunk` grid rows of a `width`-wide network of `layers` layers."""
    cells = int(grid) * int(grid)
    return cells * (8 + 4 * 4) + int(chunk) * int(grid) * width * layers * 4


def evaluate_kl(energy: Callable, params, dataset: int,
                grid: int = 2048) -> tuple[list[float], int | None]:
    """D_KL(p || p_theta) of each model of an ensemble (`params` stacked over models)
    on a grid x grid grid: the mean over x of the KL divergence of the sum-normalised
    conditionals (`toy1d.kl_from_log_scores`). Returns (D_KL per model, index of the
    best model with a finite D_KL, or None)."""
    toy1d.check_dataset(dataset)
    scores_fn = make_grid_scores(energy, grid)
    p_true = toy1d.ground_truth_grid(dataset, grid, grid)
    num_models = jax.tree.leaves(params)[0].shape[0]
    kls = []
    for j in range(num_models):
        s = scores_fn(jax.tree.map(lambda a: a[j], params))
        kls.append(float(toy1d.kl_from_log_scores(p_true, s)))
    finite = [j for j, v in enumerate(kls) if math.isfinite(v)]
    best = min(finite, key=lambda j: kls[j]) if finite else None
    return kls, best


def conditional_density(energy: Callable, params, grid: int) -> np.ndarray:
    """The model's p(y|x) on the grid x grid evaluation grid (one model), each row
    normalised over y: softmax of f(x, .) (for plots)."""
    s = make_grid_scores(energy, grid)(params)
    return np.asarray(jax.nn.softmax(s.astype(jnp.float32), axis=-1))


def _finite_or_none(v) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None


def top_k_summary(kls: Sequence[float], top_k: int) -> dict:
    """The Table 1 figures of one ensemble: the mean D_KL of its `top_k` best models
    (`kl_top_k`, the paper reports the best 5 of 20), the mean and sd over all, and
    every model's D_KL. A model with a non-finite D_KL counts as the worst; non-finite
    values are written as None (JSON has no NaN)."""
    top_k = checks.int_at_least("top_k", top_k, 1)
    kl = np.asarray(kls, np.float64)
    if kl.ndim != 1 or kl.size == 0:
        raise ValueError(f"kls must be a non-empty list of numbers, got {kls!r}")
    if top_k > kl.size:
        raise ValueError(f"top_k must be at most the number of models ({kl.size}), "
                         f"got {top_k}")
    ranked = np.sort(np.where(np.isfinite(kl), kl, np.inf))
    finite = kl[np.isfinite(kl)]
    return {
        "kl_top_k": _finite_or_none(np.mean(ranked[:top_k])),
        "top_k": top_k,
        "kl_mean": _finite_or_none(np.mean(kl)),
        "kl_std": _finite_or_none(np.std(kl)),
        "num_finite": int(finite.size),
        "kl_all": [_finite_or_none(v) for v in kl],
    }


__all__ = ["conditional_density", "evaluate_kl", "grid_scores_bytes", "make_grid_scores",
           "top_k_summary"]
