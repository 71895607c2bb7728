"""SiamFC with an energy-based box head (Gustafsson et al. 2020, "How to Train Your EBM
for Regression", sec. 5: DiMP-KLD-IS / NCE / NCE+; the box branch of PrDiMP, Danelljan
et al. 2020, and ATOM's refinement, Danelljan et al. 2019, sec. 3.2).

SiamFC localises the target's centre coarsely (one scale: the previous size kept), then
the box head refines the box by gradient ascent on its energy f in the relative box
space (cx/w0, cy/h0, log w, log h) of the coarse estimate: the estimate plus jittered
copies, T steps each, final box = the mean of the top k by energy.

    settings = BoxHeadSettings(method="nce+")
    loss_fn = make_box_head_loss(settings)            # training (`box_head_training`)
    tracker, params = make_box_head_tracker(backbone, head, settings)  # `box_head_tracker`
    state = tracker.init(params, frame, box_xywh)
    state, box = tracker.update(params, state, frame)  # jitted, one trace per frame shape

Boxes are xywh, 1-indexed (GOT-10k / OTB) at the public boundary; inside, xyxy in
crop pixels (`ebm_jax.models.box_head`). Crops follow SiamFC's conventions
(`ebm_jax.ops.crops`): the box head sees a search-size crop (255) of side
exemplar_side x 255 / 127 around the target, the reference frame's and the test
frame's alike.

This module holds the settings (`BoxHeadSettings`: loss, training, head, refinement,
tracker options); the tracker is `ebm_jax.tracking.box_head_tracker`, the training
loss `ebm_jax.tracking.box_head_training`, the crop <-> frame box maps
`ebm_jax.ops.crops.crop_box` / `frame_box`.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from ebm_jax.models.box_head_atom import ATOM_POOL_SIZES, ATOM_REF_POOL_SIZES
from ebm_jax.ops.jitter import CropJitter
from ebm_jax.tracking.siamfc import SiamFCSettings

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

    Loss (the paper's sec. 5 and PrDiMP, Danelljan et al. 2020): `method` one of ml-is, kld-is, nce, nce+;
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
        except ValueError as error:  # named as the settings' own fields
            text = str(error)
            for short in ("center_jitter", "scale_jitter"):
                if text.startswith(short + " "):
                    text = f"{short}_factors{text[len(short):]}"
            raise ValueError(f"BoxHeadSettings.{text}") from None
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


__all__ = ["ATOM_FIELDS", "HEADS", "PRDIMP_FIELDS", "PROCESSINGS", "TRACKER_OPTIONS",
           "TRACKING_METHODS", "BoxHeadSettings"]
