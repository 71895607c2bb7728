"""Box utilities for detection refinement (the paper's sec. 4.2).

Boxes are (x0, y0, x1, y1) ("xyxy") or (x, y, w, h) ("xywh", COCO's format). The
relative space of sampling and refinement is (cx / w0, cy / h0, log w, log h) with
(w0, h0) the size of a reference box, so that one sigma serves every box size.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


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


def intersection_union(a, b, *, box_format: str = "xyxy", xp=jnp):
    """(intersection, union) areas of boxes `a` and `b`, element-wise over their
    broadcast leading axes, in continuous coordinates (no +1: a box [x0, x1] is x1 - x0
    wide). The one place of the box-overlap arithmetic: every IoU of the package
    (`box_iou`, `box_iou_np`, hence guided and greedy NMS, the tracking metrics of
    `ebm_jax.eval.tracking` and the simulated detector) divides these two.

    box_format "xyxy" (x0, y0, x1, y1): a box's area is its clamped width x height,
    max(x1 - x0, 0) max(y1 - y0, 0). "xywh" (x, y, w, h; COCO, OTB, GOT-10k): the
    area is w h as given and the far corner is xy + wh. `xp` is the array module
    (`jax.numpy`, or `numpy` for float64 host code); the dtype is the inputs'.
    """
    if box_format == "xyxy":
        a_lo, a_hi, b_lo, b_hi = a[..., :2], a[..., 2:], b[..., :2], b[..., 2:]
        a_wh, b_wh = xp.maximum(a_hi - a_lo, 0.0), xp.maximum(b_hi - b_lo, 0.0)
    elif box_format == "xywh":
        a_lo, a_wh, b_lo, b_wh = a[..., :2], a[..., 2:], b[..., :2], b[..., 2:]
        a_hi, b_hi = a_lo + a_wh, b_lo + b_wh
    else:
        raise ValueError(f"box_format must be 'xyxy' or 'xywh', got {box_format!r}")
    wh = xp.maximum(xp.minimum(a_hi, b_hi) - xp.maximum(a_lo, b_lo), 0.0)
    inter = wh[..., 0] * wh[..., 1]
    union = a_wh[..., 0] * a_wh[..., 1] + b_wh[..., 0] * b_wh[..., 1] - inter
    return inter, union


def paired_box_iou(a: jax.Array, b: jax.Array) -> jax.Array:
    """Intersection over union of xyxy boxes `a` and `b` element-wise over their
    broadcast leading axes; 0 where the union is empty."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    inter, union = intersection_union(a, b)
    return jnp.where(union > 0, inter / jnp.where(union > 0, union, 1.0), 0.0)


def box_iou(a: jax.Array, b: jax.Array) -> jax.Array:
    """(N, M) intersection over union of xyxy boxes a (N, 4) and b (M, 4); 0 where the
    union is empty."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    return paired_box_iou(a[:, None], b[None, :])


_EPS64 = np.finfo(np.float64).eps


def box_iou_np(a, b, *, box_format: str = "xywh") -> np.ndarray:
    """Element-wise IoU of float64 boxes `a`, `b` (NumPy, broadcasting), as the GOT-10k
    toolkit's `rect_iou` computes it (Huang et al. 2019): intersection / (union +
    machine eps), continuous coordinates, so that two empty boxes give 0, not NaN. NaN
    where a box has a NaN. Not clipped to [0, 1] (`ebm_jax.eval.tracking.box_iou`
    clips, as the toolkit does)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    inter, union = intersection_union(a, b, box_format=box_format, xp=np)
    return inter / (union + _EPS64)


def check_xywh_boxes(boxes, name: str = "boxes") -> np.ndarray:
    """`boxes` as a finite (K, 4) float64 array of x, y, w, h boxes, else a ValueError
    naming `name`."""
    boxes = np.asarray(boxes, np.float64)
    if boxes.ndim != 2 or boxes.shape[1] != 4 or not np.all(np.isfinite(boxes)):
        raise ValueError(f"{name} must be a finite (K, 4) array of x, y, w, h boxes, got "
                         f"shape {boxes.shape}")
    return boxes


def check_box_scores(scores, count: int) -> np.ndarray:
    """`scores` as a finite (count,) float64 array, one per box, else a ValueError."""
    scores = np.asarray(scores, np.float64)
    if scores.shape != (count,) or not np.all(np.isfinite(scores)):
        raise ValueError(f"scores must be a finite ({count},) array, one per box, got shape "
                         f"{scores.shape}")
    return scores


def greedy_nms(boxes, scores, iou: float, keep: int) -> np.ndarray:
    """Indices of the boxes kept by greedy non-maximum suppression, in descending score
    (ties: lower index first): a box is dropped when its IoU (`box_iou_np`, xywh,
    continuous coordinates) with a kept box exceeds `iou`; at most `keep` are kept.
    `boxes` is a finite (K, 4) xywh array, `scores` finite (K,). NumPy, float64."""
    boxes = check_xywh_boxes(boxes)
    scores = check_box_scores(scores, len(boxes))
    if not 0 < iou <= 1:
        raise ValueError(f"iou must be in (0, 1], got {iou!r}")
    if not isinstance(keep, (int, np.integer)) or isinstance(keep, bool) or keep < 1:
        raise ValueError(f"keep must be an integer >= 1, got {keep!r}")
    order = np.argsort(-scores, kind="stable")
    ranked = boxes[order]
    dropped, kept, i = np.zeros(len(order), bool), [], 0
    while i < len(order) and len(kept) < keep:
        kept.append(i)
        rest = slice(i + 1, None)
        dropped[rest] |= box_iou_np(ranked[i], ranked[rest]) > iou
        alive = np.flatnonzero(~dropped[i + 1:])
        if alive.size == 0:
            break
        i += 1 + int(alive[0])
    return order[np.asarray(kept, np.intp)]


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
