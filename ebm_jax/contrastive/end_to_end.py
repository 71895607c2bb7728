"""The end-to-end mechanism of MoCo's ablation (He et al. 2020, sec. 3.2, Fig. 2a and
Fig. 3): one encoder for queries and keys, gradients through both, and the dictionary
is the current batch's keys only (its size is tied to the batch size).

    logits[i, j] = q_i . k_j / T,    loss = cross-entropy with target j = i
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp

from ebm_jax import checks


def end_to_end_loss(q: jax.Array, k: jax.Array, temperature: float) -> jax.Array:
    """InfoNCE with the batch as dictionary: the positive of q_i is k_i, the negatives
    are the other B - 1 keys."""
    t = checks.positive("temperature", temperature)
    logits = q @ k.T / t
    return jnp.mean(logsumexp(logits, axis=1) - jnp.diagonal(logits))


def make_end_to_end_loss(*, temperature: float, augment: Callable,
                         image_size: int, shuffle: bool = False) -> Callable:
    """`loss_fn(model, images, key) -> (loss, metrics)` for `ebm_jax.train` (model: a
    module with one `encoder`, `ebm_jax.models.contrastive.Siamese`).

    shuffle: the keys pass the encoder in a random order of the batch, restored after,
    as MoCo's keys do (sec. 3.3, shuffling BN): with an encoder whose batch norm works on
    groups of the batch, a query and its key are then normalised in different groups, so
    the mechanisms of the ablation (Fig. 3) share one normalisation."""
    checks.positive("temperature", temperature)
    from ebm_jax.contrastive.shuffle_bn import shuffled_forward
    from ebm_jax.ops.augment import augment_batch

    def loss_fn(model, images, key):
        k_q, k_k, k_perm = jax.random.split(key, 3)
        q = model.encoder(augment_batch(augment, k_q, images, size=image_size))
        x_k = augment_batch(augment, k_k, images, size=image_size)
        k = shuffled_forward(model.encoder, x_k, k_perm) if shuffle else model.encoder(x_k)
        loss = end_to_end_loss(q, k, temperature)
        accuracy = jnp.mean(jnp.argmax(q @ k.T, axis=1) == jnp.arange(q.shape[0]))
        return loss, {"accuracy": accuracy}

    return loss_fn
