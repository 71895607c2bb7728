"""Shuffling batch norm (MoCo, He et al. 2020, sec. 3.3): the key encoder must not see the batch
statistics of the very samples its queries come from, or the model cheats through them.

Two forms:

- across devices, inside `jax.shard_map` (`make_train_step(..., per_device=True)`):
  `shuffle_across_devices` gathers the global batch, permutes it with a key shared by
  all devices and hands each device its block; the key encoder then runs with each
  device's own batch statistics; `unshuffle_across_devices` restores the order.
  (Under a plain sharded `jit` BatchNorm would see the global batch, hence shard_map.)
- on one device: `SplitBatchNorm` (in `ebm_jax.models.norm`) normalises S groups of
  the batch with separate statistics (the single-device CIFAR recipe, S = 8); shuffle
  with `jax.random.permutation` before the key encoder and invert after.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["shuffle_across_devices", "unshuffle_across_devices"]


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
