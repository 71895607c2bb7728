"""The EBM losses of the paper's sec. 4.2 on boxes: an energy over boxes, trained in the
relative box space of each annotated box, shared by the detection head (Table 2) and
the tracker's box head (sec. 5).

An energy here is `f(inputs, boxes, conditions) -> (N,)`: the energies of N xyxy boxes
of one example. `inputs` is any pytree shared by the boxes of that example (detection:
one image's feature levels; tracking: what the box head needs of one pair of frames,
e.g. the reference features and box and the test features), `conditions` a per-box
array (N, ...) (detection: the boxes' categories) or None (tracking). A Flax head
called like one, or any function. A sample y lives in the relative space (cx/w0, cy/h0,
log w, log h) of the annotated box (x0, y0, w0, h0) (`ebm_jax.ops.boxes.encode_relative`),
with one sigma for all four coordinates, so every loss is the shared one of
`ebm_jax.energy.losses` (eqs. 5-12), vmapped over the annotated boxes of an example and
over the examples of a batch.

    loss_fn = make_detection_loss("nce+", num_samples=128,
                                  sigmas=(0.075, 0.15, 0.3), beta=0.1)
    value, metrics = loss_fn(head, (levels, boxes, classes, valid), key)

    loss_fn = make_tracking_box_loss("nce+", num_samples=128, sigmas=(0.05, 0.5),
                                     beta=0.1)
    value, metrics = loss_fn(box_energy, (inputs, target_boxes), key)

Method names are those of Table 2: a loss of `ebm_jax.energy.LOSSES` ("ml-is",
"kld-is", "nce", "nce+", "dsm") or "ml-mcmc-<L>", ML-MCMC with L Langevin steps. The
hyperparameters (proposal sigmas, beta, ...) are arguments: their values belong to the
experiment's config. Test-time refinement by gradient ascent in the same space is
`ascend_boxes`. Nothing here knows about Flax, optimisers or devices.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ebm_jax.energy.losses import batch_loss, make_loss
from ebm_jax.energy.methods import BOX_LOSSES, parse_method
from ebm_jax.energy.predict import gradient_ascent
from ebm_jax.ops.boxes import decode_relative, encode_relative
from ebm_jax.ops.prroi_pool import _is_concrete, check_boxes

# f(inputs, boxes (N, 4) xyxy, conditions (N, ...) or None) -> (N,)
BoxEnergy = Callable[[Any, jax.Array, Any], jax.Array]


def method_loss(method: str, num_samples: int, **hyperparameters) -> Callable:
    """The bound per-example loss of a Table 2 method with M = num_samples; the
    hyperparameters are those of the loss (checked by `make_loss`)."""
    name, fixed = parse_method(method)
    return make_loss(name, **{**hyperparameters, **fixed, "num_samples": num_samples})


def example_loss(energy: BoxEnergy, loss: Callable, inputs, boxes, conditions, valid,
                 key) -> jax.Array:
    """Mean of `loss` over one example's annotated boxes (G, 4) xyxy with their
    conditions (G, ...) or None, valid (G,) (False rows are padding, weight 0). Each
    annotated box is the reference of its relative space and the target y in it; the
    energy of a sample y is f(inputs, decode_relative(y, box), condition).

    The conditions travel beside the box as extra float columns of x and are cast
    back to their dtype and shape (exact for integers below 2^24, e.g. classes).
    Box g uses `jax.random.split(key, G)[g]` (`batch_loss`)."""
    boxes = jnp.asarray(boxes)
    if conditions is None:
        xs = boxes

        def energy_xy(x, y):  # x: the annotated box, (4,)
            return energy(inputs, decode_relative(y, x)[None], None)[0]
    else:
        conditions = jnp.asarray(conditions)
        shape, dtype = conditions.shape[1:], conditions.dtype
        flat = conditions.reshape(conditions.shape[0], -1).astype(boxes.dtype)

        def energy_xy(x, y):  # x: the annotated box and its condition, (4 + C,)
            ref, cond = x[:4], x[4:].reshape(shape).astype(dtype)
            return energy(inputs, decode_relative(y, ref)[None], cond[None])[0]

        xs = jnp.concatenate([boxes, flat], axis=1)
    y = encode_relative(boxes, boxes)
    return batch_loss(loss, energy_xy, xs, y, key, weights=valid)


def image_loss(energy: BoxEnergy, loss: Callable, levels, boxes, classes, valid,
               key) -> jax.Array:
    """Detection: `example_loss` of one image, its feature levels the inputs and the
    boxes' classes (G,) the conditions."""
    return example_loss(energy, loss, levels, boxes, classes, valid, key)


def make_box_loss(method: str, num_samples: int, **hyperparameters) -> Callable:
    """`loss_fn(f, (inputs, boxes, conditions, valid), key) -> (loss, metrics)`: the
    batch form of `example_loss`. inputs is a pytree of (B, ...) leaves (one example
    each), boxes (B, G, 4) the annotated boxes (padded), conditions (B, G, ...) or None,
    valid (B, G). Examples without a valid box get weight 0 (a documented skip); the
    loss is the mean over the others. Metric "examples_with_boxes".

    Example i uses `jax.random.split(key, B)[i]`. Hyperparameters are checked here,
    before anything is traced."""
    loss = method_loss(method, num_samples, **hyperparameters)

    def loss_fn(energy, batch, key):
        inputs, boxes, conditions, valid = batch
        keys = jax.random.split(key, boxes.shape[0])
        per_example = jax.vmap(
            lambda x, b, c, v, k: example_loss(energy, loss, x, b, c, v, k)
        )(inputs, boxes, conditions, valid, keys)
        has_box = jnp.any(valid, axis=1).astype(per_example.dtype)
        value = jnp.sum(per_example * has_box) / jnp.maximum(jnp.sum(has_box), 1.0)
        return value, {"examples_with_boxes": jnp.sum(has_box)}

    return loss_fn


def make_detection_loss(method: str, num_samples: int, **hyperparameters) -> Callable:
    """`loss_fn(f, (levels, boxes, classes, valid), key) -> (loss, metrics)` for
    `ebm_jax.train`: f is the energy (e.g. the head), levels a list of (B, H_l, W_l, C)
    feature maps, boxes (B, G, 4) the annotated boxes (padded), classes (B, G) in
    [1, C], valid (B, G). Images without a valid box get weight 0 (a documented skip);
    a batch without any valid box is an error of `check_detection_batch`.

    Image i uses `jax.random.split(key, B)[i]`. Hyperparameters are checked here,
    before anything is traced. `make_box_loss` with the levels as inputs and the
    classes as conditions."""
    box_loss = make_box_loss(method, num_samples, **hyperparameters)

    def loss_fn(energy, batch, key):
        levels, boxes, classes, valid = batch
        value, metrics = box_loss(energy, (list(levels), boxes, classes, valid), key)
        return value, {"images_with_boxes": metrics["examples_with_boxes"]}

    return loss_fn


def make_tracking_box_loss(method: str, num_samples: int, **hyperparameters) -> Callable:
    """`loss_fn(f, (inputs, boxes), key) -> (loss, metrics)` for the tracker's box head
    (the paper's sec. 5): one target box per pair of frames. inputs is a pytree of
    (B, ...) leaves (what f needs of each pair: the reference frame's features and box,
    the test frame's features), boxes (B, 4) the target's xyxy box in the test frame;
    f(inputs_i, boxes (N, 4), None) -> (N,). The samples live in the relative space of
    the target box, as in detection; the loss is the mean over the pairs.

    Pair i uses `jax.random.split(key, B)[i]` (and its one box `split(that, 1)[0]`).
    PrDiMP's KLD-IS is `make_tracking_box_loss("kld-is", 128, sigmas=(0.05, 0.5),
    label_sigma=0.05)`; NCE+ (inferred for tracking) `("nce+", 128, sigmas=(0.05, 0.5),
    beta=0.1)`."""
    box_loss = make_box_loss(method, num_samples, **hyperparameters)

    def loss_fn(energy, batch, key):
        inputs, boxes = batch
        boxes = jnp.asarray(boxes)
        if boxes.ndim != 2 or boxes.shape[-1] != 4:
            raise ValueError(f"boxes must have shape (B, 4) as xyxy, one target box per "
                             f"pair, got {boxes.shape}")
        valid = jnp.ones((boxes.shape[0], 1), bool)
        value, _ = box_loss(energy, (inputs, boxes[:, None], None, valid), key)
        return value, {}

    return loss_fn


def ascend_boxes(energy: BoxEnergy, inputs, boxes, conditions=None, *, num_steps: int,
                 step_length, reference=None, reject_decreasing: bool = False,
                 decay: float = 0.5):
    """Test-time refinement of boxes (N, 4) xyxy by gradient ascent on f in the relative
    space (cx/w0, cy/h0, log w, log h) of `reference` (N, 4) (default: each box itself),
    the same space as the losses (Gustafsson et al. 2020, sec. 2.2 and 4.2):
    `ebm_jax.energy.predict.gradient_ascent` per box, step lengths (l_c, l_c, l_s, l_s)
    (or one for all four) in that space. With `reject_decreasing`, a step that lowers
    f is undone and that box's step lengths are multiplied by `decay`.

    Returns (refined xyxy boxes (N, 4), f (N,), step scales (N,)). Traceable (jit it,
    or call it inside a jitted function); concrete boxes are checked (finite, positive
    size: `check_boxes`), as the `boxes` argument."""
    if _is_concrete(boxes):
        check_boxes(np.asarray(boxes), name="boxes")
    boxes = jnp.asarray(boxes, jnp.float32)
    reference = boxes if reference is None else jnp.asarray(reference, boxes.dtype)
    if reference.shape != boxes.shape:
        raise ValueError(f"reference must have the shape of boxes {boxes.shape}, got "
                         f"{reference.shape}")
    rel, f, scale = ascend_relative(
        energy, inputs, reference, encode_relative(boxes, reference), conditions,
        num_steps=num_steps, step_length=step_length,
        reject_decreasing=reject_decreasing, decay=decay)
    return decode_relative(rel, reference), f, scale


def ascend_relative(energy: BoxEnergy, inputs, reference, y_init, conditions=None, *,
                    num_steps: int, step_length, reject_decreasing: bool = False,
                    decay: float = 0.5):
    """The core of `ascend_boxes` in the relative space: y_init (N, 4) relative to
    `reference` (N, 4) xyxy; returns (y (N, 4), f (N,), step scales (N,)). For callers
    that encode and decode outside their jitted refinement."""
    if conditions is None:
        def energy_xy(ref, y):
            return energy(inputs, decode_relative(y, ref)[None], None)[0]

        xs = reference
    else:
        def energy_xy(x, y):
            ref, cond = x
            return energy(inputs, decode_relative(y, ref)[None], cond[None])[0]

        xs = (reference, jnp.asarray(conditions))

    def one(x, y):
        return gradient_ascent(energy_xy, x, y, num_steps=num_steps,
                               step_length=step_length,
                               reject_decreasing=reject_decreasing, decay=decay)

    return jax.vmap(one)(xs, jnp.asarray(y_init))


def ascend_top_k(energy: BoxEnergy, inputs, box, offsets, *, top_k: int, num_steps: int,
                 step_length, reject_decreasing: bool = False):
    """The tracker's refinement of one box (ATOM's procedure, Danelljan et al. 2019,
    sec. 3.2, as PrDiMP and the EBM regression paper's trackers use it): `box` (4,)
    xyxy and copies moved by `offsets` (K, 4) in its relative space (cx/w0, cy/h0,
    log w, log h), each ascended on f (`ascend_boxes`, relative to `box`); the result is
    the mean, in that space, of the `top_k` refined boxes of highest f (non-finite f
    last). Returns the box (4,) xyxy. Traceable."""
    box = jnp.asarray(box, jnp.float32)
    y0 = encode_relative(box[None], box[None])
    starts = decode_relative(jnp.concatenate([y0, y0 + jnp.asarray(offsets)], axis=0),
                             box[None])
    refs = jnp.broadcast_to(box, starts.shape)
    boxes, f, _ = ascend_boxes(energy, inputs, starts, num_steps=num_steps,
                               step_length=step_length, reference=refs,
                               reject_decreasing=reject_decreasing)
    top = jnp.argsort(-jnp.where(jnp.isfinite(f), f, -jnp.inf))[:top_k]
    return decode_relative(jnp.mean(encode_relative(boxes[top], refs[top]), axis=0),
                           box)


def check_detection_batch(boxes, classes, valid, num_classes: int) -> None:
    """Concrete checks before training: valid boxes with positive size, classes in
    [1, num_classes], and at least one valid box."""
    b, c, v = np.asarray(boxes), np.asarray(classes), np.asarray(valid, bool)
    if not v.any():
        raise ValueError("the batch has no valid ground-truth box")
    check_boxes(b[v], name="ground-truth boxes")
    if c[v].min() < 1 or c[v].max() > num_classes:
        raise ValueError(f"classes must be in [1, {num_classes}], got range "
                         f"[{c[v].min()}, {c[v].max()}]")


__all__ = ["BOX_LOSSES", "ascend_boxes", "ascend_relative", "ascend_top_k", "check_detection_batch",
           "example_loss", "image_loss", "make_box_loss", "make_detection_loss",
           "make_tracking_box_loss", "method_loss", "parse_method"]
