import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from ebm_jax.energy import gaussian_mixture


def test_log_prob_integrates_to_one_1d():
    q = gaussian_mixture((0.1, 0.8))
    grid = jnp.linspace(-8, 8, 40001)[:, None]
    dens = jnp.exp(q.log_prob(grid + 0.3, jnp.array([0.3])))
    np.testing.assert_allclose(jnp.trapezoid(dens, dx=16 / 40000), 1.0, rtol=1e-4)


def test_log_prob_integrates_to_one_2d():
    q = gaussian_mixture((0.2, 0.6, 1.0))
    t = jnp.linspace(-7, 7, 701)
    yy = jnp.stack(jnp.meshgrid(t, t, indexing="ij"), -1)
    dens = jnp.exp(q.log_prob(yy, jnp.zeros(2)))
    h = 14 / 700
    np.testing.assert_allclose(jnp.sum(dens) * h * h, 1.0, rtol=1e-3)


def test_log_prob_matches_closed_form():
    q = gaussian_mixture((0.5, 2.0))
    y, c = np.array([0.3, -1.2]), np.array([0.1, 0.4])
    sq = np.sum((y - c) ** 2)
    ref = np.log(
        0.5 * np.exp(-sq / (2 * 0.25)) / (2 * np.pi * 0.25)
        + 0.5 * np.exp(-sq / (2 * 4.0)) / (2 * np.pi * 4.0)
    )
    np.testing.assert_allclose(q.log_prob(jnp.asarray(y), jnp.asarray(c)), ref, rtol=1e-5)


@pytest.mark.parametrize("k", [1, 3])
def test_samples_match_density(k):
    q = gaussian_mixture((0.2, 1.6))
    c = jnp.arange(k, dtype=jnp.float32)
    s = np.asarray(q.sample(jax.random.key(1), c, 200_000))
    assert s.shape == (200_000, k)
    np.testing.assert_allclose(s.mean(0), np.asarray(c), atol=0.02)
    # per-dimension variance of the mixture: mean of sigma_k^2
    np.testing.assert_allclose(s.var(0), (0.04 + 2.56) / 2, rtol=0.02)
    # histogram of the first coordinate against the exact probability of each bin
    n = s.shape[0]
    counts, edges = np.histogram(s[:, 0] - float(c[0]), bins=60, range=(-3, 3))
    cdf = 0.5 * (norm.cdf(edges, scale=0.2) + norm.cdf(edges, scale=1.6))
    prob = np.diff(cdf)
    np.testing.assert_array_less(np.abs(counts / n - prob), 5 * np.sqrt(prob / n) + 1e-4)


def test_p_beta_scales_variances_or_stds():
    q = gaussian_mixture((0.1, 0.8)).scaled(0.025)
    np.testing.assert_allclose(np.square(q.sigmas), 0.025 * np.square((0.1, 0.8)), rtol=1e-6)
    q = gaussian_mixture((0.1, 0.8)).scaled(0.025, scale="std")
    np.testing.assert_allclose(q.sigmas, (0.0025, 0.02), rtol=1e-6)


@pytest.mark.parametrize("sigmas", [(), (0.0,), (-1.0, 1.0), (float("nan"),)])
def test_bad_sigmas(sigmas):
    with pytest.raises(ValueError, match="sigmas"):
        gaussian_mixture(sigmas)


def test_bad_beta():
    with pytest.raises(ValueError, match="beta"):
        gaussian_mixture((0.1,)).scaled(-0.1)
    with pytest.raises(ValueError, match="scale must be one of"):
        gaussian_mixture((0.1,)).scaled(0.1, scale="var")
