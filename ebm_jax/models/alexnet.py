"""The AlexNet-like backbone of SiamFC in Flax NNX (Bertinetto et al. 2016, "Fully-
Convolutional Siamese Networks for Object Tracking", sec. 2.4 and Table 1; the layer
settings of the widely used PyTorch port, `AlexNetV1`).

    net = SiamFCAlexNet(width=1.0, rngs=nnx.Rngs(0))
    fz = net(z)        # (N, 127, 127, 3) raw 0-255 pixels -> (N, 6, 6, 256)
    fx = net(x)        # (N, 255, 255, 3)                  -> (N, 22, 22, 256)
    c3, c5 = net.features(x, BOX_HEAD_LEVELS)   # conv3 (N, 26, 26, 384) and conv5

`features` returns the outputs of several convolutions in one pass (conv3 after its
batch norm and ReLU, conv5 as `__call__` gives it), for the tracker's box head; both are
stride 8, and `level_geometry` says where each output cell sits in the input.

Layers (all convolutions unpadded, "VALID"):
conv 11x11/2 96, BN, ReLU, max-pool 3/2; conv 5x5 256 (groups 2), BN, ReLU, max-pool
3/2; conv 3x3 384, BN, ReLU; conv 3x3 384 (groups 2), BN, ReLU; conv 3x3 256 (groups 2),
no BN and no ReLU. Total stride 8. Batch norm: eps 1e-6, PyTorch momentum 0.05 (Flax
momentum 0.95); it follows `model.train()` / `model.eval()`. Convolutions: Xavier-uniform
kernels (PyTorch's fan convention for grouped kernels: fan_in = in/groups * k * k,
fan_out = out * k * k, which is Flax's for an (k, k, in/groups, out) kernel), zero bias.

`width` scales every channel count: round(width * c), rounded to an even number so
that the two groups split evenly.

A grouped convolution keeps one kernel (k, k, in/groups, out), output channels ordered
group by group (PyTorch's and XLA's layout), but runs as one convolution per group,
concatenated: the same numbers as XLA's `feature_group_count`, which XLA's CPU backend
runs 2-3x slower forward and 3-5x slower backward (measured on 2 cores).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from ebm_jax.models.feature_request import check_feature_request, receptive_field

BASE_CHANNELS = (96, 256, 384, 384, 256)
# (kernel, stride, groups, batch norm + ReLU, max-pool 3/2 after) of the five convolutions
LAYERS = (
    (11, 2, 1, True, True),
    (5, 1, 2, True, True),
    (3, 1, 1, True, False),
    (3, 1, 2, True, False),
    (3, 1, 2, False, False),
)
TOTAL_STRIDE = 8
LEVEL_NAMES = ("conv1", "conv2", "conv3", "conv4", "conv5")
# the two levels of the box head (IoU-Net / ATOM's layer2 + layer3 in a ResNet)
BOX_HEAD_LEVELS = (2, 4)
BN_EPSILON = 1e-6
BN_MOMENTUM = 0.95  # PyTorch momentum 0.05


def alexnet_channels(width: float) -> tuple[int, ...]:
    """Channel counts of the five convolutions at `width`: round(width * c) rounded to an
    even number (>= 2), so that the grouped convolutions split in two."""
    w = float(width)
    if not (math.isfinite(w) and w > 0):
        raise ValueError(f"width must be a finite number > 0, got {width!r}")
    return tuple(max(2, 2 * round(w * c / 2)) for c in BASE_CHANNELS)


def alexnet_output_size(size: int) -> int:
    """Spatial output size of the backbone for a size x size input (VALID convolutions,
    floor-mode pooling): 127 -> 6, 255 -> 22."""
    s = int(size)
    for kernel, stride, _, _, pool in LAYERS:
        s = (s - kernel) // stride + 1
        if pool:
            s = (s - 3) // 2 + 1
    return s


def level_geometry(level: int) -> tuple[int, float]:
    """(stride, offset) of the output of convolution `level` (0 = conv1 .. 4 = conv5,
    after its pooling if any): output cell i covers the receptive field centred at input
    pixel offset + stride * i (0-indexed pixel centres; VALID convolutions and pools).
    conv3: (8, 27.0), conv5: (8, 43.0), so on a 255 crop both maps are centred on pixel
    127."""
    level = _check_level(level)
    stride, offset = 1, 0.0
    for kernel, conv_stride, _, _, pool in LAYERS[:level + 1]:
        offset += stride * (kernel - 1) / 2
        stride *= conv_stride
        if pool:
            offset += stride * (3 - 1) / 2
            stride *= 2
    return stride, offset


def _check_level(level) -> int:
    if isinstance(level, bool) or int(level) != level or not 0 <= int(level) < len(LAYERS):
        raise ValueError(f"levels must be convolution indices in [0, {len(LAYERS) - 1}] "
                         f"({', '.join(LEVEL_NAMES)}), got {level!r}")
    return int(level)


def alexnet_flops(width: float, size: int) -> float:
    """FLOPs (2 x multiply-adds) of the five convolutions of one forward pass on one
    size x size image; batch norm, ReLU and pooling (under 1% here) are not counted."""
    channels = alexnet_channels(width)
    s, c_in, total = int(size), 3, 0.0
    if s < 1:
        raise ValueError(f"size must be an integer >= 1, got {size!r}")
    for (kernel, stride, groups, _, pool), c_out in zip(LAYERS, channels):
        s = (s - kernel) // stride + 1
        if s < 1:
            raise ValueError(f"size {size} is too small for the backbone (needs >= 87)")
        total += 2.0 * s * s * kernel * kernel * (c_in // groups) * c_out
        if pool:
            s = (s - 3) // 2 + 1
        c_in = c_out
    return total


class GroupedConv(nnx.Module):
    """A VALID convolution with `groups` groups: kernel (k, k, in/groups, out) with
    Xavier-uniform init, zero bias; computed per group (see the module docstring)."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, groups: int, *,
                 rngs: nnx.Rngs):
        if c_in % groups or c_out % groups:
            raise ValueError(f"channels {c_in} -> {c_out} must divide into {groups} groups")
        self.stride, self.feature_group_count = int(stride), int(groups)
        init = nnx.initializers.xavier_uniform()
        self.kernel = nnx.Param(init(rngs.params(), (kernel, kernel, c_in // groups, c_out)))
        self.bias = nnx.Param(jnp.zeros((c_out,)))

    def __call__(self, x: jax.Array) -> jax.Array:
        kernel, g = self.kernel[...], self.feature_group_count
        c_in, c_out = x.shape[-1] // g, kernel.shape[-1] // g
        outs = [jax.lax.conv_general_dilated(
            x[..., i * c_in:(i + 1) * c_in], kernel[..., i * c_out:(i + 1) * c_out],
            (self.stride, self.stride), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
            for i in range(g)]
        return (outs[0] if g == 1 else jnp.concatenate(outs, axis=-1)) + self.bias[...]


class SiamFCAlexNet(nnx.Module):
    """SiamFC's AlexNet backbone; see the module docstring."""

    # the levels the trackers take by default: the box head's (conv3, conv5) and the
    # correlation filter's (conv1, conv5; the paper's ResNet-18 conv1 and layer3)
    box_head_levels = BOX_HEAD_LEVELS
    dcf_levels = (0, 4)
    level_names = LEVEL_NAMES
    min_input_size = 87

    def __init__(self, *, width: float = 1.0, rngs: nnx.Rngs):
        self.width = float(width)
        self.channels = alexnet_channels(width)
        convs, norms = [], []
        c_in = 3
        for (kernel, stride, groups, bn, _), c_out in zip(LAYERS, self.channels):
            convs.append(GroupedConv(c_in, c_out, kernel, stride, groups, rngs=rngs))
            norms.append(nnx.BatchNorm(c_out, momentum=BN_MOMENTUM, epsilon=BN_EPSILON,
                                       rngs=rngs) if bn else None)
            c_in = c_out
        self.convs = nnx.List(convs)
        self.norms = nnx.List(norms)
        self.feature_dim = c_in

    def __call__(self, x: jax.Array) -> jax.Array:
        """conv5's features (N, h, w, C) of raw 0-255 images (N, H, W, 3)."""
        return self.features(x, (len(LAYERS) - 1,))[0]

    def features(self, x: jax.Array, levels=BOX_HEAD_LEVELS) -> tuple[jax.Array, ...]:
        """The outputs of the convolutions `levels` (indices 0 = conv1 .. 4 = conv5,
        increasing), each after its batch norm, ReLU and pooling where the layer has
        them, from one pass that stops at the last level asked for."""
        x, levels = check_feature_request(x, levels, _check_level, self.min_input_size)
        h = x.astype(jnp.float32)
        out = []
        for i, (conv, norm, (_, _, _, _, pool)) in enumerate(
                zip(self.convs, self.norms, LAYERS)):
            if i > levels[-1]:
                break
            h = conv(h)
            if norm is not None:
                h = jax.nn.relu(norm(h))
            if pool:
                h = nnx.max_pool(h, (3, 3), strides=(2, 2), padding="VALID")
            if i in levels:
                out.append(h)
        return tuple(out)

    def level_channels(self, levels=BOX_HEAD_LEVELS) -> tuple[int, ...]:
        """The channel counts of the outputs of `features(x, levels)`."""
        return tuple(self.channels[_check_level(lv)] for lv in levels)

    def level_geometry(self, levels=BOX_HEAD_LEVELS) -> tuple[tuple[int, float], ...]:
        """(stride, offset) of each of `features(x, levels)` (`level_geometry`)."""
        return tuple(level_geometry(lv) for lv in levels)

    @staticmethod
    def embedding_grid(size: int) -> tuple[int, int, float]:
        """(g, stride, offset) of the embedding (`__call__`) of a size x size input: a
        g x g grid whose cell i is centred on input pixel offset + stride * i."""
        stride, offset = level_geometry(len(LAYERS) - 1)
        return alexnet_output_size(size), stride, offset

    @staticmethod
    def receptive_field() -> int:
        """Side in input pixels of the region one embedding cell sees: 87 (conv5)."""
        return receptive_field(LAYERS)
