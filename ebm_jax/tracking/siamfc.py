"""SiamFC (Bertinetto et al. 2016, "Fully-Convolutional Siamese Networks for Object
Tracking") as pure JAX functions, with the settings of the widely used PyTorch port:
its settings (`SiamFCSettings`, training's and tracking's) and its tracker. Its training
loss is `ebm_jax.tracking.siamfc_training`.

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

from ebm_jax.ops.crops import CROPS, box_to_center, center_to_box, exemplar_side
from ebm_jax.ops.xcorr import xcorr_broadcast


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
    defaults are this project's; `siamfc_training.PORT_TRAINING` holds the port's.
    `crop`: the tracker's crops, "continuous" (`crop_square`, the default) or "rounded"
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
    central scale; pad (3,) the padding colour (the first frame's mean colour); peak ()
    the last update's response peak (the upsampled, scale-penalised response at the
    chosen scale, before its normalisation and the window; 0 before the first
    update): how sure the tracker is that the target is in view."""

    center: jax.Array
    size: jax.Array
    template: jax.Array
    search_side: jax.Array
    pad: jax.Array
    peak: jax.Array


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
                            z_side * (s.search_size / s.exemplar_size), pad,
                            jnp.zeros((), jnp.float32))

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
        peak = jnp.max(response)
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
                             search_side=state.search_side * step,
                             peak=peak.astype(jnp.float32))
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
