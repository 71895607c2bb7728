"""MoCo's state updates (seed 002): the queue as a (K, D) ring buffer with an int
pointer, and the key encoder as an exponential moving average of the query encoder.

Order of one MoCo step (REFERENCE.md sec. 3): `ema_update` the key encoder first,
encode queries and keys, `infonce_loss` against the current queue, then `enqueue` the
new keys (after they were used) and advance the pointer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ebm_jax.contrastive.instdisc import normalise
from ebm_jax.energy import checks


def init_queue(key: jax.Array, size: int, dim: int) -> tuple[jax.Array, jax.Array]:
    """(queue, pointer): K normalised Gaussian vectors and pointer 0."""
    k = checks.int_at_least("queue size K", size, 1)
    d = checks.int_at_least("dim", dim, 1)
    return normalise(jax.random.normal(key, (k, d))), jnp.zeros((), jnp.int32)


def check_queue_size(size: int, batch_size: int) -> None:
    """K must be at least the batch size and a multiple of it (whole batches wrap)."""
    if batch_size > size:
        raise ValueError(f"queue size K must be >= the batch size {batch_size}, got {size}")
    if size % batch_size:
        raise ValueError(
            f"queue size K must be divisible by the batch size {batch_size}, got {size}"
        )


def enqueue(queue: jax.Array, pointer: jax.Array, keys: jax.Array):
    """Writes the batch of keys at the pointer; returns (queue, (pointer + B) mod K)."""
    size, batch = queue.shape[0], keys.shape[0]
    check_queue_size(size, batch)
    if keys.shape[1:] != queue.shape[1:]:
        raise ValueError(f"keys must be (B, {queue.shape[1]}), got {keys.shape}")
    keys = jax.lax.stop_gradient(keys).astype(queue.dtype)
    queue = jax.lax.dynamic_update_slice(queue, keys, (pointer, jnp.zeros_like(pointer)))
    return queue, (pointer + batch) % size


def ema_update(key_params, query_params, momentum: float):
    """key <- m * key + (1 - m) * query, leaf by leaf (MoCo's momentum encoder)."""
    m = float(momentum)
    if not 0.0 <= m <= 1.0:
        raise ValueError(f"momentum must be in [0, 1], got {momentum}")
    return jax.tree.map(lambda k, q: m * k + (1.0 - m) * q, key_params, query_params)
