"""Procedural photos for the generated tracking benchmark's "outside" split
(`ebm_jax.data.tracking`): appearance from outside both photo pools, so that a model's
figures on it say how it does on textures it has never seen the kind of.

Each photo is a pure function of (seed, index): a 512 x 512 float32 RGB image in [0, 1]
made of fractal value noise (octaves of random grids, upsampled), one of three
structures chosen by the index (oriented stripes warped by the noise, Voronoi cells of
flat colour, or soft blobs), and a random colour mixing. None of them comes from a
camera, so they share no statistics with the photos of the pools beyond being images.
"""

from __future__ import annotations

import cv2
import numpy as np

SIDE = 512
OUTSIDE_POOL_SIZE = 10  # photos per draw, as each photo pool holds
_PREFIX = "texture"


def texture_name(seed: int, index: int) -> str:
    """The name of procedural photo `index` of draw `seed` ("texture-<seed>-<index>")."""
    return f"{_PREFIX}-{int(seed)}-{int(index)}"


def parse_texture_name(name: str) -> tuple[int, int] | None:
    """(seed, index) of a procedural photo's name, None for any other name."""
    parts = name.split("-")
    if len(parts) != 3 or parts[0] != _PREFIX or not all(p.isdigit() for p in parts[1:]):
        return None
    return int(parts[1]), int(parts[2])


def outside_pool(seed: int) -> tuple[str, ...]:
    """The outside split's pool of draw `seed`: OUTSIDE_POOL_SIZE procedural photos."""
    return tuple(texture_name(seed, k) for k in range(OUTSIDE_POOL_SIZE))


def _value_noise(rng: np.random.Generator, side: int, octaves: int, channels: int,
                 persistence: float) -> np.ndarray:
    """Fractal value noise (side, side, channels): octave o a (2^(o+2) + 1)^2 grid of
    standard normals upsampled bicubically, weighted persistence^o; unit variance."""
    out = np.zeros((side, side, channels), np.float32)
    for o in range(octaves):
        cells = 2 ** (o + 2) + 1
        grid = rng.standard_normal((cells, cells, channels)).astype(np.float32)
        up = cv2.resize(grid, (side, side), interpolation=cv2.INTER_CUBIC)
        out += up.reshape(side, side, channels) * persistence ** o
    return out / out.std()


def procedural_texture(seed: int, index: int, side: int = SIDE) -> np.ndarray:
    """Procedural photo `index` of draw `seed`: float32 RGB (side, side, 3) in [0, 1]."""
    if isinstance(seed, bool) or isinstance(index, bool) or int(seed) < 0 or int(index) < 0:
        raise ValueError(f"a procedural photo's seed and index must be integers >= 0, got "
                         f"{seed!r}, {index!r}")
    rng = np.random.default_rng([0x7E7, int(seed), int(index)])
    noise = _value_noise(rng, side, 6, 3, float(rng.uniform(0.45, 0.7)))
    y, x = np.mgrid[0:side, 0:side].astype(np.float32) / side
    kind = int(index) % 3
    if kind == 0:  # stripes along a random direction, warped by the noise
        angle = rng.uniform(0, np.pi)
        freq = rng.uniform(6, 24)
        phase = (np.cos(angle) * x + np.sin(angle) * y) * freq * 2 * np.pi
        structure = np.sin(phase + 1.5 * noise[..., 0])[..., None] * np.ones(3, np.float32)
    elif kind == 1:  # Voronoi cells of flat random colour
        centres = rng.uniform(0, 1, (int(rng.integers(12, 40)), 2)).astype(np.float32)
        colours = rng.standard_normal((len(centres), 3)).astype(np.float32)
        d = (x[..., None] - centres[:, 0]) ** 2 + (y[..., None] - centres[:, 1]) ** 2
        structure = colours[np.argmin(d, axis=-1)]
    else:  # soft blobs of random colour and size
        structure = np.zeros((side, side, 3), np.float32)
        for _ in range(int(rng.integers(8, 24))):
            cx, cy = rng.uniform(0, 1, 2)
            r = rng.uniform(0.03, 0.15)
            w = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))
            structure += w[..., None] * rng.standard_normal(3).astype(np.float32)
    mix = rng.standard_normal((3, 3)).astype(np.float32) * 0.5 + np.eye(3, dtype=np.float32)
    image = (structure + float(rng.uniform(0.3, 1.0)) * noise) @ mix
    lo, hi = np.percentile(image, (1, 99), axis=(0, 1))
    image = np.clip((image - lo) / np.maximum(hi - lo, 1e-6), 0.0, 1.0)
    return np.ascontiguousarray(image.astype(np.float32))


__all__ = ["OUTSIDE_POOL_SIZE", "outside_pool", "parse_texture_name", "procedural_texture",
           "texture_name"]
