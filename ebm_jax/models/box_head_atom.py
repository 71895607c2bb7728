"""An ATOM-like box energy head: the IoU predictor of ATOM (Danelljan et al. 2019, "ATOM:
Accurate Tracking by Overlap Maximization", sec. 3.1 and fig. 3), itself the
target-conditional form of IoU-Net's IoU predictor (Jiang et al. 2018, "Acquisition of
Localization Confidence for Accurate Object Detection", sec. 3), as an energy f(x, y)
over boxes in Flax NNX. The simpler head is `ebm_jax.models.box_head.BoxEnergyHead`;
both are called the same way:

    head = AtomBoxHead((48, 32), rngs=nnx.Rngs(0))       # conv3, conv5 of the AlexNet
    inputs = head.pair_inputs(ref_levels, ref_boxes, test_levels)  # B pairs, training
    f = head(row_i_of_inputs, boxes)                     # (N,) energies of xyxy boxes
    m = head.modulation(ref_levels, ref_box)             # one frame (the tracker)
    f = head.score(m, head.test_features(test_levels), boxes)

Per feature level l (conv3 / conv5 of the AlexNet, layer2 / layer3 of ResNet-18 as in
ATOM), every "block" a convolution or FC layer, then batch norm, then ReLU:

- reference: a 3x3 conv block, PrRoIPool ref_pool_sizes[l]^2 at the reference box, an
  FC block where that pool is larger than 1x1 (ATOM: 3x3 then a 3x3 valid conv on
  layer2; 1x1 and no FC on layer3); the levels' vectors concatenated, then one FC block
  per level: the modulation vector m_l (width,), which so depends on both levels;
- test: two 3x3 conv blocks, PrRoIPool pool_sizes[l]^2 at the candidate box y (ATOM:
  5x5 on layer2, 3x3 on layer3), times m_l channel-wise, FC hidden -> ReLU;
- the levels' vectors concatenated -> FC 1: the energy f(x, y).

Departures from ATOM: widths are arguments (ATOM: 256 everywhere but 128 for layer2's
reference conv; the defaults are CPU-small); the test branch's FC layers have no batch
norm, since an energy of one box must not depend on the boxes it is batched with (ATOM
normalises over its 16 proposals per pair); the last layer starts at N(0, 0.001^2) with
zero bias, as `BoxEnergyHead`'s, so that every f starts near 0; the modulation scales
the pooled test features rather than the map (the same numbers: pooling is linear).

Batch norm (PyTorch's momentum 0.1 and eps 1e-5): `pair_inputs` of B pairs follows the
module's mode (`head.train()`, the default, normalises by the batch of B frames or
reference boxes and updates the running statistics; `head.eval()` uses them); the
per-frame parts `modulation`, `test_features` and `score`, which the tracker and the
refinement probe call, always use the running statistics (one frame is no batch).
`head(inputs, boxes)` takes a row of `pair_inputs` in either mode, or the raw
(ref_levels, ref_box, test_levels) of one pair in eval mode only. Boxes and levels'
geometry as `BoxEnergyHead` (`BoxHeadLevels`): xyxy crop pixels, cell j of a level of
stride s and offset o centred at pixel o + s j.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ebm_jax.models.box_head import BoxHeadLevels, _int_at_least
from ebm_jax.ops.prroi_pool import _is_concrete, check_boxes

BN_MOMENTUM = 0.9  # PyTorch's momentum 0.1
BN_EPSILON = 1e-5
# ATOM's pools: reference 3x3 (layer2) and 1x1 (layer3), test 5x5 and 3x3
ATOM_REF_POOL_SIZES = (3, 1)
ATOM_POOL_SIZES = (5, 3)

_he = nnx.initializers.he_normal()  # ATOM's Kaiming normal, fan in


class AtomPairInputs(NamedTuple):
    """The batch-level part of `AtomBoxHead` for B pairs: `modulation` one (B, width)
    per level, `test_features` one (B, H_l, W_l, width) per level (a row of each:
    one pair, what `AtomBoxHead.__call__` scores boxes with)."""

    modulation: tuple
    test_features: tuple


class ConvBlock(nnx.Module):
    """3x3 convolution (no bias), batch norm, ReLU on (B, H, W, C) maps."""

    def __init__(self, c_in: int, c_out: int, *, rngs: nnx.Rngs):
        self.conv = nnx.Conv(c_in, c_out, (3, 3), padding="SAME", use_bias=False,
                             kernel_init=_he, rngs=rngs)
        self.norm = nnx.BatchNorm(c_out, momentum=BN_MOMENTUM, epsilon=BN_EPSILON,
                                  rngs=rngs)

    def __call__(self, x, use_running_average: bool | None = None) -> jax.Array:
        return jax.nn.relu(self.norm(self.conv(x), use_running_average))


class FCBlock(nnx.Module):
    """Linear (no bias), batch norm, ReLU on (B, C) vectors."""

    def __init__(self, c_in: int, c_out: int, *, rngs: nnx.Rngs):
        self.linear = nnx.Linear(c_in, c_out, use_bias=False, kernel_init=_he, rngs=rngs)
        self.norm = nnx.BatchNorm(c_out, momentum=BN_MOMENTUM, epsilon=BN_EPSILON,
                                  rngs=rngs)

    def __call__(self, x, use_running_average: bool | None = None) -> jax.Array:
        return jax.nn.relu(self.norm(self.linear(x), use_running_average))


def _pool_sizes(name: str, sizes, num_levels: int) -> tuple[int, ...]:
    """One integer >= 1 per level, or a ValueError naming `name`."""
    values = (tuple(sizes.tolist()) if isinstance(sizes, np.ndarray)
              else tuple(sizes) if isinstance(sizes, (tuple, list)) else ())
    ok = (len(values) == num_levels and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1
        for v in values))
    if not ok:
        raise ValueError(f"{name} must hold one integer >= 1 per feature level "
                         f"({num_levels} levels), got {sizes!r}")
    return tuple(int(v) for v in values)


class AtomBoxHead(BoxHeadLevels):
    """See the module docstring. `in_channels` (one per level), `strides` and `offsets`
    (the levels' geometry in crop pixels) describe the backbone's levels; `width` the
    channels of every conv block and of the modulation (ATOM: 256), `hidden` each
    level's test FC width (ATOM: 256); `pool_sizes` the test pools and
    `ref_pool_sizes` the reference pools, one side >= 1 per level (ATOM: (5, 3) and
    (3, 1))."""

    def __init__(self, in_channels: Sequence[int], *, strides: Sequence[int] = (8, 8),
                 offsets: Sequence[float] = (27.0, 43.0), width: int = 32,
                 hidden: int = 64, pool_sizes: Sequence[int] = ATOM_POOL_SIZES,
                 ref_pool_sizes: Sequence[int] = ATOM_REF_POOL_SIZES, rngs: nnx.Rngs):
        self._set_levels(in_channels, strides, offsets)
        n = len(self.in_channels)
        width = _int_at_least("width", width, 1)
        hidden = _int_at_least("hidden", hidden, 1)
        self.pool_sizes = _pool_sizes("pool_sizes", pool_sizes, n)
        self.ref_pool_sizes = _pool_sizes("ref_pool_sizes", ref_pool_sizes, n)
        self.width = width
        self.ref_convs = nnx.List([ConvBlock(c, width, rngs=rngs)
                                   for c in self.in_channels])
        # an FC block on a reference pool larger than 1x1 (ATOM's 3x3 valid conv)
        self.ref_fcs = nnx.List([FCBlock(p * p * width, width, rngs=rngs)
                                 for p in self.ref_pool_sizes if p > 1])
        self.mod_fcs = nnx.List([FCBlock(n * width, width, rngs=rngs) for _ in range(n)])
        self.test_convs = nnx.List([
            nnx.List([ConvBlock(c, width, rngs=rngs), ConvBlock(width, width, rngs=rngs)])
            for c in self.in_channels])
        self.test_fcs = nnx.List([nnx.Linear(p * p * width, hidden, kernel_init=_he,
                                             rngs=rngs) for p in self.pool_sizes])
        self.out = nnx.Linear(hidden * n, 1, rngs=rngs,
                              kernel_init=nnx.initializers.normal(0.001),
                              bias_init=nnx.initializers.zeros)

    @property
    def training(self) -> bool:
        """Whether `pair_inputs` normalises by its batch (`head.train()`) rather than
        by the running statistics (`head.eval()`)."""
        return not self.ref_convs[0].norm.use_running_average

    # ----------------------------------------------------------------- batches

    def _check_batch(self, name: str, levels, b: int | None) -> tuple[list, int]:
        levels = list(levels)
        if len(levels) != len(self.in_channels):
            raise ValueError(f"{name} must hold {len(self.in_channels)} feature levels, "
                             f"got {len(levels)}")
        for i, (lv, c) in enumerate(zip(levels, self.in_channels)):
            if lv.ndim != 4 or lv.shape[-1] != c or (b is not None and lv.shape[0] != b):
                raise ValueError(f"{name}[{i}] must have shape "
                                 f"({'B' if b is None else b}, H, W, {c}), got {lv.shape}")
            b = lv.shape[0]
        return levels, b

    def _modulation(self, ref_levels: list, ref_boxes, use_running_average) -> tuple:
        vectors, k = [], 0
        for l, (lv, conv) in enumerate(zip(ref_levels, self.ref_convs)):
            feat = conv(lv, use_running_average)
            p = self.ref_pool_sizes[l]
            pooled = jax.vmap(lambda f, box, l=l, p=p: self._pool(f, box[None], l, p)[0])(
                feat, ref_boxes).reshape(ref_boxes.shape[0], -1)
            if p > 1:
                pooled, k = self.ref_fcs[k](pooled, use_running_average), k + 1
            vectors.append(pooled)
        joint = jnp.concatenate(vectors, axis=-1)
        return tuple(fc(joint, use_running_average) for fc in self.mod_fcs)

    def _test_features(self, test_levels: list, use_running_average) -> tuple:
        return tuple(second(first(lv, use_running_average), use_running_average)
                     for lv, (first, second) in zip(test_levels, self.test_convs))

    def pair_inputs(self, ref_levels, ref_boxes, test_levels) -> AtomPairInputs:
        """The batch-level part of B pairs: the reference frames' levels (each (B, H_l,
        W_l, C_l)) and boxes (B, 4) xyxy -> the modulations, the test frames' levels ->
        their features. In train mode batch norm takes the statistics of the batch
        (every frame's cells for the conv blocks, the B reference boxes for the FC
        blocks) and updates its running statistics; in eval mode it uses them."""
        ref_levels, b = self._check_batch("ref_levels", ref_levels, None)
        test_levels, _ = self._check_batch("test_levels", test_levels, b)
        if _is_concrete(ref_boxes):
            boxes = np.asarray(ref_boxes)
            if boxes.shape != (b, 4):
                raise ValueError(f"ref_boxes must have shape ({b}, 4) as xyxy, got "
                                 f"{boxes.shape}")
            for i in range(b):
                self.check_reference_box([lv[i] for lv in ref_levels], boxes[i])
        ref_boxes = jnp.asarray(ref_boxes, jnp.float32).reshape(b, 4)
        return AtomPairInputs(self._modulation(ref_levels, ref_boxes, None),
                              self._test_features(test_levels, None))

    # ----------------------------------------------------------------- one frame

    def modulation(self, ref_levels: Sequence[jax.Array], ref_box) -> tuple:
        """The target's modulation vectors, one (width,) per level, from the reference
        frame's levels (each (H_l, W_l, C_l)) and its box (4,) xyxy in crop pixels;
        batch norm by its running statistics."""
        ref_levels = self._check_levels("ref_levels", ref_levels)
        if _is_concrete(ref_box):
            self.check_reference_box(ref_levels, ref_box)
        box = jnp.asarray(ref_box, jnp.float32).reshape(1, 4)
        out = self._modulation([lv[None] for lv in ref_levels], box, True)
        return tuple(m[0] for m in out)

    def test_features(self, test_levels: Sequence[jax.Array]) -> tuple:
        """The test frame's levels after the test branch's conv blocks, each (H_l, W_l,
        width) (once per frame, shared by every candidate box); batch norm by its
        running statistics."""
        test_levels = self._check_levels("test_levels", test_levels)
        return tuple(t[0] for t in self._test_features([lv[None] for lv in test_levels],
                                                       True))

    def score(self, modulation: Sequence[jax.Array], test_features: Sequence[jax.Array],
              boxes) -> jax.Array:
        """(N,) energies of xyxy boxes (N, 4) in crop pixels, from one pair's
        `modulation` and `test_features`. Concrete boxes are checked (finite, positive
        size)."""
        if _is_concrete(boxes):
            check_boxes(np.asarray(boxes), name="boxes")
        boxes = jnp.asarray(boxes, jnp.float32)
        hs = []
        for l, (feat, m, fc) in enumerate(zip(test_features, modulation, self.test_fcs)):
            pooled = self._pool(feat, boxes, l, self.pool_sizes[l]) * m
            hs.append(jax.nn.relu(fc(pooled.reshape(boxes.shape[0], -1))))
        return self.out(jnp.concatenate(hs, axis=-1))[:, 0]

    def __call__(self, inputs, boxes, conditions=None) -> jax.Array:
        """f(inputs, boxes, None) -> (N,), the `ebm_jax.energy.boxes` energy of one pair:
        inputs a row of `pair_inputs` (an `AtomPairInputs`), or in eval mode the raw
        (ref_levels, ref_box, test_levels) of one pair."""
        if conditions is not None:
            raise ValueError("conditions must be None: the box head's energy has no "
                             "per-box condition")
        if isinstance(inputs, AtomPairInputs):
            return self.score(inputs.modulation, inputs.test_features, boxes)
        if self.training:
            raise ValueError(
                "inputs: AtomBoxHead in train mode normalises by the batch, which one "
                "pair's (ref_levels, ref_box, test_levels) is not: score a row of "
                "pair_inputs(...) of the whole batch (BoxHeadNet.pair_inputs), or put "
                "the head in eval mode (head.eval())")
        ref_levels, ref_box, test_levels = inputs
        return self.score(self.modulation(ref_levels, ref_box),
                          self.test_features(test_levels), boxes)


__all__ = ["ATOM_POOL_SIZES", "ATOM_REF_POOL_SIZES", "AtomBoxHead", "AtomPairInputs",
           "ConvBlock", "FCBlock"]
