"""Pseudo boxes from sparse boxes and dense points (Wu & Chan, "Learning Tracking
Representations from Single Point Annotations", sec. 3.4 "Scale Regression-based
Tracking"): a box every T frames starts a snippet, a point is annotated in every other
frame; a correlation filter tracker (SoCL-CF) tracks each snippet from its box, and
where its centre lies more than `radius` (20 px) from the frame's point the frame is a
failure: the point becomes the box's centre and the tracker is moved there.

    keys = sparse_key_frames(has_box, every=10)
    result = pseudo_boxes(tracker, params, read_frame, boxes, points, keys, radius=20.0)

Annotation cost per frame (sec. 3.4): a point in each frame but the boxed ones,
point_seconds (1 - 1/T), a box every T frames, box_seconds / T, plus the tracker's
seconds per frame: 2.27 (1 - 1/10) + 10.2 / 10 + 0.1 = 3.16 s at T = 10 in the paper.

Boxes are xywh, points (x, y), both 1-indexed (GOT-10k); a point is the box centre
x + (w - 1) / 2, y + (h - 1) / 2.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ebm_jax.ops.boxes import box_iou_np
from ebm_jax.ops.crops import box_to_center, center_to_box


class PseudoBoxes(NamedTuple):
    """boxes (N, 4) xywh, NaN only where the frame has neither box nor point (the
    target is absent); failed (N,) bool: the tracker's centre was more than `radius`
    from the point; keyed (N,) bool: the frame's box is an annotated one; seconds
    (N,): wall time of the tracker per frame (init on a keyed frame, update elsewhere;
    0 where the frame was not tracked)."""

    boxes: np.ndarray
    failed: np.ndarray
    keyed: np.ndarray
    seconds: np.ndarray


def _check_every(every) -> int:
    if isinstance(every, bool) or not isinstance(every, (int, np.integer)) or every < 1:
        raise ValueError(f"every (T, frames between sparse boxes) must be an integer >= 1, "
                         f"got {every!r}")
    return int(every)


def sparse_key_frames(has_box, every) -> np.ndarray:
    """The frames whose box is annotated when a box is given every T = `every` frames:
    in each block [kT, (k + 1) T) the first frame where the target has a box (kT itself
    unless the target is out of view there; a block with no such frame has no key).
    `has_box` (N,) bool."""
    t = _check_every(every)
    has_box = np.asarray(has_box, bool)
    if has_box.ndim != 1:
        raise ValueError(f"has_box must have shape (N,), got {has_box.shape}")
    keys = []
    for start in range(0, len(has_box), t):
        inside = np.flatnonzero(has_box[start:start + t])
        if inside.size:
            keys.append(start + int(inside[0]))
    return np.asarray(keys, np.int64)


def annotation_seconds_per_frame(every, *, box_seconds: float, point_seconds: float,
                                 tracker_seconds: float = 0.0) -> float:
    """Annotation cost per frame of sparse boxes + points (sec. 3.4):
    point_seconds (1 - 1/T) + box_seconds / T + tracker_seconds."""
    t = _check_every(every)
    for name, value in (("box_seconds", box_seconds), ("point_seconds", point_seconds),
                        ("tracker_seconds", tracker_seconds)):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return point_seconds * (1 - 1 / t) + box_seconds / t + tracker_seconds


def check_points_on_frame(points, shape, where: str = "", *,
                          off_frame: float = 0.0) -> None:
    """Refuses a point (x, y), 1-indexed, that is half NaN or lies more than `off_frame`
    pixels off the (H, W) frame (beyond its pixel edges, 0.5 .. W + 0.5); NaN points
    (target absent) pass. `where` prefixes the message (e.g. the sequence)."""
    points = np.asarray(points, np.float64)
    height, width = shape[:2]
    finite = np.isfinite(points)
    if np.any(finite.any(1) & ~finite.all(1)):
        bad = int(np.flatnonzero(finite.any(1) & ~finite.all(1))[0])
        raise ValueError(f"{where}frame {bad + 1}: point {points[bad].tolist()} is half NaN")
    m = float(off_frame)
    off = finite.all(1) & ((points[:, 0] < 0.5 - m) | (points[:, 0] > width + 0.5 + m)
                           | (points[:, 1] < 0.5 - m) | (points[:, 1] > height + 0.5 + m))
    if np.any(off):
        bad = int(np.flatnonzero(off)[0])
        raise ValueError(f"{where}frame {bad + 1}: point {points[bad].tolist()} lies more "
                         f"than {m:g} px off the {width} x {height} frame (points are "
                         f"1-indexed (x, y); off_frame allows more)")


def _check_inputs(boxes, points, keys, radius, shape, off_frame):
    n = len(boxes)
    if boxes.shape != (n, 4) or points.shape != (n, 2):
        raise ValueError(f"boxes must be (N, 4) and points (N, 2) for the same N, got "
                         f"{boxes.shape} and {points.shape}")
    if not (isinstance(radius, (int, float)) and math.isfinite(radius) and radius > 0):
        raise ValueError(f"radius (the failure distance in pixels) must be a finite "
                         f"number > 0, got {radius!r}")
    if keys.ndim != 1 or np.any(np.diff(keys) <= 0) or (keys.size and (
            keys[0] < 0 or keys[-1] >= n)):
        raise ValueError(f"keys must be increasing frame indices in [0, {n - 1}], got "
                         f"{keys.tolist()}")
    height, width = shape[:2]
    for i in keys:
        b = boxes[i]
        if not (np.all(np.isfinite(b)) and np.all(b[2:] > 0)):
            raise ValueError(f"frame {i + 1} is a snippet's first frame and needs a finite "
                             f"box with w, h > 0, got {b.tolist()}")
        if b[0] + b[2] - 1 < 1 or b[1] + b[3] - 1 < 1 or b[0] > width or b[1] > height:
            raise ValueError(f"frame {i + 1}: box {b.tolist()} lies wholly outside the "
                             f"{width} x {height} frame")
    if not (isinstance(off_frame, (int, float)) and off_frame >= 0):
        raise ValueError(f"off_frame must be a number >= 0 (or inf), got {off_frame!r}")
    check_points_on_frame(points, shape, off_frame=off_frame)
    finite = np.isfinite(points)
    first = int(keys[0]) if keys.size else n
    early = np.flatnonzero(finite.all(1)[:first])
    if early.size:
        raise ValueError(f"frame {early[0] + 1} has a point but no snippet starts before "
                         f"it: the first snippet needs its box (keys start at "
                         f"{first + 1 if keys.size else 'none'})")


def pseudo_boxes(tracker, params, read_frame: Callable[[int], np.ndarray], boxes, points,
                 keys, *, radius: float = 20.0, off_frame: float = 0.0) -> PseudoBoxes:
    """Pseudo boxes of one sequence (module docstring). tracker: `init`, `update` and
    `relocate(state, center_yx)` (e.g. `make_dcf_tracker`); read_frame(i) -> (H, W, 3)
    uint8; boxes (N, 4) xywh, read only at `keys` (the snippets' first frames, e.g.
    `sparse_key_frames`); points (N, 2) (x, y) 1-indexed, NaN where the target is
    absent. Frames before the first key are left without a box (they must have no
    point). In a frame without a point the tracker's box is kept but not checked and
    the pseudo box is NaN, as the ground truth has none there. A point may lie up to
    `off_frame` px beyond the frame's edge (default 0: a click is on the frame; points
    made from box centres leave it where the box is partly out of view, and the
    tracker then moves to the point off the frame). Each update is waited on, and its
    wall time recorded."""
    boxes = np.asarray(boxes, np.float64)
    points = np.asarray(points, np.float64)
    keys = np.asarray(keys, np.int64)
    n = len(boxes)
    first_frame = read_frame(int(keys[0])) if keys.size else read_frame(0)
    _check_inputs(boxes, points, keys, radius, np.shape(first_frame), off_frame)
    out = np.full((n, 4), np.nan)
    failed = np.zeros(n, bool)
    keyed = np.zeros(n, bool)
    seconds = np.zeros(n)
    ends = list(keys[1:]) + [n]
    for start, end in zip(keys, ends):
        frame = first_frame if start == keys[0] else read_frame(int(start))
        tic = time.perf_counter()
        state = jax.block_until_ready(tracker.init(params, frame, boxes[start]))
        seconds[start] = time.perf_counter() - tic
        out[start], keyed[start] = boxes[start], True
        for i in range(int(start) + 1, int(end)):
            frame = read_frame(i)
            tic = time.perf_counter()
            state, box = jax.block_until_ready(tracker.update(params, state, frame))
            seconds[i] = time.perf_counter() - tic
            box = np.asarray(box, np.float64)
            if not np.all(np.isfinite(points[i])):
                continue
            cy, cx, h, w = box_to_center(box)
            py, px = points[i, 1] - 1.0, points[i, 0] - 1.0  # 0-indexed centre
            if not (np.all(np.isfinite(box)) and math.hypot(cy - py, cx - px) <= radius):
                failed[i] = True
                state = tracker.relocate(state, jnp.asarray([py, px], jnp.float32))
                if not np.all(np.isfinite([h, w])):
                    h, w = box_to_center(boxes[start])[2:]
                box = np.asarray(center_to_box(py, px, h, w), np.float64)
            out[i] = box
    return PseudoBoxes(out, failed, keyed, seconds)


def pseudo_box_quality(pseudo: np.ndarray, truth: np.ndarray, failed: np.ndarray,
                       keyed: np.ndarray) -> dict:
    """Quality of pseudo boxes against the hidden ground truth, over the frames that
    have a true box and are not keyed (a keyed box is the truth itself): mean IoU, the
    fraction with IoU > 0.5, failures per 100 such frames, and their count."""
    pseudo, truth = np.asarray(pseudo, np.float64), np.asarray(truth, np.float64)
    scored = np.all(np.isfinite(truth), 1) & ~np.asarray(keyed, bool)
    if not np.any(scored):
        return {"mean_iou": math.nan, "iou_above_0.5": math.nan,
                "failures_per_100": math.nan, "frames": 0}
    iou = box_iou_np(pseudo[scored], truth[scored])
    iou = np.where(np.isfinite(iou), iou, 0.0)
    return {"mean_iou": float(np.mean(iou)), "iou_above_0.5": float(np.mean(iou > 0.5)),
            "failures_per_100": float(100 * np.mean(np.asarray(failed, bool)[scored])),
            "frames": int(np.sum(scored))}


__all__ = ["PseudoBoxes", "annotation_seconds_per_frame", "check_points_on_frame", "pseudo_box_quality",
           "pseudo_boxes", "sparse_key_frames"]
