"""SiamFC (Bertinetto et al. 2016, "Fully-Convolutional Siamese Networks for Object
Tracking") as pure JAX functions, with the settings of the widely used PyTorch port.

Training (sec. 2.2-2.3): exemplar and search crops around the boxes of a pair of frames,
one backbone on both, the response xcorr(phi(z), phi(x)) * 0.001 (no bias), labels
positive within an L1 radius of the target, and a class-balanced logistic loss:

    loss_fn = make_siamfc_loss(SiamFCSettings())     # loss_fn(model, batch, key)

Tracking (sec. 2.4): a pair of pure functions, optax style,

    embed, params = model_embed(model)               # eval-mode backbone
    tracker = make_tracker(embed)
    state = tracker.init(params, frame, box_xywh)
    state, box = tracker.update(params, state, frame)   # jitted

"Box-Siam" is this model trained on ground-truth boxes. Boxes are xywh, 1-indexed
(GOT-10k / OTB); see `ebm_jax.ops.crops` for the crop conventions.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ebm_jax.ops.xcorr import xcorr, xcorr_broadcast
from ebm_jax.ops.crops import (
    CROPS,
    box_to_center,
    center_to_box,
    crop_square,
    exemplar_side,
)

# fold_in purposes of the training-crop key
_Z_STRETCH, _X_STRETCH, _X_SHIFT, _Z_SHIFT = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class SiamFCSettings:
    """SiamFC's hyperparameters (the PyTorch port's defaults).

    Sizes in crop pixels: exemplar 127, search 255, backbone stride 8 (response 17x17).
    context: c = context * (w + h) around the target. r_pos: positive-label radius in
    search-crop pixels (L1). Tracking: scale_num scales scale_step^{-(n//2) .. n//2},
    penalty on the non-central ones, scale learning rate, Hann window influence,
    response upsampling factor. Training crops: random stretch of the crop side in
    [1 - stretch, 1 + stretch] and a random shift of the search crop centre of up to
    `shift` crop pixels per axis (and of the exemplar's with `shift_exemplar`), a search
    crop of `train_search_size` (None: `search_size`), labels that follow the shifts
    (`labels="follow"`) or stay at the response centre (`"centred"`, the port's). The
    defaults are this project's; `PORT_TRAINING` holds the port's. `crop`: the tracker's
    crops, "continuous" (`crop_square`, the default) or "rounded"
    (`crop_square_rounded`, the port's whole pixel corners); training crops are always
    continuous.
    """

    exemplar_size: int = 127
    search_size: int = 255
    context: float = 0.5
    stride: int = 8
    response_scale: float = 1e-3
    r_pos: float = 16.0
    scale_num: int = 3
    scale_step: float = 1.0375
    scale_penalty: float = 0.9745
    scale_lr: float = 0.59
    window_influence: float = 0.176
    response_up: int = 16
    stretch: float = 0.05
    shift: float = 8.0
    crop: str = "continuous"
    shift_exemplar: bool = False
    train_search_size: int | None = None
    labels: str = "follow"

    def identity(self) -> dict:
        """The settings for stage identities: the fields added after the first stages
        were recorded (`_LATER`) only where they are not at their defaults, so that those
        stages keep their identities."""
        out = dataclasses.asdict(self)
        for name, default in _LATER.items():
            if out[name] == default:
                del out[name]
        return out

    def __post_init__(self):
        if self.crop not in CROPS:
            raise ValueError(f"SiamFCSettings.crop must be one of {sorted(CROPS)}, got "
                             f"{self.crop!r}")
        if self.labels not in ("follow", "centred"):
            raise ValueError(f"SiamFCSettings.labels must be 'follow' or 'centred', got "
                             f"{self.labels!r}")
        if not isinstance(self.shift_exemplar, bool):
            raise ValueError(f"SiamFCSettings.shift_exemplar must be True or False, got "
                             f"{self.shift_exemplar!r}")
        t = self.train_search_size
        if t is not None and (isinstance(t, bool) or int(t) != t
                              or not self.exemplar_size <= int(t)):
            raise ValueError(f"SiamFCSettings.train_search_size must be None or an integer "
                             f">= exemplar_size ({self.exemplar_size}), got {t!r}")
        for name in ("exemplar_size", "search_size", "stride", "scale_num", "response_up"):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or int(v) < 1:
                raise ValueError(f"SiamFCSettings.{name} must be an integer >= 1, got {v!r}")
        if self.search_size < self.exemplar_size:
            raise ValueError(f"SiamFCSettings.search_size ({self.search_size}) must be >= "
                             f"exemplar_size ({self.exemplar_size})")
        if self.scale_num % 2 == 0:
            raise ValueError(f"SiamFCSettings.scale_num must be odd (a central scale), "
                             f"got {self.scale_num}")
        # (low, high, whether low itself is excluded)
        ranges = {"context": (0.0, math.inf, False), "response_scale": (0.0, math.inf, True),
                  "r_pos": (0.0, math.inf, False), "scale_step": (1.0, math.inf, False),
                  "scale_penalty": (0.0, 1.0, True), "scale_lr": (0.0, 1.0, False),
                  "window_influence": (0.0, 1.0, False), "stretch": (0.0, 0.5, False),
                  "shift": (0.0, math.inf, False)}
        for name, (lo, hi, open_lo) in ranges.items():
            v = float(getattr(self, name))
            if not (math.isfinite(v) and (v > lo if open_lo else v >= lo) and v <= hi):
                raise ValueError(f"SiamFCSettings.{name} must be in {'(' if open_lo else '['}"
                                 f"{lo}, {hi}], got {v!r}")

    def search_side(self, h, w):
        """Side in frame pixels of the search crop of a target of size (h, w): the
        exemplar side (`exemplar_side`, with `context`) x search_size / exemplar_size."""
        return exemplar_side(h, w, self.context) * (self.search_size / self.exemplar_size)

    @property
    def training_search_size(self) -> int:
        """The search crop's side in training: `train_search_size`, else `search_size`."""
        return self.search_size if self.train_search_size is None else int(
            self.train_search_size)

    @property
    def response_size(self) -> int:
        """Side of the response map of a stride-`stride` backbone: 17 by default."""
        return (self.search_size - self.exemplar_size) // self.stride + 1

    @property
    def scale_factors(self) -> np.ndarray:
        """scale_step ** (-(n // 2), ..., n // 2) (the port's `scale_factors`)."""
        half = self.scale_num // 2
        return self.scale_step ** np.linspace(-half, half, self.scale_num)


# fields added after the first stages were recorded, with their defaults (`identity`)
_LATER = {"crop": "continuous", "shift_exemplar": False, "train_search_size": None,
          "labels": "follow"}

# The PyTorch port's training crops (its `SiamFCTransforms`: a 255 context crop, then
# CenterCrop(247) and RandomCrop(239) for both crops, the exemplar the centre 127 of
# its 239): search crop 239 (a 15 x 15 response), both centres moved by up to 4 px per
# axis, labels at the response centre. The port's shifts are whole pixels and its
# resampling kernel random; here they are continuous and bilinear.
PORT_TRAINING = dict(shift=4.0, shift_exemplar=True, train_search_size=239,
                     labels="centred")


# ---------------------------------------------------------------- training


def make_labels(response_size, r_pos_cells, offset=(0.0, 0.0)) -> tuple[jax.Array, jax.Array]:
    """SiamFC's labels and class-balanced weights (Bertinetto et al. 2016, sec. 2.2,
    eq. 1 "y[u] = +1 if k ||u - c|| <= R"; the port's city-block distance and
    `BalancedLoss`): label 1 where |dy| + |dx| <= r_pos_cells, measured from the response
    centre ((n - 1) / 2) moved by `offset` (cells, (dy, dx)), else 0; weights 1 / #pos on
    positives and 1 / #neg on negatives, normalised to sum 1 (each class then sums to
    1/2). `response_size`: n or (h, w) (static); `offset` may be traced (vmap it over a
    batch). Returns float32 (h, w) labels and weights."""
    h, w = ((response_size, response_size) if np.ndim(response_size) == 0
            else tuple(response_size))
    if int(h) != h or int(w) != w or h < 1 or w < 1:
        raise ValueError(f"response_size must be an integer >= 1 or (h, w), got "
                         f"{response_size!r}")
    if not float(r_pos_cells) >= 0:
        raise ValueError(f"r_pos_cells must be >= 0, got {r_pos_cells!r}")
    offset = jnp.asarray(offset, jnp.float32)
    if offset.shape != (2,):
        raise ValueError(f"offset must have shape (2,) as (dy, dx), got {offset.shape}")
    ys = jnp.arange(int(h), dtype=jnp.float32) - (int(h) - 1) / 2 - offset[0]
    xs = jnp.arange(int(w), dtype=jnp.float32) - (int(w) - 1) / 2 - offset[1]
    dist = jnp.abs(ys)[:, None] + jnp.abs(xs)[None, :]
    labels = (dist <= r_pos_cells).astype(jnp.float32)
    num_pos, num_neg = jnp.sum(labels), jnp.sum(1.0 - labels)
    weights = (labels / jnp.maximum(num_pos, 1.0)
               + (1.0 - labels) / jnp.maximum(num_neg, 1.0))
    return labels, weights / jnp.sum(weights)


def balanced_bce(logits, labels, weights) -> jax.Array:
    """Weighted logistic loss (Bertinetto et al. 2016, sec. 2.2, eq. 1-2, with the port's
    class-balanced weights): per example sum_u w[u] * BCE(logits[u], labels[u]),
    averaged over the leading (batch) axes. logits, labels, weights: (..., h, w), the
    last two broadcastable; BCE with logits in its stable form
    max(l, 0) - l y + log(1 + exp(-|l|))."""
    logits = jnp.asarray(logits)
    if logits.ndim < 2:
        raise ValueError(f"logits must have shape (..., h, w), got {logits.shape}")
    labels = jnp.broadcast_to(jnp.asarray(labels, logits.dtype), logits.shape)
    weights = jnp.broadcast_to(jnp.asarray(weights, logits.dtype), logits.shape)
    bce = (jnp.maximum(logits, 0) - logits * labels
           + jnp.log1p(jnp.exp(-jnp.abs(logits))))
    return jnp.mean(jnp.sum(weights * bce, axis=(-2, -1)))


def _check_pair_batch(z_frames, z_boxes, x_frames, x_boxes) -> int:
    for name, frames in (("z_frames", z_frames), ("x_frames", x_frames)):
        if frames.ndim != 4 or frames.shape[-1] != 3:
            raise ValueError(f"{name} must have shape (B, H, W, 3), got {frames.shape}")
    for name, boxes in (("z_boxes", z_boxes), ("x_boxes", x_boxes)):
        if boxes.ndim != 2 or boxes.shape[-1] != 4:
            raise ValueError(f"{name} must have shape (B, 4) as xywh, got {boxes.shape}")
    sizes = {a.shape[0] for a in (z_frames, z_boxes, x_frames, x_boxes)}
    if len(sizes) != 1:
        raise ValueError(f"z_frames, z_boxes, x_frames, x_boxes need the same batch size, "
                         f"got {[a.shape[0] for a in (z_frames, z_boxes, x_frames, x_boxes)]}")
    return sizes.pop()


def training_crops(key, z_frames, z_boxes, x_frames, x_boxes,
                   settings: SiamFCSettings) -> tuple[jax.Array, jax.Array, jax.Array]:
    """SiamFC's training crops (Bertinetto et al. 2016, sec. 2.3; the port's
    `SiamFCTransforms`, made continuous): for B pairs of whole frames (B, H, W, 3) and
    xywh boxes, exemplar crops (B, 127, 127, 3) of side exemplar_side(box) and search
    crops (B, S, S, 3), S = settings.training_search_size, of side exemplar_side *
    S / 127, each side stretched by U[1 - stretch, 1 + stretch], the search crop's centre
    (and with `shift_exemplar` the exemplar's, independently) moved by U[-shift, shift]
    crop pixels per axis; padding with each frame's mean colour. Returns float32 crops
    and offsets (B, 2) = (dy, dx) in response cells of where the response should peak
    from the response centre, for `make_labels`: (exemplar shift - search shift) /
    stride with `labels="follow"`, zero with `"centred"` (the port's).

    The port stretches and shifts by integer crops of a 255 crop (up to 4 px,
    `PORT_TRAINING`). Jittable."""
    z_frames, x_frames = jnp.asarray(z_frames), jnp.asarray(x_frames)
    z_boxes = jnp.asarray(z_boxes, jnp.float32)
    x_boxes = jnp.asarray(x_boxes, jnp.float32)
    b = _check_pair_batch(z_frames, z_boxes, x_frames, x_boxes)
    s = settings
    lo, hi = 1.0 - s.stretch, 1.0 + s.stretch
    z_stretch = jax.random.uniform(jax.random.fold_in(key, _Z_STRETCH), (b,),
                                   minval=lo, maxval=hi)
    x_stretch = jax.random.uniform(jax.random.fold_in(key, _X_STRETCH), (b,),
                                   minval=lo, maxval=hi)
    shift = jax.random.uniform(jax.random.fold_in(key, _X_SHIFT), (b, 2),
                               minval=-s.shift, maxval=s.shift)
    batched_crop = jax.vmap(crop_square, in_axes=(0, 0, 0, None))

    zcy, zcx, zh, zw = box_to_center(z_boxes)
    z_side = exemplar_side(zh, zw, s.context) * z_stretch
    z_shift = jnp.zeros_like(shift)
    if s.shift_exemplar:
        z_shift = jax.random.uniform(jax.random.fold_in(key, _Z_SHIFT), (b, 2),
                                     minval=-s.shift, maxval=s.shift)
    z_center = jnp.stack([zcy, zcx], -1) + z_shift * (z_side / s.exemplar_size)[:, None]
    z = batched_crop(z_frames, z_center, z_side, s.exemplar_size)

    size = s.training_search_size
    xcy, xcx, xh, xw = box_to_center(x_boxes)
    x_side = exemplar_side(xh, xw, s.context) * (size / s.exemplar_size) * x_stretch
    x_center = jnp.stack([xcy, xcx], -1) + shift * (x_side / size)[:, None]
    x = batched_crop(x_frames, x_center, x_side, size)
    if s.labels == "centred":
        return z, x, jnp.zeros_like(shift)
    return z, x, (z_shift - shift) / s.stride


def make_siamfc_loss(settings: SiamFCSettings = SiamFCSettings()) -> Callable:
    """`loss_fn(model, batch, key) -> (loss, metrics)` for `make_train_step`
    (Bertinetto et al. 2016, sec. 2.2-2.3): batch = {"z_frames", "z_boxes", "x_frames",
    "x_boxes"} (B, H, W, 3) uint8 frames and (B, 4) xywh boxes; `training_crops`, the
    model on both crops (its batch-norm mode is the caller's: train mode in training),
    responses xcorr * response_scale (no bias, as the port), labels following the
    crops' offsets, `balanced_bce`. Metrics: mean response at positive and negative
    cells, and the fraction of pairs whose response peak is a positive cell."""
    s = settings
    r_cells = s.r_pos / s.stride

    def loss_fn(model, batch, key):
        z, x, offsets = training_crops(key, batch["z_frames"], batch["z_boxes"],
                                       batch["x_frames"], batch["x_boxes"], s)
        responses = xcorr(model(z), model(x)) * s.response_scale
        labels, weights = jax.vmap(
            lambda o: make_labels(responses.shape[1:], r_cells, o))(offsets)
        loss = balanced_bce(responses, labels, weights)
        pos = jnp.sum(responses * labels, (1, 2)) / jnp.maximum(jnp.sum(labels, (1, 2)), 1)
        neg = (jnp.sum(responses * (1 - labels), (1, 2))
               / jnp.maximum(jnp.sum(1 - labels, (1, 2)), 1))
        peak = jnp.argmax(responses.reshape(responses.shape[0], -1), axis=1)
        peak_positive = jnp.take_along_axis(labels.reshape(labels.shape[0], -1),
                                            peak[:, None], axis=1)[:, 0]
        return loss, {"response_pos": jnp.mean(pos), "response_neg": jnp.mean(neg),
                      "peak_in_positive": jnp.mean(peak_positive)}

    return loss_fn


# ---------------------------------------------------------------- tracking


def cubic_upsample_matrix(n_in: int, factor: int) -> np.ndarray:
    """(n_in * factor, n_in) matrix U with U @ r @ U.T equal to OpenCV's
    cv2.resize(r, INTER_CUBIC) (the port's x16 upsampling of the response): Keys' cubic
    with a = -0.75, half-pixel centres (source = (i + 0.5) / factor - 0.5), taps beyond
    the border replicated."""
    n_out = int(n_in) * int(factor)
    a = -0.75
    src = (np.arange(n_out) + 0.5) / factor - 0.5
    base = np.floor(src).astype(int)
    t = src - base
    taps = np.stack([
        ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
        ((a + 2) * t - (a + 3)) * t * t + 1,
        ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
    ], axis=1)
    taps = np.concatenate([taps, 1 - taps.sum(axis=1, keepdims=True)], axis=1)
    matrix = np.zeros((n_out, n_in))
    for k in range(4):
        np.add.at(matrix, (np.arange(n_out), np.clip(base - 1 + k, 0, n_in - 1)), taps[:, k])
    return matrix


def hann_window(h: int, w: int) -> np.ndarray:
    """outer(hanning(h), hanning(w)) normalised to sum 1 (the port's `hann_window`, a
    cosine window penalising large displacements; Bertinetto et al. 2016, sec. 2.4)."""
    window = np.outer(np.hanning(h), np.hanning(w))
    return window / window.sum()


class TrackerState(NamedTuple):
    """center (2,) (cy, cx) 0-indexed; size (2,) (h, w); template (hz, wz, C) the
    exemplar's features; search_side () the search crop's side in frame pixels at the
    central scale; pad (3,) the padding colour (the first frame's mean colour)."""

    center: jax.Array
    size: jax.Array
    template: jax.Array
    search_side: jax.Array
    pad: jax.Array


class Tracker(NamedTuple):
    init: Callable[[Any, jax.Array, jax.Array], TrackerState]
    update: Callable[[Any, TrackerState, jax.Array], tuple[TrackerState, jax.Array]]


def _check_frame(frame) -> None:
    if frame.ndim != 3 or frame.shape[-1] != 3:
        raise ValueError(f"frame must have shape (H, W, 3), got {frame.shape}")


def make_tracker(embed: Callable, settings: SiamFCSettings = SiamFCSettings()) -> Tracker:
    """SiamFC's tracker (Bertinetto et al. 2016, sec. 2.4; the port's `init`/`update`).

    `embed(params, images (N, S, S, 3) float32 raw 0-255) -> (N, h, w, C)`.
    `init(params, frame, box)`: the exemplar crop around the box, its features as the
    template. `update(params, state, frame) -> (state, box)`: search crops at the
    `scale_num` scales in one batch, xcorr * response_scale, x`response_up` bicubic
    upsampling (OpenCV's INTER_CUBIC, via `cubic_upsample_matrix`), penalty on the
    non-central scales, best scale by peak, response - min, / sum, mixed with a Hann
    window ((1 - wi) r + wi hann), argmax -> displacement (in upsampled cells, / up *
    stride crop pixels, * search_side * scale / search_size frame pixels); the size and
    the crop sides follow (1 - scale_lr) + scale_lr * scale. Both are jitted; update
    traces once per frame shape and dtype. Boxes are xywh (1-indexed)."""
    s = settings
    crop = CROPS[s.crop]
    factors = jnp.asarray(s.scale_factors, jnp.float32)
    penalties = jnp.asarray(np.where(np.arange(s.scale_num) == s.scale_num // 2, 1.0,
                                     s.scale_penalty), jnp.float32)

    def init(params, frame, box) -> TrackerState:
        frame = jnp.asarray(frame)
        _check_frame(frame)
        box = jnp.asarray(box, jnp.float32)
        if box.shape != (4,):
            raise ValueError(f"box must have shape (4,) as xywh, got {box.shape}")
        cy, cx, h, w = box_to_center(box)
        center, size = jnp.stack([cy, cx]), jnp.stack([h, w])
        z_side = exemplar_side(h, w, s.context)
        pad = jnp.mean(frame.astype(jnp.float32), axis=(0, 1))
        z = crop(frame, center, z_side, s.exemplar_size, pad)
        template = embed(params, z[None])[0]
        return TrackerState(center, size, template,
                            z_side * (s.search_size / s.exemplar_size), pad)

    def update(params, state: TrackerState, frame) -> tuple[TrackerState, jax.Array]:
        frame = jnp.asarray(frame)
        _check_frame(frame)
        sides = state.search_side * factors
        x = jax.vmap(crop, in_axes=(None, None, 0, None, None))(
            frame, state.center, sides, s.search_size, state.pad)
        responses = xcorr_broadcast(state.template, embed(params, x)) * s.response_scale
        n_h, n_w = responses.shape[1:]
        up_h = jnp.asarray(cubic_upsample_matrix(n_h, s.response_up), jnp.float32)
        up_w = jnp.asarray(cubic_upsample_matrix(n_w, s.response_up), jnp.float32)
        hi = jax.lax.Precision.HIGHEST
        upsampled = jnp.einsum("ui,sij,vj->suv", up_h, responses, up_w, precision=hi)
        upsampled = upsampled * penalties[:, None, None]
        scale_id = jnp.argmax(jnp.max(upsampled, axis=(1, 2)))
        response = upsampled[scale_id]
        response = response - jnp.min(response)
        response = response / (jnp.sum(response) + 1e-16)
        window = jnp.asarray(hann_window(n_h * s.response_up, n_w * s.response_up),
                             jnp.float32)
        response = (1 - s.window_influence) * response + s.window_influence * window
        loc = jnp.stack(jnp.unravel_index(jnp.argmax(response), response.shape))
        up_size = jnp.asarray([n_h, n_w], jnp.float32) * s.response_up
        disp_in_response = loc.astype(jnp.float32) - (up_size - 1) / 2
        disp_in_search = disp_in_response * s.stride / s.response_up
        scale = factors[scale_id]
        disp_in_frame = disp_in_search * state.search_side * scale / s.search_size
        step = (1 - s.scale_lr) + s.scale_lr * scale
        new = state._replace(center=state.center + disp_in_frame, size=state.size * step,
                             search_side=state.search_side * step)
        return new, center_to_box(new.center[0], new.center[1], new.size[0], new.size[1])

    return Tracker(jax.jit(init), jax.jit(update))


def model_embed(model: nnx.Module) -> tuple[Callable, nnx.State]:
    """(embed, params) for a backbone module (e.g. `SiamFCAlexNet`) in eval mode:
    embed(params, images) runs a copy of the model switched to eval mode (running
    batch statistics), params are its state. The given model is not changed."""
    eval_model = nnx.clone(model)
    eval_model.eval()
    graphdef, params = nnx.split(eval_model)

    def embed(params, images):
        return nnx.merge(graphdef, params)(images)

    return embed, params


def track_sequence(tracker: Tracker, params, frames: Iterable,
                   first_box) -> tuple[np.ndarray, np.ndarray]:
    """Runs a tracker over `frames` (an iterable of (H, W, 3) uint8 arrays, read lazily):
    boxes (N, 4) float64 xywh, the first one `first_box` itself (the toolkits'
    convention), and seconds (N,) of wall time per frame (init on the first), each
    waited on with block_until_ready; reading a frame is not timed."""
    first_box = np.asarray(first_box, np.float64)
    if first_box.shape != (4,) or not np.all(np.isfinite(first_box)) or np.any(
            first_box[2:] <= 0):
        raise ValueError(f"first_box must be a finite xywh box with w, h > 0, got "
                         f"{first_box.tolist()}")
    boxes, seconds, state = [], [], None
    for frame in frames:
        start = time.perf_counter()
        if state is None:
            state = jax.block_until_ready(tracker.init(params, frame, first_box))
            box = first_box
        else:
            state, box = jax.block_until_ready(tracker.update(params, state, frame))
            box = np.asarray(box, np.float64)
        seconds.append(time.perf_counter() - start)
        boxes.append(box)
    if not boxes:
        raise ValueError("frames is empty: a sequence needs at least one frame")
    return np.stack(boxes), np.asarray(seconds)
