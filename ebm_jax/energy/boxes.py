"""The EBM losses of the paper's sec. 4.2 on boxes: an energy over boxes, trained in the
relative box space of each annotated box, shared by the detection head (Table 2) and,
later, the tracker's box head.

An energy here is `f(levels, boxes, classes) -> (N,)`: the energies of N xyxy boxes of
categories `classes` on one image's feature levels (a Flax head called like one, or any
function). A sample y lives in the relative space (cx/w0, cy/h0, log w, log h) of the
annotated box (x0, y0, w0, h0) (`ebm_jax.ops.boxes.encode_relative`), with one sigma
for all four coordinates, so every loss is the shared one of `ebm_jax.energy.losses`
(eqs. 5-12), vmapped over the annotated boxes of an image and over the images of a
batch.

    loss_fn = make_detection_loss("nce+", num_samples=128,
                                  sigmas=(0.075, 0.15, 0.3), beta=0.1)
    value, metrics = loss_fn(head, (levels, boxes, classes, valid), key)

Method names are those of Table 2: a loss of `ebm_jax.energy.LOSSES` ("ml-is",
"kld-is", "nce", "nce+", "dsm") or "ml-mcmc-<L>", ML-MCMC with L Langevin steps. The
hyperparameters (proposal sigmas, beta, ...) are arguments: their values belong to the
experiment's config. Nothing here knows about Flax, optimisers or devices.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ebm_jax.energy.losses import batch_loss, make_loss
from ebm_jax.energy.methods import BOX_LOSSES, parse_method
from ebm_jax.ops.boxes import decode_relative, encode_relative


BoxEnergy = Callable[[list, jax.Array, jax.Array], jax.Array]


def method_loss(method: str, num_samples: int, **hyperparameters) -> Callable:
    """The bound per-example loss of a Table 2 method with M = num_samples; the
    hyperparameters are those of the loss (checked by `make_loss`)."""
    name, fixed = parse_method(method)
    return make_loss(name, **{**hyperparameters, **fixed, "num_samples": num_samples})


def image_loss(energy: BoxEnergy, loss: Callable, levels, boxes, classes, valid,
               key) -> jax.Array:
    """Mean of `loss` over one image's annotated boxes (G, 4) xyxy, classes (G,),
    valid (G,) (False rows are padding, weight 0). Each annotated box is the reference
    of its relative space and the target y in it; the energy of a sample y is
    f(levels, decode_relative(y, box), class)."""

    def energy_xy(x, y):  # x: the annotated box and its class, (5,)
        ref, cls = x[:4], x[4].astype(jnp.int32)
        return energy(levels, decode_relative(y, ref)[None], cls[None])[0]

    xs = jnp.concatenate([boxes, classes[:, None].astype(boxes.dtype)], axis=1)
    y = encode_relative(boxes, boxes)
    return batch_loss(loss, energy_xy, xs, y, key, weights=valid)


def make_detection_loss(method: str, num_samples: int, **hyperparameters) -> Callable:
    """`loss_fn(f, (levels, boxes, classes, valid), key) -> (loss, metrics)` for
    `ebm_jax.train`: f is the energy (e.g. the head), levels a list of (B, H_l, W_l, C)
    feature maps, boxes (B, G, 4) the annotated boxes (padded), classes (B, G) in
    [1, C], valid (B, G). Images without a valid box get weight 0 (a documented skip);
    a batch without any valid box is an error of `check_detection_batch`.

    Image i uses `jax.random.split(key, B)[i]`. Hyperparameters are checked here,
    before anything is traced."""
    loss = method_loss(method, num_samples, **hyperparameters)

    def loss_fn(energy, batch, key):
        levels, boxes, classes, valid = batch
        keys = jax.random.split(key, boxes.shape[0])
        per_image = jax.vmap(
            lambda lv, b, c, v, k: image_loss(energy, loss, lv, b, c, v, k)
        )(list(levels), boxes, classes, valid, keys)
        has_box = jnp.any(valid, axis=1).astype(per_image.dtype)
        value = jnp.sum(per_image * has_box) / jnp.maximum(jnp.sum(has_box), 1.0)
        return value, {"images_with_boxes": jnp.sum(has_box)}

    return loss_fn


def check_detection_batch(boxes, classes, valid, num_classes: int) -> None:
    """Concrete checks before training: valid boxes with positive size, classes in
    [1, num_classes], and at least one valid box."""
    from ebm_jax.ops.prroi_pool import check_boxes

    b, c, v = np.asarray(boxes), np.asarray(classes), np.asarray(valid, bool)
    if not v.any():
        raise ValueError("the batch has no valid ground-truth box")
    check_boxes(b[v], name="ground-truth boxes")
    if c[v].min() < 1 or c[v].max() > num_classes:
        raise ValueError(f"classes must be in [1, {num_classes}], got range "
                         f"[{c[v].min()}, {c[v].max()}]")


__all__ = ["BOX_LOSSES", "check_detection_batch", "image_loss", "make_detection_loss",
           "method_loss", "parse_method"]
