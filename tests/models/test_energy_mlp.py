"""`ToyEnergyMLP.many` (the written-out form over many targets) is the same function as
the network vmapped over the targets."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ebm_jax.models import ToyEnergyMLP
from ebm_jax.models.energy_mlp import MANY_MAX_HIDDEN
from tests.tolerances import assert_within, toy_mlp_atol


@pytest.mark.heavy
@pytest.mark.parametrize("x_dim,y_dim,hidden", [(1, 1, 10), (2, 3, 5),
                                                (1, 2, MANY_MAX_HIDDEN + 4)])
def test_many_equals_vmapped_network(x_dim, y_dim, hidden):
    model = ToyEnergyMLP(rngs=nnx.Rngs(3), x_dim=x_dim, y_dim=y_dim, hidden=hidden)
    x = jax.random.normal(jax.random.key(0), (x_dim,))
    ys = 2.0 * jax.random.normal(jax.random.key(1), (257, y_dim))
    ref = jax.vmap(lambda y: model(x, y))(ys)
    got = model.many(x, ys)
    assert got.shape == (257,)
    # two float32 orders of the same network: the running bound of tests/tolerances.py
    assert_within(got, ref, toy_mlp_atol(model, x, ys))
    # gradients in y (the Langevin and DSM scores) and in the parameters
    g_ref = jax.vmap(jax.grad(lambda y: model(x, y)))(ys)
    g = jax.grad(lambda yy: jnp.sum(model.many(x, yy)))(ys)
    # Gradients are the backward pass through the network, for which tests/tolerances.py
    # carries no bound; these tolerances are relative to gradients of O(1): the measured
    # gaps (default AVX-512, AVX2, SSE4_2 kernels) are at most 1/190 of them here
    # (6e-8) and 1/85 for the parameters' (4.6e-5, sums over the 257 targets).
    np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-5)
    graphdef, params = nnx.split(model, nnx.Param)

    def total(p, fn):
        m = nnx.merge(graphdef, p)
        return jnp.sum(jnp.tanh(fn(m, x, ys)))

    gp_ref = jax.grad(total)(params, lambda m, x, ys: jax.vmap(lambda y: m(x, y))(ys))
    gp = jax.grad(total)(params, lambda m, x, ys: m.many(x, ys))
    for a, b in zip(jax.tree.leaves(gp), jax.tree.leaves(gp_ref)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_many_keeps_leading_target_axes_and_batched_x():
    model = ToyEnergyMLP(rngs=nnx.Rngs(0))
    ys = jax.random.normal(jax.random.key(1), (3, 5, 1))
    x = jnp.array([0.3])
    ref = jax.vmap(jax.vmap(lambda y: model(x, y)))(ys)
    assert_within(model.many(x, ys), ref, toy_mlp_atol(model, x, ys))  # float32 orders
    xs = jnp.array([[0.3], [-1.0], [2.0]])  # one x per leading row: the layers broadcast
    ref = jax.vmap(lambda xx, yy: jax.vmap(lambda y: model(xx, y))(yy))(xs, ys)
    assert_within(jax.vmap(model.many)(xs, ys), ref, toy_mlp_atol(model, xs[:, None], ys))


def test_many_rejects_wrong_target_width():
    model = ToyEnergyMLP(rngs=nnx.Rngs(0), y_dim=2)
    with pytest.raises(ValueError, match=r"ys must have shape \(\.\.\., 2\)"):
        model.many(jnp.zeros(1), jnp.zeros((4, 3)))
