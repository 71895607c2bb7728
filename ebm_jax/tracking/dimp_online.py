"""DiMP's online target model (Bhat et al. 2019, sec. 3.5 "Online Tracking"), as pure
JAX functions over feature maps: the sample memory, localisation in a score map, and
the model update. The frame loop (crops, backbone, the box head's refinement) composes
these; every function here is jittable and the state is a pytree.

    memory = init_memory(features, boxes, capacity=50)      # the first frame's samples
    filt, _, _ = predict_filter(params, settings, memory.features, memory.boxes,
                                num_iter=10, sample_weight=memory.weights, ...)
    loc = localize(scores, settings)                        # per frame
    memory = add_sample(memory, feature, box, learning_rate=0.01)
    filt = refine_filter(params, settings, filt, memory, num_iter=2)

Conventions as pytracking's DiMP tracker: the memory holds up to `capacity` samples
with weights that sum to 1; a new sample gets weight `learning_rate` and the others
are scaled by (1 - learning_rate); when full, the sample of least weight is replaced
(the first frame's samples, which DiMP keeps, are protected with `keep_initial`). The
localisation takes the score map's peak with sub-cell accuracy (a parabola through the
peak and its neighbours along each axis), reports "not found" below
`not_found_threshold` of score, and a hard negative where a second peak, outside
`neighborhood` cells of the first, reaches `distractor_ratio` of it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ebm_jax.tracking import dimp


class OnlineSettings(NamedTuple):
    """DiMP-50's tracking settings (pytracking's parameter file), sizes in cells."""

    capacity: int = 50  # samples in memory
    init_iter: int = 10  # optimizer iterations on the first frame's samples
    update_iter: int = 2  # ... at a regular update
    hard_negative_iter: int = 1  # ... at a hard-negative frame
    update_every: int = 10  # frames between regular updates (train_skipping)
    learning_rate: float = 0.01
    hard_negative_learning_rate: float = 0.02
    not_found_threshold: float = 0.25
    distractor_ratio: float = 0.8
    neighborhood: float = 2.0  # cells around the peak that belong to it
    keep_initial: int = 1  # first-frame samples never replaced

    def check(self) -> None:
        for name in ("capacity", "update_every"):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("init_iter", "update_iter", "hard_negative_iter", "keep_initial"):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or v < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
        if self.keep_initial >= self.capacity:
            raise ValueError(f"keep_initial must be below capacity {self.capacity}, "
                             f"got {self.keep_initial}")
        for name in ("learning_rate", "hard_negative_learning_rate", "not_found_threshold",
                     "distractor_ratio"):
            v = getattr(self, name)
            if not 0 < v < 1:
                raise ValueError(f"{name} must be in (0, 1), got {v!r}")
        if not self.neighborhood > 0:
            raise ValueError(f"neighborhood must be > 0 cells, got {self.neighborhood!r}")


class Memory(NamedTuple):
    """The sample memory: features (M, H, W, C), boxes (M, 4) in cells, weights (M,)
    summing to 1 over the filled slots (0 for empty ones), filled (M,) bool."""

    features: jax.Array
    boxes: jax.Array
    weights: jax.Array
    filled: jax.Array


def init_memory(features: jax.Array, boxes: jax.Array, capacity: int) -> Memory:
    """The first frame's N samples (its augmented copies) in a memory of `capacity`
    slots, equally weighted."""
    n = features.shape[0]
    if not 1 <= n <= capacity:
        raise ValueError(f"capacity must be at least the {n} initial samples, got "
                         f"{capacity}")
    pad = capacity - n
    feats = jnp.concatenate([features, jnp.zeros((pad, *features.shape[1:]),
                                                 features.dtype)])
    bxs = jnp.concatenate([boxes, jnp.tile(boxes[:1], (pad, 1))])
    filled = jnp.arange(capacity) < n
    return Memory(feats, bxs, jnp.where(filled, 1.0 / n, 0.0), filled)


def add_sample(memory: Memory, feature: jax.Array, box: jax.Array, learning_rate,
               keep_initial: int = 1) -> Memory:
    """A new sample at weight `learning_rate`, the others scaled by 1 - learning_rate;
    into an empty slot, else in place of the least-weighted sample outside the first
    `keep_initial` slots."""
    m = memory.weights.shape[0]
    protected = jnp.arange(m) < keep_initial
    # empty slots first, then the least weight among the unprotected ones
    score = jnp.where(memory.filled, memory.weights, -1.0)
    score = jnp.where(protected & memory.filled, jnp.inf, score)
    slot = jnp.argmin(score)
    weights = jnp.where(memory.filled, memory.weights * (1.0 - learning_rate), 0.0)
    weights = weights.at[slot].set(learning_rate)
    weights = weights / jnp.sum(weights)
    return Memory(memory.features.at[slot].set(feature), memory.boxes.at[slot].set(box),
                  weights, memory.filled.at[slot].set(True))


class Localization(NamedTuple):
    center_yx: jax.Array  # (2,) sub-cell peak in score-map coordinates
    score: jax.Array  # the peak's score
    found: jax.Array  # bool: score >= not_found_threshold
    hard_negative: jax.Array  # bool: a second peak >= distractor_ratio x the first


def _subcell(values: jax.Array, i: jax.Array) -> jax.Array:
    """The vertex offset in (-1/2, 1/2) of the parabola through values[i-1 : i+2] (0 at
    an edge or where the three do not make a maximum)."""
    n = values.shape[0]
    left = values[jnp.clip(i - 1, 0, n - 1)]
    mid = values[i]
    right = values[jnp.clip(i + 1, 0, n - 1)]
    den = left - 2 * mid + right
    ok = (i > 0) & (i < n - 1) & (den < 0)
    return jnp.where(ok, jnp.clip(0.5 * (left - right) / jnp.where(ok, den, -1.0),
                                  -0.5, 0.5), 0.0)


def localize(scores: jax.Array, settings: OnlineSettings = OnlineSettings()) -> Localization:
    """The target in one score map (H, W) (DiMP sec. 3.5; pytracking's localisation
    with its distractor check)."""
    h, w = scores.shape
    flat = jnp.argmax(scores)
    i, j = flat // w, flat % w
    top = scores[i, j]
    dy = _subcell(scores[:, j], i)
    dx = _subcell(scores[i, :], j)
    center = jnp.stack([i + dy, j + dx]).astype(jnp.float32)
    yy = jnp.arange(h)[:, None]
    xx = jnp.arange(w)[None, :]
    near = (yy - i) ** 2 + (xx - j) ** 2 <= settings.neighborhood ** 2
    second = jnp.max(jnp.where(near, -jnp.inf, scores))
    found = top >= settings.not_found_threshold
    hard = found & (second >= settings.distractor_ratio * top)
    return Localization(center, top, found, hard)


def refine_filter(params: dict, settings: dimp.PredictorSettings, filt: jax.Array,
                  memory: Memory, num_iter: int) -> jax.Array:
    """`num_iter` optimizer iterations from `filt` on the memory's weighted samples
    (DiMP's online update; empty slots weigh 0)."""
    fs = settings.filter_size
    out_hw = dimp.score_size(memory.features.shape[1:3], fs)
    centers = dimp.score_center(0.5 * (memory.boxes[:, :2] + memory.boxes[:, 2:]), fs)
    basis = jax.vmap(lambda c: dimp.distance_basis(c, out_hw, settings.num_bins,
                                                   settings.bin_displacement))(centers)
    maps = dimp.residual_maps(params, basis)
    final, _, _ = dimp.steepest_descent(filt, memory.features, maps,
                                        dimp.filter_reg(params, settings),
                                        jnp.exp(params["log_step_length"]), num_iter,
                                        memory.weights)
    return final
