"""Greedy NMS (`ebm_jax.ops.boxes.greedy_nms`, the NMS of SoCL's TOP maps) against a
direct transcription with a scalar IoU, and on hand cases."""

from __future__ import annotations

import numpy as np
import pytest

from ebm_jax.ops.boxes import greedy_nms


def scalar_iou(a, b) -> float:
    """IoU of two xywh boxes in continuous coordinates with the toolkit's machine eps
    (GOT-10k `rect_iou`), transcribed with Python floats."""
    w = max(min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]), 0.0)
    h = max(min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]), 0.0)
    inter = w * h
    return inter / (a[2] * a[3] + b[2] * b[3] - inter + float(np.finfo(np.float64).eps))


def reference_nms(boxes, scores, iou, keep):
    order = sorted(range(len(boxes)), key=lambda k: (-scores[k], k))
    kept = []
    for k in order:
        if len(kept) == keep:
            break
        if all(scalar_iou(boxes[k], boxes[j]) <= iou for j in kept):
            kept.append(k)
    return np.array(kept, int)


def test_nms_matches_reference():
    rng = np.random.default_rng(7)
    for trial in range(5):
        boxes = np.column_stack([rng.uniform(0, 50, (150, 2)), rng.uniform(5, 40, (150, 2))])
        scores = rng.integers(0, 20, 150).astype(float)  # many ties
        for iou, keep in ((0.7, 64), (0.3, 10), (0.5, 1000)):
            np.testing.assert_array_equal(greedy_nms(boxes, scores, iou, keep),
                                          reference_nms(boxes, scores, iou, keep))


def test_nms_hand_case():
    boxes = np.array([[0, 0, 10, 5], [0, 0, 10, 10], [0, 0, 10, 4.9], [20, 0, 10, 10]])
    scores = np.array([0.5, 0.9, 0.4, 0.9])
    # IoU(box 1, box 0) = 0.5 exactly: kept at iou 0.5 (dropped only above it); box 2
    # overlaps box 1 by 0.49 and box 0 by 0.98
    np.testing.assert_array_equal(greedy_nms(boxes, scores, 0.5, 10), [1, 3, 0])
    np.testing.assert_array_equal(greedy_nms(boxes, scores, 0.45, 10), [1, 3])
    np.testing.assert_array_equal(greedy_nms(boxes, scores, 0.5, 2), [1, 3])
    # ties go to the lower index: by score 1, 3, 0, 2; IoU(1, 3) = 80/120, IoU(1, 0) = 90/110
    boxes = np.array([[0.0, 0, 10, 10], [1, 0, 10, 10], [30, 30, 5, 5], [3, 0, 10, 10]])
    scores = np.array([0.5, 0.9, 0.3, 0.9])
    np.testing.assert_array_equal(greedy_nms(boxes, scores, 0.7, 10), [1, 3, 2])
    np.testing.assert_array_equal(greedy_nms(boxes, scores, 0.6, 10), [1, 2])
    np.testing.assert_array_equal(greedy_nms(boxes, scores, 0.7, 2), [1, 3])


def test_nms_refuses_bad_arguments():
    boxes = np.array([[0.0, 0, 10, 10], [1, 0, 10, 10], [30, 30, 5, 5]])
    scores = np.array([0.5, 0.9, 0.3])
    for kwargs, message in ((dict(iou=0.0), "iou must be in"), (dict(keep=0), "keep must be"),
                            (dict(scores=scores[:2]), "scores must be"),
                            (dict(boxes=boxes[:, :3]), "boxes must be")):
        args = dict(boxes=boxes, scores=scores, iou=0.5, keep=3) | kwargs
        with pytest.raises(ValueError, match=message):
            greedy_nms(**args)
