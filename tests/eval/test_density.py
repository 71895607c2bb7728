"""D_KL on the evaluation grid (the 1D comparison's metric) and the top-k summary."""

import jax.numpy as jnp
import numpy as np
import pytest

from ebm_jax.data import toy1d
from ebm_jax.eval.density import (
    conditional_density,
    evaluate_kl,
    grid_scores_bytes,
    make_grid_scores,
    top_k_summary,
)


def _log_density_d2(scale, x, y):
    """scale x the exact log p(y|x) of dataset 2, N(sin x, s(x)^2)."""
    s = 0.15 / (1.0 + jnp.exp(-x))
    return jnp.sum(scale * (-0.5 * ((y - jnp.sin(x)) / s) ** 2 - jnp.log(s)))


def test_grid_scores_match_a_direct_loop():
    energy = lambda p, x, y: jnp.sum(p[0] * x * y + p[1] * y**2)
    params = jnp.array([0.7, -0.3])
    grid = 48  # not a multiple of the chunk: the chunk shrinks to a divisor
    scores = np.asarray(make_grid_scores(energy, grid)(params))
    xs, ys = toy1d.eval_grid(grid, grid)
    want = 0.7 * xs[:, None] * ys[None, :] - 0.3 * ys[None, :] ** 2
    np.testing.assert_allclose(scores, want, rtol=1e-5, atol=1e-5)


def test_kl_of_the_exact_density_is_zero_and_a_flat_one_is_not():
    grid = 64
    params = jnp.array([[1.0], [0.0]])  # model 0: exact log-density; model 1: flat
    kls, best = evaluate_kl(lambda p, x, y: _log_density_d2(p[0], x, y), params, 2, grid)
    assert kls[0] == pytest.approx(0.0, abs=1e-4)
    p = toy1d.ground_truth_grid(2, grid, grid)
    flat = np.mean(np.sum(p * (np.log(p) + np.log(grid)), axis=1))  # KL to uniform
    assert kls[1] == pytest.approx(flat, rel=1e-4) and kls[1] > 1.0
    assert best == 0


def test_conditional_density_rows_sum_to_one():
    energy = lambda p, x, y: jnp.sum(-((y - p * x) ** 2))
    dens = conditional_density(energy, jnp.float32(0.5), 32)
    assert dens.shape == (32, 32)
    np.testing.assert_allclose(dens.sum(axis=1), 1.0, rtol=1e-5)


def test_top_k_summary_ranks_non_finite_last():
    s = top_k_summary([0.3, float("nan"), 0.1, 0.2, float("inf")], top_k=3)
    assert s["kl_top_k"] == pytest.approx(0.2) and s["top_k"] == 3
    assert s["num_finite"] == 3 and s["kl_mean"] is None  # NaN is written as None
    assert s["kl_all"] == [0.3, None, 0.1, 0.2, None]
    s = top_k_summary([0.5, 0.1], top_k=2)
    assert s["kl_top_k"] == pytest.approx(0.3) == s["kl_mean"]
    assert s["kl_top_k"] <= s["kl_mean"] + 1e-12
    assert top_k_summary([1.0, float("nan")], top_k=2)["kl_top_k"] is None
    with pytest.raises(ValueError, match="top_k must be at most the number of models"):
        top_k_summary([0.1, 0.2], top_k=3)


def test_grid_bytes_grow_with_the_grid():
    assert grid_scores_bytes(4096) > 3 * grid_scores_bytes(2048)
    assert grid_scores_bytes(10**6) > 10**13
