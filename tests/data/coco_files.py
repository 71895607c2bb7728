"""A small COCO-layout folder written into a test's temporary directory, shared by the
tests that read COCO files (the detection recipe, the loaders' fuzz tests)."""

import json
from pathlib import Path

from ebm_jax.data.detection import generate_dataset, simulate_detections


def write_coco(tmp: Path, *, train: int, val: int, image_size: int) -> Path:
    """`tmp/coco/annotations/instances_<split>.json` and `tmp/coco/<split>/` images for
    train2017 (`train` images) and val2017 (`val`), two classes, and the detector's
    results on val in `tmp/dets.json`. Returns `tmp`."""
    root = tmp / "coco"
    (root / "annotations").mkdir(parents=True)
    for split, n, seed in (("train2017", train, 1), ("val2017", val, 2)):
        paths = generate_dataset(tmp / split, num_images=n, image_size=image_size,
                                 num_classes=2, max_objects=2, min_size=8, seed=seed)
        paths.image_dir.rename(root / split)
        paths.annotations.rename(root / "annotations" / f"instances_{split}.json")
    dets = simulate_detections(root / "annotations" / "instances_val2017.json", seed=0)
    (tmp / "dets.json").write_text(json.dumps(dets))
    return tmp
