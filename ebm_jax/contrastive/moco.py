"""MoCo's state updates (He et al., "Momentum Contrast for Unsupervised Visual
Representation Learning", 2020): the queue as a (K, D) ring buffer with an int pointer
(sec. 3.2, "Dictionary as a queue"), and the key encoder as an exponential moving
average of the query encoder (sec. 3.2, eq. 2: theta_k <- m theta_k + (1 - m) theta_q).

Order of one MoCo step (the paper's Algorithm 1): `ema_update` the key encoder first,
encode queries and keys, `infonce_loss` (eq. 1) against the current queue, then
`enqueue` the new keys (after they were used) and advance the pointer.

The model (`ebm_jax.models.contrastive.MoCo`) holds the encoders and the queue; this
module only computes on them.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from ebm_jax import checks
from ebm_jax.contrastive.instdisc import normalise


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


def gather_replicated(x: jax.Array, axis_name: str) -> jax.Array:
    """Inside shard_map: the devices' blocks concatenated in device order, (n * b, ...),
    as a value that shard_map knows is replicated (a psum of zero-padded blocks;
    `lax.all_gather`'s result is not inferred replicated, so state built from it could
    not leave shard_map with `out_specs=P()`)."""
    n = jax.lax.axis_size(axis_name)
    b = x.shape[0]
    start = jax.lax.axis_index(axis_name) * b
    full = jnp.zeros((n * b,) + x.shape[1:], x.dtype)
    full = jax.lax.dynamic_update_slice_in_dim(full, x, start, axis=0)
    return jax.lax.psum(full, axis_name)


SHUFFLES = ("batch", "devices", "none")


def make_moco_loss(*, momentum: float, temperature: float, augment: Callable,
                   image_size: int, shuffle: str = "batch",
                   axis_name: str | None = None) -> Callable:
    """`loss_fn(model: MoCo, images, key) -> (loss, metrics)` for `ebm_jax.train`, one
    MoCo step in the order of the paper's Algorithm 1 (model: a module with `query`,
    `key_encoder`, `queue` and `pointer`, `ebm_jax.models.contrastive.MoCo`):

    1. key encoder <- m * key + (1 - m) * query (parameters only);
    2. two augmented views per image, queries from the query encoder, keys from the key
       encoder with shuffled batch norm, no gradient through the keys;
    3. InfoNCE on [q.k+, q.queue] / T (label 0);
    4. the keys enter the queue after use and the pointer advances.

    shuffle: "batch" permutes the batch before the key encoder and restores the order
    after (for `SplitBatchNorm` encoders on one device); "devices" shuffles across
    devices (train step with `per_device=True, fold_device_key=False`: the permutation
    key is shared, the augmentation keys are folded with the device index here; the
    global keys are gathered before they are enqueued) over the mesh axis `axis_name` (the data
    axis of the train step); "none" is the no-shuffle ablation.
    """
    if not 0.0 <= float(momentum) <= 1.0:
        raise ValueError(f"momentum must be in [0, 1], got {momentum}")
    checks.positive("temperature", temperature)
    if shuffle not in SHUFFLES:
        raise ValueError(f"shuffle must be one of {SHUFFLES}, got {shuffle!r}")
    if shuffle == "devices" and not axis_name:
        raise ValueError('shuffle="devices" needs axis_name, the data axis of the mesh')
    from ebm_jax.contrastive.infonce import infonce_logits
    from ebm_jax.contrastive.shuffle_bn import (
        shuffle_across_devices,
        shuffled_forward,
        unshuffle_across_devices,
    )
    from ebm_jax.ops.augment import augment_batch

    def loss_fn(model, images, key):
        k_q, k_k, k_perm = jax.random.split(key, 3)
        if shuffle == "devices":
            # the step key is shared so that every device draws the same permutation;
            # the views are the device's own (as the reference's per-GPU augmentation)
            device = jax.lax.axis_index(axis_name)
            k_q, k_k = (jax.random.fold_in(k, device) for k in (k_q, k_k))
        query_params = jax.lax.stop_gradient(nnx.state(model.query, nnx.Param))
        key_params = nnx.state(model.key_encoder, nnx.Param)
        nnx.update(model.key_encoder, ema_update(key_params, query_params, momentum))

        x_q = augment_batch(augment, k_q, images, size=image_size)
        x_k = augment_batch(augment, k_k, images, size=image_size)
        q = model.query(x_q)
        if shuffle == "devices":
            shuffled, perm = shuffle_across_devices(x_k, k_perm, axis_name)
            k = unshuffle_across_devices(model.key_encoder(shuffled), perm, axis_name)
        elif shuffle == "batch":
            k = shuffled_forward(model.key_encoder, x_k, k_perm)
        else:
            k = model.key_encoder(x_k)
        k = jax.lax.stop_gradient(k)

        queue = model.queue[...]
        logits = infonce_logits(q, k, queue, temperature)
        loss = jnp.mean(jax.nn.logsumexp(logits, axis=1) - logits[:, 0])
        accuracy = jnp.mean(jnp.argmax(logits, axis=1) == 0)
        new_keys = gather_replicated(k, axis_name) if shuffle == "devices" else k
        model.queue[...], model.pointer[...] = enqueue(queue, model.pointer[...], new_keys)
        return loss, {"accuracy": accuracy}

    return loss_fn
