"""DiMP's tracker on frames (Bhat et al. 2019, sec. 3.5), as a pair of pure functions:
the target model predicted from the first frame and its augmented copies, the centre
from the score map's peak in each new frame, the sample memory and the model update
(`ebm_jax.tracking.dimp_online`). Alone, the box keeps its first size; with a box
branch (`refiner`: the energy-based head's refinement of
`ebm_jax.tracking.box_head_tracker.make_box_refiner`, as the EBM regression paper's
tracker, sec. 5) each found centre and the current size are refined by it before the
frame joins the sample memory, as DiMP does with its IoU-Net branch.

    tracker, params = make_dimp_tracker(net, DiMPTrackerSettings())
    state = tracker.init(params, frame, box_xywh)
    state, box = tracker.update(params, state, frame)    # jitted; boxes xywh, 1-indexed

    refiner, refiner_params = make_box_refiner(backbone, head, BoxHeadSettings())
    tracker, params = make_dimp_tracker(net, settings, refiner=(refiner, refiner_params))

Crops: the score map covers a square of `search_area_factor` x sqrt(w h) around the
current estimate (pytracking's search area); the crop, resampled to `crop_size` pixels
with mean-colour padding, is `dimp.crop_context` times larger where the backbone's level
covers only the crop's middle (valid convolutions). The first frame
gives `len(shifts) + 1` training samples: the crop, its horizontal flip when `flip`, and
the crop moved by each of `shifts` (fractions of its side), each with its target box.

DiMP sizes its box with its IoU branch only. `scale_num` > 1 adds SiamFC's scale search
instead (Bertinetto et al. 2016; a baseline the box branch should beat): the search crop
is cut at `scale_num` sides, side x scale_step^k for k = -(n // 2) .. n // 2, each scored
by the target model; the scale whose peak (times `scale_penalty` off the central scale)
is highest gives the centre, and a found target's size moves by the damped step
size x (1 - scale_lr + scale_lr x scale_step^k). The frame joins the memory from that
scale's crop.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from ebm_jax.ops.crops import box_to_center, center_to_box, check_first_box, crop_box, crop_square
from ebm_jax.tracking import dimp
from ebm_jax.tracking import dimp_online as online
from ebm_jax.tracking.siamfc import Tracker


@dataclasses.dataclass(frozen=True)
class DiMPTrackerSettings:
    predictor: dimp.PredictorSettings = dimp.PredictorSettings()
    online: online.OnlineSettings = online.OnlineSettings()
    search_area_factor: float = 5.0
    crop_size: int = 255
    flip: bool = True
    shifts: tuple[tuple[float, float], ...] = ((0.06, 0.0), (-0.06, 0.0), (0.0, 0.06),
                                               (0.0, -0.06))
    # SiamFC's scale search (its published values); scale_num 1: none (DiMP's own)
    scale_num: int = 1
    scale_step: float = 1.0375
    scale_penalty: float = 0.9745
    scale_lr: float = 0.59

    def __post_init__(self):
        self.predictor.check()
        self.online.check()
        n = self.scale_num
        if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n % 2 == 0 or n > 9:
            raise ValueError(f"scale_num must be an odd integer in [1, 9] (1: no scale "
                             f"search), got {n!r}")
        for name, low, high in (("scale_step", 1.0, 2.0), ("scale_penalty", 0.0, 1.0),
                                ("scale_lr", 0.0, 1.0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                    low < v <= high):
                raise ValueError(f"{name} must be a number in ({low:g}, {high:g}], got "
                                 f"{v!r}")
        if not 0 < self.search_area_factor <= 20:
            raise ValueError(f"search_area_factor must be in (0, 20], got "
                             f"{self.search_area_factor!r}")
        if isinstance(self.crop_size, bool) or int(self.crop_size) != self.crop_size or \
                self.crop_size < 16:
            raise ValueError(f"crop_size must be an integer >= 16, got {self.crop_size!r}")
        if not all(len(s) == 2 and all(abs(v) < 0.5 for v in s) for s in self.shifts):
            raise ValueError(f"shifts must be (dy, dx) pairs of fractions of the crop in "
                             f"(-0.5, 0.5), got {self.shifts!r}")
        n = 1 + int(self.flip) + len(self.shifts)
        if n > self.online.capacity:
            raise ValueError(f"the first frame's {n} samples exceed the memory's capacity "
                             f"{self.online.capacity}")


class DiMPState(NamedTuple):
    center: jax.Array  # (cy, cx), 0-indexed frame pixels
    size: jax.Array  # (h, w)
    pad: jax.Array  # (3,) the first frame's mean colour
    filt: jax.Array  # the target model
    memory: online.Memory
    frame: jax.Array  # updates so far
    score: jax.Array  # the last peak score
    refiner: Any = None  # the box branch's state (`RefinerState`), when there is one


def make_dimp_tracker(net, settings: DiMPTrackerSettings = DiMPTrackerSettings(), *,
                      refiner=None, jit: bool = True) -> tuple[Tracker, Any]:
    """(tracker, params) for a `DiMPNet` (`ebm_jax.tracking.dimp_training`) in eval
    mode; params the net's state. `refiner`: (a `BoxRefiner`, its params), the box
    branch; params are then (the net's state, the refiner's params)."""
    model = nnx.clone(net)
    model.eval()
    graph, state_n = nnx.split(model)
    s, p, o = settings, settings.predictor, settings.online
    size = int(s.crop_size)
    fs = p.filter_size
    context = dimp.crop_context(size, model.stride, model.offset)
    to_score = ((fs + 1) % 2) / 2.0  # cell coordinates -> score coordinates

    def features(params, crops):
        m = nnx.merge(graph, params)
        feats = m.features(m.levels(crops))
        return m, feats

    def side_of(box_size):
        return context * s.search_area_factor * jnp.sqrt(box_size[0] * box_size[1])

    def cells_box(m, center, box_size, crop_center, side):
        return dimp.to_cells(crop_box(center, box_size, crop_center, side, size), m.stride,
                             m.offset)

    box_branch = refiner[0] if refiner is not None else None

    def split(params):
        return params if box_branch is not None else (params, None)

    def init(params, frame, box) -> DiMPState:
        params, params_r = split(params)
        frame = jnp.asarray(frame, jnp.float32)
        cy, cx, h, w = box_to_center(box)
        center, box_size = jnp.stack([cy, cx]), jnp.stack([h, w])
        pad = jnp.mean(frame, axis=(0, 1))
        side = side_of(box_size)
        crop_centers = [center] + [center + side * jnp.asarray(d, jnp.float32)
                                   for d in s.shifts]
        crops = jnp.stack([crop_square(frame, c, side, size, pad) for c in crop_centers])
        boxes = jnp.stack([crop_box(center, box_size, c, side, size) for c in crop_centers])
        if s.flip:
            crops = jnp.concatenate([crops, crops[:1, :, ::-1]])
            b = boxes[0]
            boxes = jnp.concatenate([boxes, jnp.stack([size - 1 - b[2], b[1],
                                                       size - 1 - b[0], b[3]])[None]])
        m, feats = features(params, crops)
        cells = dimp.to_cells(boxes, m.stride, m.offset)
        filt, _, _ = dimp.predict_filter(m.predictor_params(), p, feats, cells,
                                         num_iter=o.init_iter,
                                         init_features=m.features.filter_features(feats))
        memory = online.init_memory(feats, cells, o.capacity)
        branch = (box_branch.init(params_r, frame, center, box_size, pad)
                  if box_branch is not None else None)
        return DiMPState(center, box_size, pad, filt, memory, jnp.zeros((), jnp.int32),
                         jnp.ones((), jnp.float32), branch)

    half = s.scale_num // 2
    scales = jnp.asarray([s.scale_step ** k for k in range(-half, half + 1)], jnp.float32)
    penalties = jnp.asarray([1.0 if k == 0 else s.scale_penalty
                             for k in range(-half, half + 1)], jnp.float32)

    def update(params, state: DiMPState, frame):
        params, params_r = split(params)
        frame = jnp.asarray(frame, jnp.float32)
        sides = side_of(state.size) * scales
        crops = jnp.stack([crop_square(frame, state.center, sides[k], size, state.pad)
                           for k in range(s.scale_num)])
        m, feats = features(params, crops)
        all_scores = dimp.apply_filter(feats, state.filt)  # (scales, H, W)
        best = jnp.argmax(penalties * jnp.max(all_scores, axis=(1, 2)))
        side, scores, feats = sides[best], all_scores[best], feats[best][None]
        loc = online.localize(scores, o)
        cell_yx = loc.center_yx - to_score
        crop_yx = m.offset + m.stride * cell_yx
        mid = (size - 1) / 2
        found_center = state.center + (crop_yx - mid) * side / size
        center = jnp.where(loc.found, found_center, state.center)
        box_size = state.size
        if s.scale_num > 1:  # (with one scale the size is kept exactly)
            step = 1.0 - s.scale_lr + s.scale_lr * scales[best]
            box_size = jnp.where(loc.found, state.size * step, state.size)
        if box_branch is not None:  # the box branch refines a found target's box (only)
            center, box_size = jax.lax.cond(
                loc.found,
                lambda: box_branch.refine(params_r, state.refiner, frame, center,
                                          box_size, state.pad, state.frame),
                lambda: (center, box_size))
        frame_no = state.frame + 1
        lr = jnp.where(loc.hard_negative, o.hard_negative_learning_rate, o.learning_rate)
        sample_box = cells_box(m, center, box_size, state.center, side)
        memory = jax.tree.map(
            lambda new, old: jnp.where(loc.found, new, old),
            online.add_sample(state.memory, feats[0], sample_box, lr, o.keep_initial),
            state.memory)
        params_p = m.predictor_params()
        regular = loc.found & (frame_no % o.update_every == 0)
        branch = jnp.where(loc.found & loc.hard_negative, 2, jnp.where(regular, 1, 0))
        filt = jax.lax.switch(branch, [
            lambda f: f,
            lambda f: online.refine_filter(params_p, p, f, memory, o.update_iter),
            lambda f: online.refine_filter(params_p, p, f, memory, o.hard_negative_iter),
        ], state.filt)
        new = DiMPState(center, box_size, state.pad, filt, memory, frame_no, loc.score,
                        state.refiner)
        return new, center_to_box(center[0], center[1], box_size[0], box_size[1])

    if jit:
        init, update = jax.jit(init), jax.jit(update)

    def checked_init(params, frame, box) -> DiMPState:
        check_first_box(frame, box)
        return init(params, frame, jnp.asarray(box, jnp.float32))

    if refiner is not None:
        return Tracker(checked_init, update), (state_n, refiner[1])
    return Tracker(checked_init, update), state_n


__all__ = ["DiMPState", "DiMPTrackerSettings", "make_dimp_tracker"]
