"""A detector's output on a detection set, in COCO result format: a simulated
per-class detector before NMS (the generated benchmark's), and the checks of a
detector's output (a detections file) before any training: every entry valid against
the annotations, and, for guided NMS, boxes from before NMS.

    dets = simulate_detections(paths.annotations, seed=0)   # COCO result entries
    check_detections(dets, annotations)                      # errors name the entry
    check_pre_nms(dets, 0.5, "detections file d.json")       # refuses post-NMS boxes
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable
from pathlib import Path

import numpy as np

from ebm_jax.ops.boxes import intersection_union


def _iou_xywh(a, b) -> float:
    """IoU of two xywh boxes (w, h > 0), intersection / union without an eps."""
    inter, union = intersection_union(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                      box_format="xywh", xp=np)
    return float(inter / union)


def _box_at_iou(box, target: float, rng) -> list[float]:
    """A perturbation of `box` (xywh) in a random direction of the relative space whose
    IoU with it is `target` (bisection on the perturbation's length)."""
    u = rng.normal(size=4)
    u /= np.linalg.norm(u)
    x, y, w, h = box

    def at(alpha):
        cx = x + w / 2 + alpha * u[0] * w
        cy = y + h / 2 + alpha * u[1] * h
        w2, h2 = w * math.exp(alpha * u[2]), h * math.exp(alpha * u[3])
        return [cx - w2 / 2, cy - h2 / 2, w2, h2]

    lo, hi = 0.0, 4.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if _iou_xywh(box, at(mid)) > target:
            lo = mid
        else:
            hi = mid
    return [float(v) for v in at(0.5 * (lo + hi))]


def _detector_score(iou: float, lo: float, hi: float, rng) -> float:
    """A candidate's score: grows with its IoU, plus noise (so the best-scored candidate
    of an object is not always the best-placed one: what guided NMS is for)."""
    return float(np.clip(0.3 + 0.7 * (iou - lo) / max(hi - lo, 1e-6)
                         + rng.normal(0, 0.1), 0.06, 1.0))


def simulate_detections(annotations: str | Path, *, seed: int = 0,
                        iou_range: tuple[float, float] = (0.5, 0.9),
                        false_positives: float = 1.0, miss_rate: float = 0.05,
                        candidates: float = 4.0, confusion: float = 0.2) -> list[dict]:
    """A detector's per-class output before NMS, in COCO result format (what guided NMS
    takes, IoU-Net, Jiang et al. 2018).

    Each ground-truth box is found with probability 1 - miss_rate, by 1 + Poisson(
    candidates - 1) overlapping candidates (`candidates` of them on average), each at an
    IoU uniform in `iou_range` with it and a score that grows with that IoU (plus noise);
    each candidate is also reported under another class with probability `confusion`,
    at half its score (a per-class detector scores every class of a proposal). On
    average `false_positives` random boxes per image, each with its own cluster of
    candidates, get low scores. Boxes can reach past the image, as a box regressor's
    do; `ebm_jax.detection.refine_detections` clips them. `candidates=1, confusion=0`
    gives one box per found object (no duplicates)."""
    lo, hi = iou_range
    if not 0.0 < lo <= hi < 1.0:
        raise ValueError(f"iou_range must satisfy 0 < low <= high < 1, got {iou_range}")
    if not (math.isfinite(candidates) and candidates >= 1.0):
        raise ValueError(f"candidates must be >= 1 (boxes per found object), got "
                         f"{candidates!r}")
    if not 0.0 <= confusion <= 1.0:
        raise ValueError(f"confusion must be in [0, 1], got {confusion!r}")
    gt = json.loads(Path(annotations).read_text())
    rng = np.random.default_rng(seed)
    cats = [c["id"] for c in gt["categories"]]
    out = []

    def cluster(image_id, category_id, box, score_of):
        for _ in range(1 + rng.poisson(candidates - 1.0)):
            iou = rng.uniform(lo, hi)
            entry = {"image_id": image_id, "category_id": category_id,
                     "bbox": _box_at_iou(box, iou, rng), "score": score_of(iou)}
            out.append(entry)
            others = [c for c in cats if c != category_id]
            if others and rng.random() < confusion:
                out.append({**entry, "category_id": int(rng.choice(others)),
                            "score": entry["score"] / 2})

    for ann in gt["annotations"]:
        if rng.random() < miss_rate:
            continue
        cluster(ann["image_id"], ann["category_id"], ann["bbox"],
                lambda iou: _detector_score(iou, lo, hi, rng))
    for img in gt["images"]:
        for _ in range(rng.poisson(false_positives)):
            w = rng.uniform(8, img["width"] / 2)
            h = rng.uniform(8, img["height"] / 2)
            box = [rng.uniform(0, img["width"] - w), rng.uniform(0, img["height"] - h), w, h]
            cluster(img["id"], int(rng.choice(cats)), box,
                    lambda iou: float(rng.uniform(0.05, 0.5)))
    return out


def duplicate_fraction(detections: list[dict], iou: float = 0.5) -> float:
    """The fraction of `detections` (COCO result entries) that overlap another one of
    the same image and class at IoU > `iou`: about 0 for a detector's output after NMS
    at that threshold, large before NMS (vectorised per image and class)."""
    groups: dict[tuple, list] = {}
    for d in detections:
        groups.setdefault((d["image_id"], d["category_id"]), []).append(d["bbox"])
    if not detections:
        return 0.0
    overlapping = 0
    for boxes in groups.values():
        if len(boxes) < 2:
            continue
        b = np.asarray(boxes, float)
        inter, union = intersection_union(b[:, None], b[None, :], box_format="xywh", xp=np)
        ious = inter / union
        np.fill_diagonal(ious, 0.0)
        overlapping += int(np.sum(ious.max(1) > iou))
    return overlapping / len(detections)


# below this duplicate_fraction a detections file is taken for a detector's post-NMS
# output (the old one-box-per-object simulator: 2 pairs in 260 boxes, 1.5%)
MIN_PRE_NMS_DUPLICATES = 0.02


def check_pre_nms(detections: list[dict], iou: float, where: str) -> None:
    """An error (starting with `where`) for detections that are evidently post-NMS:
    guided NMS (IoU-Net, Jiang et al. 2018) re-ranks the detector's per-class candidates
    before NMS, and on boxes NMS has already thinned it has nothing to choose from."""
    frac = duplicate_fraction(detections, iou)
    if frac < MIN_PRE_NMS_DUPLICATES:
        raise ValueError(
            f"{where}: only {frac:.1%} of its {len(detections)} boxes overlap another box "
            f"of their image and class at IoU > {iou:g} (a detector's output before NMS "
            f"has many such duplicates; at least {MIN_PRE_NMS_DUPLICATES:.0%} are "
            "expected): these look like boxes after NMS. Guided NMS needs the "
            "detector's per-class boxes before NMS (e.g. its box head's output with the "
            "NMS threshold set to 1.0); give those, or refine these boxes as they are "
            "with --config.guided_nms=false")


def check_xywh(bbox, where: str) -> np.ndarray:
    """A COCO bbox (x, y, w, h) as 4 finite numbers with w, h > 0, else an error that
    starts with `where`."""
    try:
        box = np.asarray(bbox, float)
    except (TypeError, ValueError):  # a dict, a string, a ragged list
        box = np.full(0, np.nan)
    if box.shape != (4,) or not np.all(np.isfinite(box)):
        raise ValueError(f"{where}: bbox must be 4 finite numbers (x, y, w, h), got "
                         f"{bbox!r}")
    if box[2] <= 0 or box[3] <= 0:
        raise ValueError(f"{where}: bbox {box.tolist()} has width or height <= 0")
    return box


def check_detections(detections: list[dict], annotations: dict) -> None:
    """Clear errors for detections that the evaluation would silently mis-score."""
    image_ids = {im["id"] for im in annotations["images"]}
    cat_ids = {c["id"] for c in annotations["categories"]}
    if not isinstance(detections, list):
        raise ValueError("detections must be a list of COCO result entries, got "
                         f"{type(detections).__name__}")
    for i, d in enumerate(detections):
        if not isinstance(d, dict):
            raise ValueError(f"detections[{i}] must be a COCO result entry (an object "
                             f"with image_id, category_id, bbox, score), got {d!r}")
        if not isinstance(d.get("image_id"), Hashable) or d.get("image_id") not in image_ids:
            raise ValueError(f"detections[{i}]: image_id {d.get('image_id')!r} is not in "
                             "the annotations' images")
        if (not isinstance(d.get("category_id"), Hashable)
                or d.get("category_id") not in cat_ids):
            raise ValueError(f"detections[{i}]: category_id {d.get('category_id')!r} is "
                             f"not among the categories {sorted(cat_ids)}")
        check_xywh(d.get("bbox"), f"detections[{i}]")
        score = d.get("score")
        if not isinstance(score, (int, float)) or not math.isfinite(score):
            raise ValueError(f"detections[{i}]: score must be a finite number, got {score!r}")
