"""The writers of `ebm_jax.data.records`: each of the project's datasets (a 1D set, an
image set, a COCO-format detection set, tracking sequences) as a tensorflow-datasets
ArrayRecord dataset under `out`, atomically, with its metadata; read back by
`records.open_records`. See that module's docstring for each kind's features.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ebm_jax.data.records import KINDS, RecordsError, _builder_class

def _write(kind: str, out, features, splits, metadata: dict) -> Path:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise RecordsError(f"out: {out} exists and is not a directory")
    meta = {"kind": kind, **metadata}
    json.dumps(meta)  # metadata must be JSON (tfds stores it as metadata.json)
    builder = _builder_class(kind)(data_dir=str(out), features=features, splits=splits,
                                   metadata=meta)
    path = Path(builder.data_dir)
    if (path / "dataset_info.json").is_file():
        raise RecordsError(f"out: {path} already holds a dataset; give another --out "
                           "or delete it")
    from ebm_jax.checks import writable_dir

    try:
        writable_dir("out", out)  # a read-only folder: one line, before any example
    except ValueError as error:
        raise RecordsError(str(error)) from None
    import contextlib
    import io

    from ebm_jax.data.records import _tfds

    _tfds().display_progress_bar(False)  # its bars and lines say nothing a user can act on
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            builder.download_and_prepare()
    except OSError as error:  # e.g. a disk that fills up while writing
        raise RecordsError(f"out: could not write {path}: {error.strerror or error}"
                           + (f" ({error.filename})" if error.filename else "")) from None
    downloads = out / "downloads"  # tfds' download cache: nothing is downloaded
    if downloads.is_dir() and not any(f.is_file() for f in downloads.rglob("*")):
        import shutil

        shutil.rmtree(downloads)
    return path


def _to_uint8(images: np.ndarray, name: str) -> np.ndarray:
    a = np.asarray(images)
    if a.dtype == np.uint8:
        return a
    if not np.issubdtype(a.dtype, np.floating) or a.size and (
            not np.isfinite(a).all() or a.min() < 0.0 or a.max() > 1.0):
        raise ValueError(f"{name} must be uint8, or floating point in [0, 1]")
    return np.round(a * 255.0).astype(np.uint8)


def write_toy1d_records(x, y, out, *, metadata: Mapping | None = None) -> Path:
    """The pairs (x_i, y_i) of a 1D regression set (the EBM regression paper, sec. 4.1) as split
    "train"; `metadata` (e.g. the dataset number and seed) is stored beside them."""
    x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
    if x.shape != y.shape or x.ndim not in (1, 2) or x.shape[1:] not in ((), (1,)) \
            or not len(x):
        raise ValueError(f"x and y must have one shape, (N,) or (N, 1) with N >= 1, got "
                         f"shapes {x.shape} and {y.shape}")
    x, y = x.reshape(-1, 1), y.reshape(-1, 1)

    def rows():
        for xi, yi in zip(x, y):
            yield {"x": xi, "y": yi}

    return _write("toy1d", out, {"x": ((1,), np.float32), "y": ((1,), np.float32)},
                  {"train": rows}, {"num": len(x), **dict(metadata or {})})


def write_image_records(data, out, *, metadata: Mapping | None = None) -> Path:
    """An `ImageData` (the contrastive benchmark: train and test splits) with its images
    stored as uint8, round(255 x): the images read back are those, / 255. `metadata`
    (what determines the data: source, size, seed, split) is stored beside them."""
    splits, shape = {}, tuple(int(v) for v in data.image_shape)
    for split in ("train", "test"):
        images = _to_uint8(getattr(data, f"{split}_images"), f"{data.name} {split}_images")
        labels = np.asarray(getattr(data, f"{split}_labels"), np.int64)

        def rows(images=images, labels=labels):
            for image, label in zip(images, labels):
                yield {"image": image, "label": label}

        splits[split] = rows
    meta = {"name": data.name, "num_classes": int(data.num_classes),
            "class_names": list(data.class_names), "image_shape": list(shape),
            **dict(metadata or {})}
    return _write("images", out, {"image": (shape, np.uint8), "label": ((), np.int64)},
                  splits, meta)


def write_detection_records(annotations, image_dir, out, *,
                            noisy_annotations=None, metadata: Mapping | None = None
                            ) -> Path:
    """A COCO-format detection set (e.g. `data.detection.generate_dataset`'s): every
    image in the annotation file's order with its boxes (and, with `noisy_annotations`,
    the noisy training boxes of the same annotations); `metadata` is stored beside."""
    from PIL import Image

    coco = json.loads(Path(annotations).read_text())
    noisy = json.loads(Path(noisy_annotations).read_text()) if noisy_annotations else None
    by_image: dict[int, list] = {im["id"]: [] for im in coco["images"]}
    for ann in coco["annotations"]:
        by_image[ann["image_id"]].append(ann)
    noisy_box = {a["id"]: a["bbox"] for a in noisy["annotations"]} if noisy else {}

    def rows():
        for im in coco["images"]:
            path = Path(image_dir) / im["file_name"]
            with Image.open(path) as f:
                pixels = np.asarray(f.convert("RGB"))
            anns = by_image[im["id"]]
            boxes = np.asarray([a["bbox"] for a in anns], np.float32).reshape(-1, 4)
            nb = np.asarray([noisy_box.get(a["id"], a["bbox"]) for a in anns],
                            np.float32).reshape(-1, 4)
            yield {"image": pixels, "image_id": np.int64(im["id"]), "boxes": boxes,
                   "noisy_boxes": nb,
                   "category": np.asarray([a["category_id"] for a in anns], np.int64)}

    features = {"image": ((None, None, 3), np.uint8), "image_id": ((), np.int64),
                "boxes": ((None, 4), np.float32), "noisy_boxes": ((None, 4), np.float32),
                "category": ((None,), np.int64)}
    meta = {"categories": coco["categories"], "num_images": len(coco["images"]),
            "file_names": [im["file_name"] for im in coco["images"]],
            **dict(metadata or {})}
    return _write("detection", out, features, {"train": rows}, meta)


# the format of "tracking" records (`data.tracking_records` reads format 2 only): 1 held
# frames decoded (uint8 H x W x 3); 2 holds them as their files' bytes
TRACKING_FORMAT = 2
TRACKING_ANNOTATIONS = ("boxes", "absent", "cover", "visible_ratio", "points",
                        "noisy_points")


def _json_column(values):
    """An annotation array as JSON: nested lists, NaN as null; None stays None."""
    if values is None:
        return None
    a = np.asarray(values)
    if a.dtype == bool:
        return a.tolist()
    if np.issubdtype(a.dtype, np.integer):
        return a.astype(np.int64).tolist()
    return np.where(np.isnan(a), None, a.astype(np.float64)).tolist()


def sequence_metadata(seq) -> dict:
    """What a records dataset keeps of a `Sequence` besides its frames, with the
    checksums of its annotations (`annotation_checks`)."""
    meta = {"name": seq.name, "length": len(seq), "image_size": list(seq.image_size),
            **{k: _json_column(getattr(seq, k)) for k in TRACKING_ANNOTATIONS}}
    digest, frames = annotation_checks(meta)
    return {**meta, "annotations_digest": digest, "frame_checks": frames}


def annotation_checks(meta: dict) -> tuple[str, str]:
    """(digest, frame checks) of a sequence's metadata as JSON holds it: 16 hex digits
    of the SHA-256 of its name, length, size and annotation columns (any edit changes
    it), and 4 hex digits of CRC-32 per frame of that frame's annotations (which frame
    was edited, for the error)."""
    import hashlib
    import zlib

    cols = {k: meta.get(k) for k in TRACKING_ANNOTATIONS}
    head = {k: meta.get(k) for k in ("name", "length", "image_size")}
    text = json.dumps({**head, **cols}, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    n = int(meta.get("length") or 0)

    def row(i):
        return json.dumps([None if c is None or not isinstance(c, list) or i >= len(c)
                           else c[i] for c in cols.values()])

    frames = "".join(f"{zlib.crc32(row(i).encode()) & 0xFFFF:04x}" for i in range(n))
    return digest, frames


# the most frame bytes one split of tracking records holds: tfds' writer keeps a split in
# memory up to 1 GB and past that spills it to disk through TensorFlow, which this
# project does not install; a larger dataset is written as several splits
SHARD_BYTES = 512 << 20


def _file_size(seq, i: int) -> int:
    try:
        return os.path.getsize(seq.frames[i])
    except (OSError, TypeError):  # a frame that is not a file: its bytes
        return len(seq.frame_bytes(i))


def tracking_shards(sequences, shard_bytes: int = SHARD_BYTES) -> list[list[int]]:
    """The sequences (indices) of each split of tracking records, in order: whole
    sequences, as many as fit in `shard_bytes` of frame files (at least one each)."""
    shards, size = [[]], 0
    for s, seq in enumerate(sequences):
        n = sum(_file_size(seq, i) for i in range(len(seq)))
        if shards[-1] and size + n > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(s)
        size += n
    return shards


def write_tracking_records(sequences, out, *, metadata: Mapping | None = None,
                           shard_bytes: int = SHARD_BYTES) -> Path:
    """Tracking `Sequence`s (`data.sequences.read_got10k` / `read_otb`, e.g. of the
    generated benchmark): one example per frame, each sequence's frames in order, the
    frame as its file's bytes (the JPEG or PNG as it lies on disk, so a frame decodes
    to the very pixels `Sequence.read_frame` gives); each sequence's name, size,
    annotations (float64, as read) and place (its split and first record) in the
    metadata "sequences" (what `data.tracking_records.read_tracking_records` rebuilds
    the sequences from); `metadata` (e.g. the generator's identity) is stored beside
    them. Splits "train", "train1", ... each hold whole sequences of at most
    `shard_bytes` of frames (`tracking_shards`)."""
    sequences = list(sequences)
    if not sequences:
        raise ValueError("sequences is empty")

    def nan_or(a, n, width):
        return (np.full((n, width), np.nan, np.float32) if a is None
                else np.asarray(a, np.float32))

    def rows(members):
        def generate():
            for s in members:
                seq = sequences[s]
                n = len(seq)
                boxes, points = seq.boxes.astype(np.float32), nan_or(seq.points, n, 2)
                noisy = nan_or(seq.noisy_points, n, 2)
                for i in range(n):
                    yield {"frame_file": np.frombuffer(seq.frame_bytes(i), np.uint8),
                           "sequence": np.int64(s), "frame_index": np.int64(i),
                           "box": boxes[i], "absent": np.bool_(seq.absent[i]),
                           "point": points[i], "noisy_point": noisy[i]}
        return generate

    features = {"frame_file": ((None,), np.uint8), "sequence": ((), np.int64),
                "frame_index": ((), np.int64), "box": ((4,), np.float32),
                "absent": ((), np.bool_), "point": ((2,), np.float32),
                "noisy_point": ((2,), np.float32)}
    splits, places = {}, {}
    for k, members in enumerate(tracking_shards(sequences, shard_bytes)):
        name = "train" if k == 0 else f"train{k}"
        splits[name], first = rows(members), 0
        for s in members:
            places[s] = {"split": name, "first": first}
            first += len(sequences[s])
    meta = {"format": TRACKING_FORMAT,
            "sequences": [{**sequence_metadata(seq), **places[s]}
                          for s, seq in enumerate(sequences)],
            **dict(metadata or {})}
    return _write("tracking", out, features, splits, meta)


__all__ = ["SHARD_BYTES", "TRACKING_ANNOTATIONS", "TRACKING_FORMAT", "sequence_metadata",
           "tracking_shards", "write_detection_records", "write_image_records",
           "write_toy1d_records", "write_tracking_records"]
