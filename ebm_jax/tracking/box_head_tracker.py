"""The box-head tracker (Gustafsson et al. 2020, "How to Train Your EBM for Regression",
sec. 5; ATOM's refinement, Danelljan et al. 2019, sec. 3.2): SiamFC's coarse centre at
one scale, then gradient ascent on the head's energy from the estimate and jittered
copies, with the tracker options of `BoxHeadSettings` (`ebm_jax.tracking.box_head`).

    tracker, params = make_box_head_tracker(backbone, head, BoxHeadSettings())
    state = tracker.init(params, frame, box_xywh)
    state, box = tracker.update(params, state, frame)  # jitted, one trace per frame shape

The refinement alone (`make_box_refiner`) composes with any coarse centre: DiMP's
(`ebm_jax.tracking.dimp_tracker`, the EBM regression paper's tracker) takes it as its
box branch.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from ebm_jax.energy.boxes import ascend_top_k
from ebm_jax.ops.crops import (
    center_to_box,
    check_first_box,
    crop_box,
    crop_square,
    frame_box,
    keep_on_frame,
)
from ebm_jax.tracking.box_head import BoxHeadSettings
from ebm_jax.tracking.siamfc import SiamFCSettings, Tracker, make_tracker

# fold_in purpose of the tracker's key
_JITTER = 0


class RefinerState(NamedTuple):
    """modulation: the target's modulation vectors (one per level); key: raw key data
    of the candidates' jitter."""

    modulation: tuple
    key: jax.Array


class BoxRefiner(NamedTuple):
    """`init(params, frame, center, size, pad) -> RefinerState`: the target's
    modulation from a crop centred on the first box; `refine(params, state, frame,
    center, size, pad, frame_no) -> (center, size)`: the box the head's energy ascent
    reaches from the coarse one (centre (cy, cx) and size (h, w) in frame pixels,
    0-indexed), kept on the frame and at least `min_size`; the coarse box where the
    refined one is not finite or not accepted.
    Pure and traceable; `params` = (backbone state, head state)."""

    init: Any
    refine: Any


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


def make_box_refiner(backbone: nnx.Module, head: nnx.Module,
                     settings: BoxHeadSettings = BoxHeadSettings(),
                     siamfc: SiamFCSettings = SiamFCSettings(), *, levels=None,
                     seed: int = 0) -> tuple[BoxRefiner, tuple]:
    """(refiner, params) of the box head's refinement (`BoxRefiner`; the EBM regression
    paper, sec. 5; ATOM's refinement): a `siamfc.search_size` crop of side
    `settings.head_side` around the coarse box, the head's test features,
    `num_candidates` starting boxes (the coarse box and jittered copies, keys
    fold_in(fold_in(key(seed), frame_no), 0)), `ascend_top_k` (the mean of the top k),
    then `accept_margin`, `refine_center` and `size_update` of `BoxHeadSettings`.
    `levels`: default the backbone's `box_head_levels`; params = (backbone state in
    eval mode, head state)."""
    levels = tuple(backbone.box_head_levels if levels is None else levels)
    model = nnx.clone(backbone)
    model.eval()
    head.check_geometry(model.level_geometry(levels), model.level_channels(levels))
    graph_b, state_b = nnx.split(model)
    graph_h, state_h = nnx.split(head)
    s, size = settings, siamfc.search_size
    lengths = jnp.asarray(s.step_lengths, jnp.float32)
    jitter_scale = jnp.asarray([s.jitter_center, s.jitter_center, s.jitter_size,
                                s.jitter_size], jnp.float32)

    def features(params_b, crop):
        return [lv[0] for lv in nnx.merge(graph_b, params_b).features(crop[None], levels)]

    def init(params, frame, center, box_size, pad) -> RefinerState:
        params_b, params_h = params
        side = s.head_side(siamfc, box_size[0], box_size[1])
        crop = crop_square(frame, center, side, size, pad)
        ref_box = crop_box(center, box_size, center, side, size)
        modulation = nnx.merge(graph_h, params_h).modulation(features(params_b, crop),
                                                             ref_box)
        return RefinerState(modulation, jax.random.key_data(jax.random.key(seed)))

    def refine(params, state: RefinerState, frame, center, box_size, pad, frame_no):
        params_b, params_h = params
        head_m = nnx.merge(graph_h, params_h)
        side = s.head_side(siamfc, box_size[0], box_size[1])
        crop = crop_square(frame, center, side, size, pad)
        test = head_m.test_features(features(params_b, crop))
        coarse = crop_box(center, box_size, center, side, size)
        key = jax.random.fold_in(jax.random.fold_in(jax.random.wrap_key_data(state.key),
                                                    frame_no), _JITTER)
        noise = (jax.random.uniform(key, (s.num_candidates - 1, 4)) - 0.5) * jitter_scale
        best = ascend_top_k(lambda inp, b, c: head_m.score(inp[0], inp[1], b),
                            (state.modulation, test), coarse, noise, top_k=s.top_k,
                            num_steps=s.refine_steps, step_length=lengths,
                            reject_decreasing=s.reject_decreasing)
        new_center, new_size = frame_box(best, center, side, size)
        ok = jnp.all(jnp.isfinite(new_center)) & jnp.all(jnp.isfinite(new_size))
        if s.accept_margin is not None:  # only a box the head prefers by the margin
            f_best, f_coarse = head_m.score(state.modulation, test,
                                            jnp.stack([best, coarse]))
            ok &= f_best - f_coarse > s.accept_margin
        if not s.refine_center:  # the coarse centre kept, the head sizes the box
            new_center = center
        # a damped size update in log space: size^(1 - d) x refined^d
        new_size = jnp.exp((1 - s.size_update) * jnp.log(box_size)
                           + s.size_update * jnp.log(new_size))
        return keep_on_frame(jnp.where(ok, new_center, center),
                             jnp.where(ok, new_size, box_size), frame.shape, s.min_size)

    return BoxRefiner(init, refine), (state_b, state_h)


def make_box_head_tracker(backbone: nnx.Module, head: nnx.Module,
                          settings: BoxHeadSettings = BoxHeadSettings(),
                          siamfc: SiamFCSettings = SiamFCSettings(), *,
                          levels=None, refine: bool = True, seed: int = 0,
                          jit: bool = True) -> tuple[Tracker, tuple]:
    """(tracker, params): SiamFC (one scale, `siamfc` otherwise) with the box head's
    refinement (`make_box_refiner`); params = (backbone state in eval mode, head state).
    `init(params, frame, box)` also computes the target's modulation (the reference
    crop: search_size, centred on the box). `update(params, state, frame) -> (state,
    box)`: SiamFC's coarse centre with the previous size; with `refine`, the refiner's
    box, then the size and centre limits of `BoxHeadSettings`. `refine=False` gives the
    coarse box (for timing the refinement). Both are jitted unless `jit=False`.
    Boxes are xywh (1-indexed)."""
    refiner, (state_b, state_h) = make_box_refiner(backbone, head, settings, siamfc,
                                                   levels=levels, seed=seed)
    model = nnx.clone(backbone)
    model.eval()
    graph_b, _ = nnx.split(model)
    s = settings
    coarse_settings = dataclasses.replace(siamfc, scale_num=1)

    def embed(params, images):
        return nnx.merge(graph_b, params)(images)

    siam = make_tracker(embed, coarse_settings)

    def init(params, frame, box) -> BoxHeadState:
        frame = jnp.asarray(frame)
        siam_state = siam.init(params[0], frame, box)
        r = refiner.init(params, frame, siam_state.center, siam_state.size, siam_state.pad)
        return BoxHeadState(siam_state, r.modulation, r.key, jnp.zeros((), jnp.int32),
                            jnp.zeros((), jnp.float32))

    def update(params, state: BoxHeadState, frame):
        frame = jnp.asarray(frame)
        siam_state, _ = siam.update(params[0], state.siamfc, frame)
        center, box_size = keep_on_frame(siam_state.center, state.siamfc.size, frame.shape,
                                  s.min_size)
        best_peak = jnp.maximum(state.best_peak, siam_state.peak)
        if refine:
            refined = keep_on_frame(*refiner.refine(
                params, RefinerState(state.modulation, state.key), frame, center,
                box_size, state.siamfc.pad, state.frame), frame.shape, s.min_size)
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


__all__ = ["BoxHeadState", "BoxRefiner", "RefinerState", "make_box_head_tracker",
           "make_box_refiner"]
