"""Linear evaluation of a frozen encoder (seed 002): batch norm in inference mode, the
encoder's features computed once, and only a linear classifier trained on them.

Features are extracted without augmentation, so the classifier sees fixed inputs; this
is the cheap form of the protocol (the published one re-augments every epoch).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ebm_jax.energy import checks


def extract_features(encoder: nnx.Module, images, *, batch_size: int = 256,
                     use_head: bool = False) -> jax.Array:
    """Features of `images` (N, H, W, C) from a frozen copy of `encoder` in inference
    mode (batch statistics not updated): the pooled backbone (`encoder.features`) or,
    with `use_head`, the full output. The encoder passed in is left untouched."""
    graphdef, state = nnx.split(encoder)
    frozen = nnx.merge(graphdef, state, copy=True)
    frozen.eval()
    gd, st = nnx.split(frozen)
    fn = (lambda m, x: m(x)) if use_head or not hasattr(frozen, "features") else (
        lambda m, x: m.features(x))

    @jax.jit
    def run(st, x):
        return fn(nnx.merge(gd, st), x)

    images = np.asarray(images)
    return jnp.concatenate([run(st, images[i:i + batch_size])
                            for i in range(0, len(images), batch_size)])


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
    schedule = optax.cosine_decay_schedule(learning_rate, epochs * steps)
    opt = optax.chain(optax.add_decayed_weights(weight_decay),
                      optax.sgd(schedule, momentum=0.9))
    opt_state = opt.init(params)

    def loss(p, xb, yb):
        logits = xb @ p["w"] + p["b"]
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, yb))

    @jax.jit
    def epoch(params, opt_state, k):
        idx = jax.random.permutation(k, n)[: steps * bs].reshape(steps, bs)

        def step(carry, i):
            p, s = carry
            value, g = jax.value_and_grad(loss)(p, xs[i], y[i])
            u, s = opt.update(g, s, p)
            return (optax.apply_updates(p, u), s), value

        (params, opt_state), values = jax.lax.scan(step, (params, opt_state), idx)
        return params, opt_state, jnp.mean(values)

    history = []
    for e in range(epochs):
        params, opt_state, v = epoch(params, opt_state, jax.random.fold_in(key, e))
        history.append(float(v))
    w = params["w"] / std[:, None]
    b = params["b"] - (mean / std) @ params["w"]
    if not math.isfinite(history[-1]):
        raise FloatingPointError("linear classifier diverged (non-finite loss)")
    return w, b, history


def classifier_accuracy(w, b, features, labels) -> float:
    pred = jnp.argmax(jnp.asarray(features) @ w + b, axis=-1)
    return float(jnp.mean(pred == jnp.asarray(labels)))
