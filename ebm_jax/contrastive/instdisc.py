"""Instance discrimination (Wu et al., "Unsupervised Feature Learning via
Non-Parametric Instance Discrimination", 2018): a memory bank of n normalised features,
one per training image (sec. 3.1), and the NCE loss with a uniform noise distribution
(sec. 3.2, eqs. 3-7).

    P(i | f) = exp(v_i . f / T) / Z,        P_n(i) = 1 / n
    h(i, f)  = P(i | f) / (P(i | f) + m P_n(i))
    loss     = -[log h(i, f) + sum_{j noise} log(1 - h(j, f))]   (mean over the batch)

Z is estimated once, from the first batch, as mean(exp(v . f / T)) * n over its
positive and noise entries, and then kept fixed (`resolve_log_z` inside the step).
Everything is in log space: log h = -softplus(log(m P_n) - log P).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp

from ebm_jax import checks


def normalise(x: jax.Array, axis: int = -1, eps: float = 1e-12) -> jax.Array:
    return x / jnp.maximum(jnp.linalg.norm(x, axis=axis, keepdims=True), eps)


def init_memory_bank(key: jax.Array, num_items: int, dim: int) -> jax.Array:
    """(n, D) random unit vectors, the bank before any feature is written."""
    n = checks.int_at_least("num_items", num_items, 1)
    d = checks.int_at_least("dim", dim, 1)
    return normalise(jax.random.normal(key, (n, d)))


def update_memory_bank(bank: jax.Array, indices: jax.Array, features: jax.Array,
                       momentum: float = 0.5) -> jax.Array:
    """v_i <- normalise(momentum v_i + (1 - momentum) f_i) for the batch's indices."""
    if not 0.0 <= float(momentum) <= 1.0:
        raise ValueError(f"momentum must be in [0, 1], got {momentum}")
    mixed = momentum * bank[indices] + (1.0 - momentum) * jax.lax.stop_gradient(features)
    return bank.at[indices].set(normalise(mixed))


def _scores(features, bank, indices, noise_indices, temperature):
    """(B, 1 + m) scores v . f / T: column 0 the example's own entry, then its noise."""
    t = checks.positive("temperature", temperature)
    idx = jnp.concatenate([indices[:, None], noise_indices], axis=1)  # (B, 1 + m)
    v = jax.lax.stop_gradient(bank)[idx]  # (B, 1 + m, D)
    return jnp.einsum("bmd,bd->bm", v, features) / t


def estimate_log_z(features, bank, indices, noise_indices, temperature) -> jax.Array:
    """log Z = log(mean(exp(scores)) * n) over every score of the batch (no gradient)."""
    s = jax.lax.stop_gradient(_scores(features, bank, indices, noise_indices, temperature))
    return logsumexp(s) - math.log(s.size) + math.log(bank.shape[0])


def resolve_log_z(log_z: jax.Array, estimate: jax.Array) -> jax.Array:
    """The stored log Z once set (finite), else this batch's estimate: pass NaN at
    the first step and keep the returned value in the train state."""
    return jnp.where(jnp.isfinite(log_z), log_z, estimate)


def instdisc_nce_loss(features, bank, indices, noise_indices, temperature: float,
                      log_z) -> jax.Array:
    """The NCE loss above. features (B, D) normalised; bank (n, D); indices (B,) the
    examples' own entries; noise_indices (B, m) uniform over [0, n)."""
    features, bank = jnp.asarray(features), jnp.asarray(bank)
    n = bank.shape[0]
    m = noise_indices.shape[1]
    if m < 1:
        raise ValueError(f"noise_indices must hold m >= 1 noise entries, got {m}")
    log_p = _scores(features, bank, indices, noise_indices, temperature) - log_z
    log_mpn = math.log(m) - math.log(n)
    log_h_data = -jax.nn.softplus(log_mpn - log_p[:, 0])
    log_1mh_noise = -jax.nn.softplus(log_p[:, 1:] - log_mpn)
    return -jnp.mean(log_h_data + jnp.sum(log_1mh_noise, axis=1))


def instdisc_softmax_loss(features, bank, indices, temperature: float) -> jax.Array:
    """The full non-parametric softmax: -log softmax_j(v_j . f / T) at the own index."""
    t = checks.positive("temperature", temperature)
    logits = features @ jax.lax.stop_gradient(bank).T / t  # (B, n)
    own = jnp.take_along_axis(logits, indices[:, None], axis=1)[:, 0]
    return jnp.mean(logsumexp(logits, axis=1) - own)


LOSS_KINDS = ("nce", "softmax", "infonce")


def make_instdisc_loss(*, temperature: float = 0.07, num_noise: int = 4096,
                       augment=None, image_size: int | None = None, kind: str = "nce",
                       bank_momentum: float = 0.5):
    """`loss_fn(model, (images, indices), key) -> (loss, metrics)` (model: a module with
    `encoder`, `bank` and `log_z`, `ebm_jax.models.contrastive.InstDisc`): encode one
    augmented view, the NCE loss against the bank with `num_noise` uniform noise
    indices per example (Z fixed after the first batch), the full softmax, or
    ("infonce") InfoNCE over the own bank entry and `num_noise` sampled ones (the
    memory-bank mechanism of MoCo's ablation); then write the features into the bank
    (after use)."""
    checks.positive("temperature", temperature)
    m = checks.int_at_least("num_noise", num_noise, 1)
    if kind not in LOSS_KINDS:
        raise ValueError(f"kind must be one of {LOSS_KINDS}, got {kind!r}")
    if not 0.0 <= bank_momentum <= 1.0:
        raise ValueError(f"bank_momentum must be in [0, 1], got {bank_momentum}")
    from ebm_jax.ops.augment import augment_batch

    def loss_fn(model, batch, key):
        images, indices = batch
        k_aug, k_noise = jax.random.split(key)
        x = images if augment is None else augment_batch(augment, k_aug, images,
                                                         size=image_size)
        f = model.encoder(x)
        bank = model.bank[...]
        if kind == "nce":
            noise = jax.random.randint(k_noise, (indices.shape[0], m), 0, bank.shape[0])
            log_z = resolve_log_z(model.log_z[...],
                                  estimate_log_z(f, bank, indices, noise, temperature))
            loss = instdisc_nce_loss(f, bank, indices, noise, temperature, log_z)
            model.log_z[...] = log_z
        elif kind == "infonce":
            noise = jax.random.randint(k_noise, (indices.shape[0], m), 0, bank.shape[0])
            logits = _scores(f, bank, indices, noise, temperature)
            loss = jnp.mean(logsumexp(logits, axis=1) - logits[:, 0])
        else:
            loss = instdisc_softmax_loss(f, bank, indices, temperature)
        model.bank[...] = update_memory_bank(bank, indices, f, bank_momentum)
        return loss, {"log_z": model.log_z[...]}

    return loss_fn
