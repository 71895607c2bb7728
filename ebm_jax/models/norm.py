"""Normalisation layers beyond Flax's own."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


class SplitBatchNorm(nnx.Module):
    """BatchNorm over the last axis whose training-mode statistics are computed
    separately on `num_splits` equal groups of the batch; the running averages take
    the mean of the groups' statistics. Inference mode (`use_running_average=True`)
    is plain BatchNorm."""

    def __init__(self, num_features: int, num_splits: int, *, momentum: float = 0.9,
                 epsilon: float = 1e-5, use_running_average: bool = False,
                 rngs: nnx.Rngs | None = None):
        if int(num_splits) != num_splits or num_splits < 1:
            raise ValueError(f"num_splits must be an integer >= 1, got {num_splits}")
        self.num_splits = int(num_splits)
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"momentum must be in [0, 1], got {momentum}")
        self.momentum, self.epsilon = float(momentum), float(epsilon)
        self.use_running_average = use_running_average
        self.scale = nnx.Param(jnp.ones((num_features,)))
        self.bias = nnx.Param(jnp.zeros((num_features,)))
        self.mean = nnx.BatchStat(jnp.zeros((num_features,)))
        self.var = nnx.BatchStat(jnp.ones((num_features,)))

    def __call__(self, x: jax.Array) -> jax.Array:
        if self.use_running_average:
            y = (x - self.mean[...]) * jax.lax.rsqrt(self.var[...] + self.epsilon)
            return y * self.scale[...] + self.bias[...]
        b = x.shape[0]
        if b % self.num_splits:
            raise ValueError(f"batch size {b} must be divisible by num_splits "
                             f"{self.num_splits}")
        groups = x.reshape((self.num_splits, b // self.num_splits) + x.shape[1:])
        axes = tuple(range(1, groups.ndim - 1))
        mean = jnp.mean(groups, axis=axes, keepdims=True)
        var = jnp.mean(jnp.square(groups - mean), axis=axes, keepdims=True)
        y = ((groups - mean) * jax.lax.rsqrt(var + self.epsilon)).reshape(x.shape)
        m = self.momentum
        group_mean = jnp.mean(mean.reshape(self.num_splits, -1), axis=0)
        group_var = jnp.mean(var.reshape(self.num_splits, -1), axis=0)
        self.mean[...] = m * self.mean[...] + (1 - m) * jax.lax.stop_gradient(group_mean)
        self.var[...] = m * self.var[...] + (1 - m) * jax.lax.stop_gradient(group_var)
        return y * self.scale[...] + self.bias[...]
