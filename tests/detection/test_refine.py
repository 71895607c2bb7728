"""Training inputs of the head and prediction: the box index and batches, the paper's
head, and refinement mapped back to image pixels."""

import jax
import numpy as np
import pytest
from flax import nnx

from ebm_jax.detection import (
    FeatureSource,
    box_batches,
    box_index,
    build_head,
    refine_detections,
)
from ebm_jax.eval.coco import evaluate_refinement
from ebm_jax.models.fpn import FeaturePyramid


def test_paper_head_shape():
    head = build_head(channels=256, num_classes=80, hidden=1024, pool_size=7,
                      strides=(4, 8, 16, 32), canonical_size=224.0, key=jax.random.key(0))
    assert head.fc1.kernel.shape == (7 * 7 * 256, 1024)
    assert head.out.kernel.shape == (1024, 81)


def test_box_index_and_batches(coco_set):
    ds = coco_set(((40, 20), (16, 32)), 32)
    assert box_index(ds).tolist() == [[0, 0]]  # image 2 has no box: skipped
    backbone = FeaturePyramid(widths=(8,), channels=8, rngs=nnx.Rngs(0))
    feats = FeatureSource(backbone, ds)
    levels, boxes, classes, valid = box_batches(ds, feats, boxes_per_batch=3, seed=0)(7)
    assert [lv.shape for lv in levels] == [(3, 8, 8, 8)]
    assert boxes.shape == (3, 1, 4) and classes.tolist() == [[2]] * 3 and valid.all()
    ds.valid[:] = False
    with pytest.raises(ValueError, match="no image has a .* box to train on"):
        box_index(ds)


def test_refine_detections_maps_boxes_back_to_image_pixels(coco_set):
    ds = coco_set(((40, 20),), 64)
    backbone = FeaturePyramid(widths=(8,), channels=8, rngs=nnx.Rngs(0))
    feats = FeatureSource(backbone, ds)
    head = build_head(channels=8, num_classes=ds.num_classes, hidden=16, pool_size=3,
                      strides=backbone.strides, canonical_size=48.0, key=jax.random.key(0))
    dets = [{"image_id": 1, "category_id": 7, "bbox": [5.0, 3.0, 9.0, 7.0], "score": 0.9},
            {"image_id": 1, "category_id": 3, "bbox": [20.0, 5.0, 6.0, 9.0], "score": 0.5},
            {"image_id": 1, "category_id": 3, "bbox": [1.0, 1.0, 3.0, 3.0], "score": 0.01}]
    settings = dict(step_lengths=(8e-4, 8e-4, 3.2e-3, 3.2e-3), refine_steps=2)
    out = refine_detections(head, ds, feats, dets, **settings)
    assert len(out["initial"]) == 2  # the box below the score threshold is dropped
    for got, want in zip(out["initial"], dets[:2]):
        np.testing.assert_allclose(got["bbox"], want["bbox"], rtol=1e-5)
        assert got["category_id"] == want["category_id"]
    assert len(out["nms"]) == len(out["refined"]) == 2
    for r in out["refined"]:
        assert np.all(np.isfinite(r["bbox"])) and r["bbox"][2] > 0 and r["bbox"][3] > 0
    metrics = evaluate_refinement(head, ds, feats, dets, **settings)
    assert set(metrics) == {"initial", "nms", "refined", "refine_seconds", "num_boxes",
                            "num_left_image"}
    assert metrics["num_boxes"] == 2 and 0.0 <= metrics["refined"]["AP"] <= 1.0
    with pytest.raises(ValueError, match="step_lengths must be 4 numbers"):
        refine_detections(head, ds, feats, dets, step_lengths=(1e-3,), refine_steps=1)


def _refine_setup(coco_set):
    ds = coco_set(((40, 20),), 64)  # scale 1.6: the image is 64 x 32 input pixels
    backbone = FeaturePyramid(widths=(8,), channels=8, rngs=nnx.Rngs(0))
    head = build_head(channels=8, num_classes=ds.num_classes, hidden=16, pool_size=3,
                      strides=backbone.strides, canonical_size=48.0, key=jax.random.key(0))
    return ds, FeatureSource(backbone, ds), head


def test_detector_boxes_and_refined_boxes_are_clipped_to_the_image(coco_set):
    ds, feats, head = _refine_setup(coco_set)
    dets = [{"image_id": 1, "category_id": 7, "bbox": [-4.0, 12.0, 14.0, 12.0], "score": 0.9},
            {"image_id": 1, "category_id": 3, "bbox": [30.0, 2.0, 6.0, 9.0], "score": 0.5},
            {"image_id": 1, "category_id": 3, "bbox": [41.0, 1.0, 5.0, 5.0], "score": 0.7}]
    out = refine_detections(head, ds, feats, dets, step_lengths=(0.5, 0.5, 0.5, 0.5),
                            refine_steps=3)
    # the third box lies wholly right of the 40 px wide image: dropped
    assert len(out["initial"]) == len(out["refined"]) == 2
    np.testing.assert_allclose(out["initial"][0]["bbox"], [0.0, 12.0, 10.0, 8.0], atol=1e-4)
    np.testing.assert_allclose(out["initial"][1]["bbox"], [30.0, 2.0, 6.0, 9.0], atol=1e-4)
    for r in out["refined"]:  # long steps, still inside the image
        x, y, w, h = r["bbox"]
        assert x >= 0 and y >= 0 and x + w <= 40 + 1e-4 and y + h <= 20 + 1e-4


def test_a_box_refined_out_of_the_image_is_dropped(coco_set, monkeypatch):
    import ebm_jax.models.detection_head as dh

    ds, feats, head = _refine_setup(coco_set)
    dets = [{"image_id": 1, "category_id": 7, "bbox": [4.0, 4.0, 10.0, 8.0], "score": 0.9},
            {"image_id": 1, "category_id": 3, "bbox": [24.0, 2.0, 6.0, 9.0], "score": 0.5}]
    real = dh.refine_boxes

    def steps_off_the_image(head, levels, boxes, classes, **kw):
        refined, *rest = real(head, levels, boxes, classes, **kw)
        refined = np.asarray(refined).copy()
        refined[0] = [10.0, 200.0, 30.0, 230.0]  # wholly below the 32 px high input
        return (refined, *rest)

    monkeypatch.setattr(dh, "refine_boxes", steps_off_the_image)
    out = refine_detections(head, ds, feats, dets, step_lengths=(1e-3,) * 4,
                            refine_steps=1, guided_nms=False)
    assert len(out["nms"]) == 2 and len(out["refined"]) == 1
    assert out["refined"][0]["category_id"] == out["nms"][1]["category_id"]
    metrics = evaluate_refinement(head, ds, feats, dets, step_lengths=(1e-3,) * 4,
                                  refine_steps=1, guided_nms=False)
    assert metrics["num_left_image"] == 1 and metrics["num_boxes"] == 1


def test_guided_nms_removes_duplicates_and_can_be_switched_off(coco_set):
    ds, feats, head = _refine_setup(coco_set)
    dets = [{"image_id": 1, "category_id": 7, "bbox": [4.0, 2.0, 10.0, 8.0], "score": 0.9},
            {"image_id": 1, "category_id": 7, "bbox": [4.5, 2.0, 10.0, 8.0], "score": 0.8},
            {"image_id": 1, "category_id": 3, "bbox": [4.0, 2.0, 10.0, 8.0], "score": 0.4}]
    settings = dict(step_lengths=(8e-4, 8e-4, 3.2e-3, 3.2e-3), refine_steps=1)
    out = refine_detections(head, ds, feats, dets, **settings)
    assert len(out["nms"]) == 2  # one of the two class-7 duplicates; class 3 stays
    assert sorted(d["category_id"] for d in out["nms"]) == [3, 7]
    raw = refine_detections(head, ds, feats, dets, guided_nms=False, max_detections=2,
                            **settings)
    np.testing.assert_allclose([d["score"] for d in raw["nms"]], [0.9, 0.8])  # as they are
