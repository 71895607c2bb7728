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


def test_log_prob_equals_logsumexp_over_components():
    """The written-out log-sum-exp equals jax.scipy's over a component axis, also far
    from the centre, where all but one component underflow."""
    from jax.scipy.special import logsumexp

    sigmas = (0.05, 0.3, 2.0)
    q = gaussian_mixture(sigmas)
    c = jnp.array([0.2, -0.1])
    y = c + jnp.concatenate([
        jax.random.normal(jax.random.key(0), (500, 2)),
        jnp.array([[0.0, 0.0], [40.0, -3.0], [1e3, 1e3]]),
    ])
    sq = jnp.sum(jnp.square(y - c), -1)[:, None]
    sig = jnp.asarray(sigmas)
    comp = -0.5 * sq / sig**2 - 2 * jnp.log(sig) - jnp.log(2 * jnp.pi)
    ref = logsumexp(comp, axis=-1) - jnp.log(3.0)
    np.testing.assert_allclose(q.log_prob(y, c), ref, rtol=2e-6, atol=2e-6)
    g = jax.grad(lambda yy: jnp.sum(q.log_prob(yy, c)))(y)
    g_ref = jax.grad(lambda yy: jnp.sum(
        logsumexp(-0.5 * jnp.sum(jnp.square(yy - c), -1)[:, None] / sig**2
                  - 2 * jnp.log(sig), axis=-1)))(y)
    np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-6)


def test_sample_key_use_is_documented():
    """sample: split(key) into (component key, noise key); y = c + sigma_comp * eps."""
    sigmas = (0.1, 0.8, 3.0)
    q = gaussian_mixture(sigmas)
    key, c = jax.random.key(7), jnp.array([0.5, -1.0])
    k_comp, k_eps = jax.random.split(key)
    comp = jax.random.randint(k_comp, (64,), 0, 3)
    eps = jax.random.normal(k_eps, (64, 2))
    expected = c + jnp.asarray(sigmas)[comp][:, None] * eps
    np.testing.assert_array_equal(q.sample(key, c, 64), expected)
