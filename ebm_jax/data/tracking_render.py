"""Rendering of the generated tracking benchmark (`ebm_jax.data.tracking`): the real
photos it is made of, the soft-edged objects, and one frame of a planned sequence
(`SequencePlan`, made by `ebm_jax.data.tracking.plan_sequence`).

Soft edges. An object is a shape at a pose (cx, cy, sx, sy, angle), q its canonical
coordinates and r(theta) its boundary (`ebm_jax.data.tracking_shapes`). The alpha of a
pixel is a ramp of the radial distance, clip(0.5 - (|q| - r(theta(q))) max(sx, sy) /
softness, 0, 1), so that alpha > 0.5 holds exactly inside the shape, whose exact box is
`shape_box`. The pixels with alpha > 0.5 span the box to within about half a pixel at
smooth extremes, up to about 1.5 px at a sharp polygon tip that falls between pixel
centres. (The soft edge is this ramp, not a blurred mask, so that the 0.5 level is the
shape.)

Photos are scikit-image's bundled images and scikit-learn's two sample photos, loaded
once per process, as float32 RGB in [0, 1] with the longer side at most 1024 pixels;
the "outside" split's are procedural (`ebm_jax.data.procedural_textures`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
from pathlib import Path
from typing import NamedTuple

import cv2
import numpy as np

from ebm_jax.data.procedural_textures import (outside_pool, parse_texture_name,
                                              procedural_texture)
from ebm_jax.data.tracking_shapes import Shape, shape_box, shape_radius

# (rows, cols) kept of a source image: retina's fundus disk without its black surround
_PHOTO_CROPS = {"retina": ((260, 1150), (260, 1150))}
# whole photos per pool (skimage's `cat` is `chelsea`, so only the latter is used;
# `motorcycle` is the left view of `stereo_motorcycle`)
PHOTO_POOLS: dict[str, tuple[str, ...]] = {
    "train": ("astronaut", "coffee", "china", "motorcycle", "immunohistochemistry",
              "camera", "brick", "grass", "text", "coins"),
    "test": ("chelsea", "rocket", "flower", "hubble_deep_field", "retina", "moon",
             "gravel", "page", "clock", "cell"),
}
MIN_BACKGROUND_SIDE = 250  # smaller photos (page, text) only texture objects
MAX_PHOTO_SIDE = 1024
ABSENT_BELOW = 1e-3  # visible fractions below this count as absent (0)


class PhotoUnavailableError(ValueError):
    """A photo of the pools cannot be loaded from the installed packages."""


def _read_photo(name: str) -> np.ndarray:
    if name in ("china", "flower"):
        # the file scikit-learn's load_sample_image reads, without importing scikit-learn
        # (seconds)
        from PIL import Image

        package = importlib.util.find_spec("sklearn")
        if package is None:
            raise ModuleNotFoundError("scikit-learn is not installed")
        path = Path(package.submodule_search_locations[0], "datasets", "images", f"{name}.jpg")
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"))
    import skimage.data

    if name == "motorcycle":
        return skimage.data.stereo_motorcycle()[0]  # the left view only
    return getattr(skimage.data, name)()


def photo_pool(split: str, seed: int) -> tuple[str, ...]:
    """The photos a split of the generated benchmark is made of: the train and val
    splits the "train" pool, the test split the "test" pool, the "outside" split the
    procedural photos of draw `seed` (`ebm_jax.data.procedural_textures`)."""
    if split == "outside":
        return outside_pool(seed)
    return PHOTO_POOLS["test" if split == "test" else "train"]


@functools.lru_cache(maxsize=32)
def _photo(name: str) -> tuple[np.ndarray, bool]:
    drawn = parse_texture_name(name)
    if drawn is not None:  # a procedural photo of the outside split
        image = procedural_texture(*drawn)
        image.setflags(write=False)
        return image, False
    if not any(name in pool for pool in PHOTO_POOLS.values()):
        raise PhotoUnavailableError(f"unknown photo {name!r}; the pools hold "
                                    f"{sorted(sum(PHOTO_POOLS.values(), ()))}")
    try:
        image = np.asarray(_read_photo(name))
    except Exception as e:  # noqa: BLE001 (a missing optional download, a moved file)
        raise PhotoUnavailableError(f"photo {name!r} cannot be loaded from scikit-image / "
                                    f"scikit-learn: {type(e).__name__}: {e}") from None
    if name in _PHOTO_CROPS:
        (r0, r1), (c0, c1) = _PHOTO_CROPS[name]
        image = image[r0:r1, c0:c1]
    grey = image.ndim == 2
    image = np.repeat(image[..., None], 3, axis=2) if grey else image[..., :3]
    image = image.astype(np.float32) / 255.0
    longer = max(image.shape[:2])
    if longer > MAX_PHOTO_SIDE:
        f = MAX_PHOTO_SIDE / longer
        image = cv2.resize(image, None, fx=f, fy=f, interpolation=cv2.INTER_AREA)
    image = np.ascontiguousarray(image)
    image.setflags(write=False)
    return image, grey


def load_photo(name: str) -> np.ndarray:
    """The photo `name` of `PHOTO_POOLS`: float32 RGB (H, W, 3) in [0, 1], read-only,
    greyscale repeated to three channels; cached in-process."""
    return _photo(name)[0]


def photo_is_grey(name: str) -> bool:
    return _photo(name)[1]


def background_photos(pool: tuple[str, ...]) -> tuple[str, ...]:
    """The photos of a pool large enough to be a background (shorter side >= 250 px)."""
    return tuple(p for p in pool if min(load_photo(p).shape[:2]) >= MIN_BACKGROUND_SIDE)


@functools.lru_cache(maxsize=8)
def _background_photo(name: str, scale: float, gain: tuple[float, float, float]):
    photo = load_photo(name)
    if scale < 1.0:
        photo = cv2.resize(photo, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    return photo * np.asarray(gain, np.float32)


NOISE_SHIFTS = 16  # a frame's noise: the sequence's noise field, shifted and signed


@functools.lru_cache(maxsize=2)
def _noise_field(seed: tuple[int, ...], height: int, width: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((height + NOISE_SHIFTS, width + NOISE_SHIFTS, 3), np.float32)


# ---------------------------------------------------------------------- object layers


class Layer(NamedTuple):
    """An object's alpha on the pixel grid rows row0.., cols col0.. (which may reach
    outside the frame; in sub-pixels when supersampled) and the canonical coordinates
    (u, v) of those pixels' centres."""

    row0: int
    col0: int
    alpha: np.ndarray
    u: np.ndarray
    v: np.ndarray


def object_layer(shape: Shape, pose, softness: float, supersample: int = 1) -> Layer:
    """The shape's soft alpha at `pose` on a grid covering its box plus the ramp; with
    `supersample` s, on the grid of s x s sub-pixels per pixel (index j's centre at
    (j + 0.5) / s - 0.5)."""
    cx, cy, sx, sy, angle = (float(v) for v in pose)
    x, y, w, h = shape_box(shape, pose)
    margin, k = softness + 1.0, supersample
    col0, col1 = math.floor(x - 1.5 - margin) * k, (math.ceil(x - 1.5 + w + margin) + 1) * k
    row0, row1 = math.floor(y - 1.5 - margin) * k, (math.ceil(y - 1.5 + h + margin) + 1) * k
    dx = (np.arange(col0, col1, dtype=np.float64)[None, :] + 0.5) / k - 0.5 - cx
    dy = (np.arange(row0, row1, dtype=np.float64)[:, None] + 0.5) / k - 0.5 - cy
    c, s = math.cos(angle), math.sin(angle)
    u = (c * dx + s * dy) / sx
    v = (-s * dx + c * dy) / sy
    radial = np.hypot(u, v) - shape_radius(shape, np.arctan2(v, u))
    alpha = np.clip(0.5 - radial * max(sx, sy) / softness, 0.0, 1.0).astype(np.float32)
    return Layer(row0, col0, alpha, u, v)


def _in_frame(layer: Layer, height: int, width: int):
    """(frame slices, grid slices) of the part of `layer` inside the frame, or None."""
    h, w = layer.alpha.shape
    r0, c0 = max(layer.row0, 0), max(layer.col0, 0)
    r1, c1 = min(layer.row0 + h, height), min(layer.col0 + w, width)
    if r0 >= r1 or c0 >= c1:
        return None
    return ((slice(r0, r1), slice(c0, c1)),
            (slice(r0 - layer.row0, r1 - layer.row0), slice(c0 - layer.col0, c1 - layer.col0)))


# ------------------------------------------------------------------------ sequence plan


@dataclasses.dataclass(frozen=True, eq=False)
class ObjectTrack:
    """A textured object over a sequence: poses (N, 5) rows (cx, cy, sx, sy, angle),
    NaN where the object is not in the scene; texture: a photo name and the rectangle
    (x0, y0, w, h, in its pixels) that the canonical square [-1, 1]^2 maps onto; the
    texture is multiplied by colour_gain (the tint of a greyscale photo, a recolour)."""

    shape: Shape
    poses: np.ndarray
    texture: str
    texture_rect: tuple[float, float, float, float]
    colour_gain: tuple[float, float, float] = (1.0, 1.0, 1.0)


@dataclasses.dataclass(frozen=True, eq=False)
class SequencePlan:
    """Everything a sequence's frames are rendered from (made by
    `ebm_jax.data.tracking.plan_sequence`); rendering draws no other randomness than
    the per-frame noise from `noise_seed + (frame,)`."""

    height: int
    width: int
    background: str
    background_scale: float  # <= 1: the photo is resized by this factor before the warps
    background_gain: tuple[float, float, float]
    camera: np.ndarray  # (N, 3): window centre x, y and width, in the photo's pixels
    target: ObjectTrack
    behind: tuple[ObjectTrack, ...]  # distractors drawn before the target
    front: tuple[ObjectTrack, ...]  # distractors and occluders drawn over it
    illumination: np.ndarray  # (N, 3): log gain, ramp amplitude, ramp direction
    blur: np.ndarray  # (N, 3): kind (0 none, 1 motion line, 2 Gaussian), size, angle
    noise_std: float
    noise_seed: tuple[int, ...]
    softness: float
    meta: dict = dataclasses.field(default_factory=dict)  # photos, shapes, event frames

    @property
    def num_frames(self) -> int:
        return len(self.camera)


class RenderedFrame(NamedTuple):
    image: np.ndarray  # uint8 (H, W, 3) RGB
    box: np.ndarray  # (4,) x, y, w, h of the target (may reach outside the frame)
    visible: float  # the target's visible fraction, 0 below ABSENT_BELOW


def _check_frame(plan: SequencePlan, t: int) -> None:
    if not 0 <= t < plan.num_frames:
        raise ValueError(f"frame index must be in [0, {plan.num_frames}), got {t}")


def _background(plan: SequencePlan, t: int) -> np.ndarray:
    """The camera's view: the photo's window (centre, width) at frame t resampled to
    (height, width), reflected at the photo's borders."""
    scale = plan.background_scale
    photo = _background_photo(plan.background, scale, plan.background_gain)
    cx, cy, window = plan.camera[t]
    cx, cy = (cx + 0.5) * scale - 0.5, (cy + 0.5) * scale - 0.5
    s = plan.width / (window * scale)
    m = np.array([[s, 0.0, (plan.width - 1) / 2 - s * cx],
                  [0.0, s, (plan.height - 1) / 2 - s * cy]])
    return cv2.warpAffine(photo, m, (plan.width, plan.height), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_REFLECT_101)


def _paint(image: np.ndarray, track: ObjectTrack, t: int, softness: float,
           coverage: np.ndarray | None = None) -> Layer | None:
    """Composites the object over `image` (in place); accumulates its alpha into
    `coverage` (1 - prod(1 - alpha)); returns its layer (None when not in the scene)."""
    pose = track.poses[t]
    if np.isnan(pose).any():
        return None
    layer = object_layer(track.shape, pose, softness)
    where = _in_frame(layer, *image.shape[:2])
    if where is None:
        return layer
    frame_sl, grid_sl = where
    x0, y0, tw, th = track.texture_rect
    mapx = (x0 + (layer.u[grid_sl] + 1.0) * 0.5 * tw).astype(np.float32)
    mapy = (y0 + (layer.v[grid_sl] + 1.0) * 0.5 * th).astype(np.float32)
    texture = cv2.remap(load_photo(track.texture), mapx, mapy, cv2.INTER_LINEAR,
                        borderMode=cv2.BORDER_REFLECT_101)
    texture = texture * np.asarray(track.colour_gain, np.float32)
    a = layer.alpha[grid_sl]
    image[frame_sl] = image[frame_sl] * (1.0 - a[..., None]) + texture * a[..., None]
    if coverage is not None:
        coverage[frame_sl] = 1.0 - (1.0 - coverage[frame_sl]) * (1.0 - a)
    return layer


def _visible_fraction(layer: Layer, coverage: np.ndarray) -> float:
    """sum of the target's alpha inside the frame and not covered by the objects in
    front, over the sum of its whole alpha; 0 below ABSENT_BELOW."""
    total = float(layer.alpha.sum(dtype=np.float64))
    where = _in_frame(layer, *coverage.shape)
    if where is None or total <= 0.0:
        return 0.0
    frame_sl, grid_sl = where
    seen = layer.alpha[grid_sl] * (1.0 - coverage[frame_sl])
    fraction = min(1.0, float(seen.sum(dtype=np.float64)) / total)
    return 0.0 if fraction < ABSENT_BELOW else fraction


def _line_kernel(length: int, angle: float) -> np.ndarray:
    """A normalised anti-aliased line of `length` pixels through the kernel's centre."""
    canvas = np.zeros((length, length), np.uint8)
    centre, half = (length - 1) / 2, (length - 1) / 2
    dx, dy = half * math.cos(angle), half * math.sin(angle)
    # end points with 4 fractional bits (coordinates x 16)
    p0 = (round((centre - dx) * 16), round((centre - dy) * 16))
    p1 = (round((centre + dx) * 16), round((centre + dy) * 16))
    cv2.line(canvas, p0, p1, 255, 1, cv2.LINE_AA, 4)
    kernel = canvas.astype(np.float32)
    return kernel / kernel.sum()


def _photometric(image: np.ndarray, plan: SequencePlan, t: int) -> np.ndarray:
    """Illumination (a global gain times a linear spatial ramp), blur, Gaussian noise
    (the sequence's N(0, 1) field at a per-frame random shift and sign, times
    noise_std); the result as uint8."""
    log_gain, ramp, direction = plan.illumination[t]
    xs = np.linspace(-0.5, 0.5, plan.width, dtype=np.float32)[None, :]
    ys = np.linspace(-0.5, 0.5, plan.height, dtype=np.float32)[:, None]
    gain = np.float32(math.exp(log_gain)) * (
        1.0 + np.float32(ramp) * (np.float32(math.cos(direction)) * xs
                                  + np.float32(math.sin(direction)) * ys))
    image *= gain[..., None]
    kind, size, angle = plan.blur[t]
    if kind == 1:
        image = cv2.filter2D(image, -1, _line_kernel(int(size), angle),
                             borderType=cv2.BORDER_REFLECT_101)
    elif kind == 2:
        image = cv2.GaussianBlur(image, (0, 0), float(size),
                                 borderType=cv2.BORDER_REFLECT_101)
    if plan.noise_std > 0:
        field = _noise_field(plan.noise_seed, plan.height, plan.width)
        rng = np.random.default_rng(plan.noise_seed + (t,))
        dy, dx = rng.integers(0, NOISE_SHIFTS + 1, 2)
        sign = np.float32(plan.noise_std * (1 if rng.random() < 0.5 else -1))
        image += sign * field[dy:dy + plan.height, dx:dx + plan.width]
    np.maximum(image, 0.0, out=image)
    return cv2.convertScaleAbs(image, alpha=255.0)  # rounds, saturates at 255


def render_frame(plan: SequencePlan, t: int) -> RenderedFrame:
    """Frame t of a planned sequence: background, distractors behind, the target,
    distractors and occluders in front, then illumination, blur and noise."""
    _check_frame(plan, t)
    image = _background(plan, t)
    for track in plan.behind:
        _paint(image, track, t, plan.softness)
    layer = _paint(image, plan.target, t, plan.softness)
    coverage = np.zeros((plan.height, plan.width), np.float32)
    for track in plan.front:
        _paint(image, track, t, plan.softness, coverage)
    box = shape_box(plan.target.shape, plan.target.poses[t])
    return RenderedFrame(_photometric(image, plan, t), box, _visible_fraction(layer, coverage))


def target_alpha(plan: SequencePlan, t: int, supersample: int = 1) -> np.ndarray:
    """The target's alpha (H, W) float32 in frame t (on (H s, W s) sub-pixels with
    `supersample` s), before anything in front of it: alpha > 0.5 exactly where the
    pixel's centre lies inside its shape."""
    _check_frame(plan, t)
    if isinstance(supersample, bool) or not isinstance(supersample, int) or supersample < 1:
        raise ValueError(f"supersample must be an integer >= 1, got {supersample!r}")
    size = (plan.height * supersample, plan.width * supersample)
    out = np.zeros(size, np.float32)
    layer = object_layer(plan.target.shape, plan.target.poses[t], plan.softness, supersample)
    where = _in_frame(layer, *size)
    if where is not None:
        out[where[0]] = layer.alpha[where[1]]
    return out
