"""Box utilities for detection refinement (the paper's sec. 4.2).

Boxes are (x0, y0, x1, y1) ("xyxy") or (x, y, w, h) ("xywh", COCO's format). The
relative space of sampling and refinement is (cx / w0, cy / h0, log w, log h) with
(w0, h0) the size of a reference box, so that one sigma serves every box size.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def xyxy_to_xywh(boxes: jax.Array) -> jax.Array:
    boxes = jnp.asarray(boxes)
    return jnp.concatenate([boxes[..., :2], boxes[..., 2:] - boxes[..., :2]], axis=-1)


def xywh_to_xyxy(boxes: jax.Array) -> jax.Array:
    boxes = jnp.asarray(boxes)
    return jnp.concatenate([boxes[..., :2], boxes[..., :2] + boxes[..., 2:]], axis=-1)


def encode_relative(boxes: jax.Array, reference: jax.Array) -> jax.Array:
    """xyxy boxes -> (cx / w0, cy / h0, log w, log h), (w0, h0) the reference's size."""
    boxes, reference = jnp.asarray(boxes), jnp.asarray(reference)
    wh = boxes[..., 2:] - boxes[..., :2]
    centre = boxes[..., :2] + 0.5 * wh
    ref_wh = reference[..., 2:] - reference[..., :2]
    return jnp.concatenate([centre / ref_wh, jnp.log(wh)], axis=-1)


def decode_relative(rel: jax.Array, reference: jax.Array) -> jax.Array:
    """The inverse of `encode_relative`."""
    rel, reference = jnp.asarray(rel), jnp.asarray(reference)
    ref_wh = reference[..., 2:] - reference[..., :2]
    centre = rel[..., :2] * ref_wh
    wh = jnp.exp(rel[..., 2:])
    return jnp.concatenate([centre - 0.5 * wh, centre + 0.5 * wh], axis=-1)


def box_area(boxes: jax.Array) -> jax.Array:
    boxes = jnp.asarray(boxes)
    return jnp.prod(jnp.maximum(boxes[..., 2:] - boxes[..., :2], 0.0), axis=-1)


def box_iou(a: jax.Array, b: jax.Array) -> jax.Array:
    """(N, M) intersection over union of xyxy boxes a (N, 4) and b (M, 4)."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    lo = jnp.maximum(a[:, None, :2], b[None, :, :2])
    hi = jnp.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = jnp.prod(jnp.maximum(hi - lo, 0.0), axis=-1)
    union = box_area(a)[:, None] + box_area(b)[None, :] - inter
    return jnp.where(union > 0, inter / jnp.where(union > 0, union, 1.0), 0.0)


def guided_nms(boxes: jax.Array, energies: jax.Array, scores: jax.Array,
               classes: jax.Array, valid: jax.Array | None = None, *,
               iou_threshold: float = 0.5, max_detections: int = 100):
    """Guided NMS of the EBM detection refinement (IoU-Net's, guided by f).

    Per class, boxes are visited in decreasing energy f; a box not yet suppressed is
    kept and suppresses the unsuppressed boxes of its class with IoU > iou_threshold,
    its group. A kept box takes the highest detector score of its group (itself
    included). At most `max_detections` kept boxes remain, those of highest score.

    Returns (keep (N,) bool, new_scores (N,)); jittable, fixed shapes. `valid` masks
    padding entries (never kept, never suppress).
    """
    boxes, energies, scores = jnp.asarray(boxes), jnp.asarray(energies), jnp.asarray(scores)
    n = boxes.shape[0]
    valid = jnp.ones((n,), bool) if valid is None else jnp.asarray(valid, bool)
    order = jnp.argsort(jnp.where(valid, -energies, jnp.inf))  # by f, descending
    b, s, c, v = boxes[order], scores[order], jnp.asarray(classes)[order], valid[order]
    overlap = (box_iou(b, b) > iou_threshold) & (c[:, None] == c[None, :])
    overlap = overlap & v[:, None] & v[None, :]

    def visit(i, carry):
        keep, suppressed, new_scores = carry
        kept = v[i] & ~suppressed[i]
        group = overlap[i] & ~suppressed & (jnp.arange(n) > i) & kept
        best = jnp.max(jnp.where(group, s, -jnp.inf))
        new_scores = new_scores.at[i].set(jnp.where(kept, jnp.maximum(s[i], best), s[i]))
        return keep.at[i].set(kept), suppressed | group, new_scores

    keep, _, new_scores = jax.lax.fori_loop(
        0, n, visit, (jnp.zeros((n,), bool), jnp.zeros((n,), bool), s))
    if max_detections < n:
        ranked = jnp.argsort(jnp.where(keep, -new_scores, jnp.inf))
        rank = jnp.empty((n,), jnp.int32).at[ranked].set(jnp.arange(n, dtype=jnp.int32))
        keep = keep & (rank < max_detections)
    inverse = jnp.empty((n,), jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32))
    return keep[inverse], new_scores[inverse]
