"""Shuffling batch norm (MoCo, He et al. 2020, sec. 3.3): the key encoder must not see the batch
statistics of the very samples its queries come from, or the model cheats through them.

Two forms:

- across devices, inside `jax.shard_map` (`make_train_step(..., per_device=True)`):
  `shuffle_across_devices` gathers the global batch, permutes it with a key shared by
  all devices and hands each device its block; the key encoder then runs with each
  device's own batch statistics; `unshuffle_across_devices` restores the order.
  (Under a plain sharded `jit` BatchNorm would see the global batch, hence shard_map.)
- on one device: `SplitBatchNorm` (in `ebm_jax.models.norm`) normalises S groups of
  the batch with separate statistics (the single-device CIFAR recipe, S = 8);
  `shuffled_forward` runs the key encoder on a permuted batch and restores the order.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["shuffle_across_devices", "shuffled_forward", "unshuffle_across_devices"]


def shuffled_forward(fn, x: jax.Array, key: jax.Array) -> jax.Array:
    """fn(x) computed on the batch in a random order (drawn from `key`), returned in the
    original order: with batch norm in groups of the batch, each row is normalised among
    other rows than in an unshuffled pass."""
    perm = jax.random.permutation(key, x.shape[0])
    return fn(x[perm])[jnp.argsort(perm)]


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
