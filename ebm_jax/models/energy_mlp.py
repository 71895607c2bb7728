"""The reference network f(x, y) of the 1D experiments (Gustafsson et al. 2020, sec. 4.1).

    x -> Linear(1, 10) -> ReLU -> Linear(10, 10) -> ReLU            (x branch)
    y -> Linear(1, 10) -> tanh                                       (y branch)
    concat (20) -> Linear(20, 10) -> tanh
    two residual blocks h = tanh(Linear(10, 10)(h)) + h
    Linear(10, 1)                                                    591 parameters

Weights and biases are initialised as PyTorch's `nn.Linear` does (uniform in
+-1/sqrt(fan_in)), the initialisation of the published experiments.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx


def _torch_uniform(fan_in: int):
    bound = 1.0 / math.sqrt(fan_in)

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def _linear(d_in: int, d_out: int, rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(
        d_in, d_out, kernel_init=_torch_uniform(d_in), bias_init=_torch_uniform(d_in), rngs=rngs
    )


class ToyEnergyMLP(nnx.Module):
    """f(x, y) -> scalar for x (..., x_dim), y (..., y_dim); returns shape (...)."""

    def __init__(self, *, rngs: nnx.Rngs, x_dim: int = 1, y_dim: int = 1, hidden: int = 10):
        self.x1 = _linear(x_dim, hidden, rngs)
        self.x2 = _linear(hidden, hidden, rngs)
        self.y1 = _linear(y_dim, hidden, rngs)
        self.joint = _linear(2 * hidden, hidden, rngs)
        self.res1 = _linear(hidden, hidden, rngs)
        self.res2 = _linear(hidden, hidden, rngs)
        self.out = _linear(hidden, 1, rngs)

    def __call__(self, x: jax.Array, y: jax.Array) -> jax.Array:
        hx = jax.nn.relu(self.x2(jax.nn.relu(self.x1(x))))
        hy = jnp.tanh(self.y1(y))
        # joint(concat[hx, hy]) written as hx @ W[:H] + hy @ W[H:] + b: the same function,
        # but the x half is computed once per example when many y share one x (vmap).
        w = self.joint.kernel[...]
        hidden = hx.shape[-1]
        h = jnp.tanh(hx @ w[:hidden] + hy @ w[hidden:] + self.joint.bias[...])
        h = jnp.tanh(self.res1(h)) + h
        h = jnp.tanh(self.res2(h)) + h
        return self.out(h)[..., 0]


def count_parameters(module: nnx.Module) -> int:
    return sum(p.size for p in jax.tree.leaves(nnx.state(module, nnx.Param)))
