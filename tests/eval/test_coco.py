"""COCO AP (pycocotools) of hand-made detections on the generated benchmark."""

import json

import pytest

from ebm_jax.data import detection as det
from ebm_jax.eval.coco import coco_evaluate


@pytest.fixture
def dataset(shapes_dataset):
    return shapes_dataset


def test_perfect_detections_score_ap_one_and_shifted_lower(dataset):
    gt = json.loads(dataset.annotations.read_text())
    perfect = [{"image_id": a["image_id"], "category_id": a["category_id"],
                "bbox": a["bbox"], "score": 1.0} for a in gt["annotations"]]
    m = coco_evaluate(dataset.annotations, perfect)
    assert m["AP"] == pytest.approx(1.0) and m["AP50"] == pytest.approx(1.0)
    shifted = [{**d, "bbox": [d["bbox"][0] + 0.25 * d["bbox"][2], *d["bbox"][1:]]}
               for d in perfect]
    s = coco_evaluate(dataset.annotations, shifted)
    assert s["AP"] < 0.9 * m["AP"] and s["AP75"] < m["AP75"]
    assert coco_evaluate(dataset.annotations, []) == {"AP": 0.0, "AP50": 0.0, "AP75": 0.0}


def test_simulated_detector_scores_between(dataset):
    dets = det.simulate_detections(dataset.annotations, seed=1, false_positives=0.5,
                                   miss_rate=0.0, candidates=1.0, confusion=0.0)
    m = coco_evaluate(dataset.annotations, dets)
    assert 0.1 < m["AP"] < 0.9 and m["AP50"] > 0.9


def test_bad_inputs_are_named(dataset, tmp_path):
    good = {"image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5], "score": 0.5}
    with pytest.raises(ValueError, match="category_id 7 is not among"):
        coco_evaluate(dataset.annotations, [good, {**good, "category_id": 7}])
    bad = tmp_path / "ann.json"
    bad.write_text(dataset.annotations.read_text()[:100])
    with pytest.raises(ValueError, match=r"COCO annotation file .*ann.json is not valid JSON"):
        coco_evaluate(bad, [good])
