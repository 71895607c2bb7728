"""The detection energy head's training inputs (the paper's sec. 4.2): the head, and
batches of annotated boxes, each with its image's frozen feature levels. `data` is an
`ebm_jax.data.detection.DetectionSet`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from flax import nnx



def build_head(*, channels: int, num_classes: int, hidden: int, pool_size: int,
               strides: Sequence[int], canonical_size: float, key,
               pool_method: str = "dense"):
    """A `DetectionEnergyHead` initialised from `key` (PrRoIPool P x P on the box's
    FPN level -> FC hidden x 2 -> FC classes + 1)."""
    from ebm_jax.models.detection_head import DetectionEnergyHead

    return DetectionEnergyHead(channels, num_classes, hidden=hidden, pool_size=pool_size,
                               strides=tuple(strides), canonical_size=canonical_size,
                               pool_method=pool_method, rngs=nnx.Rngs(key))


def box_index(data) -> np.ndarray:
    """(K, 2) (image, row) of every valid training box; images without one are
    skipped (documented), and a set with none is an error."""
    idx = np.argwhere(data.valid)
    if len(idx) == 0:
        raise ValueError(f"{data.name}: no image has a (non-crowd) box to train on")
    return idx


def box_batches(data, features, *, boxes_per_batch: int,
                seed: int) -> Callable[[int], tuple]:
    """`batches(step) -> (levels, boxes, classes, valid)` for `make_detection_loss`:
    `boxes_per_batch` annotated boxes drawn at random, each as a one-box "image" with
    its image's levels (a function of (seed, step) alone: a resumed run sees the same
    batches). `features` is a `FeatureSource` of `data`."""
    index = box_index(data)
    k = int(boxes_per_batch)

    def batches(step: int):
        rng = np.random.default_rng([seed, step])
        pick = index[rng.choice(len(index), size=k, replace=len(index) < k)]
        img, row = pick[:, 0], pick[:, 1]
        return (features.levels(img), data.boxes[img, row][:, None],
                data.classes[img, row][:, None], np.ones((k, 1), bool))

    return batches
