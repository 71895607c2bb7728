"""Does a box energy refine boxes of targets it never saw? The measurement that comes
before any tracking with a box head (the tracking analog of the detection head's
Table 2 in Gustafsson et al. 2020, "How to Train Your EBM for Regression", sec. 4.2 and
5; ATOM's IoU-Net refinement, Danelljan et al. 2019, sec. 3.2).

For each pair (a reference crop with its box, a test crop with the true box g):

- **refinement**: a start box, g perturbed in the relative space of g (cx/w, cy/h,
  log w, log h) by N(0, start_sigma^2) per coordinate, is moved by `ascend_boxes`
  (the tracker's gradient ascent, its step lengths and steps); IoU with g before and
  after;
- **ranking**: does f rank g above `num_jittered` boxes perturbed the same way
  (chance: 1 / (num_jittered + 1));
- **rank correlation**: Spearman's rho between f and IoU over `num_ranked` boxes
  perturbed by `rank_sigma` (a box energy should be monotone in the overlap).

    measures = refinement_measures(energy, inputs, true_boxes, key, step_lengths=...,
                                   num_steps=10)
    # {"iou_start", "iou_refined", "outranks", "rank_correlation"}: (B,) each

`energy(inputs_i, boxes (N, 4) xyxy) -> (N,)` for one pair (`inputs` batched on a
leading axis). `gaussian_box_energy` is the control: a log-density centred on the truth,
which the refinement must bring to IoU ~1 when the plumbing (sign, frames, relative
space, step length) is right. Keys: fold_in(key, purpose) for the starts, the jittered
boxes and the ranked boxes.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from ebm_jax.energy.boxes import ascend_boxes, ascend_top_k
from ebm_jax.ops.boxes import decode_relative, encode_relative, paired_box_iou

_START, _JITTERED, _RANKED, _DIRECTION = 0, 1, 2, 3  # fold_in purposes


@dataclasses.dataclass(frozen=True)
class RefinementProbe:
    """How boxes are perturbed and refined: `start_sigma` (the refinement's start and
    the jittered boxes), `rank_sigma` (the ranked boxes), `num_jittered`, `num_ranked`;
    the refinement's `step_lengths` (1 or 4: cx, cy, log w, log h), `num_steps` and
    `reject_decreasing`, as the tracker's (`BoxHeadSettings`)."""

    start_sigma: float = 0.1
    rank_sigma: float = 0.05
    num_jittered: int = 9
    num_ranked: int = 32
    step_lengths: tuple[float, ...] = (2.5e-3,)
    num_steps: int = 10
    reject_decreasing: bool = True

    def __post_init__(self):
        for name in ("start_sigma", "rank_sigma"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"RefinementProbe.{name} must be a number > 0, got {v!r}")
        for name, low in (("num_jittered", 1), ("num_ranked", 3), ("num_steps", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"RefinementProbe.{name} must be an integer >= {low}, "
                                 f"got {v!r}")
        lengths = tuple(float(x) for x in self.step_lengths)
        if len(lengths) not in (1, 4) or not all(math.isfinite(x) and x > 0
                                                 for x in lengths):
            raise ValueError(f"RefinementProbe.step_lengths must be 1 or 4 numbers > 0 "
                             f"(cx, cy, log w, log h), got {self.step_lengths!r}")
        object.__setattr__(self, "step_lengths", lengths)


def perturb_boxes(key, boxes, sigma: float, num: int):
    """(B, num, 4) xyxy: each of `boxes` (B, 4) moved in its own relative space by
    N(0, sigma^2) per coordinate (centre in units of its width / height, log size)."""
    rel = encode_relative(boxes, boxes)[:, None]
    noise = sigma * jax.random.normal(key, (boxes.shape[0], num, 4), boxes.dtype)
    return decode_relative(rel + noise, boxes[:, None])


def boxes_at_iou(key, boxes, iou: float, num_bisections: int = 40):
    """(B, 4) xyxy: each of `boxes` (B, 4) moved along a random direction of its own
    relative space (centre in units of its size, log size; a uniform direction in 4D)
    to the distance at which its IoU with the box is `iou` (in (0, 1); bisection on the
    distance, to float32 precision): starts of a set overlap, the sharper refinement
    probe's 0.5 / 0.7 / 0.8."""
    if not 0.0 < float(iou) < 1.0:
        raise ValueError(f"iou must be in (0, 1), got {iou!r}")
    boxes = jnp.asarray(boxes, jnp.float32)
    d = jax.random.normal(jax.random.fold_in(key, _DIRECTION), boxes.shape, boxes.dtype)
    d = d / jnp.linalg.norm(d, axis=-1, keepdims=True)
    rel = encode_relative(boxes, boxes)

    def overlap(t):
        return paired_box_iou(decode_relative(rel + t[:, None] * d, boxes), boxes)

    # IoU falls from 1 at t = 0 to 0 by t = 2 (a centre moved by 2 sizes, or a size
    # e^2 times larger, overlaps nothing); bisect where it crosses `iou`
    lo, hi = jnp.zeros(boxes.shape[0]), jnp.full((boxes.shape[0],), 4.0)

    def bisect(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        above = overlap(mid) > iou
        return jnp.where(above, mid, lo), jnp.where(above, hi, mid)

    lo, hi = jax.lax.fori_loop(0, num_bisections, bisect, (lo, hi))
    return decode_relative(rel + (0.5 * (lo + hi))[:, None] * d, boxes)


@dataclasses.dataclass(frozen=True)
class TrackerProcedure:
    """The tracker's own refinement (`ascend_top_k`, `BoxHeadSettings`'
    `num_candidates`, `jitter_center` / `jitter_size` and `top_k`): the start and
    `num_candidates - 1` copies moved by (U - 0.5) x (jitter_center, jitter_center,
    jitter_size, jitter_size) in its relative space, each ascended, the mean of the
    `top_k` of highest f."""

    num_candidates: int = 10
    jitter_center: float = 0.1
    jitter_size: float = 0.5
    top_k: int = 3

    def __post_init__(self):
        if not 1 <= self.top_k <= self.num_candidates:
            raise ValueError(f"TrackerProcedure.top_k must be in [1, num_candidates = "
                             f"{self.num_candidates}], got {self.top_k}")
        for name in ("jitter_center", "jitter_size"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"TrackerProcedure.{name} must be a number >= 0, got "
                                 f"{v!r}")


def refinement_from_starts(energy, inputs, true_boxes, key, probe: "RefinementProbe",
                           ious=(0.5, 0.7, 0.8),
                           procedure: TrackerProcedure | None = None) -> dict:
    """The refinement from starts of set overlap (the sharper probe): for each IoU of
    `ious`, starts at that IoU (`boxes_at_iou`) refined as the probe refines (one
    ascent), and, with `procedure`, by the tracker's own procedure from the same start
    (jittered copies, the top-k mean; keys fold_in(key, 200 + k)). Returns {iou:
    {"iou_start": (B,), "iou_refined": (B,)[, "iou_procedure": (B,)]}}. Jittable."""
    true_boxes = jnp.asarray(true_boxes, jnp.float32)
    lengths = np.asarray(probe.step_lengths)
    out = {}
    for k, level in enumerate(ious):
        starts = boxes_at_iou(jax.random.fold_in(key, 100 + k), true_boxes, level)

        def refined(inp, truth, start):
            box, _, _ = ascend_boxes(lambda i, bx, c: energy(i, bx), inp, start[None],
                                     num_steps=probe.num_steps, step_length=lengths,
                                     reject_decreasing=probe.reject_decreasing)
            return paired_box_iou(box[0], truth)

        out[float(level)] = {"iou_start": paired_box_iou(starts, true_boxes),
                             "iou_refined": jax.vmap(refined)(inputs, true_boxes, starts)}
        if procedure is not None:
            p = procedure
            scale = jnp.asarray([p.jitter_center, p.jitter_center, p.jitter_size,
                                 p.jitter_size], jnp.float32)
            offsets = (jax.random.uniform(jax.random.fold_in(key, 200 + k),
                                          (len(true_boxes), p.num_candidates - 1, 4))
                       - 0.5) * scale

            def tracked(inp, truth, start, off):
                box = ascend_top_k(lambda i, bx, c: energy(i, bx), inp, start, off,
                                   top_k=p.top_k, num_steps=probe.num_steps,
                                   step_length=lengths,
                                   reject_decreasing=probe.reject_decreasing)
                return paired_box_iou(box, truth)

            out[float(level)]["iou_procedure"] = jax.vmap(tracked)(
                inputs, true_boxes, starts, offsets)
    return out


def spearman(x, y):
    """Spearman's rank correlation of the last axis of `x` and `y` (tied values share
    their mean rank, as scipy's); 0 where either is constant."""
    def ranks(v):  # pairwise: the axis is short (tens of boxes)
        less = (v[..., None, :] < v[..., :, None]).sum(-1)
        equal = (v[..., None, :] == v[..., :, None]).sum(-1)
        return (less + 0.5 * (equal - 1)).astype(jnp.float32)

    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(-1, keepdims=True), ry - ry.mean(-1, keepdims=True)
    den = jnp.sqrt((rx ** 2).sum(-1) * (ry ** 2).sum(-1))
    return jnp.where(den > 0, (rx * ry).sum(-1) / jnp.where(den > 0, den, 1.0), 0.0)


def gaussian_box_energy(sigma: float = 0.05):
    """The control energy: f(g, boxes) = -|encode_relative(boxes, g)
    - encode_relative(g, g)|^2 / (2 sigma^2), the log-density (up to a constant) of the
    KLD-IS label distribution centred on the truth g (`inputs` = g (4,) xyxy). With
    PrDiMP's step 2.5e-3 and sigma 0.05 one step is one Newton step to g."""
    def energy(truth, boxes):
        d = encode_relative(boxes, truth[None]) - encode_relative(truth[None], truth[None])
        return -jnp.sum(d ** 2, axis=-1) / (2 * sigma ** 2)

    return energy


def refinement_measures(energy, inputs, true_boxes, key, probe: RefinementProbe,
                        step_lengths=None):
    """The per-pair measures of the module docstring: a dict of (B,) arrays
    "iou_start", "iou_refined", "outranks" (1.0 / 0.0) and "rank_correlation".
    `energy(inputs_i, boxes) -> (N,)`, `inputs` batched over B pairs, `true_boxes`
    (B, 4) xyxy. `step_lengths` (C, 4), checked > 0 by the caller, may be traced: then
    "iou_refined" is (C, B), one row per candidate (the probe's step lengths otherwise).
    Jittable (close over `energy` and `probe`)."""
    true_boxes = jnp.asarray(true_boxes, jnp.float32)
    b = true_boxes.shape[0]
    starts = perturb_boxes(jax.random.fold_in(key, _START), true_boxes,
                           probe.start_sigma, 1)[:, 0]
    jittered = perturb_boxes(jax.random.fold_in(key, _JITTERED), true_boxes,
                             probe.start_sigma, probe.num_jittered)
    ranked = perturb_boxes(jax.random.fold_in(key, _RANKED), true_boxes,
                           probe.rank_sigma, probe.num_ranked)

    def refined(inp, truth, start, lengths):
        out, _, _ = ascend_boxes(lambda i, bx, c: energy(i, bx), inp, start[None],
                                 num_steps=probe.num_steps, step_length=lengths,
                                 reject_decreasing=probe.reject_decreasing)
        return paired_box_iou(out[0], truth)

    def one(inp, truth, start, jit, rank):
        f_true = energy(inp, truth[None])[0]
        f_jit = energy(inp, jit)
        f_rank = energy(inp, rank)
        return ((f_true > jnp.max(f_jit)).astype(jnp.float32),
                spearman(f_rank, paired_box_iou(rank, truth[None])))

    outranks, rho = jax.vmap(one)(inputs, true_boxes, starts, jittered, ranked)
    if step_lengths is None:
        refined_iou = jax.vmap(refined, in_axes=(0, 0, 0, None))(
            inputs, true_boxes, starts, np.asarray(probe.step_lengths))
    else:
        refined_iou = jax.vmap(lambda lengths: jax.vmap(refined, in_axes=(0, 0, 0, None))(
            inputs, true_boxes, starts, lengths))(jnp.asarray(step_lengths, jnp.float32))
    return {"iou_start": paired_box_iou(starts, true_boxes), "iou_refined": refined_iou,
            "outranks": outranks, "rank_correlation": rho,
            "chance_outranks": jnp.full((b,), 1.0 / (probe.num_jittered + 1))}


__all__ = ["RefinementProbe", "TrackerProcedure", "boxes_at_iou", "gaussian_box_energy", "perturb_boxes",
           "refinement_from_starts", "refinement_measures", "spearman"]
