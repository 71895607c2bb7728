"""The detection energy head of the paper's sec. 4.2 and box
refinement by gradient ascent on it.

    head = DetectionEnergyHead(in_channels=256, num_classes=80, rngs=nnx.Rngs(0))
    f = head(levels, boxes, classes)          # (N,) energies of xyxy boxes
    boxes, f, scale = refine_boxes(head, levels, boxes, classes,
                                   step_length=(8e-4, 8e-4, 3.2e-3, 3.2e-3))

PrRoIPool P x P on the box's FPN level -> FC hidden -> ReLU -> FC hidden -> ReLU ->
FC (classes + 1); f is the entry of the box's class (1 .. num_classes; 0 is the
background entry). The last layer starts at N(0, 0.001^2) with zero bias, so every f
starts near 0. Widths are arguments so that CPU experiments can use smaller heads; the
paper's head is pool 7, hidden 1024, 256 channels (12544 pooled features).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ebm_jax import checks
from ebm_jax.energy.boxes import ascend_relative
from ebm_jax.ops.boxes import decode_relative, encode_relative
from ebm_jax.ops.prroi_pool import (
    POOL_METHODS,
    _is_concrete,
    check_boxes,
    prroi_pool_fpn,
)


class DetectionEnergyHead(nnx.Module):
    def __init__(self, in_channels: int = 256, num_classes: int = 80, *,
                 hidden: int = 1024, pool_size: int = 7,
                 strides: Sequence[int] = (4, 8, 16, 32), canonical_size: float = 224.0,
                 pool_method: str = "dense", rngs: nnx.Rngs):
        for name, value in (("in_channels", in_channels), ("num_classes", num_classes),
                            ("hidden", hidden), ("pool_size", pool_size)):
            if int(value) != value or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        self.num_classes, self.pool_size = int(num_classes), int(pool_size)
        self.strides = tuple(int(s) for s in strides)
        if not canonical_size > 0:
            raise ValueError(f"canonical_size must be > 0, got {canonical_size!r}")
        self.canonical_size = float(canonical_size)
        if pool_method not in POOL_METHODS:
            raise ValueError(f"pool_method must be one of {POOL_METHODS}, got "
                             f"{pool_method!r}")
        # "integral": PrRoIPool from integral images (the fast path), "dense": the
        # whole-map contraction (the reference); the same values to float32 precision
        self.pool_method = pool_method
        self.fc1 = nnx.Linear(pool_size * pool_size * in_channels, hidden, rngs=rngs)
        self.fc2 = nnx.Linear(hidden, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, num_classes + 1, rngs=rngs,
                              kernel_init=nnx.initializers.normal(0.001),
                              bias_init=nnx.initializers.zeros)

    def __call__(self, levels: Sequence[jax.Array], boxes: jax.Array,
                 classes: jax.Array) -> jax.Array:
        """(N,) energies f of xyxy `boxes` (N, 4) of category `classes` (N,) in
        [1, num_classes], on one image's feature levels (each (H_l, W_l, C))."""
        if _is_concrete(classes):
            c = np.asarray(classes)
            if c.ndim != 1 or (c.size and (c.min() < 1 or c.max() > self.num_classes)):
                raise ValueError(f"classes must be a 1-D array in [1, {self.num_classes}] "
                                 f"(0 is background), got range "
                                 f"[{c.min() if c.size else '-'}, {c.max() if c.size else '-'}]")
        pooled = prroi_pool_fpn(levels, boxes, strides=self.strides,
                                output_size=self.pool_size,
                                canonical_size=self.canonical_size,
                                method=self.pool_method)
        h = pooled.reshape(pooled.shape[0], -1)
        h = jax.nn.relu(self.fc1(h))
        h = jax.nn.relu(self.fc2(h))
        logits = self.out(h)
        return jnp.take_along_axis(logits, jnp.asarray(classes)[:, None], axis=1)[:, 0]


def refine_boxes(head: DetectionEnergyHead, levels: Sequence[jax.Array], boxes,
                 classes, *, step_length, num_steps: int = 10, decay: float = 0.5):
    """T steps of gradient ascent on f in the relative space (cx/w0, cy/h0, log w,
    log h) of each initial box; a step that lowers f is undone and that box's step
    lengths are multiplied by `decay` (`ebm_jax.energy.boxes.ascend_relative`, the
    refinement the tracker's box head shares). Returns (refined xyxy boxes, f, step
    scale)."""
    if _is_concrete(boxes):
        check_boxes(boxes)
    boxes = jnp.asarray(boxes, jnp.float32)
    graphdef, state = nnx.split(head)
    predict = _predictor(graphdef, num_steps, tuple(np.atleast_1d(step_length).tolist()),
                         decay)
    rel, f, scale = predict(state, tuple(levels), boxes, jnp.asarray(classes),
                            encode_relative(boxes, boxes))
    return decode_relative(rel, boxes), f, scale


_PREDICTORS: dict = {}


def _predictor(graphdef, num_steps, step_length, decay):
    """One jitted refinement per (head structure, settings); features and parameters
    are arguments, so every image reuses it."""
    key = (graphdef, num_steps, step_length, decay)
    if key not in _PREDICTORS:
        _check_refinement(num_steps, step_length, decay)

        def predict(state, levels, boxes, classes, rel):
            return ascend_relative(nnx.merge(graphdef, state), list(levels), boxes, rel,
                                   classes, num_steps=num_steps, step_length=step_length,
                                   reject_decreasing=True, decay=decay)

        _PREDICTORS[key] = jax.jit(predict)
    return _PREDICTORS[key]


def _check_refinement(num_steps, step_length, decay) -> None:
    """The settings' checks, before anything is traced (`gradient_ascent`'s)."""
    checks.int_at_least("num_steps", num_steps, 0)
    checks.positive_steps("step_length", step_length)
    if not 0 < decay < 1:
        raise ValueError(f"decay must be in (0, 1), got {decay!r}")
