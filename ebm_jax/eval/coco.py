"""COCO box AP (the paper's sec. 4.2 reports AP, AP50 and AP75 on COCO val2017): the
official definitions through pycocotools."""

from __future__ import annotations

import contextlib
import io
import time

from ebm_jax.data.detection import check_detections
from ebm_jax.detection.refine import refine_detections
from ebm_jax.io import read_json


def coco_evaluate(annotations, detections: list[dict]) -> dict:
    """AP, AP50 and AP75 (COCO's definitions, pycocotools) of `detections` (COCO result
    entries) against the COCO annotation file `annotations`. A detection that the
    evaluator would silently mis-score (unknown image or category, bad box or score)
    is an error naming it. An annotation without "area" gets its box's w * h."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    gt_json = read_json(annotations, what="COCO annotation file",
                        fix="replace it with a valid COCO annotation file")
    check_detections(detections, gt_json)
    for ann in gt_json["annotations"]:  # optional in COCO-format files; COCO's is w * h
        ann.setdefault("area", float(ann["bbox"][2] * ann["bbox"][3]))
        ann.setdefault("iscrowd", 0)
    if not detections:
        return {"AP": 0.0, "AP50": 0.0, "AP75": 0.0}
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = gt_json
        gt.createIndex()
        dt = gt.loadRes([dict(d) for d in detections])
        ev = COCOeval(gt, dt, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return {"AP": float(ev.stats[0]), "AP50": float(ev.stats[1]),
            "AP75": float(ev.stats[2])}


def evaluate_refinement(head, val, features, detections: list[dict],
                        **settings) -> dict:
    """AP / AP50 / AP75 (COCO evaluator) of the initial, guided-NMS and refined boxes
    of `ebm_jax.detection.refine_detections(..., **settings)` (the paper's sec. 4.2),
    with the refinement's seconds, the number of refined boxes and of those the
    refinement carried out of the image (dropped)."""
    t0 = time.perf_counter()
    results = refine_detections(head, val, features, detections, **settings)
    seconds = time.perf_counter() - t0
    out = {name: coco_evaluate(val.annotations, dets) for name, dets in results.items()}
    out["refine_seconds"] = seconds
    out["num_boxes"] = len(results["refined"])
    out["num_left_image"] = len(results["nms"]) - len(results["refined"])
    return out
