"""Linear evaluation of a frozen encoder (MoCo, He et al. 2020, sec. 4.1 "Linear
Classification Protocol"; InstDisc, Wu et al. 2018, sec. 4.1): batch norm in inference
mode, the encoder's features computed once, and only a linear classifier trained on
them. `few_label_indices` draws the labelled subset of the low-label evaluation.

Features are extracted without augmentation, so the classifier sees fixed inputs; this
is the cheap form of the protocol (the published one re-augments every epoch).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ebm_jax import checks


def extract_features(encoder: nnx.Module, images, *, batch_size: int = 256,
                     use_head: bool = False) -> jax.Array:
    """Features of `images` (N, H, W, C) from a frozen copy of `encoder` in inference
    mode (batch statistics not updated): the pooled backbone (`encoder.features`) or,
    with `use_head`, the full output. The encoder passed in is left untouched. Every
    chunk is padded to `batch_size` rows, so one compilation serves every call with an
    encoder of the same structure."""
    graphdef, state = nnx.split(encoder)
    frozen = nnx.merge(graphdef, state, copy=True)
    frozen.eval()
    gd, st = nnx.split(frozen)
    head = bool(use_head or not hasattr(frozen, "features"))
    images = np.asarray(images)
    bs = checks.int_at_least("batch_size", batch_size, 1)
    out = []
    for i in range(0, len(images), bs):
        chunk = images[i:i + bs]
        pad = np.zeros((bs - len(chunk),) + chunk.shape[1:], chunk.dtype)
        out.append(_features(gd, head, st, np.concatenate([chunk, pad]))[:len(chunk)])
    return jnp.concatenate(out)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _features(graphdef, use_head: bool, state, x):
    model = nnx.merge(graphdef, state)
    return model(x) if use_head else model.features(x)


def train_linear_classifier(features, labels, num_classes: int, *, key: jax.Array,
                            epochs: int = 100, batch_size: int = 256,
                            learning_rate: float = 0.1, weight_decay: float = 0.0):
    """(weights (D, C), bias (C,)) of a softmax classifier trained with SGD + momentum
    0.9 and a cosine schedule on standardised features; returns also the per-epoch mean
    training loss. Each epoch is one jitted scan over shuffled batches."""
    x = jnp.asarray(checks.finite_array("features", features), jnp.float32)
    y = jnp.asarray(labels)
    c = checks.int_at_least("num_classes", num_classes, 1)
    checks.same_batch("features", x, "labels", y)
    if int(jnp.min(y)) < 0 or int(jnp.max(y)) >= c:
        raise ValueError(f"labels must be in [0, {c}), got range "
                         f"[{int(jnp.min(y))}, {int(jnp.max(y))}]")
    epochs = checks.int_at_least("epochs", epochs, 1)
    n = x.shape[0]
    bs = min(checks.int_at_least("batch_size", batch_size, 1), n)
    steps = n // bs
    mean, std = x.mean(0), x.std(0) + 1e-6
    xs = (x - mean) / std
    params = {"w": jnp.zeros((x.shape[1], c)), "b": jnp.zeros((c,))}
    hyper = (float(learning_rate), float(weight_decay), epochs * steps, steps, bs)
    opt_state = _classifier_optimizer(*hyper[:3]).init(params)

    history = []
    for e in range(epochs):
        params, opt_state, v = _classifier_epoch(params, opt_state,
                                                 jax.random.fold_in(key, e), xs, y, hyper)
        history.append(float(v))
    w = params["w"] / std[:, None]
    b = params["b"] - (mean / std) @ params["w"]
    if not math.isfinite(history[-1]):
        raise FloatingPointError("linear classifier diverged (non-finite loss)")
    return w, b, history


def _classifier_optimizer(learning_rate: float, weight_decay: float, total_steps: int):
    return optax.chain(optax.add_decayed_weights(weight_decay),
                       optax.sgd(optax.cosine_decay_schedule(learning_rate, total_steps),
                                 momentum=0.9))


@functools.partial(jax.jit, static_argnums=(5,))
def _classifier_epoch(params, opt_state, key, xs, y, hyper):
    """One epoch of the linear classifier: a scan over shuffled batches. Module-level,
    so that every call with the same shapes and settings shares one compilation."""
    learning_rate, weight_decay, total_steps, steps, bs = hyper
    opt = _classifier_optimizer(learning_rate, weight_decay, total_steps)

    def loss(p, xb, yb):
        logits = xb @ p["w"] + p["b"]
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, yb))

    idx = jax.random.permutation(key, xs.shape[0])[: steps * bs].reshape(steps, bs)

    def step(carry, i):
        p, s = carry
        value, g = jax.value_and_grad(loss)(p, xs[i], y[i])
        u, s = opt.update(g, s, p)
        return (optax.apply_updates(p, u), s), value

    (params, opt_state), values = jax.lax.scan(step, (params, opt_state), idx)
    return params, opt_state, jnp.mean(values)


def classifier_accuracy(w, b, features, labels) -> float:
    pred = jnp.argmax(jnp.asarray(features) @ w + b, axis=-1)
    return float(jnp.mean(pred == jnp.asarray(labels)))


def few_label_indices(labels, num_classes: int, per_class: int, seed: int) -> np.ndarray:
    """`per_class` training indices of each class (sorted), drawn with NumPy seed
    `seed` (give it a named seed, e.g. `ctx.seed_of(stage, "few labels")`)."""
    labels = np.asarray(labels)
    per_class = checks.int_at_least("few_labels", per_class, 1)
    rng = np.random.default_rng(seed)
    out = []
    for c in range(checks.int_at_least("num_classes", num_classes, 1)):
        idx = np.flatnonzero(labels == c)
        if len(idx) < per_class:
            raise ValueError(f"few_labels {per_class} exceeds the {len(idx)} training "
                             f"images of class {c}")
        out.append(rng.choice(idx, per_class, replace=False))
    return np.sort(np.concatenate(out))
