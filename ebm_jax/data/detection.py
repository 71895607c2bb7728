"""A detection benchmark that runs anywhere: generated images with objects, written as
COCO-format JSON plus PNG images, training boxes with annotation noise and a simulated
detector output; and the reader of a COCO-format set (`load_detection_set`), which
validates the annotations and every image when the set is opened. AP is computed by
`ebm_jax.eval.coco`.

    paths = generate_dataset("data/shapes", num_images=200, annotation_noise=0.1)
    dets = simulate_detections(paths.annotations, seed=0)      # see ebm_jax.data.detector
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

from ebm_jax.data.detector import (  # noqa: F401 (re-exported: the set's detector)
    MIN_PRE_NMS_DUPLICATES,
    check_detections,
    check_pre_nms,
    check_xywh,
    duplicate_fraction,
    simulate_detections,
)
from ebm_jax.io import atomic_write, image_cut_short, read_json

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
            with open(path, "rb") as raw, Image.open(raw) as f:
                size, image_format = f.size, f.format
                f.verify()
                cut = image_cut_short(raw, image_format)
        except FileNotFoundError:
            raise ValueError(f"image {path} (image id {im.get('id')} of {annotations}) "
                             "does not exist") from None
        except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as e:
            raise ValueError(f"image {path} (image id {im.get('id')} of {annotations}) "
                             f"cannot be read ({e}); replace or remove it") from None
        if cut:
            raise ValueError(f"image {path} (image id {im.get('id')} of {annotations}) is "
                             f"cut short (its header is intact, its {image_format} end "
                             "marker is missing: a truncated copy or download); replace "
                             "it")
        if size != (im.get("width"), im.get("height")):
            raise ValueError(f"image {path} is {size[0]}x{size[1]}, but {annotations} "
                             f"says {im.get('width')}x{im.get('height')} (image id "
                             f"{im.get('id')})")


def _detection_set(gt: dict, annotations: Path, image_dir: Path, image_size: int,
                   name: str | None) -> DetectionSet:
    """`load_detection_set`'s set from a parsed COCO file (errors name what is wrong,
    the caller names the file)."""
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
    return DetectionSet(name or annotations.stem, annotations, image_dir,
                        [im["id"] for im in images], [im["file_name"] for im in images],
                        scales, boxes, classes, valid, cats, int(image_size),
                        np.array([[im["width"], im["height"]] for im in images],
                                 np.float64))


def load_detection_set(annotations: str | Path, image_dir: str | Path, *, image_size: int,
                       name: str | None = None, preload: bool = False) -> DetectionSet:
    """Reads a COCO-format annotation file and its image folder (nothing is
    downloaded), validating both: an annotation file that is not COCO-format JSON is
    one error naming it; every image must be readable and of the size its annotation
    says (`check_images`). Crowd annotations are left out of training; a box of width
    or height <= 0 or with a non-finite coordinate is an error naming its annotation
    id."""
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
    try:
        out = _detection_set(gt, annotations, image_dir, image_size, name)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as error:
        # one line, also where the file's own strings (a file_name) hold line breaks
        text = str(error).replace("\r", "\\r").replace("\n", "\\n")
        if str(annotations) in text:  # already names the file
            raise ValueError(text) from None
        what = f"no field {error}" if isinstance(error, KeyError) else text
        raise ValueError(f"COCO annotation file {annotations}: {what}"
                         f"{'' if isinstance(error, ValueError) else ' (wrong type)'}; "
                         "replace it with a valid COCO annotation file") from None
    return out.preload() if preload else out
