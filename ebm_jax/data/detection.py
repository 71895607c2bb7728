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
    return at(0.5 * (lo + hi))


def simulate_detections(annotations: str | Path, *, seed: int = 0,
                        iou_range: tuple[float, float] = (0.5, 0.9),
                        false_positives: float = 1.0, miss_rate: float = 0.05) -> list[dict]:
    """A detector's output in COCO result format: each ground-truth box is found (with
    probability 1 - miss_rate) at an IoU uniform in `iou_range`, with a score that grows
    with that IoU; plus on average `false_positives` random boxes per image with low
    scores."""
    lo, hi = iou_range
    if not 0.0 < lo <= hi < 1.0:
        raise ValueError(f"iou_range must satisfy 0 < low <= high < 1, got {iou_range}")
    gt = json.loads(Path(annotations).read_text())
    rng = np.random.default_rng(seed)
    cats = [c["id"] for c in gt["categories"]]
    out = []
    for ann in gt["annotations"]:
        if rng.random() < miss_rate:
            continue
        iou = rng.uniform(lo, hi)
        score = float(np.clip(0.3 + 0.7 * (iou - lo) / max(hi - lo, 1e-6)
                              + rng.normal(0, 0.1), 0.06, 1.0))
        out.append({"image_id": ann["image_id"], "category_id": ann["category_id"],
                    "bbox": _box_at_iou(ann["bbox"], iou, rng), "score": score})
    for img in gt["images"]:
        for _ in range(rng.poisson(false_positives)):
            w = rng.uniform(8, img["width"] / 2)
            h = rng.uniform(8, img["height"] / 2)
            out.append({"image_id": img["id"], "category_id": int(rng.choice(cats)),
                        "bbox": [rng.uniform(0, img["width"] - w),
                                 rng.uniform(0, img["height"] - h), w, h],
                        "score": float(rng.uniform(0.05, 0.5))})
    return out


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
    row, which training skips. `images(idx)` reads and letterboxes images on demand
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
                       scales, boxes, classes, valid, cats, int(image_size))
    return out.preload() if preload else out
