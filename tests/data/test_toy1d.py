import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import lognorm, norm

from ebm_jax.data import toy1d


@pytest.mark.parametrize("dataset", [1, 2])
def test_density_integrates_to_one(dataset):
    y = np.linspace(-3, 3, 60001)
    for x in (-2.5, -0.3, 0.0, 0.7, 2.9):
        np.testing.assert_allclose(np.trapezoid(toy1d.density(dataset, x, y), y), 1.0, atol=1e-4)


def test_density_matches_scipy():
    y = np.linspace(-2, 2, 101)
    np.testing.assert_allclose(
        toy1d.density(1, -1.0, y),
        0.8 * norm.pdf(y, np.sin(-1.0), 0.075) + 0.2 * norm.pdf(y, -np.sin(-1.0), 0.075),
    )
    np.testing.assert_allclose(toy1d.density(1, 1.0, y), lognorm.pdf(y + 1, s=0.25), atol=1e-12)
    s = 0.15 / (1 + np.exp(-0.5))
    np.testing.assert_allclose(toy1d.density(2, 0.5, y), norm.pdf(y, np.sin(0.5), s))


def _cdf(dataset: int, x, y):
    """P(Y <= y | x) of the two 1D sets, from scipy's distributions (whose densities
    `test_density_matches_scipy` checks `toy1d.density` against)."""
    if dataset == 1:
        mix = 0.8 * norm.cdf(y, np.sin(x), 0.075) + 0.2 * norm.cdf(y, -np.sin(x), 0.075)
        return np.where(x < 0, mix, lognorm.cdf(y + 1, s=0.25))
    return norm.cdf(y, np.sin(x), 0.15 / (1 + np.exp(-x)))


@pytest.mark.parametrize("dataset", [1, 2])
def test_the_cdf_is_the_densitys_integral(dataset):
    y = np.linspace(-3, 3, 60001)
    for x in (-2.5, -0.3, 0.0, 0.7, 2.9):
        cdf = np.concatenate([[0.0], np.cumsum(np.diff(y) * 0.5 * (
            toy1d.density(dataset, x, y)[1:] + toy1d.density(dataset, x, y)[:-1]))])
        np.testing.assert_allclose(cdf, _cdf(dataset, x, y), atol=1e-4)


@pytest.mark.parametrize("dataset", [1, 2])
def test_samples_follow_the_density(dataset):
    n = 100_000
    x, y = toy1d.sample(jax.random.key(0), dataset, n)
    assert x.shape == y.shape == (n, 1) and x.dtype == y.dtype == jnp.float32
    x, y = np.asarray(x[:, 0], np.float64), np.asarray(y[:, 0], np.float64)
    assert x.min() >= -3 and x.max() <= 3
    # probability integral transform: P(Y <= y | x) must be uniform; a bin's fraction
    # has sd sqrt(0.1 * 0.9 / n) = 0.00095, and 0.006 is over 6 of them
    hist, _ = np.histogram(_cdf(dataset, x, y), bins=10, range=(0, 1))
    np.testing.assert_allclose(hist / n, 0.1, atol=0.006)


def test_kl_of_ground_truth_is_zero_and_positive_otherwise():
    p = toy1d.ground_truth_grid(2, 64, 256)
    xs, ys = toy1d.eval_grid(64, 256)
    np.testing.assert_allclose(toy1d.kl_from_log_scores(p, jnp.log(jnp.asarray(p))), 0.0,
                               atol=1e-5)
    # a model that is the ground truth up to a per-x constant is exact as well
    shift = jnp.log(jnp.asarray(p)) + jnp.asarray(xs)[:, None] * 50.0
    np.testing.assert_allclose(toy1d.kl_from_log_scores(p, shift), 0.0, atol=1e-4)
    flat = jnp.zeros((64, 256))
    kl_flat = float(toy1d.kl_from_log_scores(p, flat))
    ref = np.mean(np.sum(p * (np.log(p) - np.log(1 / 256)), 1))
    np.testing.assert_allclose(kl_flat, ref, rtol=1e-4)


def test_unknown_dataset():
    with pytest.raises(ValueError, match="dataset must be one of"):
        toy1d.sample(jax.random.key(0), 3)
