"""Tracking metrics: hand-computed cases and the GOT-10k toolkit (PyPI `got10k`) as an
oracle on random boxes."""

from __future__ import annotations

import numpy as np
import pytest

from ebm_jax.eval import tracking as tm


def constant_track(n, box=(10.0, 10.0, 20.0, 20.0), shift=(0.0, 0.0)):
    gt = np.tile(np.array(box, np.float64), (n, 1))
    pred = gt.copy()
    pred[:, :2] += shift
    return pred, gt


def test_box_iou_hand_cases():
    a = np.array([[0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 10, 10], [2, 2, 4, 4]], float)
    b = np.array([[5, 5, 10, 10], [10, 0, 5, 5], [0, 0, 10, 10], [0, 0, 10, 10]], float)
    np.testing.assert_allclose(tm.box_iou(a, b), [25 / 175, 0.0, 1.0, 16 / 100])
    # touching boxes share an edge of zero area: IoU 0 exactly (no +1 convention)
    assert tm.box_iou(a[1:2], b[1:2])[0] == 0.0
    assert np.isnan(tm.box_iou([[np.nan, 0, 1, 1]], [[0, 0, 1, 1]])[0])


def test_box_iou_bound_clips_like_the_toolkit():
    # x < 0 moves the box to x = 0 (toolkit quirk); past the right edge cuts the width
    a = np.array([[-5, 0, 10, 10], [15, 0, 10, 10], [0, 15, 10, 10]], float)
    b = np.array([[0, 0, 10, 10], [15, 0, 5, 10], [0, 15, 10, 5]], float)
    np.testing.assert_allclose(tm.box_iou(a, b, bound=(20, 20)), [1.0, 1.0, 1.0])
    np.testing.assert_allclose(tm.box_iou(a, b), [50 / 150, 0.5, 0.5])
    # bound is (width, height): a tall image does not cut the second box's width at 20
    np.testing.assert_allclose(tm.box_iou(a[1:2], b[1:2], bound=(40, 20)), [0.5])


def test_center_errors_hand_cases():
    a = np.array([[1, 1, 3, 3], [0, 0, 2, 2]], float)
    b = np.array([[4, 5, 3, 3], [0, 0, 4, 4]], float)
    np.testing.assert_allclose(tm.center_error(a, b), [5.0, np.sqrt(2)])
    pred, gt = constant_track(1, box=(10, 10, 30, 40), shift=(3, 4))
    np.testing.assert_allclose(tm.normalized_center_error(pred, gt), [np.sqrt(0.02)])


def test_curves_strictness_and_inclusiveness():
    # IoU exactly 0 does not count at t = 0; error exactly t counts at t
    pred, gt = constant_track(4, shift=(25, 0))  # disjoint boxes, error 25 px
    assert tm.success_curve(pred, gt)[0] == 0.0
    prec = tm.precision_curve(pred, gt)
    assert prec[24] == 0.0 and prec[25] == 1.0 and prec[50] == 1.0
    perfect = tm.success_curve(gt, gt)
    np.testing.assert_array_equal(perfect, [1.0] * 20 + [0.0])
    assert tm.success_curve(gt, gt).shape == (21,)
    assert tm.normalized_precision_curve(gt, gt).shape == (51,)


def test_perfect_tracker_scores_20_of_21():
    pred, gt = constant_track(7)
    m = tm.otb_metrics([pred, pred[:3]], [gt, gt[:3]])
    assert m["auc"] == pytest.approx(20 / 21)
    assert m["precision"] == 1.0 and m["norm_precision"] == 1.0
    assert m["num_sequences"] == 2 and m["num_frames"] == 10
    assert len(m["success_curve"]) == 21 and len(m["precision_curve"]) == 51
    assert len(m["norm_precision_curve"]) == 51


def test_shifted_tracker_hand_computed():
    n = 5
    pred, gt = constant_track(n, shift=(5, 0))  # IoU (15*20)/(800-300) = 0.6, error 5
    m = tm.otb_metrics([pred], [gt])
    # the first frame is the ground truth (IoU 1): 1/n of the frames at every t < 1
    expected = np.where(tm.SUCCESS_THRESHOLDS < 0.6 - 1e-9, 1.0, 1 / n)
    expected[-1] = 0.0
    np.testing.assert_allclose(m["success_curve"], expected)
    assert m["auc"] == pytest.approx(expected.mean())
    prec = np.asarray(m["precision_curve"])
    np.testing.assert_allclose(prec[:5], 1 / n)
    np.testing.assert_allclose(prec[5:], 1.0)
    far, gt = constant_track(n, shift=(25, 0))
    m = tm.otb_metrics([far], [gt])
    assert m["auc"] == pytest.approx(20 / 21 / n) and m["precision"] == pytest.approx(1 / n)
    # 25 px over a 20 px box: normalised error 1.25, beyond 0.5
    assert m["norm_precision"] == pytest.approx(1 / n)
    s = tm.sequence_scores(pred, constant_track(n)[1])
    assert s["ao"] == pytest.approx((1 + 0.6 * (n - 1)) / n, rel=1e-12)
    assert s["precision"] == 1.0 and s["num_frames"] == n


def test_otb_averages_sequences_not_frames():
    good, gt_a = constant_track(2)
    bad, gt_b = constant_track(4, shift=(100, 0))
    m = tm.otb_metrics([good, bad], [gt_a, gt_b])
    assert m["auc"] == pytest.approx((20 / 21 + 20 / 21 / 4) / 2)
    assert m["precision"] == pytest.approx((1 + 1 / 4) / 2)


def test_nan_ground_truth_skipped_nan_prediction_fails():
    pred, gt = constant_track(6, shift=(5, 0))
    gt_nan = gt.copy()
    gt_nan[[2, 4]] = np.nan
    keep = [0, 1, 3, 5]
    a = tm.otb_metrics([pred], [gt_nan])
    b = tm.otb_metrics([pred[keep]], [gt[keep]])
    assert a == b and a["num_frames"] == 4
    lost = pred.copy()
    lost[3] = np.nan
    s = tm.sequence_scores(lost, gt)
    assert s["ao"] == pytest.approx((1 + 0.6 * 4) / 6)
    assert s["precision"] == pytest.approx(5 / 6)
    g = tm.got10k_metrics([lost], [gt])
    assert g["ao"] == pytest.approx(0.6 * 4 / 5) and g["num_frames"] == 5


def test_got10k_skips_first_and_invisible_frames_frame_weighted():
    good, gt_a = constant_track(3)
    good[0] += 50  # the first frame is never scored
    bad, gt_b = constant_track(5, shift=(100, 0))
    m = tm.got10k_metrics([good, bad], [gt_a, gt_b])
    assert m["ao"] == pytest.approx(2 / 6) and m["sr50"] == pytest.approx(2 / 6)
    assert m["num_frames"] == 6 and len(m["success_curve"]) == 101
    visible = [np.ones(3, bool), np.array([1, 0, 0, 1, 1], bool)]
    m = tm.got10k_metrics([good, bad], [gt_a, gt_b], visible=visible)
    assert m["ao"] == pytest.approx(2 / 4) and m["num_frames"] == 4
    # clipping to a (height, width) image: both boxes cut at the right edge agree
    pred, gt = constant_track(2, box=(20, 5, 20, 10))
    pred[:, 2] = 30  # wider than the gt, the extra part beyond x = 40
    assert tm.got10k_metrics([pred], [gt])["ao"] == pytest.approx(200 / 300)
    m = tm.got10k_metrics([pred], [gt], image_sizes=[(100, 40)])
    assert m["ao"] == pytest.approx(1.0) and m["sr75"] == 1.0
    m = tm.got10k_metrics([pred], [gt], image_sizes=[(40, 100)])  # (h, w), not (w, h)
    assert m["ao"] == pytest.approx(200 / 300)


def test_shape_errors_name_the_sequence():
    pred, gt = constant_track(4)
    with pytest.raises(ValueError, match="sequence 1: pred has 3 boxes but gt has 4"):
        tm.otb_metrics([pred, pred[:3]], [gt, gt])
    with pytest.raises(ValueError, match=r"sequence 0: gt must be an \(N, 4\)"):
        tm.got10k_metrics([pred], [gt[:, :3]])
    with pytest.raises(ValueError, match="visible has 1 entries but there are 2"):
        tm.got10k_metrics([pred, pred], [gt, gt], visible=[np.ones(4, bool)])
    with pytest.raises(ValueError, match="sequence 0: visible must have shape"):
        tm.got10k_metrics([pred], [gt], visible=[np.ones(3, bool)])
    with pytest.raises(ValueError, match="first frame has no box"):
        tm.otb_metrics([pred], [np.vstack([[np.nan] * 4, gt[1:]])])
    with pytest.raises(ValueError, match="empty"):
        tm.otb_metrics([], [])


def random_boxes(rng, n, size=(120, 80)):
    """Boxes around a (width, height) image, some partly outside, some near-identical
    pairs and some disjoint."""
    w = rng.uniform(2, 60, n)
    h = rng.uniform(2, 60, n)
    x = rng.uniform(-30, size[0], n)
    y = rng.uniform(-30, size[1], n)
    return np.stack([x, y, w, h], axis=1)


def test_against_the_got10k_toolkit():
    pytest.importorskip("got10k")
    pytest.importorskip("shapely")
    from got10k.experiments.got10k import ExperimentGOT10k
    from got10k.experiments.otb import ExperimentOTB
    from got10k.utils.metrics import center_error, rect_iou

    rng = np.random.default_rng(0)
    lengths = [30, 7, 55, 12]
    gts = [random_boxes(rng, n) for n in lengths]
    preds = []
    for gt in gts:
        pred = gt + rng.normal(0, 6, gt.shape)
        pred[:, 2:] = np.abs(pred[:, 2:]) + 1
        pred[::5] = random_boxes(rng, len(pred[::5]))  # some far misses
        preds.append(pred)
    a, b = np.vstack(preds), np.vstack(gts)
    np.testing.assert_allclose(tm.box_iou(a, b), rect_iou(a.copy(), b.copy()), atol=1e-15)
    np.testing.assert_allclose(tm.box_iou(a, b, bound=(120, 80)),
                               rect_iou(a.copy(), b.copy(), bound=(120, 80)), atol=1e-15)
    np.testing.assert_allclose(tm.center_error(a, b), center_error(a, b), atol=1e-12)

    # OTB report: boxes[0] = anno[0], per-sequence curves, mean over sequences
    otb = object.__new__(ExperimentOTB)
    otb.nbins_iou, otb.nbins_ce = 21, 51
    succ, prec = [], []
    for pred, gt in zip(preds, gts):
        boxes = pred.copy()
        boxes[0] = gt[0]
        s, p = otb._calc_curves(rect_iou(boxes, gt.copy()), center_error(boxes, gt))
        succ.append(s)
        prec.append(p)
    succ, prec = np.mean(succ, axis=0), np.mean(prec, axis=0)
    ours = tm.otb_metrics(preds, gts)
    np.testing.assert_allclose(ours["success_curve"], succ, atol=1e-15)
    np.testing.assert_allclose(ours["precision_curve"], prec, atol=1e-15)
    assert ours["auc"] == pytest.approx(np.mean(succ), abs=1e-15)
    assert ours["precision"] == pytest.approx(prec[20], abs=1e-15)
    assert 0.05 < ours["auc"] < 0.9  # a case where the curves are not trivial
    for pred, gt in zip(preds, gts):
        boxes = pred.copy()
        boxes[0] = gt[0]
        s, p = otb._calc_curves(rect_iou(boxes, gt.copy()), center_error(boxes, gt))
        scores = tm.sequence_scores(pred, gt)
        assert scores["auc"] == pytest.approx(np.mean(s), abs=1e-15)
        assert scores["precision"] == pytest.approx(p[20], abs=1e-15)

    # GOT-10k report: clipped IoUs of frames 1.. where cover > 0, concatenated
    sizes = [(80, 120), (60, 90), (80, 120), (100, 50)]  # (height, width)
    covers = [rng.integers(0, 9, n) for n in lengths]
    ious = np.concatenate([
        rect_iou(p[1:].copy(), g[1:].copy(), bound=(w, h))[c[1:] > 0]
        for p, g, c, (h, w) in zip(preds, gts, covers, sizes)])
    got = object.__new__(ExperimentGOT10k)
    ao, sr, _, curve = got._evaluate(ious, np.array([]))
    ours = tm.got10k_metrics(preds, gts, visible=[c > 0 for c in covers],
                             image_sizes=sizes)
    assert ours["ao"] == pytest.approx(ao, abs=1e-15)
    assert ours["sr50"] == pytest.approx(sr, abs=1e-15)
    assert ours["sr75"] == pytest.approx(np.mean(ious > 0.75), abs=1e-15)
    np.testing.assert_allclose(ours["success_curve"], curve, atol=1e-15)
    assert ours["num_frames"] == len(ious)


def test_normalized_precision_brute_force():
    rng = np.random.default_rng(1)
    gt = random_boxes(rng, 40)
    pred = gt + rng.normal(0, 4, gt.shape)
    pred[0] = gt[0]
    errors = []
    for p, g in zip(pred, gt):  # pytracking: centres divided by the gt size, per axis
        pc, gc = p[:2] + (p[2:] - 1) / 2, g[:2] + (g[2:] - 1) / 2
        errors.append(np.hypot(*((pc - gc) / g[2:])))
    curve = [np.mean(np.array(errors) <= t) for t in np.arange(51) / 100]
    np.testing.assert_allclose(tm.normalized_precision_curve(pred, gt), curve)
    assert tm.otb_metrics([pred], [gt])["norm_precision"] == pytest.approx(curve[20])


def annotation_boxes(rng, n):
    """Boxes as annotation files hold them (0.1 px), of sizes drawn apart from any other
    box's: decimals that binary floating point does not hold exactly."""
    return np.round(random_boxes(rng, n), 1)


def test_centre_errors_and_curves_are_the_toolkits_to_the_last_bit():
    """The toolkit's centre is `xy + (wh - 1) / 2`. Between two boxes the -1/2 cancels,
    so `xy + wh / 2` moves an error by rounding only, which no tolerance sees; but a
    curve counts an error against its thresholds with <=, so at a threshold the rounding
    decides. Every centre-based figure is therefore compared with the toolkit (and
    pytracking's normalised error, which the toolkit lacks) exactly, on boxes whose sizes
    differ between prediction and ground truth, and at two thresholds by hand."""
    pytest.importorskip("got10k")
    pytest.importorskip("shapely")
    from got10k.experiments.otb import ExperimentOTB
    from got10k.utils.metrics import center_error, rect_iou

    def toolkit_centre(boxes):  # got10k.utils.metrics.center_error's
        return boxes[..., :2] + (boxes[..., 2:] - 1) / 2

    def normalized(pred, gt):  # pytracking calc_err_center(normalized=True)
        d = (toolkit_centre(pred) - toolkit_centre(gt)) / gt[..., 2:]
        return np.sqrt(np.sum(np.power(d, 2), axis=-1))

    otb = object.__new__(ExperimentOTB)
    otb.nbins_iou, otb.nbins_ce = 21, 51
    rng = np.random.default_rng(7)
    gts = [annotation_boxes(rng, n) for n in (40, 9, 61)]
    preds = [annotation_boxes(rng, len(g)) for g in gts]  # sizes of their own
    for pred, gt in zip(preds, gts):
        near = pred[::2]  # half the frames near the truth, for precision's thresholds
        near[:, :2] = np.round(gt[::2, :2] + rng.normal(0, 8, (len(near), 2)), 1)
    for pred, gt in zip(preds, gts):
        assert (pred[:, 2:] != gt[:, 2:]).all()
        np.testing.assert_array_equal(tm.center_error(pred, gt), center_error(pred, gt))
        np.testing.assert_array_equal(tm.normalized_center_error(pred, gt),
                                      normalized(pred, gt))
        _, prec = otb._calc_curves(rect_iou(pred.copy(), gt.copy()),
                                   center_error(pred, gt))
        np.testing.assert_array_equal(tm.precision_curve(pred, gt), prec)
        norm = np.mean(normalized(pred, gt)[:, None] <= tm.NORM_PRECISION_THRESHOLDS,
                       axis=0)
        np.testing.assert_array_equal(tm.normalized_precision_curve(pred, gt), norm)
    curves = []
    for pred, gt in zip(preds, gts):
        boxes = pred.copy()
        boxes[0] = gt[0]
        curves.append(otb._calc_curves(rect_iou(boxes, gt.copy()),
                                       center_error(boxes, gt))[1])
    ours = tm.otb_metrics(preds, gts)
    np.testing.assert_array_equal(ours["precision_curve"], np.mean(curves, axis=0))
    assert 0.1 < ours["precision"] < 0.9  # a case where the curve is not trivial

    # at 20 px: 33.8 - (59.4 - 31.8) / 2 = 20 exactly, and the toolkit gets 20.0, so
    # the frame counts; xy + wh / 2 gets 20.000000000000007 and drops it
    pred, gt = np.array([[48.5, 10.5, 31.8, 39.7]]), np.array([[14.7, 10.5, 59.4, 39.7]])
    assert center_error(pred, gt)[0] == 20.0 == tm.center_error(pred, gt)[0]
    assert tm.precision_curve(pred, gt)[tm.PRECISION_AT] == 1.0
    assert tm.sequence_scores(np.vstack([gt, pred]), np.vstack([gt, gt]))["precision"] \
        == 1.0
    # at 0.2: (23.45 - (37.0 - 4.9) / 2) / 37.0 = 0.2, within the threshold as the
    # toolkit's centres round it
    pred, gt = np.array([[133.15, 55.5, 4.9, 21.6]]), np.array([[109.7, 55.5, 37.0, 21.6]])
    assert normalized(pred, gt)[0] <= 0.2
    assert tm.normalized_precision_curve(pred, gt)[20] == 1.0
    assert tm.otb_metrics([np.vstack([gt, pred])], [np.vstack([gt, gt])])[
        "norm_precision"] == 1.0
