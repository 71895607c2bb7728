"""SiamFC's training loss (Bertinetto et al. 2016, sec. 2.2-2.3), as pure JAX functions
on `SiamFCSettings`: exemplar and search crops around the boxes of a pair of frames,
one backbone on both, the response xcorr(phi(z), phi(x)) * 0.001 (no bias), labels
positive within an L1 radius of the target, and a class-balanced logistic loss:

    loss_fn = make_siamfc_loss(SiamFCSettings())     # loss_fn(model, batch, key)

The defaults are this project's training pairs; `PORT_TRAINING` holds the PyTorch
port's (`dataclasses.replace(SiamFCSettings(), **PORT_TRAINING)`).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ebm_jax.ops.crops import box_to_center, crop_square, exemplar_side
from ebm_jax.ops.xcorr import xcorr
from ebm_jax.tracking.siamfc import SiamFCSettings

# fold_in purposes of the training-crop key
_Z_STRETCH, _X_STRETCH, _X_SHIFT, _Z_SHIFT = 0, 1, 2, 3

# The PyTorch port's training crops (its `SiamFCTransforms`: a 255 context crop, then
# CenterCrop(247) and RandomCrop(239) for both crops, the exemplar the centre 127 of
# its 239): search crop 239 (a 15 x 15 response), both centres moved by up to 4 px per
# axis, labels at the response centre. The port's shifts are whole pixels and its
# resampling kernel random; here they are continuous and bilinear.
PORT_TRAINING = dict(shift=4.0, shift_exemplar=True, train_search_size=239,
                     labels="centred")


def make_labels(response_size, r_pos_cells, offset=(0.0, 0.0)) -> tuple[jax.Array, jax.Array]:
    """SiamFC's labels and class-balanced weights (Bertinetto et al. 2016, sec. 2.2,
    eq. 1 "y[u] = +1 if k ||u - c|| <= R"; the port's city-block distance and
    `BalancedLoss`): label 1 where |dy| + |dx| <= r_pos_cells, measured from the response
    centre ((n - 1) / 2) moved by `offset` (cells, (dy, dx)), else 0; weights 1 / #pos on
    positives and 1 / #neg on negatives, normalised to sum 1 (each class then sums to
    1/2). `response_size`: n or (h, w) (static); `offset` may be traced (vmap it over a
    batch). Returns float32 (h, w) labels and weights."""
    h, w = ((response_size, response_size) if np.ndim(response_size) == 0
            else tuple(response_size))
    if int(h) != h or int(w) != w or h < 1 or w < 1:
        raise ValueError(f"response_size must be an integer >= 1 or (h, w), got "
                         f"{response_size!r}")
    if not float(r_pos_cells) >= 0:
        raise ValueError(f"r_pos_cells must be >= 0, got {r_pos_cells!r}")
    offset = jnp.asarray(offset, jnp.float32)
    if offset.shape != (2,):
        raise ValueError(f"offset must have shape (2,) as (dy, dx), got {offset.shape}")
    ys = jnp.arange(int(h), dtype=jnp.float32) - (int(h) - 1) / 2 - offset[0]
    xs = jnp.arange(int(w), dtype=jnp.float32) - (int(w) - 1) / 2 - offset[1]
    dist = jnp.abs(ys)[:, None] + jnp.abs(xs)[None, :]
    labels = (dist <= r_pos_cells).astype(jnp.float32)
    num_pos, num_neg = jnp.sum(labels), jnp.sum(1.0 - labels)
    weights = (labels / jnp.maximum(num_pos, 1.0)
               + (1.0 - labels) / jnp.maximum(num_neg, 1.0))
    return labels, weights / jnp.sum(weights)


def balanced_bce(logits, labels, weights) -> jax.Array:
    """Weighted logistic loss (Bertinetto et al. 2016, sec. 2.2, eq. 1-2, with the port's
    class-balanced weights): per example sum_u w[u] * BCE(logits[u], labels[u]),
    averaged over the leading (batch) axes. logits, labels, weights: (..., h, w), the
    last two broadcastable; BCE with logits in its stable form
    max(l, 0) - l y + log(1 + exp(-|l|))."""
    logits = jnp.asarray(logits)
    if logits.ndim < 2:
        raise ValueError(f"logits must have shape (..., h, w), got {logits.shape}")
    labels = jnp.broadcast_to(jnp.asarray(labels, logits.dtype), logits.shape)
    weights = jnp.broadcast_to(jnp.asarray(weights, logits.dtype), logits.shape)
    bce = (jnp.maximum(logits, 0) - logits * labels
           + jnp.log1p(jnp.exp(-jnp.abs(logits))))
    return jnp.mean(jnp.sum(weights * bce, axis=(-2, -1)))


def _check_pair_batch(z_frames, z_boxes, x_frames, x_boxes) -> int:
    for name, frames in (("z_frames", z_frames), ("x_frames", x_frames)):
        if frames.ndim != 4 or frames.shape[-1] != 3:
            raise ValueError(f"{name} must have shape (B, H, W, 3), got {frames.shape}")
    for name, boxes in (("z_boxes", z_boxes), ("x_boxes", x_boxes)):
        if boxes.ndim != 2 or boxes.shape[-1] != 4:
            raise ValueError(f"{name} must have shape (B, 4) as xywh, got {boxes.shape}")
    sizes = {a.shape[0] for a in (z_frames, z_boxes, x_frames, x_boxes)}
    if len(sizes) != 1:
        raise ValueError(f"z_frames, z_boxes, x_frames, x_boxes need the same batch size, "
                         f"got {[a.shape[0] for a in (z_frames, z_boxes, x_frames, x_boxes)]}")
    return sizes.pop()


def training_crops(key, z_frames, z_boxes, x_frames, x_boxes,
                   settings: SiamFCSettings) -> tuple[jax.Array, jax.Array, jax.Array]:
    """SiamFC's training crops (Bertinetto et al. 2016, sec. 2.3; the port's
    `SiamFCTransforms`, made continuous): for B pairs of whole frames (B, H, W, 3) and
    xywh boxes, exemplar crops (B, 127, 127, 3) of side exemplar_side(box) and search
    crops (B, S, S, 3), S = settings.training_search_size, of side exemplar_side *
    S / 127, each side stretched by U[1 - stretch, 1 + stretch], the search crop's centre
    (and with `shift_exemplar` the exemplar's, independently) moved by U[-shift, shift]
    crop pixels per axis; padding with each frame's mean colour. Returns float32 crops
    and offsets (B, 2) = (dy, dx) in response cells of where the response should peak
    from the response centre, for `make_labels`: (exemplar shift - search shift) /
    stride with `labels="follow"`, zero with `"centred"` (the port's).

    The port stretches and shifts by integer crops of a 255 crop (up to 4 px,
    `PORT_TRAINING`). Jittable."""
    z_frames, x_frames = jnp.asarray(z_frames), jnp.asarray(x_frames)
    z_boxes = jnp.asarray(z_boxes, jnp.float32)
    x_boxes = jnp.asarray(x_boxes, jnp.float32)
    b = _check_pair_batch(z_frames, z_boxes, x_frames, x_boxes)
    s = settings
    lo, hi = 1.0 - s.stretch, 1.0 + s.stretch
    z_stretch = jax.random.uniform(jax.random.fold_in(key, _Z_STRETCH), (b,),
                                   minval=lo, maxval=hi)
    x_stretch = jax.random.uniform(jax.random.fold_in(key, _X_STRETCH), (b,),
                                   minval=lo, maxval=hi)
    shift = jax.random.uniform(jax.random.fold_in(key, _X_SHIFT), (b, 2),
                               minval=-s.shift, maxval=s.shift)
    batched_crop = jax.vmap(crop_square, in_axes=(0, 0, 0, None))

    zcy, zcx, zh, zw = box_to_center(z_boxes)
    z_side = exemplar_side(zh, zw, s.context) * z_stretch
    z_shift = jnp.zeros_like(shift)
    if s.shift_exemplar:
        z_shift = jax.random.uniform(jax.random.fold_in(key, _Z_SHIFT), (b, 2),
                                     minval=-s.shift, maxval=s.shift)
    z_center = jnp.stack([zcy, zcx], -1) + z_shift * (z_side / s.exemplar_size)[:, None]
    z = batched_crop(z_frames, z_center, z_side, s.exemplar_size)

    size = s.training_search_size
    xcy, xcx, xh, xw = box_to_center(x_boxes)
    x_side = exemplar_side(xh, xw, s.context) * (size / s.exemplar_size) * x_stretch
    x_center = jnp.stack([xcy, xcx], -1) + shift * (x_side / size)[:, None]
    x = batched_crop(x_frames, x_center, x_side, size)
    if s.labels == "centred":
        return z, x, jnp.zeros_like(shift)
    return z, x, (z_shift - shift) / s.stride


def make_siamfc_loss(settings: SiamFCSettings = SiamFCSettings()) -> Callable:
    """`loss_fn(model, batch, key) -> (loss, metrics)` for `make_train_step`
    (Bertinetto et al. 2016, sec. 2.2-2.3): batch = {"z_frames", "z_boxes", "x_frames",
    "x_boxes"} (B, H, W, 3) uint8 frames and (B, 4) xywh boxes; `training_crops`, the
    model on both crops (its batch-norm mode is the caller's: train mode in training),
    responses xcorr * response_scale (no bias, as the port), labels following the
    crops' offsets, `balanced_bce`. Metrics: mean response at positive and negative
    cells, and the fraction of pairs whose response peak is a positive cell."""
    s = settings
    r_cells = s.r_pos / s.stride

    def loss_fn(model, batch, key):
        z, x, offsets = training_crops(key, batch["z_frames"], batch["z_boxes"],
                                       batch["x_frames"], batch["x_boxes"], s)
        responses = xcorr(model(z), model(x)) * s.response_scale
        labels, weights = jax.vmap(
            lambda o: make_labels(responses.shape[1:], r_cells, o))(offsets)
        loss = balanced_bce(responses, labels, weights)
        pos = jnp.sum(responses * labels, (1, 2)) / jnp.maximum(jnp.sum(labels, (1, 2)), 1)
        neg = (jnp.sum(responses * (1 - labels), (1, 2))
               / jnp.maximum(jnp.sum(1 - labels, (1, 2)), 1))
        peak = jnp.argmax(responses.reshape(responses.shape[0], -1), axis=1)
        peak_positive = jnp.take_along_axis(labels.reshape(labels.shape[0], -1),
                                            peak[:, None], axis=1)[:, 0]
        return loss, {"response_pos": jnp.mean(pos), "response_neg": jnp.mean(neg),
                      "peak_in_positive": jnp.mean(peak_positive)}

    return loss_fn
