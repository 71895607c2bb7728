"""The two synthetic 1D datasets of "How to Train Your Energy-Based Model for
Regression" (sec. 4.1) with exact ground-truth
densities, and the D_KL evaluation of that section (KL(p_gt || p_model) on a grid).

Dataset 1: x ~ U(-3, 3); for x < 0, p(y|x) = 0.8 N(sin x, 0.075^2) + 0.2 N(-sin x, 0.075^2);
           for x >= 0, y + 1 ~ LogNormal(0, 0.25).
Dataset 2: p(y|x) = N(sin x, s(x)^2), s(x) = 0.15 / (1 + exp(-x)).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

DATASETS = (1, 2)
X_RANGE = (-3.0, 3.0)


def check_dataset(dataset: int) -> int:
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {DATASETS}, got {dataset!r}")
    return int(dataset)


def sample(key: jax.Array, dataset: int, num: int = 2000) -> tuple[jax.Array, jax.Array]:
    """Draws `num` training pairs; returns x, y of shape (num, 1), float32."""
    check_dataset(dataset)
    if num < 1:
        raise ValueError(f"num must be >= 1, got {num}")
    kx, kc, ke = jax.random.split(key, 3)
    x = jax.random.uniform(kx, (num,), jnp.float32, *X_RANGE)
    eps = jax.random.normal(ke, (num,), jnp.float32)
    if dataset == 1:
        sign = jnp.where(jax.random.uniform(kc, (num,)) < 0.8, 1.0, -1.0)
        y_neg = sign * jnp.sin(x) + 0.075 * eps
        y_pos = jnp.exp(0.25 * eps) - 1.0
        y = jnp.where(x < 0, y_neg, y_pos)
    else:
        s = 0.15 / (1.0 + jnp.exp(-x))
        y = jnp.sin(x) + s * eps
    return x[:, None], y[:, None].astype(jnp.float32)


def _normal_pdf(y, mu, s):
    return np.exp(-0.5 * ((y - mu) / s) ** 2) / (s * math.sqrt(2 * math.pi))


def density(dataset: int, x, y) -> np.ndarray:
    """Exact p(y|x) in float64 (NumPy), broadcasting x against y."""
    check_dataset(dataset)
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    if dataset == 1:
        mix = 0.8 * _normal_pdf(y, np.sin(x), 0.075) + 0.2 * _normal_pdf(y, -np.sin(x), 0.075)
        z = y + 1.0
        with np.errstate(divide="ignore", invalid="ignore"):
            logn = np.where(
                z > 0,
                np.exp(-0.5 * (np.log(np.where(z > 0, z, 1.0)) / 0.25) ** 2)
                / (np.where(z > 0, z, 1.0) * 0.25 * math.sqrt(2 * math.pi)),
                0.0,
            )
        return np.where(x < 0, mix, logn)
    s = 0.15 / (1.0 + np.exp(-x))
    return _normal_pdf(y, np.sin(x), s)


def eval_grid(num_x: int = 2048, num_y: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """The evaluation grid: num_x x values and num_y y values on linspace(-3, 3)."""
    return (
        np.linspace(-3.0, 3.0, num_x, dtype=np.float32),
        np.linspace(-3.0, 3.0, num_y, dtype=np.float32),
    )


def ground_truth_grid(dataset: int, num_x: int = 2048, num_y: int = 2048) -> np.ndarray:
    """Sum-normalised ground truth (pdf + 1e-30) on the grid, shape (num_x, num_y)."""
    xs, ys = eval_grid(num_x, num_y)
    p = density(dataset, xs[:, None], ys[None, :]) + 1e-30
    return p / p.sum(axis=1, keepdims=True)


def kl_from_log_scores(p_true: np.ndarray, scores: jax.Array) -> jax.Array:
    """Mean over x of KL(p_true(.|x) || softmax(scores(x, .))) on the grid.

    `scores` (num_x, num_y) are f(x, y) on the grid; the model density is exp(f)
    normalised by its discrete sum over y (computed as a log-softmax, so no overflow).
    """
    p = jnp.asarray(p_true, jnp.float32)
    log_q = jax.nn.log_softmax(scores, axis=-1)
    kl = jnp.sum(p * (jnp.log(p) - log_q), axis=-1)
    return jnp.mean(kl)
