import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ebm_jax.energy import exact_hessian_trace, grad_and_hessian_trace, hutchinson_hessian_trace
from ebm_jax.models import ToyEnergyMLP


@pytest.mark.parametrize("k", [1, 2, 4])
def test_exact_trace_of_quadratic_equals_analytic(k):
    rng = np.random.default_rng(k)
    a = rng.normal(size=(k, k)).astype(np.float32)
    sym = a + a.T  # Hessian of 0.5 y^T A y + b.y is (A + A^T) / 2 ... here use y^T S y / 2
    b = rng.normal(size=k).astype(np.float32)

    def f(y):
        return 0.5 * y @ sym @ y + b @ y + 3.0

    y = jnp.asarray(rng.normal(size=k), jnp.float32)
    grad, tr = grad_and_hessian_trace(f, y)
    np.testing.assert_allclose(tr, np.trace(sym), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grad, sym @ np.asarray(y) + b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_exact_trace_of_mlp_equals_full_hessian_trace(k):
    model = ToyEnergyMLP(rngs=nnx.Rngs(k), x_dim=3, y_dim=k)
    x = jnp.array([0.3, -1.0, 0.5])
    y = jnp.linspace(-0.7, 0.9, k)
    f = lambda yy: model(x, yy)
    ref = jnp.trace(jax.hessian(f)(y))
    chex.assert_trees_all_close(exact_hessian_trace(f, y), ref, rtol=1e-5, atol=1e-6)


def test_hutchinson_is_unbiased_but_not_exact():
    sym = jnp.diag(jnp.array([1.0, -2.0, 3.0, 0.5]))
    f = lambda y: 0.5 * y @ sym @ y
    y = jnp.ones(4)
    est = hutchinson_hessian_trace(f, y, jax.random.key(0), num_probes=4000)
    np.testing.assert_allclose(est, 2.5, atol=1e-4)  # Rademacher probes on a diagonal H
    with pytest.raises(ValueError, match="num_probes"):
        hutchinson_hessian_trace(f, y, jax.random.key(0), num_probes=0)


def test_rejects_batched_y():
    with pytest.raises(ValueError, match=r"shape \(K,\)"):
        exact_hessian_trace(lambda y: jnp.sum(y**2), jnp.ones((2, 3)))
