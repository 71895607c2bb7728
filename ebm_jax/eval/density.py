"""Density metrics of the 1D regression comparison (the paper's sec. 4.1, Table 1 and
Figure 2): D_KL between the exact p(y|x) and the model's p(y|x; theta) = exp(f(x, y))
/ Z(x, theta), both normalised over y on a grid x grid evaluation grid on [-3, 3]^2.

    energy = energy_fn(graphdef)                  # energy(params, x, y) -> f(x, y)
    kls, best = evaluate_kl(energy, stacked_params, dataset=1, grid=2048)
    summary = top_k_summary(kls, top_k=5)        # the paper reports the mean of the best 5

`evaluate_kl` scores the whole ensemble in one jitted program (`make_ensemble_kl`),
`chunk_rows` x values of every model at a time, sized to about `CHUNK_BYTES` of
activations; the ground truth is an argument of that program, so both datasets (and
every ensemble of the same size) share one compiled executable. `grid_scores_bytes` is
what one evaluation holds in memory, for the checks made before training.
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

CHUNK = 64  # x values evaluated at once (one model: `make_grid_scores`)
CHUNK_BYTES = 256 * 2**20  # activations of one chunk of the ensemble evaluation
WIDTH, LAYERS = 10, 8  # the 1D network: about 8 layers of 10 float32 activations


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


def chunk_rows(grid: int, num_models: int = 1, width: int = WIDTH,
               layers: int = LAYERS, budget: int = CHUNK_BYTES) -> int:
    """The x values per chunk of the ensemble evaluation: the largest divisor of `grid`
    whose activations (num_models x rows x grid network evaluations) fit `budget`."""
    per_row = int(num_models) * int(grid) * width * layers * 4
    most = max(1, budget // per_row)
    return max(d for d in range(1, min(int(grid), most) + 1) if grid % d == 0)


def grid_scores_bytes(grid: int, chunk: int = CHUNK, width: int = WIDTH,
                      layers: int = LAYERS, num_models: int = 1) -> int:
    """Bytes one `evaluate_kl` call holds: the float64 ground truth and its float32
    copy and logarithm (grid x grid each), the D_KL terms of every model, and the
    activations of one chunk of the ensemble (`chunk_rows`; the one-model plots take
    `chunk` rows) of a `width`-wide network of `layers` layers."""
    cells = int(grid) * int(grid)
    model_rows = max(int(chunk),
                     int(num_models) * chunk_rows(grid, num_models, width, layers))
    return (cells * (8 + 4 + 4) + int(num_models) * int(grid) * 4
            + model_rows * int(grid) * width * layers * 4)


@functools.lru_cache(maxsize=8)
def make_ensemble_kl(energy: Callable, grid: int, rows: int) -> Callable:
    """Jitted `kl(params, p, log_p) -> (N,)`: D_KL(p || p_theta) of each model of an
    ensemble (`params` stacked over N models) on the grid of `toy1d.eval_grid`, given
    the sum-normalised ground truth `p` (grid, grid) and its logarithm (float32), `rows`
    x values of every model at a time. Cached: the same `energy` and sizes give the
    same (compiled) function."""
    grid = checks.int_at_least("grid", grid, 2)
    if grid % rows:
        raise ValueError(f"rows ({rows}) must divide grid ({grid})")
    xs, ys = toy1d.eval_grid(grid, grid)
    xs = jnp.asarray(xs).reshape(-1, rows)
    ys = jnp.asarray(ys)[:, None]

    @jax.jit
    def kl(params, p, log_p):
        def chunk(args):
            x_rows, p_rows, log_p_rows = args  # (rows,), (rows, grid), (rows, grid)

            def model(prm):
                def row(x):
                    return jax.vmap(lambda yy: energy(prm, x[None], yy))(ys)

                log_q = jax.nn.log_softmax(jax.vmap(row)(x_rows), axis=-1)
                return jnp.sum(p_rows * (log_p_rows - log_q), axis=-1)  # (rows,)

            return jax.vmap(model)(params)  # (N, rows)

        per_row = jax.lax.map(chunk, (xs, p.reshape(-1, rows, grid),
                                      log_p.reshape(-1, rows, grid)))
        return jnp.mean(jnp.moveaxis(per_row, 1, 0).reshape(per_row.shape[1], -1), axis=1)

    return kl


@functools.lru_cache(maxsize=4)
def _ground_truth(dataset: int, grid: int) -> tuple[jax.Array, jax.Array]:
    """The sum-normalised ground truth on the grid and its logarithm, float32, on the
    device (computed once per dataset and grid in a process)."""
    p = jnp.asarray(toy1d.ground_truth_grid(dataset, grid, grid), jnp.float32)
    return p, jnp.log(p)


def evaluate_kl(energy: Callable, params, dataset: int,
                grid: int = 2048) -> tuple[list[float], int | None]:
    """D_KL(p || p_theta) of each model of an ensemble (`params` stacked over models)
    on a grid x grid grid: the mean over x of the KL divergence of the sum-normalised
    conditionals (as `toy1d.kl_from_log_scores`), all models in one jitted program
    (`make_ensemble_kl`). Returns (D_KL per model, index of the best model with a
    finite D_KL, or None)."""
    toy1d.check_dataset(dataset)
    grid = checks.int_at_least("grid", grid, 2)
    num_models = jax.tree.leaves(params)[0].shape[0]
    kl = make_ensemble_kl(energy, grid, chunk_rows(grid, num_models))
    kls = [float(v) for v in np.asarray(kl(params, *_ground_truth(dataset, grid)))]
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


__all__ = ["CHUNK_BYTES", "chunk_rows", "conditional_density", "evaluate_kl",
           "grid_scores_bytes", "make_ensemble_kl", "make_grid_scores", "top_k_summary"]
