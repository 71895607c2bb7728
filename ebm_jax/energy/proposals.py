"""Gaussian-mixture proposals of Gustafsson et al. 2020: p_N(y | y_i) (eqs. 4, 11) and
p_beta (eq. 15).

Both are equal-weight mixtures of isotropic Gaussians over a K-dimensional target:

    p_N(y | c)  = 1/C sum_k N(y; c, sigma_k^2 I)
    p_beta(y)   = 1/C sum_k N(y; 0, beta sigma_k^2 I)      (eq. 15 as printed)

`GaussianMixture.scaled(beta, scale=...)` builds p_beta with either convention: eq. 15
scales the variances by beta; the authors' published 1D code scales the standard
deviations by beta (variances beta^2 sigma_k^2), and only that convention reproduces
the paper's NCE+ figures in Table 1 (see `ebm_jax.energy.losses.nce_plus_loss`).

A `GaussianMixture` is a small immutable pytree-free value (sigmas are static floats),
so it can be closed over inside jitted code.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp

from ebm_jax import checks


@dataclasses.dataclass(frozen=True)
class GaussianMixture:
    """Equal-weight mixture of isotropic Gaussians centred at a given point.

    Attributes:
      sigmas: the standard deviations sigma_k of the components (all > 0).
    """

    sigmas: tuple[float, ...]

    def __post_init__(self):
        sigmas = tuple(float(s) for s in self.sigmas)
        if not sigmas:
            raise ValueError("sigmas: need at least one standard deviation, got none")
        for s in sigmas:
            checks.positive("sigmas", s)
        object.__setattr__(self, "sigmas", sigmas)

    @property
    def num_components(self) -> int:
        return len(self.sigmas)

    def sample(self, key: jax.Array, center: jax.Array, num: int) -> jax.Array:
        """Draws `num` samples around `center` (shape (K,)); returns (num, K).

        The component of each sample is uniform over the mixture, then the sample is
        `center + sigma_k * eps`. Key use: split into (component key, noise key).
        """
        center = jnp.asarray(center)
        k_comp, k_eps = jax.random.split(key)
        comp = jax.random.randint(k_comp, (num,), 0, self.num_components)
        # sigma_comp as a chain of selects over the (few, static) components rather than
        # a gather: the same values, fused with the noise into one elementwise loop
        scale = jnp.full(comp.shape, self.sigmas[0], center.dtype)
        for k, s in enumerate(self.sigmas[1:], start=1):
            scale = jnp.where(comp == k, jnp.asarray(s, center.dtype), scale)
        eps = jax.random.normal(k_eps, (num,) + center.shape, center.dtype)
        return center + scale[:, None] * eps

    def log_prob(self, y: jax.Array, center: jax.Array) -> jax.Array:
        """log p(y | center) for y of shape (..., K) and center of shape (K,).

        The log-sum-exp over the components is written out over the (few, static)
        components, max-shifted as `jax.scipy.special.logsumexp` is, so that it stays
        one elementwise loop over the samples: a reduction over a trailing axis of
        size C compiles to a slow loop on XLA's CPU backend (6x slower at C = 2).
        """
        y = jnp.asarray(y)
        dim = y.shape[-1]
        sq = jnp.sum(jnp.square(y - center), axis=-1)  # (...,)
        const = 0.5 * dim * math.log(2 * math.pi)
        comps = [-0.5 * sq / (s * s) - (dim * math.log(s) + const) for s in self.sigmas]
        top = comps[0]
        for c in comps[1:]:
            top = jnp.maximum(top, c)
        top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0.0))
        total = sum(jnp.exp(c - top) for c in comps)
        return jnp.log(total) + top - math.log(self.num_components)

    def scaled(self, beta: float, scale: str = "variance") -> "GaussianMixture":
        """The mixture with every component narrowed by beta > 0 (p_beta of eq. 15).

        scale="variance": variances beta * sigma_k^2 (eq. 15 read literally);
        scale="std": standard deviations beta * sigma_k.
        """
        checks.positive("beta", beta)
        if scale not in BETA_SCALES:
            raise ValueError(f"scale must be one of {BETA_SCALES}, got {scale!r}")
        factor = math.sqrt(beta) if scale == "variance" else float(beta)
        return GaussianMixture(tuple(factor * s for s in self.sigmas))


BETA_SCALES = ("std", "variance")


def gaussian_mixture(sigmas: Sequence[float]) -> GaussianMixture:
    """p_N of eqs. 4 and 11: `gaussian_mixture((0.1, 0.8))`."""
    return GaussianMixture(tuple(sigmas))


def isotropic_gaussian(sigma: float) -> GaussianMixture:
    """N(y; c, sigma^2 I) as a one-component mixture (KLD-IS label density, DSM noise)."""
    return GaussianMixture((sigma,))
