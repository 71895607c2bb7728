"""The frozen features the detection energy head pools from (the paper's sec. 4.2 uses
the FPN levels of a trained Faster R-CNN R50-FPN; here a small feature pyramid,
`ebm_jax.models.fpn`, trained with a dense box head on the training boxes).

    model = build_backbone(widths=(32, 64), channels=32, num_classes=4, key=key)
    batches = backbone_batches(train, model.backbone.strides, batch=16, seed=seed)
    ...train model with `ebm_jax.models.fpn.dense_loss`...
    features = FeatureSource(model.backbone, train)   # computed once, on first use
    levels = features.levels([3, 0, 3])               # [(3, H_l, W_l, C), ...]

`train` is an `ebm_jax.data.detection.DetectionSet`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import numpy as np
from flax import nnx



def build_backbone(*, widths: Sequence[int], channels: int, num_classes: int, key):
    """A `DenseBoxModel` (feature pyramid + dense box head) initialised from `key`."""
    from ebm_jax.models.fpn import DenseBoxModel, FeaturePyramid

    rngs = nnx.Rngs(key)
    backbone = FeaturePyramid(widths=tuple(widths), channels=channels, rngs=rngs)
    return DenseBoxModel(backbone, num_classes, rngs=rngs)


def backbone_batches(data, strides: Sequence[int], *, batch: int,
                     seed: int) -> Callable[[int], tuple]:
    """`batches(step) -> (images, dense targets per level)` for `dense_loss`: `batch`
    images drawn at random; a function of (seed, step) alone, so a resumed run sees the
    same batches."""
    from ebm_jax.models.fpn import dense_targets

    n, size = len(data), data.image_size

    def batches(step: int):
        rng = np.random.default_rng([seed, step])
        idx = rng.choice(n, size=batch, replace=n < batch)
        targets = []
        for stride in strides:
            ts = [dense_targets(data.boxes[j], data.classes[j], data.valid[j], size, size,
                                stride) for j in idx]
            targets.append((np.stack([t[0] for t in ts]), np.stack([t[1] for t in ts])))
        return data.images(idx), tuple(targets)

    return batches


def feature_bytes(image_size: int, strides: Sequence[int], channels: int) -> int:
    """Bytes of one image's float32 feature levels."""
    return sum((image_size // s) ** 2 for s in strides) * channels * 4


_FORWARD: dict = {}


def _forward(graphdef):
    """One jitted forward pass per backbone structure (parameters are an argument), so
    the sources of every set and run share its compilations."""
    if graphdef not in _FORWARD:
        _FORWARD[graphdef] = jax.jit(lambda st, x: nnx.merge(graphdef, st)(x))
    return _FORWARD[graphdef]


class FeatureSource:
    """Frozen feature levels of a DetectionSet's images. They are computed on first use
    and kept in memory when they fit in `cache_bytes`, else computed for each request
    (so a resumed run whose stages are all done computes none)."""

    def __init__(self, backbone, data, *, batch: int = 32,
                 cache_bytes: float = 2e9, progress: bool = False):
        graphdef, state = nnx.split(backbone)
        self.data, self.batch, self.progress = data, batch, progress
        self._fn = _forward(graphdef)
        self._state = state
        self.strides = tuple(backbone.strides)
        total = feature_bytes(data.image_size, self.strides, backbone.channels) * len(data)
        self.cached = total <= cache_bytes
        self._cache: list[np.ndarray] | None = None

    @property
    def cache(self) -> list[np.ndarray] | None:
        """The cached levels of every image (computed now if not yet), or None when
        they do not fit in the cache."""
        if self.cached and self._cache is None:
            self._cache = self._compute(np.arange(len(self.data)), self.progress)
        return self._cache

    def _compute(self, idx, progress=False) -> list[np.ndarray]:
        from tqdm import tqdm

        chunks = []
        starts = range(0, len(idx), self.batch)
        for i in tqdm(starts, desc=f"features {self.data.name}", disable=not progress,
                      leave=False):
            part = idx[i:i + self.batch]
            # padded to a power of two: a few compiled shapes, and one image (as in
            # prediction without the cache) costs one image, not a whole batch
            pad = min(self.batch, 1 << (len(part) - 1).bit_length()) - len(part)
            imgs = self.data.images(np.concatenate([part, np.repeat(part[-1:], pad)]))
            out = self._fn(self._state, imgs)
            chunks.append([np.asarray(lv)[:len(part)] for lv in out])
        return [np.concatenate([c[k] for c in chunks]) for k in range(len(self.strides))]

    def levels(self, idx) -> list[np.ndarray]:
        idx = np.asarray(idx, int)
        cache = self.cache
        if cache is not None:
            return [lv[idx] for lv in cache]
        uniq, inv = np.unique(idx, return_inverse=True)
        return [lv[inv] for lv in self._compute(uniq)]
