"""Unlabelled square crops of tracking frames and photos: the images a tracking backbone
is pretrained on without any annotation (MoCo on the training split's frames and its
photo pool; `ebm_jax.recipes.tracking.backbone_pretraining`).

    crops = frame_crops(sequences, photos, count=4096, size=96, seed=0)
    crops.shape, crops.dtype        # (4096, 96, 96, 3) uint8

Each crop is a square of a random side (`side_range`, a fraction of the shorter side
of its image) at a random place, resized to size x size (`cv2.INTER_AREA`). A fraction
`photo_fraction` of the crops come from `photos` (float RGB in [0, 1]), the rest from
frames drawn uniformly over all the frames of `sequences`. Only pixels are read: no
box, point or label. Everything is drawn from `numpy.random.default_rng(seed)`, so a
seed gives the same bytes.
"""

from __future__ import annotations

import numpy as np

from ebm_jax import checks

__all__ = ["frame_crops"]


def _check(name, value, ok, allowed):
    if not ok:
        raise ValueError(f"{name} must be {allowed}, got {value!r}")


def _square(image: np.ndarray, size: int, side_range, rng) -> np.ndarray:
    import cv2

    h, w = image.shape[:2]
    short = min(h, w)
    lo = max(1, int(round(side_range[0] * short)))
    hi = max(lo, int(round(side_range[1] * short)))
    side = int(rng.integers(lo, hi + 1))
    y, x = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
    crop = image[y:y + side, x:x + side]
    interp = cv2.INTER_AREA if side > size else cv2.INTER_LINEAR
    return cv2.resize(crop, (size, size), interpolation=interp)


def frame_crops(sequences, photos=(), *, count: int, size: int,
                side_range: tuple[float, float] = (0.3, 1.0), photo_fraction: float = 0.25,
                seed: int = 0, progress: bool = False) -> np.ndarray:
    """(count, size, size, 3) uint8 crops of the frames of `sequences` (`Sequence`s) and
    of `photos` (float RGB arrays in [0, 1]); see the module docstring."""
    count = checks.int_at_least("count", count, 1)
    size = checks.int_at_least("size", size, 8)
    lo, hi = (float(v) for v in side_range)
    _check("side_range", side_range, 0.0 < lo <= hi <= 1.0, "(low, high) with 0 < low <= "
           "high <= 1 (fractions of the image's shorter side)")
    _check("photo_fraction", photo_fraction, 0.0 <= photo_fraction <= 1.0, "in [0, 1]")
    sequences, photos = list(sequences), list(photos)
    n_photo = int(round(photo_fraction * count)) if photos else 0
    n_frame = int(count) - n_photo
    if n_frame and not sequences:
        raise ValueError("frame_crops needs sequences (or photo_fraction=1 with photos)")
    rng = np.random.default_rng(seed)
    out = np.empty((int(count), int(size), int(size), 3), np.uint8)
    if n_frame:
        lengths = np.array([len(s) for s in sequences])
        flat = np.sort(rng.integers(0, lengths.sum(), n_frame))  # read each frame once
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        which = np.searchsorted(starts, flat, side="right") - 1
        items = zip(which, flat - starts[which])
        if progress:
            from tqdm.auto import tqdm
            items = tqdm(list(items), desc="frame crops", unit="crop")
        last, frame = None, None
        for i, (s, f) in enumerate(items):
            if (s, f) != last:
                frame, last = sequences[s].read_frame(int(f)), (s, f)
            out[i] = _square(frame, size, (lo, hi), rng)
    for i in range(n_photo):
        photo = photos[int(rng.integers(len(photos)))]
        crop = _square(np.asarray(photo, np.float32), size, (lo, hi), rng)
        out[n_frame + i] = np.clip(np.rint(crop * 255.0), 0, 255).astype(np.uint8)
    return out[rng.permutation(int(count))]
