"""D_KL on the evaluation grid (the 1D comparison's metric) and the top-k summary."""

import jax.numpy as jnp
import numpy as np
import pytest

from ebm_jax.data import toy1d
from ebm_jax.eval.density import (
    chunk_rows,
    conditional_density,
    evaluate_kl,
    grid_scores_bytes,
    make_ensemble_kl,
    make_grid_scores,
    top_k_summary,
)
from ebm_jax.train.compilation import CompileMeter


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
    # the ground truth grows with the cells; a chunk's activations are bounded
    assert grid_scores_bytes(4096) > 1.5 * grid_scores_bytes(2048)
    assert grid_scores_bytes(16384) > 3 * grid_scores_bytes(8192)
    assert grid_scores_bytes(10**6) > 10**13


def _quadratic(p, x, y):
    """A model whose log-density is Gaussian in y around p[0] x with scale p[1]."""
    return jnp.sum(-0.5 * ((y - p[0] * jnp.sin(x)) / p[1]) ** 2)


def test_the_ensemble_program_gives_each_models_kl():
    """One program for the whole ensemble, chunked over x: each model's D_KL as scored
    alone (its grid scores and `toy1d.kl_from_log_scores`), to float32 rounding."""
    grid = 48
    params = jnp.array([[1.0, 0.1], [0.5, 0.3], [-1.0, 1.0]])
    for dataset in (1, 2):
        kls, best = evaluate_kl(_quadratic, params, dataset, grid)
        p = toy1d.ground_truth_grid(dataset, grid, grid)
        want = [float(toy1d.kl_from_log_scores(p, make_grid_scores(_quadratic, grid)(q)))
                for q in params]
        np.testing.assert_allclose(kls, want, rtol=1e-5, atol=1e-6)
        assert best == int(np.argmin(want))
    rows = [1, 4, 48]  # any chunking gives the same
    p = jnp.asarray(toy1d.ground_truth_grid(2, grid, grid), jnp.float32)
    got = [make_ensemble_kl(_quadratic, grid, r)(params, p, jnp.log(p)) for r in rows]
    for g in got[1:]:
        np.testing.assert_allclose(g, got[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="must divide grid"):
        make_ensemble_kl(_quadratic, grid, 5)


def test_both_datasets_and_every_ensemble_of_a_size_share_one_program():
    grid = 40
    first = jnp.array([[1.0, 0.2], [0.3, 0.5]])
    second, third = first * 1.5, first + 0.1
    evaluate_kl(_quadratic, first, 1, grid)
    with CompileMeter() as meter:
        evaluate_kl(_quadratic, second, 2, grid)
        evaluate_kl(_quadratic, third, 1, grid)
    assert meter.compilations == 0


def test_chunks_divide_the_grid_and_fit_the_budget():
    for grid, models in ((2048, 20), (2048, 1), (64, 5), (97, 3)):
        rows = chunk_rows(grid, models)
        assert grid % rows == 0 and 1 <= rows <= grid
    assert chunk_rows(2048, 20) == 16  # 20 x 16 x 2048 evaluations of 320 B: 210 MB
    assert chunk_rows(2048, 20, budget=1) == 1
    assert chunk_rows(64, 1) == 64
    assert grid_scores_bytes(2048, num_models=20) > grid_scores_bytes(2048)
