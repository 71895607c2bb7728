"""Pseudo boxes from sparse boxes and points: the 20 px rule on a tracker that drifts by
a known amount, a tracker lost everywhere, absent frames, the key frames, the cost per
frame, the quality summary, the correlation filter tracker on a drawn target, and the
refused inputs."""

import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import pytest

from ebm_jax.tracking.dcf import DCFSettings, make_dcf_tracker
from ebm_jax.tracking.pseudo_boxes import (
    annotation_seconds_per_frame,
    pseudo_box_quality,
    pseudo_boxes,
    sparse_key_frames,
)
from tests.tracking.drawn_targets import PixelPyramid, drawn_sequence

SHAPE = (120, 200, 3)


class _State(NamedTuple):
    center: jnp.ndarray
    size: jnp.ndarray


class DriftingTracker:
    """init at the box; each update moves the centre `drift` px right (or to NaN with
    drift=None); relocate sets the centre."""

    def __init__(self, drift):
        self.drift = drift

    def init(self, params, frame, box):
        x, y, w, h = box
        return _State(jnp.asarray([y - 1 + (h - 1) / 2, x - 1 + (w - 1) / 2]),
                      jnp.asarray([h, w], jnp.float32))

    def update(self, params, state, frame):
        step = jnp.asarray([0.0, self.drift if self.drift is not None else jnp.nan])
        new = state._replace(center=state.center + step)
        (cy, cx), (h, w) = new.center, new.size
        return new, jnp.stack([cx + 1 - (w - 1) / 2, cy + 1 - (h - 1) / 2, w, h])

    def relocate(self, state, center):
        return state._replace(center=jnp.asarray(center))


def _static(n=12, x=50.0, y=40.0, w=21.0, h=15.0):
    boxes = np.tile([x, y, w, h], (n, 1))
    points = boxes[:, :2] + (boxes[:, 2:] - 1) / 2
    return boxes, points


def _read(i):
    return np.zeros(SHAPE, np.uint8)


def test_the_20_px_rule_on_a_drifting_tracker():
    boxes, points = _static()
    keys = sparse_key_frames(np.ones(12, bool), 10)
    np.testing.assert_array_equal(keys, [0, 10])
    result = pseudo_boxes(DriftingTracker(8.0), None, _read, boxes, points, keys)
    # 8 px a frame: 8, 16, 24 > 20 -> a failure, moved back to the point, and again
    # three frames on; frame 10 starts a new snippet from its box
    expected = np.zeros(12, bool)
    expected[[3, 6, 9]] = True
    np.testing.assert_array_equal(result.failed, expected)
    np.testing.assert_array_equal(result.keyed, np.isin(np.arange(12), [0, 10]))
    centre_x = result.boxes[:, 0] + (result.boxes[:, 2] - 1) / 2
    np.testing.assert_allclose(centre_x - points[:, 0],
                               [0, 8, 16, 0, 8, 16, 0, 8, 16, 0, 0, 8], atol=1e-4)
    np.testing.assert_allclose(result.boxes[:, 2:], boxes[:, 2:])
    assert np.all(result.seconds[1:] > 0)
    # exactly at the radius: no failure (the rule is "more than 20 px")
    edge = pseudo_boxes(DriftingTracker(10.0), None, _read, boxes, points, keys)
    assert not edge.failed[2] and edge.failed[3]


def test_points_off_the_frame_move_the_tracker_there_when_allowed():
    boxes, points = _static()
    points[4] = [-8.0, 20.0]  # the box centre 8.5 px left of the frame's edge
    with pytest.raises(ValueError, match="frame 5: point"):
        pseudo_boxes(DriftingTracker(0.0), None, _read, boxes, points, np.array([0]))
    result = pseudo_boxes(DriftingTracker(0.0), None, _read, boxes, points, np.array([0]),
                          off_frame=10.0)
    assert result.failed[4] and not result.failed[3]
    np.testing.assert_allclose(result.boxes[4, 0] + (result.boxes[4, 2] - 1) / 2, -8.0,
                               atol=1e-4)


def test_a_tracker_lost_everywhere_still_gives_a_box_per_visible_frame():
    boxes, points = _static()
    points[5] = np.nan  # the target is out of view in frame 5
    keys = np.array([0])
    result = pseudo_boxes(DriftingTracker(None), None, _read, boxes, points, keys)
    visible = np.isfinite(points).all(1)
    assert np.all(np.isfinite(result.boxes[visible]))
    assert np.all(np.isnan(result.boxes[5]))
    np.testing.assert_array_equal(result.failed, visible & (np.arange(12) > 0))
    # every box is the point with the first box's size
    centres = result.boxes[visible, :2] + (result.boxes[visible, 2:] - 1) / 2
    np.testing.assert_allclose(centres, points[visible], atol=1e-4)


def test_key_frames_move_to_the_first_frame_in_view():
    has_box = np.array([0, 1, 1, 1, 0, 0, 0, 0, 1, 1], bool)
    np.testing.assert_array_equal(sparse_key_frames(has_box, 4), [1, 8])
    np.testing.assert_array_equal(sparse_key_frames(np.ones(7, bool), 1), np.arange(7))
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="every"):
            sparse_key_frames(has_box, bad)


def test_annotation_cost_per_frame_is_the_papers_formula():
    # the paper: 2.27 (1 - 1/10) + 10.2 / 10 + 0.1 = 3.163 s at T = 10
    cost = annotation_seconds_per_frame(10, box_seconds=10.2, point_seconds=2.27,
                                        tracker_seconds=0.1)
    assert math.isclose(cost, 3.163, rel_tol=1e-12)
    assert annotation_seconds_per_frame(1, box_seconds=10.2, point_seconds=2.27) == 10.2
    with pytest.raises(ValueError, match="tracker_seconds"):
        annotation_seconds_per_frame(10, box_seconds=1, point_seconds=1,
                                     tracker_seconds=-1.0)


def test_quality_scores_the_unkeyed_frames_with_a_true_box():
    truth = np.array([[1, 1, 10, 10], [1, 1, 10, 10], [1, 1, 10, 10],
                      [np.nan] * 4], float)
    pseudo = np.array([[1, 1, 10, 10], [6, 1, 10, 10], [1, 1, 10, 10], [1, 1, 4, 4]], float)
    q = pseudo_box_quality(pseudo, truth, failed=[False, True, False, True],
                           keyed=[True, False, False, False])
    # frame 1: IoU 50 / 150; frame 2: 1; frame 3 has no true box
    assert q["frames"] == 2
    assert math.isclose(q["mean_iou"], (1 / 3 + 1) / 2, rel_tol=1e-12)
    assert q["iou_above_0.5"] == 0.5 and q["failures_per_100"] == 50.0


def test_the_correlation_filter_gives_pseudo_boxes_close_to_the_truth():
    frames, gt = drawn_sequence(20)
    points = gt[:, :2] + (gt[:, 2:] - 1) / 2
    tracker, params = make_dcf_tracker(PixelPyramid(), DCFSettings(scale_num=3))
    keys = sparse_key_frames(np.ones(20, bool), 10)
    result = pseudo_boxes(tracker, params, lambda i: frames[i], gt, points, keys)
    q = pseudo_box_quality(result.boxes, gt, result.failed, result.keyed)
    assert q["frames"] == 18 and q["mean_iou"] > 0.8 and q["failures_per_100"] == 0


@pytest.mark.parametrize("change, message", [
    (dict(radius=0.0), "radius"),
    (dict(radius=math.nan), "radius"),
    (dict(keys=np.array([3, 1])), "keys must be increasing"),
    (dict(box0=[np.nan] * 4), "snippet's first frame"),
    (dict(box0=[300.0, 40.0, 20.0, 10.0]), "wholly outside"),
    (dict(point=[500.0, 10.0]), "more than 0 px off the 200 x 120"),
    (dict(point=[250.0, 10.0], off_frame=-1.0), "off_frame must be"),
    (dict(point=[np.nan, 10.0]), "half NaN"),
    (dict(keys=np.array([2])), "no snippet starts before"),
])
def test_bad_inputs_name_the_setting(change, message):
    boxes, points = _static()
    if "box0" in change:
        boxes[0] = change["box0"]
    if "point" in change:
        points[4] = change["point"]
    with pytest.raises(ValueError, match=message):
        pseudo_boxes(DriftingTracker(1.0), None, _read, boxes, points,
                     change.get("keys", np.array([0, 10])),
                     radius=change.get("radius", 20.0),
                     off_frame=change.get("off_frame", 0.0))
