"""Prediction with the detection energy head (the paper's sec. 4.2): the detector's
boxes, guided NMS by f, then T gradient-ascent steps on f in the relative box space
(scored with the COCO evaluator before and after by `ebm_jax.eval.coco.
evaluate_refinement`). `val` is an `ebm_jax.data.detection.DetectionSet`.

    out = refine_detections(head, val, features, detections, step_lengths=(8e-4,
                            8e-4, 3.2e-3, 3.2e-3), refine_steps=10)
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from flax import nnx

from ebm_jax.ops.boxes import guided_nms

_ENERGY_FNS: dict = {}


def _energy_fn(graphdef):
    if graphdef not in _ENERGY_FNS:
        _ENERGY_FNS[graphdef] = jax.jit(
            lambda st, levels, boxes, classes: nnx.merge(graphdef, st)(levels, boxes,
                                                                      classes))
    return _ENERGY_FNS[graphdef]


_NMS = jax.jit(lambda b, f, s, c, v, t, m: guided_nms(b, f, s, c, v, iou_threshold=t,
                                                       max_detections=m),
               static_argnums=(5, 6))


def _bucket(n: int) -> int:
    return max(8, 1 << (int(n) - 1).bit_length())


def _clip(xyxy: np.ndarray, width: float, height: float) -> np.ndarray:
    """xyxy boxes clipped to [0, width] x [0, height]."""
    return np.clip(xyxy, 0.0, np.array([width, height, width, height], np.float32))


def refine_detections(head, val, features, detections: list[dict], *,
                      step_lengths: Sequence[float], refine_steps: int,
                      score_threshold: float = 0.05, max_detections: int = 100,
                      nms_iou: float = 0.5, guided_nms: bool = True,
                      progress: bool = False) -> dict[str, list]:
    """The prediction of the paper's sec. 4.2 on every val image: the detector's boxes
    with score > `score_threshold`, clipped to the image (as a detector's
    post-processing does; a box wholly outside it is dropped); guided NMS by f (IoU
    `nms_iou`, at most `max_detections`; with `guided_nms=False` the boxes are taken as
    they are, the `max_detections` best-scored, for a detector's output after its own
    NMS); then `refine_steps` gradient-ascent steps with `step_lengths` (l_c, l_c, l_s,
    l_s) for (cx, cy, log w, log h), clipped to the image again (a box the steps carry
    wholly out of it is dropped from "refined"). `features` is a
    `FeatureSource` of `val`. Returns COCO result lists in the images' pixels:
    "initial" (the detector's clipped boxes above the threshold), "nms" and
    "refined"."""
    from tqdm import tqdm

    from ebm_jax.models.detection_head import refine_boxes

    lengths = tuple(float(v) for v in step_lengths)
    if len(lengths) != 4:
        raise ValueError(f"step_lengths must be 4 numbers (cx, cy, log w, log h), got "
                         f"{step_lengths!r}")
    graphdef, state = nnx.split(head)
    energy = _energy_fn(graphdef)
    row = {im: i for i, im in enumerate(val.image_ids)}
    cat_index = {c: i + 1 for i, c in enumerate(val.category_ids)}
    by_image: dict[int, list[dict]] = {}
    for d in detections:
        if d["score"] > score_threshold:
            by_image.setdefault(d["image_id"], []).append(d)
    out = {"initial": [], "nms": [], "refined": []}
    for image_id, dets in tqdm(sorted(by_image.items()), desc="refine",
                               disable=not progress, leave=False):
        i = row[image_id]
        s = float(val.scales[i])
        # the image's extent in input pixels (the letterboxed frame without padding)
        w_img, h_img = ((val.sizes[i] * s) if val.sizes is not None
                        else (val.image_size, val.image_size))
        xywh = np.array([d["bbox"] for d in dets], np.float32)
        xyxy = _clip(np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], 1) * s,
                     w_img, h_img)
        inside = (xyxy[:, 2] > xyxy[:, 0]) & (xyxy[:, 3] > xyxy[:, 1])
        dets = [d for d, k in zip(dets, inside) if k]
        if not dets:
            continue
        n, size = len(dets), _bucket(len(dets))
        boxes = np.zeros((size, 4), np.float32)
        boxes[:, 2:] = 1.0
        boxes[:n] = xyxy[inside]
        classes = np.ones(size, np.int32)
        classes[:n] = [cat_index[d["category_id"]] for d in dets]
        scores = np.zeros(size, np.float32)
        scores[:n] = [d["score"] for d in dets]
        valid = np.arange(size) < n
        levels = [lv[0] for lv in features.levels([i])]
        if guided_nms:
            f = energy(state, levels, boxes, classes)
            keep, new_scores = _NMS(boxes, f, scores, classes, valid, float(nms_iou),
                                    int(max_detections))
            keep, new_scores = np.asarray(keep), np.asarray(new_scores)
            kept = np.flatnonzero(keep)
        else:
            kept = np.sort(np.argsort(-scores[:n], kind="stable")[:max_detections])
            new_scores = scores
        kb = np.zeros((_bucket(len(kept)), 4), np.float32)
        kb[:, 2:] = 1.0
        kb[:len(kept)] = boxes[kept]
        kc = np.ones(len(kb), np.int32)
        kc[:len(kept)] = classes[kept]
        refined, _, _ = refine_boxes(head, levels, kb, kc, step_length=lengths,
                                     num_steps=refine_steps)
        refined = _clip(np.asarray(refined)[:len(kept)], w_img, h_img)
        # a box that the steps carried wholly out of the image is clipped to nothing:
        # dropped, as the detector's own boxes outside the image are (a lost detection)
        alive = (refined[:, 2] > refined[:, 0]) & (refined[:, 3] > refined[:, 1])

        def entry(box, j, score, image_id=image_id, s=s, dets=dets):
            x0, y0, x1, y1 = (np.asarray(box, float) / s).tolist()
            return {"image_id": image_id, "category_id": dets[j]["category_id"],
                    "bbox": [x0, y0, x1 - x0, y1 - y0], "score": float(score)}

        out["initial"] += [entry(boxes[j], j, scores[j]) for j in range(n)]
        out["nms"] += [entry(boxes[j], j, new_scores[j]) for j in kept]
        out["refined"] += [entry(refined[r], j, new_scores[j]) for r, j in enumerate(kept)
                           if alive[r]]
    return out
