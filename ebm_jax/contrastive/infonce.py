"""InfoNCE (MoCo's loss, He et al. 2020, eq. 1): cross-entropy over
[q.k+, q.negatives] / T with the positive at index 0, computed in log space."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp

from ebm_jax import checks


def infonce_logits(q: jax.Array, k_pos: jax.Array, negatives: jax.Array,
                   temperature: float) -> jax.Array:
    """(B, 1 + K) logits: column 0 is q_i . k_i, columns 1.. are q_i . n_j, all / T.

    q, k_pos: (B, D); negatives: (K, D) shared by the batch (MoCo's queue).
    """
    t = checks.positive("temperature", temperature)
    q, k_pos, negatives = jnp.asarray(q), jnp.asarray(k_pos), jnp.asarray(negatives)
    if q.ndim != 2 or k_pos.shape != q.shape or negatives.ndim != 2 or (
        negatives.shape[1] != q.shape[1]
    ):
        raise ValueError(
            f"q and k_pos must be (B, D) and negatives (K, D), got {q.shape}, "
            f"{k_pos.shape}, {negatives.shape}"
        )
    pos = jnp.sum(q * k_pos, axis=-1, keepdims=True)
    neg = q @ negatives.T
    return jnp.concatenate([pos, neg], axis=1) / t


def infonce_loss(q: jax.Array, k_pos: jax.Array, negatives: jax.Array,
                 temperature: float) -> jax.Array:
    """mean_i -log softmax(logits_i)[0] (label 0 for every query)."""
    logits = infonce_logits(q, k_pos, negatives, temperature)
    return jnp.mean(logsumexp(logits, axis=1) - logits[:, 0])
