"""Training the detection energy head with the methods of Table 2 (seed 000, sec. 4.2).

The energy of a box is the head's f on one image's frozen feature levels. Samples live
in the relative space (cx/w0, cy/h0, log w, log h) of each (annotated) ground-truth box,
with one sigma for all four coordinates (REFERENCE.md sec. 2), and every loss is the
shared one of `ebm_jax.energy`, vmapped over the ground-truth boxes of an image and over
the images of a batch.

    loss_fn = make_detection_loss("nce+", num_samples=128)
    loss = loss_fn(head, (levels, boxes, classes, valid), key)   # a batch of images

This module has the losses and their hyperparameters; the `ebm-jax detection`
experiment (tables, sweeps, COCO evaluation) is not written yet.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from ebm_jax.energy import batch_loss, make_loss
from ebm_jax.ops.boxes import decode_relative, encode_relative

# Table 2's methods: (loss of ebm_jax.energy, hyperparameters other than M).
METHODS = {
    "ml-is": ("ml-is", {"sigmas": (0.0375, 0.075, 0.15)}),
    "kld-is": ("kld-is", {"sigmas": (0.0375, 0.075, 0.15), "label_sigma": 0.0225}),
    "ml-mcmc-1": ("ml-mcmc", {"num_steps": 1, "step_size": 1e-5}),
    "ml-mcmc-4": ("ml-mcmc", {"num_steps": 4, "step_size": 1e-5}),
    "ml-mcmc-8": ("ml-mcmc", {"num_steps": 8, "step_size": 1e-5}),
    "nce": ("nce", {"sigmas": (0.075, 0.15, 0.3)}),
    "dsm": ("dsm", {"sigma": 0.075}),
    "nce+": ("nce+", {"sigmas": (0.075, 0.15, 0.3), "beta": 0.1}),
}

# Refinement step lengths (l_c for cx, cy; l_s for log w, log h), REFERENCE.md sec. 2.
STEP_LENGTHS = {
    "nce+": (8e-4, 3.2e-3), "ml-is": (4e-4, 1.6e-3), "kld-is": (4e-4, 1.6e-3),
    "nce": (4e-4, 1.6e-3), "dsm": (2.5e-5, 1e-4), "ml-mcmc-1": (2.5e-5, 1e-4),
    "ml-mcmc-4": (2.5e-5, 1e-4), "ml-mcmc-8": (2.5e-5, 1e-4),
}


def method_loss(method: str, num_samples: int = 128, **overrides) -> Callable:
    """The bound `ebm_jax.energy` loss of a Table 2 method with M = num_samples
    (overrides replace the paper's sigmas, beta, ...)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
    name, hp = METHODS[method]
    return make_loss(name, **{**hp, "num_samples": num_samples, **overrides})


def step_lengths(method: str) -> tuple[float, float, float, float]:
    lc, ls = STEP_LENGTHS[method]
    return (lc, lc, ls, ls)


def image_loss(head, loss: Callable, levels, boxes, classes, valid, key) -> jax.Array:
    """Mean loss over one image's ground-truth boxes (G, 4) xyxy, classes (G,), valid
    (G,) (False rows are padding, weight 0)."""

    def energy(x, y):  # x: the reference box and its class, (5,)
        ref, cls = x[:4], x[4].astype(jnp.int32)
        return head(levels, decode_relative(y, ref)[None], cls[None])[0]

    xs = jnp.concatenate([boxes, classes[:, None].astype(boxes.dtype)], axis=1)
    y = encode_relative(boxes, boxes)
    return batch_loss(loss, energy, xs, y, key, weights=valid)


def make_detection_loss(method: str, num_samples: int = 128, **overrides) -> Callable:
    """`loss_fn(head, (levels, boxes, classes, valid), key) -> (loss, metrics)` for
    `ebm_jax.train`: levels is a list of (B, H_l, W_l, C) frozen feature maps, boxes
    (B, G, 4) the annotated boxes (padded), classes (B, G) in [1, C], valid (B, G).
    Images without a valid box get weight 0 (documented skip), and a batch without
    any valid box is an error in `check_detection_batch`."""
    loss = method_loss(method, num_samples, **overrides)

    def loss_fn(head, batch, key):
        levels, boxes, classes, valid = batch
        n = boxes.shape[0]
        keys = jax.random.split(key, n)
        per_image = jax.vmap(
            lambda lv, b, c, v, k: image_loss(head, loss, lv, b, c, v, k)
        )(list(levels), boxes, classes, valid, keys)
        has_box = jnp.any(valid, axis=1).astype(per_image.dtype)
        value = jnp.sum(per_image * has_box) / jnp.maximum(jnp.sum(has_box), 1.0)
        return value, {"images_with_boxes": jnp.sum(has_box)}

    return loss_fn


def check_detection_batch(boxes, classes, valid, num_classes: int) -> None:
    """Concrete checks before training: valid boxes with positive size, classes in
    [1, num_classes], and at least one valid box."""
    import numpy as np

    from ebm_jax.ops.prroi_pool import check_boxes

    b, c, v = np.asarray(boxes), np.asarray(classes), np.asarray(valid, bool)
    if not v.any():
        raise ValueError("the batch has no valid ground-truth box")
    check_boxes(b[v], name="ground-truth boxes")
    if c[v].min() < 1 or c[v].max() > num_classes:
        raise ValueError(f"classes must be in [1, {num_classes}], got range "
                         f"[{c[v].min()}, {c[v].max()}]")
