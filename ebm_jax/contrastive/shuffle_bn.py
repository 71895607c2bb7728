"""Shuffling batch norm (MoCo, seed 002): the key encoder must not see the batch
statistics of the very samples its queries come from, or the model cheats through them.

Two forms:

- across devices, inside `jax.shard_map` (`make_train_step(..., per_device=True)`):
  `shuffle_across_devices` gathers the global batch, permutes it with a key shared by
  all devices and hands each device its block; the key encoder then runs with each
  device's own batch statistics; `unshuffle_across_devices` restores the order.
  (Under a plain sharded `jit` BatchNorm would see the global batch, hence shard_map.)
- on one device: `SplitBatchNorm` normalises S groups of the batch with separate
  statistics (the single-device CIFAR recipe, S = 8); shuffle with `jax.random.permutation`
  before the key encoder and invert after.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from ebm_jax.energy import checks


def shuffle_across_devices(x: jax.Array, key: jax.Array, axis_name: str):
    """(this device's block of the permuted global batch, the permutation). Call inside
    shard_map with the same `key` on every device; x is the local block (b, ...)."""
    full = jax.lax.all_gather(x, axis_name, tiled=True)  # (n_devices * b, ...)
    perm = jax.random.permutation(key, full.shape[0])
    b = x.shape[0]
    start = jax.lax.axis_index(axis_name) * b
    return jax.lax.dynamic_slice_in_dim(full[perm], start, b, axis=0), perm


def unshuffle_across_devices(y: jax.Array, perm: jax.Array, axis_name: str) -> jax.Array:
    """Inverse of `shuffle_across_devices` for outputs y computed on the shuffled block."""
    full = jax.lax.all_gather(y, axis_name, tiled=True)
    restored = full[jnp.argsort(perm)]
    b = y.shape[0]
    start = jax.lax.axis_index(axis_name) * b
    return jax.lax.dynamic_slice_in_dim(restored, start, b, axis=0)


class SplitBatchNorm(nnx.Module):
    """BatchNorm over the last axis whose training-mode statistics are computed
    separately on `num_splits` equal groups of the batch; the running averages take
    the mean of the groups' statistics. Inference mode (`use_running_average=True`)
    is plain BatchNorm."""

    def __init__(self, num_features: int, num_splits: int, *, momentum: float = 0.9,
                 epsilon: float = 1e-5, use_running_average: bool = False,
                 rngs: nnx.Rngs | None = None):
        self.num_splits = checks.int_at_least("num_splits", num_splits, 1)
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
