"""Square crops around a target, with SiamFC's conventions (Bertinetto et al. 2016,
sec. 2.4; the coordinate conventions of the widely used PyTorch port).

Boxes are (x, y, w, h) in the GOT-10k / OTB convention (1-indexed pixels). The target
centre in 0-indexed continuous pixel coordinates (pixel i's centre at i) is
cy = y - 1 + (h - 1) / 2, cx = x - 1 + (w - 1) / 2.

A square crop of side s centred at c covers the pixel centres c - (s - 1) / 2 ...
c + (s - 1) / 2, i.e. the frame region [c - s / 2, c + s / 2] between pixel edges, and
is resampled to out x out pixels; output pixel i samples the frame at
c + (i - (out - 1) / 2) * s / out (OpenCV's resize convention), so the output centre
(out - 1) / 2 lands on c exactly. Bilinear interpolation; samples outside the frame take
the padding colour (default: the frame's mean colour), and a sample between the edge
and the outside blends the two, as OpenCV's BORDER_CONSTANT does.

The port rounds the side and the corners to whole pixels before resizing (a shift of
up to half a pixel); here the crop is continuous, so that a training crop can be
jitted and the centre maps exactly. `crop_square_rounded` is the port's geometry
instead, for the tracker's `crop="rounded"` option.
"""

from __future__ import annotations

import cv2
import jax
import jax.numpy as jnp
import numpy as np


def _array_module(*values):
    """jax.numpy if any value is a JAX array (or tracer), else NumPy."""
    return jnp if any(isinstance(v, jax.Array) for v in values) else np


def box_to_center(box) -> tuple:
    """xywh box (1-indexed, GOT-10k / OTB) -> (cy, cx, h, w), the centre 0-indexed
    (the SiamFC PyTorch port's `init`). Works on NumPy (float64) or JAX arrays (..., 4)."""
    xp = _array_module(box)
    box = xp.asarray(box) if xp is jnp else np.asarray(box, np.float64)
    if box.shape[-1:] != (4,):
        raise ValueError(f"box must have shape (..., 4) as (x, y, w, h), got {box.shape}")
    x, y, w, h = box[..., 0], box[..., 1], box[..., 2], box[..., 3]
    return y - 1 + (h - 1) / 2, x - 1 + (w - 1) / 2, h, w


def center_to_box(cy, cx, h, w):
    """The inverse of `box_to_center`: (cy, cx, h, w) -> xywh (..., 4), x = cx + 1 -
    (w - 1) / 2; JAX if any input is a JAX array, else NumPy float64."""
    xp = _array_module(cy, cx, h, w)
    dtype = None if xp is jnp else np.float64
    cy, cx, h, w = xp.broadcast_arrays(*(xp.asarray(v, dtype) for v in (cy, cx, h, w)))
    return xp.stack([cx + 1 - (w - 1) / 2, cy + 1 - (h - 1) / 2, w, h], axis=-1)


def exemplar_side(h, w, context: float = 0.5):
    """Side of SiamFC's exemplar square, sqrt((w + c)(h + c)) with c = context * (w + h)
    (Bertinetto et al. 2016, sec. 2.4: "A^2 = (w + 2p)(h + 2p)", p = (w + h) / 4)."""
    c = context * (w + h)
    return _array_module(h, w).sqrt((w + c) * (h + c))



def check_first_box(frame, box) -> None:
    """Refuses a tracker's first box unless it is a finite xywh box with w, h > 0 whose
    centre lies on the (H, W, ...) frame; concrete values, before tracing."""
    b = np.asarray(box, np.float64)
    if b.shape != (4,) or not np.all(np.isfinite(b)) or np.any(b[2:] <= 0):
        raise ValueError(f"box must be a finite xywh box with w, h > 0, got {b.tolist()}")
    cy, cx, _, _ = box_to_center(b)
    height, width = np.shape(frame)[:2]
    if not (0 <= cx <= width - 1 and 0 <= cy <= height - 1):
        raise ValueError(f"box {b.tolist()} lies outside the {width} x {height} frame "
                         f"(its centre ({cx:g}, {cy:g}) must be on the frame)")


def keep_on_frame(center, size, frame_shape, min_size):
    """A tracker's estimate kept sane: the centre (cy, cx) clipped onto the frame, the
    size (h, w) into [min_size, the frame's size]. Jittable."""
    height, width = frame_shape[:2]
    size = jnp.clip(size, min_size, jnp.asarray([height, width], jnp.float32))
    center = jnp.clip(center, 0.0, jnp.asarray([height - 1, width - 1], jnp.float32))
    return center, size

def _check_image(image, name: str = "image") -> None:
    shape = np.shape(image)
    if len(shape) != 3 or shape[-1] != 3 or shape[0] < 1 or shape[1] < 1:
        raise ValueError(f"{name} must have shape (H, W, 3), got {shape}")


def _check_out_size(out_size) -> int:
    if isinstance(out_size, bool) or int(out_size) != out_size or int(out_size) < 1:
        raise ValueError(f"out_size must be an integer >= 1, got {out_size!r}")
    return int(out_size)


def _sample_positions(center, side, out_size: int):
    """Frame coordinates sampled by output pixels 0 .. out - 1 along one axis."""
    offsets = jnp.arange(out_size, dtype=jnp.float32) - (out_size - 1) / 2
    return center + offsets * (side / out_size)


def _axis_taps(pos, size: int):
    """Bilinear taps along one axis: lower indices (clipped), weights of lower/upper
    tap, and whether each tap lies inside [0, size - 1]."""
    lo = jnp.floor(pos)
    frac = pos - lo
    lo = lo.astype(jnp.int32)
    hi = lo + 1
    valid_lo = (lo >= 0) & (lo <= size - 1)
    valid_hi = (hi >= 0) & (hi <= size - 1)
    return (jnp.clip(lo, 0, size - 1), jnp.clip(hi, 0, size - 1), 1.0 - frac, frac,
            valid_lo, valid_hi)


def crop_square(image, center_yx, side, out_size: int, pad=None) -> jax.Array:
    """The square of `side` frame pixels centred at `center_yx` (0-indexed continuous
    (cy, cx)), resampled bilinearly to (out_size, out_size, 3) float32; see the module
    docstring for the conventions. `pad`: the colour outside the frame, (3,) (default:
    the image's mean colour, as SiamFC pads). Jittable (out_size static) and vmappable
    over images, centres, sides and pads."""
    img, center_yx, side, out_size, pad = _crop_arguments(image, center_yx, side,
                                                          out_size, pad)
    height, width = img.shape[:2]
    ys = _sample_positions(center_yx[0], side, out_size)
    xs = _sample_positions(center_yx[1], side, out_size)
    y0, y1, wy0, wy1, vy0, vy1 = _axis_taps(ys, height)
    x0, x1, wx0, wx1, vx0, vx1 = _axis_taps(xs, width)
    return _blend(img, ((y0, wy0, vy0), (y1, wy1, vy1)), ((x0, wx0, vx0), (x1, wx1, vx1)),
                  pad)


def _crop_arguments(image, center_yx, side, out_size, pad):
    """(float32 image, centre, side, out_size, pad colour) of a crop, checked."""
    image = jnp.asarray(image)
    _check_image(image)
    out_size = _check_out_size(out_size)
    center_yx = jnp.asarray(center_yx, jnp.float32)
    if center_yx.shape != (2,):
        raise ValueError(f"center_yx must have shape (2,), got {center_yx.shape}")
    side = jnp.asarray(side, jnp.float32)
    if side.shape != ():
        raise ValueError(f"side must be a scalar, got shape {side.shape}")
    img = image.astype(jnp.float32)
    pad = (jnp.mean(img, axis=(0, 1)) if pad is None
           else jnp.broadcast_to(jnp.asarray(pad, jnp.float32), (3,)))
    return img, center_yx, side, out_size, pad


def _blend(img, y_taps, x_taps, pad):
    """Sum over the tap pairs of weight x (the frame pixel, or `pad` outside the frame);
    each axis's taps: (indices, weights, inside) per tap."""
    out = 0.0
    for yi, wy, vy in y_taps:
        for xi, wx, vx in x_taps:
            tap = img[yi[:, None], xi[None, :]]
            inside = (vy[:, None] & vx[None, :])[..., None]
            out = out + (wy[:, None] * wx[None, :])[..., None] * jnp.where(inside, tap, pad)
    return out


def crop_square_rounded(image, center_yx, side, out_size: int, pad=None) -> jax.Array:
    """The port's crop (siamfc-pytorch `ops.crop_and_resize`), jittable: the side rounded
    to s whole pixels, the first row and column to r = round(c - (s - 1) / 2) (both
    half to even, as NumPy and Python round), the s x s patch of frame pixels
    r .. r + s - 1 (outside the frame: `pad`, as its `copyMakeBorder`) resized to
    out_size x out_size with OpenCV's INTER_LINEAR convention: output pixel i samples
    patch coordinate (i + 0.5) s / out - 0.5, clamped to the patch (its edge pixels
    repeat). The same arguments and output as `crop_square`. On float frames it
    matches the port's crop to float32 rounding; on uint8 frames OpenCV resizes in
    fixed point, so the port's crop can differ from this one by a grey level there."""
    img, center_yx, side, out_size, pad = _crop_arguments(image, center_yx, side,
                                                          out_size, pad)
    side = jnp.round(side)
    height, width = img.shape[:2]
    first = jnp.round(center_yx - (side - 1) / 2)

    def taps(start, size):
        pos = (jnp.arange(out_size, dtype=jnp.float32) + 0.5) * (side / out_size) - 0.5
        lo = jnp.floor(pos)
        frac = pos - lo
        at_edge = (lo < 0) | (lo >= side - 1)  # OpenCV: the edge pixel, weight 0 beyond
        lo = jnp.clip(lo, 0, side - 1)
        frac = jnp.where(at_edge, 0.0, frac)
        i0 = (start + lo).astype(jnp.int32)
        i1 = (start + jnp.minimum(lo + 1, side - 1)).astype(jnp.int32)
        return ((jnp.clip(i0, 0, size - 1), 1.0 - frac, (i0 >= 0) & (i0 < size)),
                (jnp.clip(i1, 0, size - 1), frac, (i1 >= 0) & (i1 < size)))

    return _blend(img, taps(first[0], height), taps(first[1], width), pad)


CROPS = {"continuous": crop_square, "rounded": crop_square_rounded}


def rounded_uint8(pixels: np.ndarray) -> np.ndarray:
    """Float pixels rounded to the nearest grey level and clipped to [0, 255], as uint8.
    Rounds and clips `pixels` in place when it is a float32 array (a crop fresh from
    `crop_square_np`): half the time of the copying np.clip(np.rint(x)) on a 255 x 255
    crop."""
    if isinstance(pixels, np.ndarray) and pixels.dtype == np.float32 \
            and pixels.flags.writeable:
        np.rint(pixels, out=pixels)
        np.clip(pixels, 0, 255, out=pixels)
        return pixels.astype(np.uint8)
    return np.clip(np.rint(np.asarray(pixels)), 0, 255).astype(np.uint8)


def crop_box(center, size, crop_center, side, crop_size: int) -> jax.Array:
    """xyxy box (..., 4) in the pixels of a crop of `side` frame pixels centred at
    `crop_center` (cy, cx) resampled to `crop_size` (`crop_square`), of a target of
    centre (cy, cx) and size (h, w) in the frame (0-indexed continuous)."""
    scale = crop_size / side
    mid = (crop_size - 1) / 2
    cy = mid + (center[..., 0] - crop_center[..., 0]) * scale
    cx = mid + (center[..., 1] - crop_center[..., 1]) * scale
    h, w = size[..., 0] * scale, size[..., 1] * scale
    return jnp.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1)


def frame_box(box, crop_center, side, crop_size: int) -> tuple[jax.Array, jax.Array]:
    """The inverse of `crop_box`: (centre (cy, cx), size (h, w)) in the frame of a crop
    xyxy box."""
    scale = side / crop_size
    mid = (crop_size - 1) / 2
    cx, cy = (box[..., 0] + box[..., 2]) / 2, (box[..., 1] + box[..., 3]) / 2
    center = jnp.stack([crop_center[..., 0] + (cy - mid) * scale,
                        crop_center[..., 1] + (cx - mid) * scale], axis=-1)
    size = jnp.stack([(box[..., 3] - box[..., 1]) * scale,
                      (box[..., 2] - box[..., 0]) * scale], axis=-1)
    return center, size


def crop_square_np(image, center_yx, side, out_size: int, pad=None) -> np.ndarray:
    """`crop_square` on the host with OpenCV (cv2.warpAffine, INTER_LINEAR,
    BORDER_CONSTANT with `pad`, default the image's mean colour): (out_size, out_size, 3)
    float32. OpenCV quantises sample positions to 1/32 pixel, so the two agree to a
    fraction of a grey level away from sharp edges."""
    _check_image(image)
    out_size = _check_out_size(out_size)
    cy, cx = (float(v) for v in np.asarray(center_yx, np.float64).reshape(2))
    side = float(side)
    if not (np.isfinite(side) and side > 0):
        raise ValueError(f"side must be a finite number > 0, got {side!r}")
    img = np.ascontiguousarray(np.asarray(image, np.float32))
    # the mean colour by OpenCV (float64 sums, GIL released): NumPy's mean was a third
    # of the time of a training pair
    pad = (np.asarray(cv2.mean(img)[:3]) if pad is None
           else np.broadcast_to(np.asarray(pad, np.float64), (3,)))
    scale = side / out_size
    half = (out_size - 1) / 2
    # inverse map: output (u, v) -> frame (cx + (u - half) * scale, cy + (v - half) * scale)
    matrix = np.array([[scale, 0.0, cx - half * scale],
                       [0.0, scale, cy - half * scale]])
    return cv2.warpAffine(img, matrix, (out_size, out_size),
                          flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                          borderMode=cv2.BORDER_CONSTANT,
                          borderValue=tuple(float(v) for v in pad))
