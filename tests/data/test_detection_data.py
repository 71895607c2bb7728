"""The generated detection benchmark and its COCO evaluation."""

import json

import numpy as np
import pytest

from ebm_jax.data import detection as det


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return det.generate_dataset(tmp_path_factory.mktemp("shapes"), num_images=12,
                                image_size=64, num_classes=3, min_size=8,
                                annotation_noise=0.1, seed=0)


def test_generated_dataset_is_coco_format(dataset):
    import matplotlib.image as mpimg

    gt = json.loads(dataset.annotations.read_text())
    noisy = json.loads(dataset.noisy_annotations.read_text())
    assert len(gt["images"]) == 12 and len(gt["categories"]) == 3
    assert len(gt["annotations"]) == len(noisy["annotations"]) >= 12
    for a, b in zip(gt["annotations"], noisy["annotations"]):
        x, y, w, h = a["bbox"]
        assert w > 0 and h > 0 and x >= 0 and y >= 0 and x + w <= 64 and y + h <= 64
        assert a["id"] == b["id"] and a["category_id"] == b["category_id"]
    moved = [a["bbox"] != b["bbox"] for a, b in zip(gt["annotations"], noisy["annotations"])]
    assert np.mean(moved) > 0.8  # annotation noise moves the training boxes
    img = mpimg.imread(dataset.image_dir / gt["images"][0]["file_name"])
    assert img.shape[:2] == (64, 64)


def test_perfect_detections_score_ap_one_and_shifted_lower(dataset):
    gt = json.loads(dataset.annotations.read_text())
    perfect = [{"image_id": a["image_id"], "category_id": a["category_id"],
                "bbox": a["bbox"], "score": 1.0} for a in gt["annotations"]]
    m = det.coco_evaluate(dataset.annotations, perfect)
    assert m["AP"] == pytest.approx(1.0) and m["AP50"] == pytest.approx(1.0)
    shifted = [{**d, "bbox": [d["bbox"][0] + 0.25 * d["bbox"][2], *d["bbox"][1:]]}
               for d in perfect]
    s = det.coco_evaluate(dataset.annotations, shifted)
    assert s["AP"] < 0.9 * m["AP"] and s["AP75"] < m["AP75"]


def test_simulated_detector_has_realistic_ious(dataset):
    dets = det.simulate_detections(dataset.annotations, seed=1, false_positives=0.5,
                                   miss_rate=0.0)
    gt = json.loads(dataset.annotations.read_text())["annotations"]
    ious = [det._iou_xywh(g["bbox"], d["bbox"]) for g, d in zip(gt, dets)]
    assert 0.49 < min(ious) and max(ious) < 0.91
    m = det.coco_evaluate(dataset.annotations, dets)
    assert 0.1 < m["AP"] < 0.9 and m["AP50"] > 0.9


def test_bad_detections_are_named(dataset):
    gt = json.loads(dataset.annotations.read_text())
    good = {"image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5], "score": 0.5}
    cases = [({**good, "image_id": 999}, "image_id 999 is not in"),
             ({**good, "category_id": 7}, "category_id 7 is not among"),
             ({**good, "bbox": [1, 1, 0, 5]}, "width or height <= 0"),
             ({**good, "bbox": [1, float("nan"), 3, 5]}, "4 finite numbers"),
             ({**good, "score": float("nan")}, "score must be a finite")]
    for bad, message in cases:
        with pytest.raises(ValueError, match=message):
            det.check_detections([good, bad], gt)
    with pytest.raises(ValueError, match="annotation_noise must be >= 0"):
        det.generate_dataset("unused", annotation_noise=-1.0)
