"""Crops centred on a jittered box, as pytracking's training processing cuts them for
the box branch of ATOM and PrDiMP (Danelljan et al. 2019 / 2020; its `_get_jittered_box`
and `jittered_center_crop`), so that the target appears at varied offsets and scales:

    size'   = (w, h) * exp(N(0, 1) * scale_factor)          (per axis, log-normal)
    centre' = centre + sqrt(w' h') * centre_factor * (U(0, 1) - 0.5)   (per axis)
    crop    = the square of side search_area_factor * sqrt(w' h') around centre',
              resampled to out_size (`crop_square_np`)

PrDiMP's factors: search area 5, centre 3 (reference frame) / 4.5 (test frame), scale
0.25 / 0.5, output 288 (18 x 16); here the output is the backbone's search size.

    jitter = CropJitter()
    crop, box = jittered_crop_np(rng, frame, box_xywh, jitter, frame_kind=1, out_size=255)
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ebm_jax.ops.crops import box_to_center, crop_square_np, rounded_uint8

REFERENCE, TEST = 0, 1  # the frame kinds: index of the factors
# the ranges checked before training: a crop side scales by exp(N(0, 1) x scale_jitter)
# (at 2, a 3-sigma draw is 400x: beyond it sizes overflow), the centre moves by up to
# center_jitter / 2 x the jittered side, and the crop is search_area_factor sides wide
MAX_SCALE_JITTER, MAX_CENTER_JITTER, MAX_SEARCH_AREA = 2.0, 20.0, 20.0


@dataclasses.dataclass(frozen=True)
class CropJitter:
    """pytracking's jittered centre crop: `search_area_factor` (the crop's side over the
    jittered box's sqrt(w h)), `center_jitter` and `scale_jitter` as (reference, test)
    factors (module docstring)."""

    search_area_factor: float = 5.0
    center_jitter: tuple[float, float] = (3.0, 4.5)
    scale_jitter: tuple[float, float] = (0.25, 0.5)

    def __post_init__(self):
        v = self.search_area_factor
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                math.isfinite(v) and 0 < v <= MAX_SEARCH_AREA):
            raise ValueError(f"search_area_factor must be a number in (0, "
                             f"{MAX_SEARCH_AREA:g}], got {v!r}")
        for name, high in (("center_jitter", MAX_CENTER_JITTER),
                           ("scale_jitter", MAX_SCALE_JITTER)):
            pair = getattr(self, name)
            try:
                pair = tuple(float(x) for x in pair)
            except (TypeError, ValueError):
                pair = ()
            if len(pair) != 2 or not all(math.isfinite(x) and 0 < x <= high for x in pair):
                raise ValueError(f"{name} must be two numbers in (0, {high:g}] (reference, "
                                 f"test frame), got {getattr(self, name)!r}")
            object.__setattr__(self, name, pair)


def jittered_box(rng: np.random.Generator, box_xywh, jitter: CropJitter,
                 frame_kind: int) -> tuple[np.ndarray, float]:
    """(centre (cy, cx), crop side) of the crop around a jittered copy of `box_xywh`
    (1-indexed xywh) for `frame_kind` (REFERENCE or TEST)."""
    cy, cx, h, w = box_to_center(np.asarray(box_xywh, np.float64))
    size = np.array([h, w]) * np.exp(rng.standard_normal(2) * jitter.scale_jitter[frame_kind])
    root = math.sqrt(size[0] * size[1])
    center = np.array([cy, cx]) + root * jitter.center_jitter[frame_kind] * (
        rng.random(2) - 0.5)
    return center, jitter.search_area_factor * root


def jittered_crop_np(rng: np.random.Generator, frame, box_xywh, jitter: CropJitter,
                     frame_kind: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(crop (out_size, out_size, 3) uint8, the true box in it (4,) xyxy float32 in
    crop pixels, 0-indexed continuous as `ebm_jax.ops.crops`) of the jittered crop of
    the module docstring; mean-colour padding outside the frame."""
    center, side = jittered_box(rng, box_xywh, jitter, frame_kind)
    crop = crop_square_np(frame, center, side, out_size)
    cy, cx, h, w = box_to_center(np.asarray(box_xywh, np.float64))
    scale, mid = out_size / side, (out_size - 1) / 2
    y, x = mid + (cy - center[0]) * scale, mid + (cx - center[1]) * scale
    box = np.array([x - w * scale / 2, y - h * scale / 2, x + w * scale / 2,
                    y + h * scale / 2], np.float32)
    return rounded_uint8(crop), box


__all__ = ["REFERENCE", "TEST", "CropJitter", "jittered_box", "jittered_crop_np"]
