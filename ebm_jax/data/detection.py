"""A detection benchmark that runs anywhere: generated images with objects, written as
COCO-format JSON plus PNG images, training boxes with annotation noise and a simulated
detector output; and the reader of a COCO-format set (`load_detection_set`), which
validates the annotations and every image when the set is opened. AP is computed by
`ebm_jax.eval.coco`.

    paths = generate_dataset("data/shapes", num_images=200, annotation_noise=0.1)
    dets = simulate_detections(paths.annotations, seed=0)      # COCO result entries
    train = load_detection_set(paths.noisy_annotations, paths.image_dir, image_size=128)

Objects are drawn shapes (one shape per class: disc, square, triangle, cross, ring,
diamond, bar, ...), each of a random colour and size, on textured backgrounds (colour
gradients plus noise and stripes); later objects occlude earlier ones, and a box is the
object's full extent (occluded parts included), as in COCO.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from ebm_jax.io import atomic_write

SHAPES = ("disc", "square", "triangle", "cross", "ring", "diamond", "bar", "ellipse")


@dataclasses.dataclass(frozen=True)
class DatasetPaths:
    root: Path
    annotations: Path  # the clean ground truth (evaluation)
    noisy_annotations: Path  # the training boxes, with annotation noise
    image_dir: Path


def _mask(shape: str, h: int, w: int, rng) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w]
    y = (yy + 0.5) / h * 2 - 1
    x = (xx + 0.5) / w * 2 - 1
    if shape == "disc":
        return x**2 + y**2 <= 1
    if shape == "square":
        return np.ones((h, w), bool)
    if shape == "triangle":
        return (y >= -1) & (np.abs(x) <= (y + 1) / 2)
    if shape == "cross":
        return (np.abs(x) <= 0.3) | (np.abs(y) <= 0.3)
    if shape == "ring":
        r = x**2 + y**2
        return (r <= 1) & (r >= 0.35)
    if shape == "diamond":
        return np.abs(x) + np.abs(y) <= 1
    if shape == "bar":
        return np.abs(y) <= 0.45
    return (x / 1.0) ** 2 + (y / 0.6) ** 2 <= 1  # ellipse, flat


def _background(size: int, rng) -> np.ndarray:
    yy, xx = np.mgrid[0:size, 0:size] / size
    c0, c1 = rng.random(3), rng.random(3)
    t = (xx * rng.uniform(-1, 1) + yy * rng.uniform(-1, 1))[..., None]
    img = c0 + (c1 - c0) * (t - t.min()) / max(np.ptp(t), 1e-6)
    freq = rng.uniform(4, 20)
    img += 0.08 * np.sin(2 * np.pi * freq * (xx * rng.random() + yy))[..., None]
    img += rng.normal(0, 0.05, img.shape)
    return np.clip(img, 0, 1)


def _render(size: int, num_classes: int, max_objects: int, min_size: int, rng):
    img = _background(size, rng)
    objects = []
    for _ in range(rng.integers(1, max_objects + 1)):
        cls = int(rng.integers(num_classes))
        w = int(rng.integers(min_size, size // 2 + 1))
        h = int(np.clip(w * rng.uniform(0.6, 1.6), min_size, size - 1))
        x0 = int(rng.integers(0, size - w + 1))
        y0 = int(rng.integers(0, size - h + 1))
        mask = _mask(SHAPES[cls % len(SHAPES)], h, w, rng)
        colour = rng.random(3)
        region = img[y0:y0 + h, x0:x0 + w]
        region[mask] = colour + rng.normal(0, 0.03, (int(mask.sum()), 3))
        objects.append((cls, [float(x0), float(y0), float(w), float(h)]))
    return np.clip(img, 0, 1), objects


def _jitter_box(box_xywh, scale: float, rng, bounds: float) -> list[float]:
    """Noise in the relative space: centre shifted by scale * (w, h) * N(0, 1), size
    multiplied by exp(scale * N(0, 1)); kept inside the image."""
    x, y, w, h = box_xywh
    cx = x + w / 2 + scale * w * rng.normal()
    cy = y + h / 2 + scale * h * rng.normal()
    w2 = w * math.exp(scale * rng.normal())
    h2 = h * math.exp(scale * rng.normal())
    x0, y0 = max(0.0, cx - w2 / 2), max(0.0, cy - h2 / 2)
    x1, y1 = min(bounds, cx + w2 / 2), min(bounds, cy + h2 / 2)
    if x1 - x0 < 1 or y1 - y0 < 1:
        return list(map(float, box_xywh))
    return [x0, y0, x1 - x0, y1 - y0]


def generate_dataset(root: str | Path, *, num_images: int = 200, image_size: int = 128,
                     num_classes: int = 4, max_objects: int = 4, min_size: int = 12,
                     annotation_noise: float = 0.1, seed: int = 0) -> DatasetPaths:
    """Writes `root/images/*.png`, `root/annotations.json` (clean boxes) and
    `root/annotations_noisy.json` (each box jittered with `annotation_noise`)."""
    import matplotlib.image as mpimg

    for name, value, low in (("num_images", num_images, 1), ("image_size", image_size, 16),
                             ("num_classes", num_classes, 1), ("max_objects", max_objects, 1),
                             ("min_size", min_size, 2)):
        if int(value) != value or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if num_classes > len(SHAPES):
        raise ValueError(f"num_classes must be <= {len(SHAPES)} (one shape each), "
                         f"got {num_classes}")
    if min_size > image_size // 2:
        raise ValueError(f"min_size must be <= image_size / 2 = {image_size // 2}, "
                         f"got {min_size}")
    if not (math.isfinite(annotation_noise) and annotation_noise >= 0):
        raise ValueError(f"annotation_noise must be >= 0, got {annotation_noise!r}")
    root = Path(root)
    image_dir = root / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    images, clean, noisy = [], [], []
    for i in range(num_images):
        img, objects = _render(image_size, num_classes, max_objects, min_size, rng)
        name = f"{i:06d}.png"
        mpimg.imsave(image_dir / name, img)
        images.append({"id": i + 1, "file_name": name, "width": image_size,
                       "height": image_size})
        for cls, box in objects:
            ann = {"id": len(clean) + 1, "image_id": i + 1, "category_id": cls + 1,
                   "bbox": box, "area": box[2] * box[3], "iscrowd": 0}
            clean.append(ann)
            nb = _jitter_box(box, annotation_noise, rng, float(image_size))
            noisy.append({**ann, "bbox": nb, "area": nb[2] * nb[3]})
    categories = [{"id": c + 1, "name": SHAPES[c]} for c in range(num_classes)]
    write = lambda path, anns: atomic_write(path, json.dumps(  # noqa: E731
        {"images": images, "annotations": anns, "categories": categories}))
    write(root / "annotations.json", clean)
    write(root / "annotations_noisy.json", noisy)
    return DatasetPaths(root, root / "annotations.json", root / "annotations_noisy.json",
                        image_dir)


def _iou_xywh(a, b) -> float:
    ax1, ay1, bx1, by1 = a[0] + a[2], a[1] + a[3], b[0] + b[2], b[1] + b[3]
    iw = max(0.0, min(ax1, bx1) - max(a[0], b[0]))
    ih = max(0.0, min(ay1, by1) - max(a[1], b[1]))
    inter = iw * ih
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


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
    takes, REFERENCE.md sec. 2).

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
        x0, y0 = b[:, 0], b[:, 1]
        x1, y1 = x0 + b[:, 2], y0 + b[:, 3]
        iw = np.clip(np.minimum(x1[:, None], x1) - np.maximum(x0[:, None], x0), 0, None)
        ih = np.clip(np.minimum(y1[:, None], y1) - np.maximum(y0[:, None], y0), 0, None)
        inter = iw * ih
        area = b[:, 2] * b[:, 3]
        ious = inter / (area[:, None] + area - inter)
        np.fill_diagonal(ious, 0.0)
        overlapping += int(np.sum(ious.max(1) > iou))
    return overlapping / len(detections)


# below this duplicate_fraction a detections file is taken for a detector's post-NMS
# output (the old one-box-per-object simulator: 2 pairs in 260 boxes, 1.5%)
MIN_PRE_NMS_DUPLICATES = 0.02


def check_pre_nms(detections: list[dict], iou: float, where: str) -> None:
    """An error (starting with `where`) for detections that are evidently post-NMS:
    guided NMS (REFERENCE.md sec. 2) re-ranks the detector's per-class candidates
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
    box = np.asarray(bbox, float)
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
        if d.get("image_id") not in image_ids:
            raise ValueError(f"detections[{i}]: image_id {d.get('image_id')!r} is not in "
                             "the annotations' images")
        if d.get("category_id") not in cat_ids:
            raise ValueError(f"detections[{i}]: category_id {d.get('category_id')!r} is "
                             f"not among the categories {sorted(cat_ids)}")
        check_xywh(d.get("bbox"), f"detections[{i}]")
        score = d.get("score")
        if not isinstance(score, (int, float)) or not math.isfinite(score):
            raise ValueError(f"detections[{i}]: score must be a finite number, got {score!r}")


@dataclasses.dataclass
class DetectionSet:
    """A COCO-format detection set letterboxed to `image_size` x `image_size` network
    inputs: each image is scaled by `scales[i]` (its longer side to image_size) and
    padded at the bottom and right, and its boxes with it.

    boxes (N, G, 4) xyxy in input pixels, classes (N, G) in [1, C] (the categories in
    `category_ids` order), valid (N, G); images without a (non-crowd) box have no valid
    row, which training skips. `sizes` (N, 2) are the images' own (width, height).
    `images(idx)` reads and letterboxes images on demand
    (all of them are kept in memory when `preload`)."""

    name: str
    annotations: Path
    image_dir: Path
    image_ids: list[int]
    files: list[str]
    scales: np.ndarray
    boxes: np.ndarray
    classes: np.ndarray
    valid: np.ndarray
    category_ids: list[int]
    image_size: int
    sizes: np.ndarray | None = None  # (N, 2) each image's (width, height) in its pixels
    _cache: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.image_ids)

    @property
    def num_classes(self) -> int:
        return len(self.category_ids)

    def _read(self, i: int) -> np.ndarray:
        from PIL import Image

        with Image.open(self.image_dir / self.files[i]) as im:
            im = im.convert("RGB")
            w, h = im.size
            s = self.scales[i]
            size = (max(1, round(w * s)), max(1, round(h * s)))
            if size != (w, h):
                im = im.resize(size, Image.BILINEAR)
            arr = np.asarray(im, np.float32) / 255.0
        out = np.zeros((self.image_size, self.image_size, 3), np.float32)
        out[:arr.shape[0], :arr.shape[1]] = arr
        return out

    def images(self, idx) -> np.ndarray:
        idx = np.asarray(idx, int)
        if self._cache is not None:
            return self._cache[idx]
        return np.stack([self._read(int(i)) for i in idx])

    def preload(self) -> "DetectionSet":
        if self._cache is None:
            self._cache = np.stack([self._read(i) for i in range(len(self))])
        return self


def check_images(image_dir: Path, images: list[dict], annotations: Path) -> None:
    """Every image of a COCO set exists, is readable, and has the width and height
    its annotation file says: checked when the set is opened, so that a bad image is
    an error naming its file before any training, not when its batch comes up."""
    from PIL import Image, UnidentifiedImageError

    for im in images:
        path = image_dir / str(im.get("file_name"))
        try:
            with Image.open(path) as f:
                size = f.size
                f.verify()
        except FileNotFoundError:
            raise ValueError(f"image {path} (image id {im.get('id')} of {annotations}) "
                             "does not exist") from None
        except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as e:
            raise ValueError(f"image {path} (image id {im.get('id')} of {annotations}) "
                             f"cannot be read ({e}); replace or remove it") from None
        if size != (im.get("width"), im.get("height")):
            raise ValueError(f"image {path} is {size[0]}x{size[1]}, but {annotations} "
                             f"says {im.get('width')}x{im.get('height')} (image id "
                             f"{im.get('id')})")


def load_detection_set(annotations: str | Path, image_dir: str | Path, *, image_size: int,
                       name: str | None = None, preload: bool = False) -> DetectionSet:
    """Reads a COCO-format annotation file and its image folder (nothing is
    downloaded), validating both: an annotation file that is not COCO-format JSON is
    one error naming it; every image must be readable and of the size its annotation
    says (`check_images`). Crowd annotations are left out of training; a box of width
    or height <= 0 or with a non-finite coordinate is an error naming its annotation
    id."""
    from ebm_jax.io import read_json

    annotations, image_dir = Path(annotations), Path(image_dir)
    if not annotations.is_file():
        raise ValueError(f"annotation file {annotations} does not exist")
    if not image_dir.is_dir():
        raise ValueError(f"image folder {image_dir} does not exist")
    if int(image_size) != image_size or image_size < 16:
        raise ValueError(f"image_size must be an integer >= 16, got {image_size!r}")
    gt = read_json(annotations, what="COCO annotation file",
                   fix="replace it with a valid COCO annotation file")
    for key in ("images", "annotations", "categories"):
        if not isinstance(gt, dict) or not isinstance(gt.get(key), list):
            raise ValueError(f"COCO annotation file {annotations} is not COCO format: "
                             f"no {key!r} list")
    check_images(image_dir, gt["images"], annotations)
    cats = sorted(c["id"] for c in gt["categories"])
    cat_index = {c: i + 1 for i, c in enumerate(cats)}
    images = sorted(gt["images"], key=lambda im: im["id"])
    row = {im["id"]: i for i, im in enumerate(images)}
    per_image: list[list] = [[] for _ in images]
    for ann in gt["annotations"]:
        box = check_xywh(ann.get("bbox"), f"annotation {ann.get('id')}")
        if ann["image_id"] not in row:
            raise ValueError(f"annotation {ann.get('id')}: image_id {ann['image_id']} is "
                             "not among the images")
        if ann["category_id"] not in cat_index:
            raise ValueError(f"annotation {ann.get('id')}: category_id "
                             f"{ann['category_id']} is not among the categories")
        if ann.get("iscrowd", 0):
            continue
        per_image[row[ann["image_id"]]].append((cat_index[ann["category_id"]], box))
    n, g = len(images), max(1, max((len(p) for p in per_image), default=1))
    scales = np.array([image_size / max(im["width"], im["height"]) for im in images])
    boxes = np.zeros((n, g, 4), np.float32)
    boxes[..., 2:] = 1.0  # padding rows: a valid-shaped dummy box, weight 0
    classes = np.ones((n, g), np.int32)
    valid = np.zeros((n, g), bool)
    for i, objs in enumerate(per_image):
        for j, (c, (x, y, w, h)) in enumerate(objs):
            boxes[i, j] = np.array([x, y, x + w, y + h]) * scales[i]
            classes[i, j], valid[i, j] = c, True
    out = DetectionSet(name or annotations.stem, annotations, image_dir,
                       [im["id"] for im in images], [im["file_name"] for im in images],
                       scales, boxes, classes, valid, cats, int(image_size),
                       np.array([[im["width"], im["height"]] for im in images], np.float64))
    return out.preload() if preload else out
