"""A small convolutional backbone with a feature pyramid (FPN, Lin et al. 2017), and the
dense box head that trains it: the frozen feature levels on which the detection energy
head pools (Gustafsson et al. 2020, sec. 4.2, where the levels come from a Faster R-CNN R50-FPN).

    backbone = FeaturePyramid(widths=(32, 64), channels=32, rngs=nnx.Rngs(0))
    levels = backbone(images)        # [(N, H/4, W/4, 32), (N, H/8, W/8, 32)]

Level l has stride 4 * 2**l. The bottom-up path is a stride-2 stem and one stage of two
3x3 convolutions per level (the first with stride 2 from the second level on); the
top-down path adds each level's 1x1 lateral projection to the upsampled level above and
smooths the sum with a 3x3 convolution, as in FPN. Group normalisation keeps the
features independent of the batch, so that frozen features do not depend on which
images share a batch.

`DenseBoxModel` adds, on every level, a shared 3x3 convolution predicting a class per
position (0 = background) and the log distances from the position to the four sides of
the box it lies in (FCOS-style): supervised with boxes alone, it teaches the pyramid
where objects and their edges are, which is what box refinement needs.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx


def _groups(c: int) -> int:
    for g in (8, 4, 2, 1):
        if c % g == 0:
            return g
    return 1


class _ConvGN(nnx.Module):
    def __init__(self, c_in: int, c_out: int, k: int, stride: int, rngs: nnx.Rngs):
        self.conv = nnx.Conv(c_in, c_out, (k, k), strides=(stride, stride), padding="SAME",
                             use_bias=False, rngs=rngs)
        self.norm = nnx.GroupNorm(c_out, num_groups=_groups(c_out), rngs=rngs)

    def __call__(self, x):
        return jax.nn.relu(self.norm(self.conv(x)))


class FeaturePyramid(nnx.Module):
    def __init__(self, *, in_channels: int = 3, widths: Sequence[int] = (32, 64, 128, 256),
                 channels: int = 256, rngs: nnx.Rngs):
        widths = tuple(widths)
        for name, value in (("in_channels", in_channels), ("channels", channels),
                            *(("widths", w) for w in widths)):
            if int(value) != value or value < 1:
                raise ValueError(f"{name} must be integers >= 1, got {value!r}")
        if not widths:
            raise ValueError("widths must name at least one level")
        self.in_channels, self.channels = int(in_channels), int(channels)
        self.widths = widths
        self.strides = tuple(4 * 2**i for i in range(len(widths)))
        self.stem = _ConvGN(in_channels, widths[0], 3, 2, rngs)
        stages, c = [], widths[0]
        for i, w in enumerate(widths):
            stages.append(nnx.Sequential(_ConvGN(c, w, 3, 2, rngs), _ConvGN(w, w, 3, 1, rngs)))
            c = w
        self.stages = nnx.List(stages)
        self.lateral = nnx.List([nnx.Conv(w, channels, (1, 1), rngs=rngs) for w in widths])
        self.output = nnx.List([nnx.Conv(channels, channels, (3, 3), padding="SAME",
                                         rngs=rngs) for _ in widths])

    def check_images(self, images) -> None:
        shape = tuple(np.shape(images))
        top = self.strides[-1]
        if len(shape) != 4 or shape[-1] != self.in_channels:
            raise ValueError(f"images must have shape (N, H, W, {self.in_channels}), "
                             f"got {shape}")
        if shape[1] % top or shape[2] % top:
            raise ValueError(f"image height and width must be multiples of the top "
                             f"stride {top}, got {shape[1]}x{shape[2]}")

    def __call__(self, images: jax.Array) -> list[jax.Array]:
        self.check_images(images)
        h = self.stem(jnp.asarray(images))
        bottom_up = []
        for stage in self.stages:
            h = stage(h)
            bottom_up.append(h)
        out, top = [None] * len(bottom_up), None
        for i in reversed(range(len(bottom_up))):
            lat = self.lateral[i](bottom_up[i])
            if top is not None:
                n, hh, ww, c = lat.shape
                lat = lat + jax.image.resize(top, (n, hh, ww, c), "nearest")
            top = lat
            out[i] = self.output[i](lat)
        return out


class DenseBoxModel(nnx.Module):
    """The pyramid plus a dense head shared over levels: per position, num_classes + 1
    logits and 4 log side distances (in units of the level's stride)."""

    def __init__(self, backbone: FeaturePyramid, num_classes: int, *, rngs: nnx.Rngs):
        if int(num_classes) != num_classes or num_classes < 1:
            raise ValueError(f"num_classes must be an integer >= 1, got {num_classes!r}")
        self.backbone = backbone
        self.num_classes = int(num_classes)
        c = backbone.channels
        self.tower = _ConvGN(c, c, 3, 1, rngs)
        self.classify = nnx.Conv(c, num_classes + 1, (3, 3), padding="SAME", rngs=rngs)
        self.sides = nnx.Conv(c, 4, (3, 3), padding="SAME", rngs=rngs)

    def __call__(self, images):
        outs = []
        for lv in self.backbone(images):
            t = self.tower(lv)
            outs.append((self.classify(t), self.sides(t)))
        return outs


def dense_targets(boxes: np.ndarray, classes: np.ndarray, valid: np.ndarray,
                  height: int, width: int, stride: int):
    """Targets of one image on one level: (H/s, W/s) class (0 = background; a position
    in several boxes takes the smallest) and (H/s, W/s, 4) log distances to the sides
    (left, top, right, bottom) of that box in strides."""
    hs, ws = height // stride, width // stride
    cy, cx = (np.mgrid[0:hs, 0:ws] + 0.5) * stride
    cls = np.zeros((hs, ws), np.int32)
    dist = np.zeros((hs, ws, 4), np.float32)
    best = np.full((hs, ws), np.inf)
    for b, c, v in zip(boxes, classes, valid):
        if not v:
            continue
        x0, y0, x1, y1 = b
        sides = np.stack([cx - x0, cy - y0, x1 - cx, y1 - cy], -1)
        area = (x1 - x0) * (y1 - y0)
        inside = np.all(sides > 0, -1) & (area < best)
        cls[inside], best[inside] = c, area
        dist[inside] = np.log(sides[inside] / stride)
    return cls, dist


def dense_loss(model: DenseBoxModel, batch, key=None):
    """Softmax cross-entropy of the classes over all positions plus the L1 error of the
    log side distances on the foreground, summed over levels. batch = (images,
    ((class_l, dist_l) for each level))."""
    images, targets = batch
    total, metrics = 0.0, {}
    for i, ((logits, sides), (cls, dist)) in enumerate(zip(model(images), targets)):
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, cls).mean()
        fg = (cls > 0).astype(sides.dtype)
        l1 = jnp.sum(jnp.abs(sides - dist).sum(-1) * fg) / jnp.maximum(fg.sum(), 1.0)
        total = total + ce + l1
        metrics[f"ce_{i}"], metrics[f"l1_{i}"] = ce, l1
    return total, metrics
