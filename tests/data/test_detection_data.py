"""The generated detection benchmark, and the COCO-format reader: letterboxing, crowd
and empty images, and its validation of annotations and images when a set is opened."""

import json

import numpy as np
import pytest
from PIL import Image

from ebm_jax.data import detection as det
from ebm_jax.data import detector


@pytest.fixture
def dataset(shapes_dataset):
    return shapes_dataset


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


def test_simulated_detector_has_realistic_ious(dataset):
    dets = det.simulate_detections(dataset.annotations, seed=1, false_positives=0.5,
                                   miss_rate=0.0, candidates=1.0, confusion=0.0)
    gt = json.loads(dataset.annotations.read_text())["annotations"]
    ious = [detector._iou_xywh(g["bbox"], d["bbox"]) for g, d in zip(gt, dets)]
    assert 0.49 < min(ious) and max(ious) < 0.91


def test_simulated_detector_gives_per_class_boxes_before_nms(dataset):
    gt = json.loads(dataset.annotations.read_text())
    dets = det.simulate_detections(dataset.annotations, seed=1, miss_rate=0.0)
    # several candidates per object, every one at IoU in the range with its object
    assert len(dets) > 3 * len(gt["annotations"])
    assert det.duplicate_fraction(dets, 0.5) > 0.3
    by_image = {}
    for g in gt["annotations"]:
        by_image.setdefault(g["image_id"], []).append(g)
    best = [max(detector._iou_xywh(g["bbox"], d["bbox"]) for g in by_image[d["image_id"]])
            for d in dets if d["score"] > 0.5]
    assert min(best) > 0.49
    # the same box under another class, at a lower score
    confused = [(a, b) for a, b in zip(dets, dets[1:]) if a["bbox"] == b["bbox"]]
    assert confused and all(a["category_id"] != b["category_id"]
                            and b["score"] < a["score"] for a, b in confused)
    one = det.simulate_detections(dataset.annotations, seed=1, false_positives=0.0,
                                  candidates=1.0, confusion=0.0)
    assert det.duplicate_fraction(one, 0.5) < det.MIN_PRE_NMS_DUPLICATES
    with pytest.raises(ValueError, match="candidates must be >= 1"):
        det.simulate_detections(dataset.annotations, candidates=0.5)


def _nms(dets, iou):
    """Plain per-class NMS of COCO result entries (what a detector returns)."""
    kept = []
    for d in sorted(dets, key=lambda d: -d["score"]):
        if all(k["image_id"] != d["image_id"] or k["category_id"] != d["category_id"]
               or detector._iou_xywh(k["bbox"], d["bbox"]) <= iou for k in kept):
            kept.append(d)
    return kept


def test_post_nms_boxes_are_refused_for_guided_nms(dataset):
    dets = det.simulate_detections(dataset.annotations, seed=2)
    det.check_pre_nms(dets, 0.5, "detections file d.json")  # before NMS: fine
    after = _nms(dets, 0.5)
    assert det.duplicate_fraction(after, 0.5) == 0.0
    with pytest.raises(ValueError, match=r"detections file d.json: only 0.0% of its "
                       r"\d+ boxes .* look like boxes after NMS.*guided_nms=false"):
        det.check_pre_nms(after, 0.5, "detections file d.json")


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
    with pytest.raises(ValueError, match="must be a list of COCO result entries"):
        det.check_detections({"a": 1}, gt)
    with pytest.raises(ValueError, match=r"detections\[1\] must be a COCO result entry"):
        det.check_detections([good, 3], gt)


def test_letterboxed_coco_set(tmp_path, coco_folder):
    anns = [{"id": 1, "image_id": 1, "category_id": 7, "bbox": [4, 2, 10, 8], "iscrowd": 0},
            {"id": 2, "image_id": 1, "category_id": 3, "bbox": [0, 0, 5, 5], "iscrowd": 1}]
    path = coco_folder(anns, sizes=((40, 20), (16, 32)))
    ds = det.load_detection_set(path, tmp_path / "img", image_size=80)
    np.testing.assert_allclose(ds.scales, [2.0, 2.5])
    assert ds.num_classes == 2 and ds.category_ids == [3, 7]
    # the crowd box is left out; image 2 has no box (a documented skip in training)
    assert ds.valid.tolist() == [[True], [False]]
    np.testing.assert_allclose(ds.boxes[0, 0], [8, 4, 28, 20])
    assert ds.classes[0, 0] == 2
    imgs = ds.images([0, 1])
    assert imgs.shape == (2, 80, 80, 3)
    assert imgs[0, :40].min() == 1.0 and imgs[0, 40:].max() == 0.0  # padded below
    assert imgs[1, :, :40].min() == 1.0 and imgs[1, :, 40:].max() == 0.0  # at the right


@pytest.mark.parametrize("bbox, message", [([1, 1, 0, 3], "width or height <= 0"),
                                           ([1, float("nan"), 2, 3], "4 finite numbers")])
def test_bad_annotation_names_its_id(tmp_path, coco_folder, bbox, message):
    anns = [{"id": 42, "image_id": 1, "category_id": 3, "bbox": bbox, "iscrowd": 0}]
    path = coco_folder(anns)
    with pytest.raises(ValueError, match=f"annotation 42: .*{message}"):
        det.load_detection_set(path, tmp_path / "img", image_size=64)


def test_a_corrupt_set_is_named_when_opened(tmp_path, coco_folder):
    anns = [{"id": 1, "image_id": 1, "category_id": 7, "bbox": [4, 2, 10, 8], "iscrowd": 0}]
    path = coco_folder(anns, sizes=((40, 20), (16, 32)))
    good = path.read_text()
    path.write_text(good[:-7])
    with pytest.raises(ValueError, match=r"COCO annotation file .*ann.json is not valid "
                       "JSON .*replace it"):
        det.load_detection_set(path, tmp_path / "img", image_size=64)
    path.write_text(json.dumps({"images": [], "annotations": []}))
    with pytest.raises(ValueError, match="is not COCO format: no 'categories' list"):
        det.load_detection_set(path, tmp_path / "img", image_size=64)
    path.write_text(good)
    (tmp_path / "img" / "2.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match=r"image .*2.png \(image id 2 of .*ann.json\) "
                       "cannot be read"):
        det.load_detection_set(path, tmp_path / "img", image_size=64)
    Image.fromarray(np.zeros((5, 5, 3), np.uint8)).save(tmp_path / "img" / "2.png")
    with pytest.raises(ValueError, match=r"image .*2.png is 5x5, but .*ann.json says 16x32"):
        det.load_detection_set(path, tmp_path / "img", image_size=64)
    (tmp_path / "img" / "2.png").unlink()
    with pytest.raises(ValueError, match=r"image .*2.png .* does not exist"):
        det.load_detection_set(path, tmp_path / "img", image_size=64)
    with pytest.raises(ValueError, match="annotation file .*none.json does not exist"):
        det.load_detection_set(tmp_path / "none.json", tmp_path / "img", image_size=64)


@pytest.mark.parametrize("kind", ["JPEG", "PNG"])
def test_an_image_cut_short_is_refused_when_the_set_is_opened(tmp_path, coco_folder, kind):
    """A copy or download cut short keeps its header (size, format); PIL's verify()
    notices some cuts ('Truncated File Read') but passes one that loses only the last
    bytes: its missing end marker tells, before any training."""
    anns = [{"id": 1, "image_id": 1, "category_id": 7, "bbox": [4, 2, 10, 8], "iscrowd": 0}]
    path = coco_folder(anns, sizes=((40, 20), (16, 32)))
    pixels = np.random.default_rng(0).integers(0, 256, (32, 16, 3), np.uint8)
    name = "2.jpg" if kind == "JPEG" else "2.png"
    data = json.loads(path.read_text())
    data["images"][1]["file_name"] = name
    path.write_text(json.dumps(data))
    (tmp_path / "img" / "2.png").unlink()
    Image.fromarray(pixels).save(tmp_path / "img" / name, format=kind)
    det.load_detection_set(path, tmp_path / "img", image_size=64)  # whole: accepted
    whole = (tmp_path / "img" / name).read_bytes()
    (tmp_path / "img" / name).write_bytes(whole[:-2])  # verify() passes this one
    with pytest.raises(ValueError, match=rf"image .*{name} \(image id 2 of .*ann.json\) "
                       f"is cut short .*{kind} end marker is missing"):
        det.load_detection_set(path, tmp_path / "img", image_size=64)
