"""Single-object tracking metrics, exactly as the GOT-10k toolkit (PyPI `got10k` 0.1.3,
`got10k.utils.metrics` and `got10k.experiments`) defines them, vectorised in NumPy.

    scores = otb_metrics(preds, gts)          # OTB one-pass evaluation: auc, precision
    scores = got10k_metrics(preds, gts, visible=[s.visible for s in seqs],
                            image_sizes=[s.image_size for s in seqs])      # ao, sr50, sr75

Boxes are (N, 4) arrays `(x, y, w, h)` (the OTB / GOT-10k convention). IoU uses
continuous coordinates (no +1 in the intersection, unlike pytracking); a box's centre is
`xy + (wh - 1) / 2`. A NaN prediction (a tracker that reports no box) counts as a failure
in every metric: IoU 0 and an infinite centre error. Frames whose ground truth is NaN
(no box: absent target, or an unannotated frame) are skipped.
"""

from __future__ import annotations

import numpy as np

from ebm_jax.ops.boxes import box_iou_np

SUCCESS_THRESHOLDS = np.linspace(0, 1, 21)  # OTB success plot (toolkit: nbins_iou = 21)
PRECISION_THRESHOLDS = np.arange(0, 51)  # OTB precision plot, pixels (nbins_ce = 51)
NORM_PRECISION_THRESHOLDS = np.linspace(0, 0.5, 51)  # LaSOT / TrackingNet, 0..0.5
GOT10K_SUCCESS_THRESHOLDS = np.linspace(0, 1, 101)  # ExperimentGOT10k._evaluate
PRECISION_AT = 20  # px: OTB's precision score
NORM_PRECISION_AT = 0.2  # normalised precision score (pytracking's LaSOT/TrackingNet)


def _boxes(x, name: str) -> np.ndarray:
    boxes = np.asarray(x, np.float64)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError(f"{name} must be an (N, 4) array of x, y, w, h boxes, got shape "
                         f"{boxes.shape}")
    return boxes


def _pair(pred, gt, where: str = "") -> tuple[np.ndarray, np.ndarray]:
    pred, gt = _boxes(pred, f"{where}pred"), _boxes(gt, f"{where}gt")
    if len(pred) != len(gt):
        raise ValueError(f"{where}pred has {len(pred)} boxes but gt has {len(gt)}; they "
                         "must have one box per frame each")
    return pred, gt


def _clip_to_image(boxes: np.ndarray, width: float, height: float) -> np.ndarray:
    """GOT-10k toolkit's bound (`rect_iou(..., bound)`): x, y clipped to [0, W], [0, H],
    then w, h clipped to [0, W - x], [0, H - y] with the clipped x, y. Note the toolkit's
    quirk, kept here: a box with x < 0 is moved to x = 0, not cut at the border."""
    x = np.clip(boxes[:, 0], 0, width)
    y = np.clip(boxes[:, 1], 0, height)
    w = np.clip(boxes[:, 2], 0, width - x)
    h = np.clip(boxes[:, 3], 0, height - y)
    return np.stack([x, y, w, h], axis=1)


def box_iou(a, b, bound: tuple[float, float] | None = None) -> np.ndarray:
    """Row-wise IoU of (N, 4) x (N, 4) xywh boxes in continuous coordinates (GOT-10k
    toolkit `rect_iou`: intersection / (union + machine eps), clipped to [0, 1]).
    bound=(width, height) first clips both boxes to the image as the toolkit does for
    GOT-10k (see `_clip_to_image`). NaN where either box has a NaN. The arithmetic is
    `ebm_jax.ops.boxes.box_iou_np`."""
    a, b = _pair(a, b)
    if bound is not None:
        if len(bound) != 2:
            raise ValueError(f"bound must be (width, height), got {bound!r}")
        a, b = _clip_to_image(a, *bound), _clip_to_image(b, *bound)
    return np.clip(box_iou_np(a, b, box_format="xywh"), 0.0, 1.0)


def _centre(boxes: np.ndarray) -> np.ndarray:
    return boxes[:, :2] + (boxes[:, 2:] - 1) / 2


def center_error(a, b) -> np.ndarray:
    """Euclidean distance between the centres `xy + (wh - 1) / 2` (GOT-10k toolkit
    `center_error`; the precision plot of Wu et al. 2013, "Online Object Tracking: A
    Benchmark")."""
    a, b = _pair(a, b)
    return np.linalg.norm(_centre(a) - _centre(b), axis=1)


def normalized_center_error(a, b) -> np.ndarray:
    """Centre error with each axis divided by the ground truth's (`b`'s) width and height
    (the normalised precision of TrackingNet, Muller et al. 2018, and LaSOT, Fan et al.
    2019; pytracking's `calc_err_center(normalized=True)`)."""
    a, b = _pair(a, b)
    return np.linalg.norm((_centre(a) - _centre(b)) / b[:, 2:], axis=1)


def _valid_gt(gt: np.ndarray) -> np.ndarray:
    return np.isfinite(gt).all(axis=1)


def _fraction_above(values: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Fraction of `values` > each threshold (strictly, as the toolkit's np.greater)."""
    return np.mean(values[:, None] > thresholds[None, :], axis=0)


def _fraction_within(values: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Fraction of `values` <= each threshold (the toolkit's np.less_equal)."""
    return np.mean(values[:, None] <= thresholds[None, :], axis=0)


def _scored_frames(pred, gt, where: str = ""):
    """IoU, centre error and normalised centre error of the frames with a gt box; NaN
    predictions become IoU 0 and infinite errors."""
    pred, gt = _pair(pred, gt, where)
    keep = _valid_gt(gt)
    if not keep.any():
        raise ValueError(f"{where}gt has no frame with a box (all NaN); nothing to score")
    pred, gt = pred[keep], gt[keep]
    iou = np.nan_to_num(box_iou(pred, gt), nan=0.0)
    ce = np.nan_to_num(center_error(pred, gt), nan=np.inf)
    nce = np.nan_to_num(normalized_center_error(pred, gt), nan=np.inf)
    return iou, ce, nce


def success_curve(pred, gt) -> np.ndarray:
    """(21,) fraction of frames with IoU > t, t in SUCCESS_THRESHOLDS (OTB success plot,
    Wu et al. 2013; toolkit `ExperimentOTB._calc_curves`). A frame with IoU exactly t
    does not count."""
    return _fraction_above(_scored_frames(pred, gt)[0], SUCCESS_THRESHOLDS)


def precision_curve(pred, gt) -> np.ndarray:
    """(51,) fraction of frames with centre error <= t px, t = 0..50 (OTB precision plot;
    toolkit `ExperimentOTB._calc_curves`)."""
    return _fraction_within(_scored_frames(pred, gt)[1], PRECISION_THRESHOLDS)


def normalized_precision_curve(pred, gt) -> np.ndarray:
    """(51,) fraction of frames with normalised centre error <= t, t in
    NORM_PRECISION_THRESHOLDS = 0, 0.01, ..., 0.5 (TrackingNet / LaSOT)."""
    return _fraction_within(_scored_frames(pred, gt)[2], NORM_PRECISION_THRESHOLDS)


def _check_lists(preds, gts) -> None:
    if not isinstance(preds, (list, tuple)) or not isinstance(gts, (list, tuple)):
        raise ValueError("preds and gts must be lists with one (N, 4) array per sequence")
    if len(preds) != len(gts):
        raise ValueError(f"preds has {len(preds)} sequences but gts has {len(gts)}")
    if not preds:
        raise ValueError("preds and gts are empty; need at least one sequence")


def _otb_sequence(pred, gt, where: str):
    """One sequence under the OTB protocol: the first prediction is the ground truth
    (toolkit `ExperimentOTB.report`: boxes[0] = anno[0])."""
    pred, gt = _pair(pred, gt, where)
    if not _valid_gt(gt[:1]).all():
        raise ValueError(f"{where}gt's first frame has no box ({gt[0].tolist()}); the "
                         "OTB protocol starts every sequence from it")
    pred = pred.copy()
    pred[0] = gt[0]
    iou, ce, nce = _scored_frames(pred, gt, where)
    return (iou, _fraction_above(iou, SUCCESS_THRESHOLDS),
            _fraction_within(ce, PRECISION_THRESHOLDS),
            _fraction_within(nce, NORM_PRECISION_THRESHOLDS))


def otb_metrics(preds: list[np.ndarray], gts: list[np.ndarray]) -> dict:
    """OTB one-pass evaluation (Wu et al. 2013/2015; GOT-10k toolkit `ExperimentOTB`):
    per sequence the success, precision and normalised precision curves over the frames
    with a ground-truth box, with the first frame set to the ground truth and counted (a
    perfect tracker scores auc = 20/21); curves averaged over sequences (each sequence
    weighs the same).

    Keys: success_curve, precision_curve, norm_precision_curve (lists); auc (mean of the
    success curve); precision (the curve at 20 px); norm_precision (the normalised curve
    at 0.2, the value pytracking reports as LaSOT/TrackingNet "Norm Prec"; the LaSOT
    paper's own ranking uses the area under that curve on [0, 0.5] instead);
    num_sequences; num_frames (frames scored)."""
    _check_lists(preds, gts)
    succ, prec, norm, frames = [], [], [], 0
    for s, (pred, gt) in enumerate(zip(preds, gts)):
        iou, sc, pc, nc = _otb_sequence(pred, gt, f"sequence {s}: ")
        succ.append(sc)
        prec.append(pc)
        norm.append(nc)
        frames += len(iou)
    succ, prec, norm = (np.mean(c, axis=0) for c in (succ, prec, norm))
    return {"success_curve": succ.tolist(), "precision_curve": prec.tolist(),
            "norm_precision_curve": norm.tolist(), "auc": float(np.mean(succ)),
            "precision": float(prec[PRECISION_AT]),
            "norm_precision": float(norm[int(round(NORM_PRECISION_AT * 100))]),
            "num_sequences": len(preds), "num_frames": int(frames)}


def got10k_metrics(preds: list[np.ndarray], gts: list[np.ndarray],
                   visible: list[np.ndarray] | None = None,
                   image_sizes: list[tuple[int, int]] | None = None) -> dict:
    """GOT-10k evaluation (Huang et al. 2019, "GOT-10k", TPAMI; toolkit
    `ExperimentGOT10k.report` and `_evaluate`): IoU of the boxes clipped to the image
    (`image_sizes[s]` = (height, width); no clipping when None), the first frame
    skipped, only frames where the target is visible (`visible[s]`, e.g.
    `Sequence.visible` = cover > 0; all frames when None) and the ground truth has a
    box; the IoUs of all sequences are concatenated, so each
    frame weighs the same. Repeated runs are scored by passing each run as a sequence.

    Keys: ao (mean IoU), sr50, sr75 (fraction with IoU > 0.5, > 0.75), success_curve
    (fraction with IoU > t for 101 thresholds linspace(0, 1, 101), a list), num_frames."""
    _check_lists(preds, gts)
    for arg, values in (("visible", visible), ("image_sizes", image_sizes)):
        if values is not None and len(values) != len(preds):
            raise ValueError(f"{arg} has {len(values)} entries but there are "
                             f"{len(preds)} sequences")
    ious = []
    for s, (pred, gt) in enumerate(zip(preds, gts)):
        where = f"sequence {s}: "
        pred, gt = _pair(pred, gt, where)
        keep = _valid_gt(gt)
        if visible is not None:
            vis = np.asarray(visible[s])
            if vis.shape != (len(gt),):
                raise ValueError(f"{where}visible must have shape ({len(gt)},), got "
                                 f"{vis.shape}")
            keep &= vis.astype(bool)
        bound = None
        if image_sizes is not None:
            size = tuple(image_sizes[s])
            if len(size) != 2 or min(size) <= 0:
                raise ValueError(f"{where}image size must be (height, width) > 0, got "
                                 f"{image_sizes[s]!r}")
            bound = (size[1], size[0])
        iou = np.nan_to_num(box_iou(pred[1:], gt[1:], bound), nan=0.0)
        ious.append(iou[keep[1:]])
    ious = np.concatenate(ious)
    if not len(ious):
        raise ValueError("no frame to score: every frame after the first is invisible or "
                         "has no ground-truth box")
    return {"ao": float(np.mean(ious)), "sr50": float(np.mean(ious > 0.5)),
            "sr75": float(np.mean(ious > 0.75)),
            "success_curve": _fraction_above(ious, GOT10K_SUCCESS_THRESHOLDS).tolist(),
            "num_frames": int(len(ious))}


def sequence_scores(pred, gt) -> dict:
    """One sequence's scores under the OTB protocol of `otb_metrics` (first frame set to
    the ground truth and counted, frames without a gt box skipped), for per-sequence
    tables and error analysis: auc, precision (20 px), norm_precision (0.2), ao (mean
    IoU of the same frames), num_frames."""
    iou, succ, prec, norm = _otb_sequence(pred, gt, "")
    return {"auc": float(np.mean(succ)), "precision": float(prec[PRECISION_AT]),
            "norm_precision": float(norm[int(round(NORM_PRECISION_AT * 100))]),
            "ao": float(np.mean(iou)), "num_frames": int(len(iou))}
