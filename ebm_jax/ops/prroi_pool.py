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
    features = _checked_pool_args(features, boxes, output_size, spatial_scale)
    h, w = features.shape[:2]
    if h < output_size or w < output_size:
        raise ValueError(f"features: the {h} x {w} map is smaller than the "
                         f"{output_size} x {output_size} pooling grid")
    boxes = jnp.asarray(boxes, features.dtype)
    offset = 0.5 if aligned else 0.0
    return jax.vmap(lambda b: _pool_one(features, b, int(output_size), spatial_scale,
                                        offset))(boxes)


def _checked_pool_args(features, boxes, output_size, spatial_scale) -> jax.Array:
    """The checks both PrRoIPool paths make: a (H, W, C) map, an integer grid >= 1, a
    positive scale, and concrete boxes well formed."""
    features = jnp.asarray(features)
    if features.ndim != 3:
        raise ValueError(f"features must have shape (H, W, C), got {features.shape}")
    if int(output_size) != output_size or output_size < 1:
        raise ValueError(f"output_size must be an integer >= 1, got {output_size!r}")
    if not (math.isfinite(spatial_scale) and spatial_scale > 0):
        raise ValueError(f"spatial_scale must be > 0, got {spatial_scale!r}")
    if _is_concrete(boxes):
        check_boxes(boxes)
    return features


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


POOL_METHODS = ("integral", "dense")


def prroi_pool_fpn(levels: Sequence[jax.Array], boxes: jax.Array, *,
                   strides: Sequence[int] = (4, 8, 16, 32), output_size: int = 7,
                   aligned: bool = True, canonical_size: float = 224.0,
                   method: str = "dense") -> jax.Array:
    """(N, P, P, C) from a feature pyramid: each box pooled on its `fpn_levels` level.
    `method="dense"` (default) pools every level for every box and selects the box's
    own level (static shapes for jit), contracting the whole map per box (`prroi_pool`).
    "integral" reads each bin from the box's own level's integral images (as
    `prroi_pool_integral`: a cost per box independent of the map's size); the same
    values to float32 precision.
    `canonical_size` is FPN's 224 (the box size that goes to P4); smaller images use a
    proportionally smaller one."""
    if method not in POOL_METHODS:
        raise ValueError(f"method must be one of {POOL_METHODS}, got {method!r}")
    if len(levels) != len(strides):
        raise ValueError(f"got {len(levels)} feature levels but {len(strides)} strides")
    channels = {lv.shape[-1] for lv in levels}
    if len(channels) != 1:
        raise ValueError(f"all levels need the same channel count, got {sorted(channels)}")
    if _is_concrete(boxes):
        check_boxes(boxes)
    boxes = jnp.asarray(boxes, levels[0].dtype)
    idx = fpn_levels(boxes, num_levels=len(levels),
                     min_level=int(round(math.log2(strides[0]))),
                     canonical_size=canonical_size)
    if method == "integral":  # each box read from its own level only
        return _pool_integral(levels, boxes, idx, strides, int(output_size), aligned)
    pooled = jnp.stack([
        prroi_pool(lv, boxes, output_size=output_size, spatial_scale=1.0 / s,
                   aligned=aligned)
        for lv, s in zip(levels, strides)])  # (L, N, P, P, C)
    return jnp.take_along_axis(pooled, idx[None, :, None, None, None], axis=0)[0]


# ------------------------------------------------------------------ integral-image path


def integral_tables(features: jax.Array) -> tuple[jax.Array, ...]:
    """The tables the integral path reads, for a map F (H, W, C): F zero-padded by 2 on
    every side (index i of F at i + 2), its prefix sums down the rows, along the columns
    and both (the summed-area table), and the per-channel mean m that was subtracted
    first (it keeps the prefix sums small, so their differences keep float32
    precision). Computed once per map, shared by every box."""
    features = jnp.asarray(features)
    mean = jnp.mean(features, axis=(0, 1))
    centred = jnp.pad(features - mean, ((2, 2), (2, 2), (0, 0)))
    rows = jnp.cumsum(centred, axis=0)
    return centred, rows, jnp.cumsum(centred, axis=1), jnp.cumsum(rows, axis=1), mean


def _corner_weights(t: jax.Array, size):
    """Q(t) = sum_i F_i H(t - i), H the hat's CDF, is P[a - 1] + alpha F_a + beta F_(a+1)
    with a = floor(t), r = t - a, alpha = 1 - (1 - r)^2 / 2, beta = r^2 / 2 (P the prefix
    sum): t limited to [-1, size], where Q is constant outside, gives the padded index
    a + 2 and the two weights."""
    t = jnp.clip(t, -1.0, size)
    a = jnp.floor(t)
    r = t - a
    return a.astype(jnp.int32) + 2, 1.0 - 0.5 * (1.0 - r) ** 2, 0.5 * r * r


def _indicator_prefix(t: jax.Array, size) -> jax.Array:
    """sum_{i=0}^{size-1} H(t - i): Q of an all-ones map along one axis, in closed form
    (the number of whole pixels below a, plus alpha and beta where a, a + 1 are on
    the map)."""
    a, alpha, beta = _corner_weights(t, size)
    a = a - 2  # back to map indices
    whole = jnp.clip(a, 0, size).astype(t.dtype)  # pixels 0 .. a - 1
    on = lambda i: ((i >= 0) & (i < size)).astype(t.dtype)  # noqa: E731
    return whole + alpha * on(a) + beta * on(a + 1)


def _pool_integral(maps, boxes, levels_of_boxes, strides, output_size: int,
                   aligned: bool) -> jax.Array:
    """(N, P, P, C): box n pooled on map `levels_of_boxes[n]` (stride `strides[l]`) from
    integral images. The tables of every map are flattened into one
    (sum_l (H_l + 4)(W_l + 4), C) array per kind, so a box reads only its own map's
    part: 9 reads per bin corner, whatever the map's size.

    Each bin's integral of the bilinear surface f is Q(y1, x1) - Q(y0, x1) - Q(y1, x0)
    + Q(y0, x0), Q(ty, tx) = sum_ij F_ij H(ty - i) H(tx - j); rows below a = floor(ty)
    and columns below b = floor(tx) have weight 1 (a summed-area-table read), rows a,
    a + 1 and columns b, b + 1 their alpha and beta (`_corner_weights`)."""
    per_map = [integral_tables(m) for m in maps]
    shapes = [m.shape[:2] for m in maps]
    f, rows, cols, sat = (jnp.concatenate([t[k].reshape(-1, t[k].shape[-1])
                                           for t in per_map]) for k in range(4))
    means = jnp.stack([t[4] for t in per_map])  # (L, C)
    sizes = [(h + 4) * (w + 4) for h, w in shapes]
    offsets = jnp.asarray(np.concatenate([[0], np.cumsum(sizes)[:-1]]), jnp.int32)
    heights = jnp.asarray([h for h, _ in shapes], boxes.dtype)
    widths = jnp.asarray([w for _, w in shapes], boxes.dtype)
    row_len = jnp.asarray([w + 4 for _, w in shapes], jnp.int32)
    scales = jnp.asarray([1.0 / s for s in strides], boxes.dtype)
    offset = 0.5 if aligned else 0.0
    edges = jnp.linspace(0.0, 1.0, output_size + 1, dtype=boxes.dtype)

    def one(box, lv):
        h, w, stride_len, base = heights[lv], widths[lv], row_len[lv], offsets[lv]
        x0, y0, x1, y1 = box * scales[lv] - offset
        ys, xs = y0 + (y1 - y0) * edges, x0 + (x1 - x0) * edges  # (P + 1,)
        a, ay, by = _corner_weights(ys, h)
        b, ax, bx = _corner_weights(xs, w)
        a, b = a[:, None], b[None, :]
        ay, by = ay[:, None, None], by[:, None, None]
        ax, bx = ax[None, :, None], bx[None, :, None]

        def at(table, i, j):  # (P + 1, P + 1, C)
            return table[base + i * stride_len + j]

        q = (at(sat, a - 1, b - 1) + ax * at(rows, a - 1, b) + bx * at(rows, a - 1, b + 1)
             + ay * at(cols, a, b - 1) + by * at(cols, a + 1, b - 1)
             + ay * (ax * at(f, a, b) + bx * at(f, a, b + 1))
             + by * (ax * at(f, a + 1, b) + bx * at(f, a + 1, b + 1)))
        # the in-map indicator's integral over each bin, for the mean added back
        ones_y, ones_x = _indicator_prefix(ys, h), _indicator_prefix(xs, w)
        inside = (ones_y[1:] - ones_y[:-1])[:, None] * (ones_x[1:] - ones_x[:-1])[None, :]
        pooled = q[1:, 1:] - q[:-1, 1:] - q[1:, :-1] + q[:-1, :-1]
        pooled = pooled + inside[..., None] * means[lv]
        area = (ys[1:] - ys[:-1])[:, None] * (xs[1:] - xs[:-1])[None, :]
        return pooled / area[..., None]

    return jax.vmap(one)(boxes, levels_of_boxes)


def prroi_pool_integral(features: jax.Array, boxes: jax.Array, *, output_size: int = 7,
                        spatial_scale: float = 1.0, aligned: bool = True) -> jax.Array:
    """`prroi_pool` computed from integral images: the same exact bin averages, at a
    cost per box independent of the map's size (9 table reads per bin corner instead of
    a contraction over the whole map; `_pool_integral`). Differentiable in the box
    coordinates (the weights are the same piecewise quadratics); the prefix sums cost
    some float32 precision, within 1e-4 of the features' scale for the smallest bins."""
    features = _checked_pool_args(features, boxes, output_size, spatial_scale)
    boxes = jnp.asarray(boxes, features.dtype)
    return _pool_integral([features], boxes, jnp.zeros(len(boxes), jnp.int32),
                          [1.0 / spatial_scale], int(output_size), aligned)
