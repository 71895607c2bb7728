"""The shapes of the generated tracking benchmark's objects (`ebm_jax.data.tracking`)
and their exact boxes.

A shape is star-shaped around its origin: in canonical coordinates q = (u, v) its
boundary is r(theta) (u, v) with r <= 1 (ellipse, rounded rectangle as a superellipse,
smooth Fourier blob, random star polygon). A pose (cx, cy, sx, sy, angle) maps it into
the frame, p = c + R(angle) diag(sx, sy) q, in 0-indexed continuous pixel coordinates
(pixel i's centre at i). The box is the extent [u0, u1] x [v0, v1] of the transformed
boundary (never clipped to the frame), written in the GOT-10k / OTB convention
x = u0 + 1.5, w = u1 - u0 (pixel i covers [i - 0.5, i + 0.5]), whose centre
x - 1 + (w - 1) / 2 is the extent's centre (u0 + u1) / 2. The boundary is sampled at
2048 angles (and a polygon's vertices), which puts the box within 1e-5 of the shape's
size. (How the rendered soft edge relates to the box: `ebm_jax.data.tracking_render`.)
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

SHAPE_KINDS = ("ellipse", "rounded_rect", "blob", "polygon")


@dataclasses.dataclass(frozen=True)
class Shape:
    """kind in SHAPE_KINDS; params: () ellipse; (p,) rounded_rect (superellipse
    exponent); (a2, a3, a4, phi2, phi3, phi4, norm) blob; (angles..., radii...) polygon."""

    kind: str
    params: tuple[float, ...] = ()


def random_shape(rng: np.random.Generator, kind: str) -> Shape:
    """A random shape of `kind`, normalised so that max r(theta) <= 1."""
    if kind == "ellipse":
        return Shape(kind)
    if kind == "rounded_rect":
        return Shape(kind, (float(rng.uniform(3.0, 8.0)),))
    if kind == "blob":
        amps, phases = rng.uniform(0.0, 0.14, 3), rng.uniform(0.0, 2 * math.pi, 3)
        theta = np.linspace(0.0, 2 * math.pi, 4096, endpoint=False)
        r = 1.0 + sum(a * np.cos((k + 2) * theta + p) for k, (a, p) in
                      enumerate(zip(amps, phases)))
        return Shape(kind, tuple(map(float, amps)) + tuple(map(float, phases))
                     + (float(r.max()),))
    if kind == "polygon":
        k = int(rng.integers(5, 9))
        angles = ((np.arange(k) + rng.uniform(-0.3, 0.3, k)) * 2 * math.pi / k
                  + rng.uniform(0.0, 2 * math.pi)) % (2 * math.pi)
        order = np.argsort(angles)
        radii = rng.uniform(0.7, 1.0, k)
        return Shape(kind, tuple(map(float, angles[order])) + tuple(map(float, radii[order])))
    raise ValueError(f"shape kind must be one of {SHAPE_KINDS}, got {kind!r}")


def shape_radius(shape: Shape, theta: np.ndarray) -> np.ndarray:
    """r(theta) of the shape's boundary (star-shaped around the origin)."""
    theta = np.asarray(theta, np.float64)
    if shape.kind == "ellipse":
        return np.ones_like(theta)
    if shape.kind == "rounded_rect":
        # superellipse |u|^p + |v|^p = 1 (Lame curve), scaled so its diagonal radius is 1
        p = shape.params[0]
        r = (np.abs(np.cos(theta)) ** p + np.abs(np.sin(theta)) ** p) ** (-1.0 / p)
        return r / 2.0 ** (0.5 - 1.0 / p)
    if shape.kind == "blob":
        a, phase, norm = shape.params[:3], shape.params[3:6], shape.params[6]
        r = 1.0 + sum(a[k] * np.cos((k + 2) * theta + phase[k]) for k in range(3))
        return r / norm
    if shape.kind == "polygon":
        k = len(shape.params) // 2
        angles, radii = np.array(shape.params[:k]), np.array(shape.params[k:])
        t = theta % (2 * math.pi)
        i = (np.searchsorted(angles, t, side="right") - 1) % k
        j = (i + 1) % k
        px, py = radii[i] * np.cos(angles[i]), radii[i] * np.sin(angles[i])
        ex, ey = radii[j] * np.cos(angles[j]) - px, radii[j] * np.sin(angles[j]) - py
        # the ray t (cos, sin) meets the edge P_i + s E where cross(d, E) t = cross(P_i, E)
        return (px * ey - py * ex) / (np.cos(t) * ey - np.sin(t) * ex)
    raise ValueError(f"shape kind must be one of {SHAPE_KINDS}, got {shape.kind!r}")


@functools.lru_cache(maxsize=4096)
def _canonical_boundary(shape: Shape) -> np.ndarray:
    theta = np.linspace(0.0, 2 * math.pi, 2048, endpoint=False)
    if shape.kind == "polygon":  # the vertices, where a polygon's extremes lie
        theta = np.concatenate([theta, shape.params[:len(shape.params) // 2]])
    r = shape_radius(shape, theta)
    return np.stack([r * np.cos(theta), r * np.sin(theta)])


def shape_box(shape: Shape, pose) -> np.ndarray:
    """The exact box (x, y, w, h) (GOT-10k convention, 1-indexed) of the shape at
    `pose` = (cx, cy, sx, sy, angle): the extent of its transformed boundary, not
    clipped to any frame (module docstring)."""
    cx, cy, sx, sy, angle = (float(v) for v in pose)
    u, v = _canonical_boundary(shape)
    c, s = math.cos(angle), math.sin(angle)
    xs = cx + c * sx * u - s * sy * v
    ys = cy + s * sx * u + c * sy * v
    x0, y0 = xs.min(), ys.min()
    return np.array([x0 + 1.5, y0 + 1.5, xs.max() - x0, ys.max() - y0])
