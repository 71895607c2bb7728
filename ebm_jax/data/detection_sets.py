"""The data of the detection experiment (the paper's sec. 4.2): a training set, a val
set and the detector's boxes on val, either generated (`ebm_jax.data.detection`:
drawn shapes, noisy training boxes, a simulated detector) or a real COCO-format set.

    data = open_generated(root, train=spec_train, val=spec_val, detector=detector)
    data = open_coco(coco_root, detections_file, image_size=800)
    data.identity    # what the results depend on: content, never a path

The identity is content-based, so a run resumes wherever its files live: a generated
set is named by its generation spec (with its seed), a COCO set by a hash of its
annotations (image ids and sizes, boxes, classes) and of its image files' bytes, the
detections by a hash of theirs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np

from ebm_jax.data import detection as det_data
from ebm_jax.io import atomic_write, content_hash, file_digests, read_json


@dataclasses.dataclass
class DetectionData:
    train: det_data.DetectionSet
    val: det_data.DetectionSet  # the scored split (val, or a held-out test split)
    detections: list[dict]  # the detector's output on it (COCO result format)
    kind: str  # "generated" or "coco"
    identity: dict  # {"train": ..., "val": ..., "detections": ...}


def set_fingerprint(ds: det_data.DetectionSet) -> str:
    """A hash of what training and evaluation read from a set's annotations: image ids,
    scales, boxes, classes and categories (bytes, cheap on all of COCO)."""
    h = hashlib.sha256()
    for arr in (np.asarray(ds.image_ids, np.int64), np.round(ds.scales, 6),
                np.round(ds.boxes, 3).astype(np.float32), ds.classes.astype(np.int32),
                ds.valid, np.asarray(ds.category_ids, np.int64)):
        h.update(np.ascontiguousarray(arr).tobytes())
    h.update(str(ds.image_size).encode())
    return h.hexdigest()[:16]


def images_fingerprint(ds: det_data.DetectionSet, *, digest_cache=None) -> str:
    """A hash of the set's image files: each file name (relative to the image folder)
    and the SHA-256 of its bytes (`ebm_jax.io.file_digests`; with `digest_cache`, an
    image is read again only when its size or modification time changed). Never a
    path, so a set copied elsewhere keeps its stages; a replaced image gets new ones."""
    digests = file_digests([ds.image_dir / f for f in ds.files], cache=digest_cache)
    return content_hash([[str(f), d] for f, d in zip(ds.files, digests)])


def generated_dir(root, spec: dict) -> Path:
    """`<root>/<hash of spec>`: where a generated split with this spec lives."""
    return Path(root) / f"{spec.get('split', 'set')}-{content_hash(spec)[:8]}"


def _generate(root, spec: dict) -> Path:
    """Writes the split once (a complete `spec.json` marks it done) and returns its
    directory."""
    d = generated_dir(root, spec)
    spec_path = d / "spec.json"
    if spec_path.is_file():
        try:
            done = json.loads(spec_path.read_text()) == spec
        except ValueError:
            done = False
        if done:
            return d
    det_data.generate_dataset(d, **{k: v for k, v in spec.items() if k != "split"})
    atomic_write(spec_path, json.dumps(spec))
    return d


def open_generated(root, *, train: dict, val: dict, detector: dict) -> DetectionData:
    """The generated benchmark: `train` and `val` are `generate_dataset` arguments
    (with num_images and seed) plus "split" (`val` is the scored split: a val or a
    held-out test split, by its own name and seed); `detector` holds
    `simulate_detections`' seed, iou_range, false_positives and (optionally)
    candidates and confusion. Each split is written once under
    `generated_dir(root, spec)` and reused."""
    dirs = {"train": _generate(root, train), "val": _generate(root, val)}
    image_size = train["image_size"]
    train_set = det_data.load_detection_set(
        dirs["train"] / "annotations_noisy.json", dirs["train"] / "images",
        image_size=image_size, name="train", preload=True)
    val_set = det_data.load_detection_set(
        dirs["val"] / "annotations.json", dirs["val"] / "images", image_size=image_size,
        name=val.get("split", "val"), preload=True)
    dets = det_data.simulate_detections(
        val_set.annotations, seed=detector["seed"],
        iou_range=tuple(detector["iou_range"]),
        false_positives=detector["false_positives"],
        **{k: detector[k] for k in ("candidates", "confusion") if k in detector})
    identity = {"train": {"generated": train}, "val": {"generated": val},
                "detections": {"simulated": detector}}
    return DetectionData(train_set, val_set, dets, "generated", identity)


def read_detections(path, val: det_data.DetectionSet) -> list[dict]:
    """The detector's results on val from a COCO result file, checked against val's
    annotations; every error names the file."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"detections file {path} does not exist")
    dets = read_json(path, what="detections file",
                     fix="replace it with the detector's COCO result JSON on the val split")
    gt = read_json(val.annotations, what="COCO annotation file",
                   fix="replace it with a valid COCO annotation file")
    try:
        det_data.check_detections(dets, gt)
    except ValueError as e:
        raise ValueError(f"detections file {path}: {e}") from None
    return dets


def open_coco(coco_root, detections, *, image_size: int, train_split: str = "train2017",
              val_split: str = "val2017", digest_cache=None) -> DetectionData:
    """A real COCO-format dataset: `coco_root/annotations/instances_<split>.json` and
    `coco_root/<split>/`, with the detector's val output in the file `detections`.
    Annotations and every image are validated here, before any training. The identity
    holds the annotations' and the images' content (`images_fingerprint`, its digests
    cached in the JSON file `digest_cache` when given)."""
    root = Path(coco_root)
    ann = root / "annotations"
    train = det_data.load_detection_set(ann / f"instances_{train_split}.json",
                                        root / train_split, image_size=image_size,
                                        name="train")
    val = det_data.load_detection_set(ann / f"instances_{val_split}.json",
                                      root / val_split, image_size=image_size, name="val")
    dets = read_detections(detections, val)
    identity = {"train": {"coco": set_fingerprint(train),
                          "images": images_fingerprint(train, digest_cache=digest_cache)},
                "val": {"coco": set_fingerprint(val),
                        "images": images_fingerprint(val, digest_cache=digest_cache)},
                "detections": {"file": content_hash(dets)}}
    return DetectionData(train, val, dets, "coco", identity)
