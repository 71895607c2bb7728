"""Digits on photos: an MNIST-M-style benchmark that runs offline, for the contrastive
experiments (InstDisc, MoCo). Raw pixels separate plain digits almost perfectly; composited
onto patches of real photos, with the photo's colours inverted under the stroke (the
MNIST-M blend, |patch - digit|), they do not, which leaves room for a representation to
matter.

    data = load_digits_on_photos(32, seed=0)          # an ImageData, RGB 32 x 32
    data.train_images.shape, data.test_images.shape    # (2694, 32, 32, 3) (1800, 32, 32, 3)

- Digits: scikit-learn's 1797 (8x8), split 75/25 stratified by `seed`, so no test
  digit is seen in training.
- Patches: random crops of the photos of `PHOTO_POOLS` (scikit-image and scikit-learn
  photos); training images use the "train" pool, test images the disjoint "test" pool.
- `split="val"` holds out 15% of the training digits as a validation split (on the
  training photos), for choosing hyperparameters without touching the test split.
- Each digit is used `train_copies` (or `test_copies`) times, each time on its own
  patch, at its own scale (60-100% of the image side) and position; the test split is
  4 x 450 = 1800 images.

Everything is drawn from `numpy.random.default_rng` seeded by (`seed`, split), so a seed
gives the same bytes.
"""

from __future__ import annotations

import numpy as np

from ebm_jax.data.labelled_images import ImageData, stratified_split

_SPLIT_IDS = {"train": 1, "test": 2}


def _patch(photo: np.ndarray, size: int, rng) -> np.ndarray:
    """A size x size crop of `photo` at a random scale (the crop covers 32-128 px of the
    photo before resizing), at a random place."""
    import cv2

    h, w = photo.shape[:2]
    side = int(rng.integers(size, min(h, w, 4 * size) + 1))
    y, x = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
    crop = photo[y:y + side, x:x + side]
    if side != size:
        # INTER_AREA can overshoot 1 by rounding
        crop = np.clip(cv2.resize(crop, (size, size), interpolation=cv2.INTER_AREA), 0, 1)
    return crop


def _stroke(digit: np.ndarray, size: int, rng) -> np.ndarray:
    """A digit (8x8 in [0, 1]) as a size x size stroke mask at a random scale and place."""
    import cv2

    side = int(rng.integers(int(0.6 * size), size + 1))
    small = cv2.resize(digit.astype(np.float32), (side, side), interpolation=cv2.INTER_LINEAR)
    out = np.zeros((size, size), np.float32)
    y, x = (int(rng.integers(0, size - side + 1)) for _ in range(2))
    out[y:y + side, x:x + side] = small
    return np.clip(out, 0.0, 1.0)


def composite(digits: np.ndarray, photos: list[np.ndarray], size: int, copies: int,
              rng) -> tuple[np.ndarray, np.ndarray]:
    """`copies` images per digit of `digits` (N, 8, 8) in [0, 1]: |patch - stroke| with
    a patch of a random one of `photos`. Returns (images (N * copies, size, size, 3),
    the index of the photo of each image)."""
    n = len(digits)
    images = np.empty((n * copies, size, size, 3), np.float32)
    sources = rng.integers(0, len(photos), n * copies)
    for i in range(n * copies):
        patch = _patch(photos[sources[i]], size, rng)
        stroke = _stroke(digits[i % n], size, rng)
        images[i] = np.abs(patch - stroke[..., None])
    return images, sources


def load_digits_on_photos(size: int = 32, *, seed: int = 0, train_copies: int = 2,
                          test_copies: int = 4, split: str = "test",
                          val_fraction: float = 0.15) -> ImageData:
    """The benchmark at size x size (>= 16), RGB in [0, 1]; see the module docstring.
    `split="val"`: the evaluation split is a validation split instead, `val_fraction`
    of the training digits (stratified, by `seed`) held out from training and put on
    patches of the training photos, `test_copies` times each; the test digits and
    photos are not touched."""
    from sklearn.datasets import load_digits

    from ebm_jax.data.tracking_render import PHOTO_POOLS, load_photo

    for name, value, low in (("size", size, 16), ("train_copies", train_copies, 1),
                             ("test_copies", test_copies, 1)):
        if isinstance(value, bool) or int(value) != value or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if split not in ("test", "val"):
        raise ValueError(f"split must be 'test' or 'val', got {split!r}")
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    d = load_digits()
    digits = (d.images / 16.0).astype(np.float32)
    train_idx, test_idx = stratified_split(d.target, 0.25, seed)
    pools = {"train": "train", "test": "test"}
    if split == "val":  # held-out training digits on the training photos
        keep, val = stratified_split(d.target[train_idx], val_fraction, seed)
        train_idx, test_idx = train_idx[keep], train_idx[val]
        pools["test"] = "train"
    out = {}
    for part, idx, copies in (("train", train_idx, train_copies),
                              ("test", test_idx, test_copies)):
        rng = np.random.default_rng([seed, _SPLIT_IDS[part] + (2 if split == "val" else 0)])
        photos = [load_photo(p) for p in PHOTO_POOLS[pools[part]]]
        images, _ = composite(digits[idx], photos, size, copies, rng)
        labels = np.tile(d.target[idx], copies).astype(np.int32)
        order = rng.permutation(len(images))
        out[part] = (images[order], labels[order])
    name = "digits-on-photos" + (" (val)" if split == "val" else "")
    return ImageData(name, *out["train"], *out["test"], 10,
                     tuple(str(i) for i in range(10)))
