"""Labelled image datasets for the contrastive experiments, read from disk or from data
an installed package ships; nothing is downloaded.

Every loader returns an `ImageData`: float32 images (N, H, W, C) in [0, 1] and int32
labels in [0, num_classes), split into train and test.

- `load_digits(size)`: scikit-learn's 1797 handwritten digits (8x8, 10 classes),
  upscaled bilinearly; a fixed stratified 75/25 split.
- `load_opencv_digits(path, size)`: the 5000 digits (20x20) of OpenCV's sample image
  `digits.png` (Debian's opencv-doc: /usr/share/doc/opencv-doc/examples/data/digits.png),
  used by `load_embedded` when present; 80/20 split.
- `load_cifar10(root)`: CIFAR-10's python batches (`cifar-10-batches-py/`) from a local
  path.
- `load_image_folder(root, size)`: an ImageNet-style folder, `root/train/<class>/*` and
  `root/val/<class>/*` (PNG or JPEG), resized to size x size.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from ebm_jax.data.digits_on_photos import load_digits_on_photos
from ebm_jax.data.labelled_images import (  # noqa: F401 (the checks re-exported)
    ImageData,
    check_images,
    check_labels,
    stratified_split,
)
from ebm_jax.data.records import image_data_from_records, open_records
from ebm_jax.safe_pickle import NUMPY_ARRAYS, PickleRefusedError, restricted_load_file

OPENCV_DIGITS = Path("/usr/share/doc/opencv-doc/examples/data/digits.png")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".ppm")


def resize(images: np.ndarray, size: int) -> np.ndarray:
    """Bilinear (antialiased when shrinking) resize of (N, H, W, C) to (N, size, size, C),
    clipped back to [0, 1] (the interpolation can overshoot by rounding only)."""
    import jax
    import jax.numpy as jnp

    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    n, h, w, c = images.shape
    if (h, w) == (size, size):
        return images.astype(np.float32)
    out = jax.jit(lambda x: jax.image.resize(x, (x.shape[0], size, size, c), "linear"))(
        jnp.asarray(images, jnp.float32))
    return np.clip(np.asarray(out), 0.0, 1.0)


def _split(name, images, labels, num_classes, test_fraction, seed, class_names=()):
    tr, te = stratified_split(labels, test_fraction, seed)
    return ImageData(name, images[tr], labels[tr].astype(np.int32), images[te],
                     labels[te].astype(np.int32), num_classes, tuple(class_names))


def load_digits(size: int = 16, *, seed: int = 0) -> ImageData:
    """scikit-learn's digits (8x8, values 0-16), scaled to [0, 1] and resized."""
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    images = (d.images / 16.0).astype(np.float32)[..., None]
    return _split("digits", resize(images, size), d.target, 10, 0.25, seed,
                  [str(i) for i in range(10)])


def load_opencv_digits(path: str | os.PathLike = OPENCV_DIGITS, size: int = 16, *,
                       seed: int = 0) -> ImageData:
    """OpenCV's digits.png: a 50 x 100 grid of 20x20 digits, 500 per class in rows of
    five (rows 0-4 are zeros, 5-9 ones, ...)."""
    import matplotlib.image as mpimg

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"OpenCV digits image not found: {path}")
    sheet = np.asarray(mpimg.imread(path), np.float32)
    if sheet.ndim == 3:
        sheet = sheet[..., :3].mean(-1)
    if sheet.max() > 1.0:
        sheet = sheet / 255.0
    if sheet.shape != (1000, 2000):
        raise ValueError(f"{path}: expected a 1000 x 2000 grid of 20x20 digits, got "
                         f"shape {sheet.shape}")
    cells = sheet.reshape(50, 20, 100, 20).transpose(0, 2, 1, 3).reshape(5000, 20, 20, 1)
    labels = np.repeat(np.arange(10), 500)
    return _split("opencv-digits", resize(cells, size), labels, 10, 0.2, seed,
                  [str(i) for i in range(10)])


def load_embedded(size: int = 16, *, seed: int = 0) -> ImageData:
    """The default real images that ship offline: OpenCV's 5000 digits when Debian's
    opencv-doc is installed, else scikit-learn's 1797 digits."""
    if OPENCV_DIGITS.is_file():
        return load_opencv_digits(OPENCV_DIGITS, size, seed=seed)
    return load_digits(size, seed=seed)


CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                   "horse", "ship", "truck")


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, 3, 32, 32) uint8, labels (N,) int32) of one CIFAR-10 python batch,
    read by the restricted unpickler (dicts, lists, bytes and plain NumPy arrays only:
    a batch that names anything else is refused, nothing in it runs)."""
    try:
        d = restricted_load_file(path, NUMPY_ARRAYS, encoding="bytes")
    except PickleRefusedError as error:
        raise ValueError(f"CIFAR-10 batch {error}") from error
    data = d.get(b"data") if isinstance(d, dict) else None
    labels = d.get(b"labels") if isinstance(d, dict) else None
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2
            and data.shape[1] == 3 * 32 * 32 and isinstance(labels, list)
            and len(labels) == len(data) and all(isinstance(v, int) and 0 <= v < 10
                                                 for v in labels)):
        raise ValueError(f"CIFAR-10 batch {path} is not a dict of b'data' (N x 3072 uint8) "
                         "and b'labels' (N ints in 0..9)")
    return data.reshape(-1, 3, 32, 32), np.asarray(labels, np.int32)


def load_cifar10(root: str | os.PathLike) -> ImageData:
    """CIFAR-10 from its python version (`root` is `cifar-10-batches-py` or its
    parent): 50000 train and 10000 test images, 32x32x3."""
    root = Path(root)
    if (root / "cifar-10-batches-py").is_dir():
        root = root / "cifar-10-batches-py"
    files = [root / f"data_batch_{i}" for i in range(1, 6)] + [root / "test_batch"]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(
            f"CIFAR-10 python batches not found under {root} (missing {missing[:2]}...); "
            "pass the folder that holds data_batch_1..5 and test_batch")

    def read(paths):
        xs, ys = [], []
        for p in paths:
            x, y = _read_cifar_batch(p)
            xs.append(x)
            ys.append(y)
        x = np.concatenate(xs).transpose(0, 2, 3, 1).astype(np.float32) / 255.0
        return x, np.concatenate(ys)

    xtr, ytr = read(files[:5])
    xte, yte = read(files[5:])
    return ImageData("cifar10", xtr, ytr, xte, yte, 10, CIFAR10_CLASSES)


def load_image_folder(root: str | os.PathLike, size: int = 32, *,
                      channels: int = 3) -> ImageData:
    """`root/train/<class>/*.png|jpg` and `root/val/<class>/*` (classes: the train
    folder's subfolders, sorted), each image resized to size x size."""
    from PIL import Image

    root = Path(root)
    train_dir, val_dir = root / "train", root / "val"
    for d in (train_dir, val_dir):
        if not d.is_dir():
            raise FileNotFoundError(f"image folder needs {d} with one subfolder per class")
    classes = sorted(p.name for p in train_dir.iterdir() if p.is_dir())
    if not classes:
        raise ValueError(f"{train_dir} has no class subfolders")
    mode = "RGB" if channels == 3 else "L"

    def read(split_dir):
        xs, ys = [], []
        for c, name in enumerate(classes):
            folder = split_dir / name
            if not folder.is_dir():
                continue
            for f in sorted(folder.iterdir()):
                if f.suffix.lower() not in IMAGE_SUFFIXES:
                    continue
                with Image.open(f) as im:
                    im = im.convert(mode).resize((size, size), Image.BILINEAR)
                    a = np.asarray(im, np.float32) / 255.0
                xs.append(a.reshape(size, size, channels))
                ys.append(c)
        if not xs:
            raise ValueError(f"{split_dir} holds no images ({', '.join(IMAGE_SUFFIXES)})")
        return np.stack(xs), np.asarray(ys, np.int32)

    xtr, ytr = read(train_dir)
    xte, yte = read(val_dir)
    rng = np.random.default_rng(0)
    p, q = rng.permutation(len(xtr)), rng.permutation(len(xte))
    return ImageData(root.name, xtr[p], ytr[p], xte[q], yte[q], len(classes),
                     tuple(classes))


# --------------------------------------------------------------------------- by name

DATASETS = ("embedded", "digits", "opencv-digits", "digits-on-photos", "cifar10", "folder",
            "records")
# data_root: a directory, required ("records": an "images" ArrayRecord dataset written by
# `data.records_write.write_image_records`, e.g. by `ebm-jax records images`)
NEEDS_ROOT = ("cifar10", "folder", "records")
OPTIONAL_ROOT = ("opencv-digits",)  # data_root: the directory that holds digits.png


VAL_FRACTION = 0.15  # of the training examples, held out by split="val"


def load_image_data(name: str, size: int, *, data_root=None, seed: int = 0,
                    num_train: int | None = None, num_test: int | None = None,
                    split: str = "test") -> ImageData:
    """The dataset `name` of `DATASETS` at size x size (resized where it is not),
    read from `data_root` where it needs one (nothing is downloaded); `seed` draws the
    train/test split of the digit sets; `num_train` / `num_test` keep the first
    examples of each split. `split="val"` evaluates on a validation split instead of
    the test split: `VAL_FRACTION` of the training examples (of the training digits for
    `digits-on-photos`) held out from training, drawn by `seed`."""
    if split not in ("test", "val"):
        raise ValueError(f"split must be 'test' or 'val', got {split!r}")
    if name == "embedded":
        d = load_embedded(size, seed=seed)
    elif name == "digits":
        d = load_digits(size, seed=seed)
    elif name == "opencv-digits":
        path = Path(data_root) / "digits.png" if data_root is not None else OPENCV_DIGITS
        d = load_opencv_digits(path, size, seed=seed)
    elif name == "digits-on-photos":
        d = load_digits_on_photos(size, seed=seed, split=split,
                                  val_fraction=VAL_FRACTION)
    elif name in NEEDS_ROOT and data_root is None:
        raise ValueError(f"data {name} needs data_root (a local path; nothing is "
                         "downloaded)")
    elif name == "cifar10":
        d = load_cifar10(data_root)
        if size != 32:
            d = dataclasses.replace(d, train_images=resize(d.train_images, size),
                                    test_images=resize(d.test_images, size))
    elif name == "folder":
        d = load_image_folder(data_root, size)
    elif name == "records":
        d = image_data_from_records(data_root, size=size)
    else:
        raise ValueError(f"data must be one of {', '.join(DATASETS)}; got {name!r}")
    if split == "val" and name != "digits-on-photos":
        d = validation_split(d, VAL_FRACTION, seed)
    return d.subset(num_train, num_test) if (num_train or num_test) else d


def dataset_sizes(name: str, data_root=None) -> tuple[int, int, int]:
    """(train images, test images, channels) of a dataset, known without reading its
    images (a folder's files are counted), for memory checks made before loading."""
    if name == "embedded":
        name = "opencv-digits" if OPENCV_DIGITS.is_file() else "digits"
    if name == "digits":
        return 1347, 450, 1
    if name == "opencv-digits":
        return 4000, 1000, 1
    if name == "digits-on-photos":
        return 2 * 1347, 4 * 450, 3
    if name == "cifar10":
        return 50000, 10000, 3
    if name == "records" and data_root is not None:
        rec = open_records(data_root, "images")
        return rec.splits["train"], rec.splits["test"], int(rec.metadata["image_shape"][-1])
    if name == "folder" and data_root is not None:
        def count(split):
            folder = Path(data_root) / split
            if not folder.is_dir():
                return 0
            return sum(1 for c in folder.iterdir() if c.is_dir() for f in c.iterdir()
                       if f.suffix.lower() in IMAGE_SUFFIXES)
        return count("train"), count("val"), 3
    raise ValueError(f"data must be one of {', '.join(DATASETS)}; got {name!r}")


def validation_split(data: ImageData, fraction: float, seed: int) -> ImageData:
    """`data` with a stratified `fraction` of its training examples held out as the
    evaluation split: an ImageData whose `test_*` are those examples and whose `train_*`
    are the rest, for choosing hyperparameters without touching the test split. (Sets
    whose images share a source split by source instead: `digits-on-photos`.)"""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"the validation fraction must be in (0, 1), got {fraction!r}")
    tr, va = stratified_split(data.train_labels, fraction, seed)
    if len(va) == 0 or len(tr) == 0:
        raise ValueError(f"a validation fraction of {fraction} leaves {len(tr)} training "
                         f"and {len(va)} validation images of {len(data.train_labels)}")
    return dataclasses.replace(
        data, name=f"{data.name} (val)", train_images=data.train_images[tr],
        train_labels=data.train_labels[tr], test_images=data.train_images[va],
        train_index=None if data.train_index is None else data.train_index[tr],
        test_labels=data.train_labels[va])


def fingerprint(data: ImageData) -> str:
    """16 hex digits of the labels and a sample of the images: what a training stage's
    identity records of its data (never its path)."""
    import hashlib

    h = hashlib.sha256()
    for a in (data.train_labels, data.test_labels):
        h.update(np.ascontiguousarray(a).tobytes())
    for a in (data.train_images, data.test_images):
        step = max(1, len(a) // 64)
        h.update(np.ascontiguousarray(a[::step]).tobytes())
        h.update(str(a.shape).encode())
    return h.hexdigest()[:16]
