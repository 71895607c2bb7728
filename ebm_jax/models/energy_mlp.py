"""The reference network f(x, y) of the 1D experiments (Gustafsson et al. 2020, sec. 4.1).

    x -> Linear(1, 10) -> ReLU -> Linear(10, 10) -> ReLU            (x branch)
    y -> Linear(1, 10) -> tanh                                       (y branch)
    concat (20) -> Linear(20, 10) -> tanh
    two residual blocks h = tanh(Linear(10, 10)(h)) + h
    Linear(10, 1)                                                    591 parameters

Weights and biases are initialised as PyTorch's `nn.Linear` does (uniform in
+-1/sqrt(fan_in)), the initialisation of the published experiments.

`ToyEnergyMLP.many(x, ys)` evaluates the same network for one x and many targets (the M
samples of a loss) in another form: each hidden unit is an array over the targets and
each layer is written out as multiply-adds of such arrays, so XLA fuses a whole layer,
its tanh included, into one elementwise loop over the targets. With 10-wide layers, the
vmapped form spends its time in tiny matrix products and the transposes around them:
on XLA's CPU backend the written-out form is about 2x faster forward and 2.5x faster
for the gradient in y (the Langevin and DSM scores). It is used up to
`MANY_MAX_HIDDEN` hidden units; wider networks call `__call__` on all rows at once.
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


MANY_MAX_HIDDEN = 16  # wider: `many` calls __call__ (written-out layers grow as width^2)


def _units(kernel: jax.Array, bias: jax.Array, inputs: list[jax.Array],
           act=None) -> list[jax.Array]:
    """act(bias_o + sum_i kernel[i, o] inputs[i]) for every output unit o: a dense layer
    on a list of same-shaped arrays, one per input unit, written out as multiply-adds."""
    outputs = []
    for o in range(kernel.shape[1]):
        z = kernel[0, o] * inputs[0]
        for i in range(1, len(inputs)):
            z = z + kernel[i, o] * inputs[i]
        z = z + bias[o]
        outputs.append(z if act is None else act(z))
    return outputs


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

    def chain_weights(self) -> dict:
        """The arrays the fused Langevin chain takes (`chain_weights`)."""
        return chain_weights(self)

    def many(self, x: jax.Array, ys: jax.Array) -> jax.Array:
        """f(x, y) for one x (x_dim,) and every row y of ys (..., y_dim) -> (...): the
        same function as `__call__` vmapped over the rows of ys (equal to float32
        rounding), written unit by unit (see the module docstring)."""
        hidden = self.res1.kernel.shape[0]
        if hidden > MANY_MAX_HIDDEN or jnp.ndim(x) != 1:
            return self(x, ys)  # the layers broadcast x over the rows of ys
        if ys.shape[-1] != self.y1.kernel.shape[0]:
            raise ValueError(f"ys must have shape (..., {self.y1.kernel.shape[0]}), "
                             f"got {ys.shape}")
        hx = jax.nn.relu(self.x2(jax.nn.relu(self.x1(x))))  # (hidden,): once per x
        w = self.joint.kernel[...]
        a = hx @ w[:hidden] + self.joint.bias[...]
        columns = [ys[..., k] for k in range(ys.shape[-1])]
        u = _units(self.y1.kernel[...], self.y1.bias[...], columns, jnp.tanh)
        h = _units(w[hidden:], a, u, jnp.tanh)
        for layer in (self.res1, self.res2):
            t = _units(layer.kernel[...], layer.bias[...], h, jnp.tanh)
            h = [ti + hi for ti, hi in zip(t, h)]
        return _units(self.out.kernel[...], self.out.bias[...], h)[0]


def chain_weights(model: ToyEnergyMLP) -> dict:
    """The network's arrays by the names of `ebm_jax.energy.langevin_fused.WEIGHTS`
    (kernels (in, out), biases (out,)): what the fused Langevin chain takes."""
    layers = {"x1": model.x1, "x2": model.x2, "y1": model.y1, "joint": model.joint,
              "res1": model.res1, "res2": model.res2, "out": model.out}
    out = {}
    for name, layer in layers.items():
        out[f"{name}_w"] = layer.kernel[...]
        out[f"{name}_b"] = layer.bias[...]
    return out


def count_parameters(module: nnx.Module) -> int:
    return sum(p.size for p in jax.tree.leaves(nnx.state(module, nnx.Param)))
