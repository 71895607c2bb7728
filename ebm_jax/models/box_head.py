"""The tracker's box energy head: an IoU-Net / ATOM-style target-conditional energy
f(x, y) over boxes (Jiang et al. 2018, IoU-Net; Danelljan et al. 2019, ATOM, sec. 3.1;
the box branch of PrDiMP that Gustafsson et al. 2020 train with KLD-IS, NCE and NCE+ in
sec. 5), in Flax NNX.

    head = BoxEnergyHead((48, 32), rngs=nnx.Rngs(0))     # conv3, conv5 of the AlexNet
    m = head.modulation(ref_levels, ref_box)              # once per target
    t = head.test_features(test_levels)                   # once per test frame
    f = head.score(m, t, boxes)                           # (N,) energies of xyxy boxes
    f = head((ref_levels, ref_box, test_levels), boxes)   # the three at once: the
                                                          # `ebm_jax.energy.boxes` energy

Per feature level l (two levels of the tracking backbone, both stride 8 here: the
AlexNet's conv3 and conv5, `SiamFCAlexNet.features`; layer2 + layer3 in ATOM):

- reference: conv 3x3 -> ReLU on the reference frame's features, PrRoIPool
  ref_pool x ref_pool at the reference box (`ebm_jax.ops.prroi_pool`), FC -> ReLU: the
  modulation vector m_l (width,) of the target;
- test: conv 3x3 -> ReLU on the test frame's features, PrRoIPool pool x pool at the
  candidate box y, times m_l (channel-wise, as ATOM's modulation), FC hidden -> ReLU;
- the levels' vectors concatenated -> FC 1: the energy f(x, y).

The last layer starts at N(0, 0.001^2) with zero bias (as the detection head), so every
f starts near 0. Widths are arguments; the defaults are CPU-small (ATOM: 256 channels,
pools 3 (reference) and 5 / 3 (test), hidden 256).

An ATOM-like variant with batch norm, per-level pool sizes and a joint modulation is
`AtomBoxHead` (`ebm_jax.models.box_head_atom`); both share `BoxHeadLevels` (the
levels' geometry, checks and pooling).

Coordinates: boxes are xyxy in crop pixels with pixel i's centre at i (the 0-indexed
continuous convention of `ebm_jax.ops.crops`); a level of stride s and offset o
(`SiamFCAlexNet.level_geometry`) has its cell j centred at crop pixel o + s j.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ebm_jax.models.tracking_backbones import detached_copy
from ebm_jax.ops.prroi_pool import _is_concrete, check_boxes, prroi_pool


def _int_at_least(name: str, value, low: int) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


class BoxHeadLevels(nnx.Module):
    """What every box head shares: the backbone levels it reads (`in_channels`,
    `strides`, `offsets` per level, set by `_set_levels`), their checks, and PrRoIPool
    of crop-pixel boxes on a level. A subclass defines the energy."""

    def _set_levels(self, in_channels: Sequence[int], strides: Sequence[int],
                    offsets: Sequence[float]) -> None:
        in_channels = tuple(_int_at_least("in_channels", c, 1) for c in in_channels)
        if not in_channels:
            raise ValueError("in_channels must name at least one feature level")
        self.strides = tuple(_int_at_least("strides", s, 1) for s in strides)
        self.offsets = tuple(float(o) for o in offsets)
        if not len(in_channels) == len(self.strides) == len(self.offsets):
            raise ValueError(f"in_channels, strides and offsets need one entry per level, "
                             f"got {len(in_channels)}, {len(self.strides)} and "
                             f"{len(self.offsets)}")
        if not all(np.isfinite(self.offsets)):
            raise ValueError(f"offsets must be finite, got {self.offsets}")
        self.in_channels = in_channels

    # ----------------------------------------------------------------- checks

    def check_geometry(self, geometry: Sequence[tuple[int, float]],
                       channels: Sequence[int] | None = None) -> None:
        """Raises ValueError unless a backbone's levels, as (stride, offset) per level
        (`SiamFCAlexNet.level_geometry`) and optionally their channel counts, are the
        ones this head was built for."""
        strides = tuple(int(s) for s, _ in geometry)
        offsets = tuple(float(o) for _, o in geometry)
        if strides != self.strides:
            raise ValueError(f"strides: the backbone's feature strides {strides} do not "
                             f"match the box head's {self.strides}")
        if offsets != self.offsets:
            raise ValueError(f"offsets: the backbone's feature offsets {offsets} do not "
                             f"match the box head's {self.offsets}")
        if channels is not None and tuple(int(c) for c in channels) != self.in_channels:
            raise ValueError(f"in_channels: the backbone's levels have "
                             f"{tuple(int(c) for c in channels)} channels, the box head "
                             f"takes {self.in_channels}")

    def _check_levels(self, name: str, levels) -> list:
        levels = list(levels)
        if len(levels) != len(self.in_channels):
            raise ValueError(f"{name} must hold {len(self.in_channels)} feature levels, "
                             f"got {len(levels)}")
        for i, (lv, c) in enumerate(zip(levels, self.in_channels)):
            if lv.ndim != 3 or lv.shape[-1] != c:
                raise ValueError(f"{name}[{i}] must have shape (H, W, {c}), got {lv.shape}")
        return levels

    def _extent(self, levels, l: int) -> tuple[float, float, float, float]:
        """The crop region (x0, y0, x1, y1) that level l's cells cover."""
        h, w = levels[l].shape[:2]
        s, o = self.strides[l], self.offsets[l]
        return o - s / 2, o - s / 2, o + s * (w - 1) + s / 2, o + s * (h - 1) + s / 2

    def check_reference_box(self, ref_levels, ref_box) -> None:
        """A concrete reference box (4,) xyxy: finite, of positive size, its centre on
        every level's map (inside the crop); a ValueError naming `ref_box` otherwise."""
        b = np.asarray(ref_box, np.float64)
        if b.shape != (4,):
            raise ValueError(f"ref_box must have shape (4,) as xyxy, got {b.shape}")
        check_boxes(b[None], name="ref_box")
        cx, cy = (b[0] + b[2]) / 2, (b[1] + b[3]) / 2
        for l in range(len(self.in_channels)):
            x0, y0, x1, y1 = self._extent(ref_levels, l)
            if not (x0 <= cx <= x1 and y0 <= cy <= y1):
                raise ValueError(f"ref_box {b.tolist()} lies outside the crop: its centre "
                                 f"({cx:g}, {cy:g}) is off level {l}'s map, which covers "
                                 f"[{x0:g}, {x1:g}] x [{y0:g}, {y1:g}]")

    def _pool(self, feat, boxes, l: int, size: int) -> jax.Array:
        """(N, size, size, C) PrRoIPool of crop-pixel xyxy boxes on level l."""
        shifted = boxes - self.offsets[l]
        return prroi_pool(feat, shifted, output_size=size,
                          spatial_scale=1.0 / self.strides[l], aligned=False)


class BoxEnergyHead(BoxHeadLevels):
    """See the module docstring. `in_channels` (one per level), `strides` and
    `offsets` (the levels' geometry in crop pixels) describe the backbone's levels;
    `width` the modulated channels, `hidden` each level's FC width."""

    def __init__(self, in_channels: Sequence[int], *, strides: Sequence[int] = (8, 8),
                 offsets: Sequence[float] = (27.0, 43.0), width: int = 32,
                 hidden: int = 64, pool_size: int = 3, ref_pool_size: int = 3,
                 rngs: nnx.Rngs):
        self._set_levels(in_channels, strides, offsets)
        in_channels = self.in_channels
        width = _int_at_least("width", width, 1)
        hidden = _int_at_least("hidden", hidden, 1)
        self.pool_size = _int_at_least("pool_size", pool_size, 1)
        self.ref_pool_size = _int_at_least("ref_pool_size", ref_pool_size, 1)

        def conv(c):
            return nnx.Conv(c, width, (3, 3), padding="SAME", rngs=rngs)

        self.ref_convs = nnx.List([conv(c) for c in in_channels])
        self.test_convs = nnx.List([conv(c) for c in in_channels])
        self.ref_fcs = nnx.List([nnx.Linear(self.ref_pool_size ** 2 * width, width, rngs=rngs)
                                 for _ in in_channels])
        self.test_fcs = nnx.List([nnx.Linear(self.pool_size ** 2 * width, hidden, rngs=rngs)
                                  for _ in in_channels])
        self.out = nnx.Linear(hidden * len(in_channels), 1, rngs=rngs,
                              kernel_init=nnx.initializers.normal(0.001),
                              bias_init=nnx.initializers.zeros)

    def pair_inputs(self, ref_levels, ref_boxes, test_levels) -> tuple:
        """The energy's inputs of B pairs, as `BoxHeadNet.pair_inputs` hands them on:
        (ref_levels, ref_boxes, test_levels) as given (this head has no batch-level
        part)."""
        return list(ref_levels), ref_boxes, list(test_levels)

    def modulation(self, ref_levels: Sequence[jax.Array], ref_box) -> tuple:
        """The target's modulation vectors, one (width,) per level, from the reference
        frame's levels (each (H_l, W_l, C_l)) and its box (4,) xyxy in crop pixels."""
        ref_levels = self._check_levels("ref_levels", ref_levels)
        if _is_concrete(ref_box):
            self.check_reference_box(ref_levels, ref_box)
        box = jnp.asarray(ref_box, jnp.float32).reshape(1, 4)
        out = []
        for l, (lv, conv, fc) in enumerate(zip(ref_levels, self.ref_convs, self.ref_fcs)):
            feat = jax.nn.relu(conv(lv[None])[0])
            pooled = self._pool(feat, box, l, self.ref_pool_size)
            out.append(jax.nn.relu(fc(pooled.reshape(-1))))
        return tuple(out)

    def test_features(self, test_levels: Sequence[jax.Array]) -> tuple:
        """The test frame's levels after the test branch's convolutions (computed once
        per frame, shared by every candidate box)."""
        test_levels = self._check_levels("test_levels", test_levels)
        return tuple(jax.nn.relu(conv(lv[None])[0])
                     for lv, conv in zip(test_levels, self.test_convs))

    def score(self, modulation: Sequence[jax.Array], test_features: Sequence[jax.Array],
              boxes) -> jax.Array:
        """(N,) energies of xyxy boxes (N, 4) in crop pixels, from `modulation` and
        `test_features`. Concrete boxes are checked (finite, positive size)."""
        if _is_concrete(boxes):
            check_boxes(np.asarray(boxes), name="boxes")
        boxes = jnp.asarray(boxes, jnp.float32)
        hs = []
        for l, (feat, m, fc) in enumerate(zip(test_features, modulation, self.test_fcs)):
            pooled = self._pool(feat, boxes, l, self.pool_size) * m
            hs.append(jax.nn.relu(fc(pooled.reshape(boxes.shape[0], -1))))
        return self.out(jnp.concatenate(hs, axis=-1))[:, 0]

    def __call__(self, inputs, boxes, conditions=None) -> jax.Array:
        """f(inputs, boxes, None) -> (N,), the `ebm_jax.energy.boxes` energy of one pair:
        inputs = (ref_levels, ref_box, test_levels)."""
        if conditions is not None:
            raise ValueError("conditions must be None: the box head's energy has no "
                             "per-box condition")
        ref_levels, ref_box, test_levels = inputs
        return self.score(self.modulation(ref_levels, ref_box),
                          self.test_features(test_levels), boxes)



class BoxHeadNet(nnx.Module):
    """A tracking backbone and its box head, trained together as one module: `levels(x)`
    is the backbone's `features(x, levels)` (the head's input levels), held constant in
    the gradient (`stop_gradient`) when `frozen`. The backbone runs in eval mode (its
    batch-norm statistics are not updated), frozen or not; with `frozen`, give the
    optimiser the head's parameters only (`trainable_filter`). `levels`: default the
    backbone's `box_head_levels`. The head (`BoxEnergyHead`, or `AtomBoxHead` of
    `ebm_jax.models.box_head_atom`) keeps the mode it is given: an `AtomBoxHead` in
    train mode normalises by its batch and updates its running statistics in
    `pair_inputs`. The backbone and the head are copied, arrays included: a train step
    that donates the net's state leaves the caller's modules (and their mode) as they
    were."""

    def __init__(self, backbone: nnx.Module, head: BoxHeadLevels, *,
                 levels: Sequence[int] | None = None, frozen: bool = True):
        levels = backbone.box_head_levels if levels is None else levels
        self.levels_used = tuple(int(lv) for lv in levels)
        head.check_geometry(backbone.level_geometry(self.levels_used),
                            backbone.level_channels(self.levels_used))
        self.backbone = detached_copy(backbone)
        self.backbone.eval()
        self.head = detached_copy(head)
        self.frozen = bool(frozen)

    def levels(self, images: jax.Array) -> tuple:
        out = self.backbone.features(images, self.levels_used)
        return tuple(jax.lax.stop_gradient(o) for o in out) if self.frozen else out

    def pair_inputs(self, ref: jax.Array, ref_boxes: jax.Array, test: jax.Array):
        """The head's energy inputs of B pairs of crops, ref and test (B, S, S, 3), and
        the reference boxes (B, 4) xyxy: `head.pair_inputs` of both crops' `levels`,
        a pytree of (B, ...) leaves whose row i `head(row_i, boxes)` scores. For a
        `BoxEnergyHead`, (ref levels, ref_boxes, test levels); for an `AtomBoxHead`,
        its batch-level part (batch norm over the B pairs in train mode)."""
        return self.head.pair_inputs(list(self.levels(ref)), ref_boxes,
                                     list(self.levels(test)))

    @property
    def trainable_filter(self):
        """The NNX filter of what the optimiser updates: the head's parameters when
        frozen, every parameter otherwise."""
        return nnx.All(nnx.Param, nnx.PathContains("head")) if self.frozen else nnx.Param


__all__ = ["BoxEnergyHead", "BoxHeadLevels", "BoxHeadNet"]
