"""SiamFC with an energy-based box head (Gustafsson et al. 2020, "How to Train Your EBM
for Regression", sec. 5: DiMP-KLD-IS / NCE / NCE+; the box branch of PrDiMP, Danelljan
et al. 2020, and ATOM's refinement, Danelljan et al. 2019, sec. 3.2).

SiamFC localises the target's centre coarsely (one scale: the previous size kept), then
the box head refines the box by gradient ascent on its energy f in the relative box
space (cx/w0, cy/h0, log w, log h) of the coarse estimate: the estimate plus jittered
copies, T steps each, final box = the mean of the top k by energy.

    settings = BoxHeadSettings(method="nce+")
    loss_fn = make_box_head_loss(settings)            # training (`box_head_training`)
    tracker, params = make_box_head_tracker(backbone, head, settings)
    state = tracker.init(params, frame, box_xywh)
    state, box = tracker.update(params, state, frame)  # jitted, one trace per frame shape

Boxes are xywh, 1-indexed (GOT-10k / OTB) at the public boundary; inside, xyxy in
crop pixels (`ebm_jax.models.box_head`). Crops follow SiamFC's conventions
(`ebm_jax.ops.crops`): the box head sees a search-size crop (255) of side
exemplar_side x 255 / 127 around the target, the reference frame's and the test
frame's alike.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ebm_jax.energy.boxes import ascend_boxes
from ebm_jax.models.box_head_atom import ATOM_POOL_SIZES, ATOM_REF_POOL_SIZES
from ebm_jax.ops.boxes import decode_relative, encode_relative
from ebm_jax.ops.jitter import CropJitter
from ebm_jax.ops.crops import (
    box_to_center,
    center_to_box,
    check_first_box,
    crop_square,
    keep_on_frame,
)
from ebm_jax.tracking.siamfc import SiamFCSettings, Tracker, make_tracker

# fold_in purpose of the tracker's key
_JITTER = 0

TRACKING_METHODS = ("ml-is", "kld-is", "nce", "nce+")
# the training crops: SiamFC's (the test crop shifted and scaled uniformly, the reference
# exact) or pytracking's PrDiMP processing (both jittered, `ebm_jax.ops.jitter`, with
# appearance augmentation)
PROCESSINGS = ("siamfc", "prdimp")
# the tracker's options beside the refinement: the head sizes the box only (SiamFC's
# centre kept), a refined box is taken only where f(refined) - f(coarse) exceeds a
# margin, the size moves by a damped step
TRACKER_OPTIONS = ("refine_center", "accept_margin", "size_update", "lost_ratio")
# the box heads (`build_box_head`): "simple" `BoxEnergyHead`, "atom" `AtomBoxHead`
# (ATOM's IoU predictor: batch norm, pools per level, a joint modulation)
HEADS = ("simple", "atom")
# the fields of the "atom" head, recorded in identities only where it is used
ATOM_FIELDS = ("head", "atom_pool_sizes", "atom_ref_pool_sizes")
PRDIMP_FIELDS = ("processing", "search_area_factor", "center_jitter_factors",
                 "scale_jitter_factors", "brightness_jitter", "grayscale_prob", "blur_prob")


@dataclasses.dataclass(frozen=True)
class BoxHeadSettings:
    """The box head's hyperparameters: its loss, training, head widths and refinement.

    Loss (the paper's sec. 5 and REFERENCE.md): `method` one of ml-is, kld-is, nce, nce+;
    M = `num_samples` proposals in the relative space from an equal-weight Gaussian
    mixture of `sigmas`; `label_sigma` the KLD-IS label density's std (PrDiMP: 0.05);
    `beta` NCE+'s scale of the sigmas for the perturbed label (inferred for tracking:
    0.1).
    Training: `steps` Adam steps of learning rate `lr` on `batch_size` pairs fewer than
    `max_gap` frames apart. `processing` "siamfc": the test crop is moved by
    U[-center_jitter, center_jitter] x sqrt(w h) of the target per axis and its side
    scaled by exp(U[-scale_jitter, scale_jitter]); the reference crop is centred on the
    target. "prdimp" (pytracking's PrDiMP box branch): both crops centred on a jittered
    box (`ebm_jax.ops.jitter`: `center_jitter_factors` and `scale_jitter_factors` for
    the (reference, test) frames, side `search_area_factor` x sqrt(w h), which the
    tracker's refinement crop then uses too), cut on the host
    (`ebm_jax.data.box_head_pairs`), then the brightness scaled by U[1 -
    brightness_jitter, 1 + brightness_jitter] per crop, both crops of a pair made grey
    with `grayscale_prob` and each blurred with `blur_prob` (sigma U[0.1, 2] px).
    Head: `head` "simple" (`BoxEnergyHead`: `width`, `hidden`, `pool_size`,
    `ref_pool_size`) or "atom" (`AtomBoxHead`, ATOM's IoU predictor, Danelljan et al.
    2019, sec. 3.1: conv blocks with batch norm, `width`, `hidden`, the test pools
    `atom_pool_sizes` and the reference pools `atom_ref_pool_sizes`, one per level,
    ATOM's (5, 3) and (3, 1)).
    Refinement: the coarse estimate plus `num_candidates - 1` copies jittered by
    (U - 0.5) x (jitter_center, jitter_center, jitter_size, jitter_size) in the relative
    space (PrDiMP's box_jitter_pos 0.1 and box_jitter_sz 0.5, there relative to
    sqrt(w h)), `refine_steps` steps y <- y + step_lengths * grad_y f, (l_c, l_c, l_s,
    l_s) in the relative space of the estimate (cx / w0, cy / h0, log w, log h), the
    space of PrDiMP's 2.5e-3 (the default). There 2.5e-3 is one Newton step on an
    energy of curvature 1 / 0.05^2, the KLD-IS label density's, which is what KLD-IS
    trains f towards; NCE and NCE+ learn a sharper f near the target (the annotation's
    own spread), on which that step can overshoot, so by default a step that lowers f
    is undone and that box's steps halve (`reject_decreasing`, the detection
    refinement's rule; PrDiMP takes every step). The step lengths belong to a
    validation split. Final box: the mean (in the relative space) of the `top_k`
    candidates of highest f; its size is kept in
    [min_size px, the frame's size] and its centre inside the frame. Tracker options:
    `refine_center` False keeps SiamFC's centre (the head sets the size only);
    `accept_margin` m takes the refined box only where f(refined) - f(coarse) > m (else
    the coarse one); `size_update` d moves the size to size^(1 - d) refined^d;
    `lost_ratio` r skips the refinement (the coarse box, the previous size) on a frame
    whose SiamFC response peak is below r x the highest (positive) peak so far: the
    target is likely lost there, and the head would size whatever SiamFC found.
    """

    method: str = "nce+"
    num_samples: int = 128
    sigmas: tuple[float, ...] = (0.05, 0.5)
    label_sigma: float = 0.05
    beta: float = 0.1
    steps: int = 1000
    batch_size: int = 8
    lr: float = 1e-3
    max_gap: int = 100
    center_jitter: float = 0.25
    scale_jitter: float = 0.15
    width: int = 32
    hidden: int = 64
    pool_size: int = 3
    ref_pool_size: int = 3
    head: str = "simple"
    atom_pool_sizes: tuple[int, ...] = ATOM_POOL_SIZES
    atom_ref_pool_sizes: tuple[int, ...] = ATOM_REF_POOL_SIZES
    num_candidates: int = 10
    refine_steps: int = 10
    step_lengths: tuple[float, ...] = (2.5e-3, 2.5e-3, 2.5e-3, 2.5e-3)
    jitter_center: float = 0.1
    jitter_size: float = 0.5
    top_k: int = 3
    reject_decreasing: bool = True
    min_size: float = 4.0
    processing: str = "siamfc"
    search_area_factor: float = 5.0
    center_jitter_factors: tuple[float, float] = (3.0, 4.5)
    scale_jitter_factors: tuple[float, float] = (0.25, 0.5)
    brightness_jitter: float = 0.2
    grayscale_prob: float = 0.05
    blur_prob: float = 0.0
    refine_center: bool = True
    accept_margin: float | None = None
    size_update: float = 1.0
    lost_ratio: float | None = None

    def __post_init__(self):
        if self.processing not in PROCESSINGS:
            raise ValueError(f"BoxHeadSettings.processing must be one of {PROCESSINGS}, "
                             f"got {self.processing!r}")
        try:
            jitter = self.crop_jitter
        except ValueError as error:
            raise ValueError(f"BoxHeadSettings.{error}") from None
        object.__setattr__(self, "center_jitter_factors", jitter.center_jitter)
        object.__setattr__(self, "scale_jitter_factors", jitter.scale_jitter)
        for name, high in (("brightness_jitter", 1.0), ("grayscale_prob", 1.0),
                           ("blur_prob", 1.0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                    0 <= v <= high) or (name == "brightness_jitter" and v >= 1):
                raise ValueError(f"BoxHeadSettings.{name} must be a number in [0, 1"
                                 f"{')' if name == 'brightness_jitter' else ']'}, got {v!r}")
        if self.head not in HEADS:
            raise ValueError(f"BoxHeadSettings.head must be one of {HEADS}, got "
                             f"{self.head!r}")
        for name in ("atom_pool_sizes", "atom_ref_pool_sizes"):
            sizes = getattr(self, name)
            values = tuple(sizes) if isinstance(sizes, (tuple, list)) else ()
            if not values or not all(isinstance(v, (int, np.integer))
                                     and not isinstance(v, bool) and v >= 1
                                     for v in values):
                raise ValueError(f"BoxHeadSettings.{name} must be one or more integers "
                                 f">= 1 (one per feature level), got {sizes!r}")
            object.__setattr__(self, name, tuple(int(v) for v in values))
        if self.method not in TRACKING_METHODS:
            raise ValueError(f"BoxHeadSettings.method must be one of {TRACKING_METHODS}, "
                             f"got {self.method!r}")
        for name, low in (("num_samples", 1), ("steps", 1), ("batch_size", 1),
                          ("max_gap", 1), ("width", 1), ("hidden", 1), ("pool_size", 1),
                          ("ref_pool_size", 1), ("num_candidates", 1),
                          ("refine_steps", 0), ("top_k", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise ValueError(f"BoxHeadSettings.{name} must be an integer >= {low}, "
                                 f"got {v!r}")
        if self.top_k > self.num_candidates:
            raise ValueError(f"BoxHeadSettings.top_k must be in [1, num_candidates = "
                             f"{self.num_candidates}], got {self.top_k}")
        sigmas = _floats(self.sigmas)
        if not sigmas or not all(math.isfinite(s) and s > 0 for s in sigmas):
            raise ValueError(f"BoxHeadSettings.sigmas must be one or more numbers > 0, got "
                             f"{self.sigmas!r}")
        object.__setattr__(self, "sigmas", sigmas)
        lengths = _floats(self.step_lengths)
        if len(lengths) not in (1, 4) or not all(math.isfinite(s) and s > 0
                                                 for s in lengths):
            raise ValueError(f"BoxHeadSettings.step_lengths must be 1 or 4 numbers > 0 "
                             f"(cx, cy, log w, log h), got {self.step_lengths!r}")
        object.__setattr__(self, "step_lengths", lengths)
        for name, open_low in (("label_sigma", True), ("beta", True), ("lr", True),
                               ("min_size", True), ("center_jitter", False),
                               ("scale_jitter", False), ("jitter_center", False),
                               ("jitter_size", False)):
            v = getattr(self, name)
            ok = (isinstance(v, (int, float, np.floating)) and not isinstance(v, bool)
                  and math.isfinite(v) and (
                      v > 0 if open_low else v >= 0))
            if not ok:
                raise ValueError(f"BoxHeadSettings.{name} must be a number "
                                 f"{'> 0' if open_low else '>= 0'}, got {v!r}")
        for name in ("reject_decreasing", "refine_center"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"BoxHeadSettings.{name} must be True or False, got "
                                 f"{getattr(self, name)!r}")
        m = self.accept_margin
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float))
                              or not math.isfinite(m)):
            raise ValueError(f"BoxHeadSettings.accept_margin must be a finite number or "
                             f"None, got {m!r}")
        u = self.size_update
        if isinstance(u, bool) or not isinstance(u, (int, float)) or not 0 < u <= 1:
            raise ValueError(f"BoxHeadSettings.size_update must be a number in (0, 1], "
                             f"got {u!r}")
        r = self.lost_ratio
        if r is not None and (isinstance(r, bool) or not isinstance(r, (int, float))
                              or not 0 < r < 1):
            raise ValueError(f"BoxHeadSettings.lost_ratio must be a number in (0, 1) or "
                             f"None, got {r!r}")
        if not isinstance(self.reject_decreasing, bool):
            raise ValueError(f"BoxHeadSettings.reject_decreasing must be True or False, "
                             f"got {self.reject_decreasing!r}")

    @property
    def crop_jitter(self) -> CropJitter:
        """The PrDiMP processing's crops (`processing="prdimp"`)."""
        return CropJitter(search_area_factor=self.search_area_factor,
                          center_jitter=self.center_jitter_factors,
                          scale_jitter=self.scale_jitter_factors)

    def head_side(self, siamfc: SiamFCSettings, h, w):
        """The side (frame pixels) of the crop the head sees around a target of size
        (h, w): SiamFC's search side (`processing="siamfc"`), or search_area_factor x
        sqrt(w h) as PrDiMP's; the same in training, tracking and the probe."""
        if self.processing == "prdimp":
            return self.search_area_factor * jnp.sqrt(h * w)
        return siamfc.search_side(h, w)

    def identity(self) -> dict:
        """The settings an identity records (a tracker's evaluation): every field, but
        the PrDiMP processing's and the ATOM head's only where they are used and the
        tracker's options only where they differ from their defaults, so that stages
        and evaluations of the settings before these fields existed keep their
        identity."""
        out = dataclasses.asdict(self)
        if self.processing == "siamfc":
            for name in PRDIMP_FIELDS:
                out.pop(name)
        if self.head == "simple":
            for name in ATOM_FIELDS:
                out.pop(name)
        for name in TRACKER_OPTIONS:
            if out[name] == getattr(BoxHeadSettings, name):
                out.pop(name)
        return out

    def training_identity(self) -> dict:
        """What a training stage's identity records: `identity` less the tracker's
        options, which no training uses (one head, tracked with every option)."""
        out = self.identity()
        for name in TRACKER_OPTIONS:
            out.pop(name, None)
        return out

    @property
    def loss_hyperparameters(self) -> dict:
        """The hyperparameters of `method`'s loss (`ebm_jax.energy.make_loss`)."""
        hp = {"sigmas": self.sigmas}
        if self.method == "kld-is":
            hp["label_sigma"] = self.label_sigma
        if self.method == "nce+":
            hp["beta"] = self.beta
        return hp


def _floats(values) -> tuple:
    """`values` (one number or several) as a tuple of floats; () where they are not
    numbers (which the caller's check then names)."""
    try:
        return tuple(float(v) for v in np.atleast_1d(np.asarray(values, np.float64)))
    except (TypeError, ValueError):
        return ()


# ---------------------------------------------------------------- training


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


# ---------------------------------------------------------------- tracking


class BoxHeadState(NamedTuple):
    """siamfc: SiamFC's state (centre, size, template, search side, padding colour,
    last response peak); modulation: the target's modulation vectors (one per level);
    key: raw key data of the candidates' jitter; frame: the number of updates so far;
    best_peak: the highest response peak so far (`lost_ratio`'s reference)."""

    siamfc: Any
    modulation: tuple
    key: jax.Array
    frame: jax.Array
    best_peak: jax.Array


def make_box_head_tracker(backbone: nnx.Module, head: nnx.Module,
                          settings: BoxHeadSettings = BoxHeadSettings(),
                          siamfc: SiamFCSettings = SiamFCSettings(), *,
                          levels=None, refine: bool = True, seed: int = 0,
                          jit: bool = True) -> tuple[Tracker, tuple]:
    """(tracker, params): SiamFC (one scale, `siamfc` otherwise) with the box head's
    refinement; params = (backbone state in eval mode, head state). `init(params, frame,
    box)` also computes the target's modulation (the reference crop: search_size,
    centred on the box). `update(params, state, frame) -> (state, box)`: SiamFC's
    coarse centre with the previous size; with `refine`, a search_size crop centred
    there, the head's test features, `num_candidates` starting boxes (the estimate and
    jittered copies, keys fold_in(fold_in(key(seed), frame), 0)), `ascend_boxes`, the
    mean of the top k; then the size and centre limits of `BoxHeadSettings` (a
    non-finite refined box falls back to the coarse one). `refine=False` gives the
    coarse box (for timing the refinement). Both are jitted unless `jit=False`.
    Boxes are xywh (1-indexed). `levels`: default the backbone's `box_head_levels`."""
    levels = tuple(backbone.box_head_levels if levels is None else levels)
    model = nnx.clone(backbone)
    model.eval()
    head.check_geometry(model.level_geometry(levels), model.level_channels(levels))
    graph_b, state_b = nnx.split(model)
    graph_h, state_h = nnx.split(head)
    s, size = settings, siamfc.search_size
    coarse_settings = dataclasses.replace(siamfc, scale_num=1)

    def embed(params, images):
        return nnx.merge(graph_b, params)(images)

    siam = make_tracker(embed, coarse_settings)
    lengths = jnp.asarray(s.step_lengths, jnp.float32)
    jitter_scale = jnp.asarray([s.jitter_center, s.jitter_center, s.jitter_size,
                                s.jitter_size], jnp.float32)

    def features(params_b, crop):
        return [lv[0] for lv in nnx.merge(graph_b, params_b).features(crop[None], levels)]

    def init(params, frame, box) -> BoxHeadState:
        params_b, params_h = params
        frame = jnp.asarray(frame)
        siam_state = siam.init(params_b, frame, box)
        side = s.head_side(siamfc, siam_state.size[0], siam_state.size[1])
        crop = crop_square(frame, siam_state.center, side, size, siam_state.pad)
        ref_box = crop_box(siam_state.center, siam_state.size, siam_state.center, side, size)
        modulation = nnx.merge(graph_h, params_h).modulation(features(params_b, crop),
                                                             ref_box)
        key = jax.random.key_data(jax.random.key(seed))
        return BoxHeadState(siam_state, modulation, key, jnp.zeros((), jnp.int32),
                            jnp.zeros((), jnp.float32))

    def refine_box(params, state: BoxHeadState, frame, center, box_size):
        params_b, params_h = params
        head_m = nnx.merge(graph_h, params_h)
        side = s.head_side(siamfc, box_size[0], box_size[1])
        crop = crop_square(frame, center, side, size, state.siamfc.pad)
        test = head_m.test_features(features(params_b, crop))
        coarse = crop_box(center, box_size, center, side, size)
        key = jax.random.fold_in(jax.random.fold_in(jax.random.wrap_key_data(state.key),
                                                    state.frame), _JITTER)
        noise = (jax.random.uniform(key, (s.num_candidates - 1, 4)) - 0.5) * jitter_scale
        y0 = encode_relative(coarse, coarse)
        starts = decode_relative(
            jnp.concatenate([y0[None], y0[None] + noise], axis=0), coarse)
        refs = jnp.broadcast_to(coarse, starts.shape)
        boxes, f, _ = ascend_boxes(
            lambda inp, b, c: head_m.score(inp[0], inp[1], b), (state.modulation, test),
            starts, num_steps=s.refine_steps, step_length=lengths, reference=refs,
            reject_decreasing=s.reject_decreasing)
        top = jnp.argsort(-jnp.where(jnp.isfinite(f), f, -jnp.inf))[:s.top_k]
        best = decode_relative(jnp.mean(encode_relative(boxes[top], coarse), axis=0),
                               coarse)
        new_center, new_size = frame_box(best, center, side, size)
        ok = jnp.all(jnp.isfinite(new_center)) & jnp.all(jnp.isfinite(new_size))
        if s.accept_margin is not None:  # only a box the head prefers by the margin
            f_best, f_coarse = head_m.score(state.modulation, test,
                                            jnp.stack([best, coarse]))
            ok &= f_best - f_coarse > s.accept_margin
        if not s.refine_center:  # SiamFC's centre kept, the head sizes the box
            new_center = center
        # a damped size update in log space: size^(1 - d) x refined^d
        new_size = jnp.exp((1 - s.size_update) * jnp.log(box_size)
                           + s.size_update * jnp.log(new_size))
        return jnp.where(ok, new_center, center), jnp.where(ok, new_size, box_size)

    def update(params, state: BoxHeadState, frame):
        frame = jnp.asarray(frame)
        siam_state, _ = siam.update(params[0], state.siamfc, frame)
        center, box_size = keep_on_frame(siam_state.center, state.siamfc.size, frame.shape,
                                  s.min_size)
        best_peak = jnp.maximum(state.best_peak, siam_state.peak)
        if refine:
            refined = keep_on_frame(*refine_box(params, state, frame, center, box_size),
                                    frame.shape, s.min_size)
            if s.lost_ratio is not None:  # the coarse box where the target seems lost
                lost = (best_peak > 0) & (siam_state.peak < s.lost_ratio * best_peak)
                refined = tuple(jnp.where(lost, c, r)
                                for c, r in zip((center, box_size), refined))
            center, box_size = refined
        side = siamfc.search_side(box_size[0], box_size[1])
        siam_state = siam_state._replace(center=center, size=box_size, search_side=side)
        new = state._replace(siamfc=siam_state, frame=state.frame + 1, best_peak=best_peak)
        return new, center_to_box(center[0], center[1], box_size[0], box_size[1])

    if jit:
        init, update = jax.jit(init), jax.jit(update)

    def checked_init(params, frame, box) -> BoxHeadState:
        check_first_box(frame, box)  # concrete, before tracing
        return init(params, frame, jnp.asarray(box, jnp.float32))

    checked_init.traced = init
    return Tracker(checked_init, update), (state_b, state_h)


__all__ = ["ATOM_FIELDS", "HEADS", "PROCESSINGS", "TRACKING_METHODS", "BoxHeadSettings",
           "BoxHeadState", "crop_box", "frame_box", "make_box_head_tracker"]
