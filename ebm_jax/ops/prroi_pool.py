"""Precise RoI pooling (PrRoIPool, Jiang et al. 2018) in JAX.

The feature map F (H, W, C) is a continuous function through bilinear interpolation,

    f(y, x) = sum_ij F[i, j] k(y - i) k(x - j),    k(t) = max(0, 1 - |t|),

with F = 0 outside the map. A bin [y0, y1] x [x0, x1] is pooled to the exact average of
f over it. The integral factorises: the bin's value is ry^T F rx / area with the row
weights ry_i = integral_{y0}^{y1} k(y - i) dy (and likewise rx), so a P x P grid is two
small contractions, `einsum("ph,hwc,qw->pqc")`. Everything is differentiable in the
features and in the box coordinates (the weights are piecewise quadratic in the bin
edges, with continuous first derivatives).

Coordinates: boxes are (x0, y0, x1, y1) in image pixels; `spatial_scale` maps them to
the feature map (1 / stride). With `aligned=True` (default) feature pixel (i, j) covers
the image point ((j + 0.5) / scale, (i + 0.5) / scale), so a box over the whole image
pools the whole map; `aligned=False` is the original implementation's convention
(pixel (i, j) at (j / scale, i / scale)).

    pooled = prroi_pool(features, boxes, output_size=7, spatial_scale=1 / 8)  # (N, 7, 7, C)
    pooled = prroi_pool_fpn(levels, boxes, strides=(4, 8, 16, 32))          # FPN levels
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np


def _hat_cdf(t: jax.Array) -> jax.Array:
    """G(t) = integral_{-inf}^{t} max(0, 1 - |s|) ds."""
    t = jnp.clip(t, -1.0, 1.0)
    return jnp.where(t < 0, 0.5 * (t + 1.0) ** 2, 1.0 - 0.5 * (1.0 - t) ** 2)


def bin_weights(lo: jax.Array, hi: jax.Array, size: int) -> jax.Array:
    """(..., size) weights integral_{lo}^{hi} k(t - i) dt for pixels i = 0 .. size - 1."""
    i = jnp.arange(size, dtype=jnp.result_type(lo, jnp.float32))
    return _hat_cdf(hi[..., None] - i) - _hat_cdf(lo[..., None] - i)


def _pool_one(features: jax.Array, box: jax.Array, output_size: int, spatial_scale,
              offset) -> jax.Array:
    h, w = features.shape[:2]
    x0, y0, x1, y1 = box * spatial_scale - offset
    edges = jnp.linspace(0.0, 1.0, output_size + 1, dtype=features.dtype)
    ys = y0 + (y1 - y0) * edges
    xs = x0 + (x1 - x0) * edges
    ry = bin_weights(ys[:-1], ys[1:], h)  # (P, H)
    rx = bin_weights(xs[:-1], xs[1:], w)  # (P, W)
    area = (ys[1:] - ys[:-1])[:, None] * (xs[1:] - xs[:-1])[None, :]  # (P, P)
    pooled = jnp.einsum("ph,hwc,qw->pqc", ry, features, rx)
    return pooled / area[..., None]


def _is_concrete(x) -> bool:
    try:
        np.asarray(x)
    except jax.errors.TracerArrayConversionError:
        return False
    return True


def check_boxes(boxes, name: str = "boxes") -> None:
    """Concrete boxes (N, 4) as (x0, y0, x1, y1): finite, x1 > x0 and y1 > y0."""
    b = np.asarray(boxes)
    if b.ndim != 2 or b.shape[1] != 4:
        raise ValueError(f"{name} must have shape (N, 4) as (x0, y0, x1, y1), got {b.shape}")
    if not np.all(np.isfinite(b)):
        bad = int(np.flatnonzero(~np.all(np.isfinite(b), axis=1))[0])
        raise ValueError(f"{name}[{bad}] has a non-finite coordinate: {b[bad].tolist()}")
    wh = b[:, 2:] - b[:, :2]
    if np.any(wh <= 0):
        bad = int(np.flatnonzero(np.any(wh <= 0, axis=1))[0])
        raise ValueError(f"{name}[{bad}] = {b[bad].tolist()} has width or height <= 0 "
                         "(boxes are (x0, y0, x1, y1) with x1 > x0, y1 > y0)")


def prroi_pool(features: jax.Array, boxes: jax.Array, *, output_size: int = 7,
               spatial_scale: float = 1.0, aligned: bool = True) -> jax.Array:
    """(N, P, P, C): each box's P x P bins, exact averages of the bilinearly interpolated
    `features` (H, W, C). Concrete inputs are checked (box shape, finite coordinates,
    positive size, a map at least 1 x 1); traced ones are not."""
    features = jnp.asarray(features)
    if features.ndim != 3:
        raise ValueError(f"features must have shape (H, W, C), got {features.shape}")
    if int(output_size) != output_size or output_size < 1:
        raise ValueError(f"output_size must be an integer >= 1, got {output_size!r}")
    if not (math.isfinite(spatial_scale) and spatial_scale > 0):
        raise ValueError(f"spatial_scale must be > 0, got {spatial_scale!r}")
    h, w = features.shape[:2]
    if h < output_size or w < output_size:
        raise ValueError(f"features: the {h} x {w} map is smaller than the "
                         f"{output_size} x {output_size} pooling grid")
    if _is_concrete(boxes):
        check_boxes(boxes)
    boxes = jnp.asarray(boxes, features.dtype)
    offset = 0.5 if aligned else 0.0
    return jax.vmap(lambda b: _pool_one(features, b, int(output_size), spatial_scale,
                                        offset))(boxes)


def fpn_levels(boxes: jax.Array, *, num_levels: int = 4, min_level: int = 2,
               canonical_size: float = 224.0, canonical_level: int = 4) -> jax.Array:
    """FPN's level of each box (Lin et al. 2017, eq. 1), as an index into the levels
    (0 for P2): k = floor(k0 + log2(sqrt(w h) / 224)), limited to the levels that exist
    (a box larger or smaller than the pyramid goes to its top or bottom level, as in
    FPN)."""
    boxes = jnp.asarray(boxes)
    wh = jnp.maximum(boxes[:, 2:] - boxes[:, :2], 1e-6)
    k = jnp.floor(canonical_level + jnp.log2(jnp.sqrt(wh[:, 0] * wh[:, 1]) / canonical_size))
    return jnp.clip(k - min_level, 0, num_levels - 1).astype(jnp.int32)


def prroi_pool_fpn(levels: Sequence[jax.Array], boxes: jax.Array, *,
                   strides: Sequence[int] = (4, 8, 16, 32), output_size: int = 7,
                   aligned: bool = True, canonical_size: float = 224.0) -> jax.Array:
    """(N, P, P, C) from a feature pyramid: each box pooled on its `fpn_levels` level.
    Every level is pooled for every box (vmapped over levels) and the box's own level
    selected: static shapes for jit, at the cost of pooling 4 times (cheap next to the
    head's first FC layer). `canonical_size` is FPN's 224 (the box size that goes to
    P4); smaller images use a proportionally smaller one."""
    if len(levels) != len(strides):
        raise ValueError(f"got {len(levels)} feature levels but {len(strides)} strides")
    channels = {lv.shape[-1] for lv in levels}
    if len(channels) != 1:
        raise ValueError(f"all levels need the same channel count, got {sorted(channels)}")
    if _is_concrete(boxes):
        check_boxes(boxes)
    boxes = jnp.asarray(boxes, levels[0].dtype)
    pooled = jnp.stack([
        prroi_pool(lv, boxes, output_size=output_size, spatial_scale=1.0 / s,
                   aligned=aligned)
        for lv, s in zip(levels, strides)])  # (L, N, P, P, C)
    idx = fpn_levels(boxes, num_levels=len(levels),
                     min_level=int(round(math.log2(strides[0]))),
                     canonical_size=canonical_size)
    return jnp.take_along_axis(pooled, idx[None, :, None, None, None], axis=0)[0]
