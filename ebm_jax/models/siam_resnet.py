"""ResNet-18 as a tracking backbone in Flax NNX: the backbone SoCL-Siam and SoCL-CF use
in the paper (Wu & Chan, "Learning Tracking Representations from Single Point
Annotations", sec. 4.1: "M is ResNet-18 pre-trained on ImageNet"; SoCL-CF takes conv1
and layer3), with torchvision's layer names and padding so that its ImageNet weights
load unchanged.

    net = SiamResNet18(width=1.0, rngs=nnx.Rngs(0))
    fz = net(z)        # (N, 127, 127, 3) raw 0-255 pixels -> (N, 16, 16, 256)
    fx = net(x)        # (N, 255, 255, 3)                  -> (N, 32, 32, 256)
    c1, l3 = net.features(x, (0, 3))     # conv1 (stride 2) and layer3 (stride 8)

Layers (torchvision's ResNet-18 up to layer3): conv1 7x7/2 (pad 3), BN, ReLU, max-pool
3/2 (pad 1); layer1: two basic blocks of 64; layer2: two of 128, the first with stride 2;
layer3: two of 256 with **stride 1 and dilation 2** in place of torchvision's stride 2
(SiamRPN++, Li et al. 2019, sec. 3.2: unit stride and dilated convolutions in the
last blocks, so that the correlated features keep stride 8 and the pretrained kernels
keep their receptive field; SiamDW, Zhang & Peng 2019, removes the stride and crops the
padding instead, which would change layer3's weights' context). layer4 and the
classifier are left out. Then `adjust`, a 1x1 convolution with bias to `out_channels`
(SiamRPN++'s neck; no BN, no ReLU, as SiamFC's conv5) is the embedding SiamFC
correlates: a 127 exemplar gives 16 x 16 cells, a 255 search crop 32 x 32, so the
response is 17 x 17 as with SiamFC's AlexNet.

Inputs are raw 0-255 RGB pixels, normalised inside with ImageNet's mean and std
(torchvision's convention for its weights). Every convolution is padded symmetrically,
so output cell i of a level of stride s is centred on input pixel s * i (offset 0):
`level_geometry`. `width` scales every channel count (round(width * c), at least 8) for
CPU runs. Batch norm: torchvision's eps 1e-5 and momentum 0.1 (Flax momentum 0.9); it
follows `model.train()` / `model.eval()`. `num_splits > 1` normalises each of that many
groups of the batch by itself while training (`SplitBatchNorm`, for MoCo's shuffled
batch norm on one device); its variables are the same, so its weights load into a
`num_splits=1` model.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from ebm_jax.models.feature_request import check_feature_request, receptive_field

from ebm_jax.models.resnet import BasicBlock, _conv, _norm_factory

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
BASE_CHANNELS = (64, 64, 128, 256)  # conv1, layer1, layer2, layer3
LEVEL_NAMES = ("conv1", "layer1", "layer2", "layer3", "adjust")
LEVEL_STRIDES = (2, 4, 8, 8, 8)
# the longest path to layer3, as (kernel, stride, pool after): conv1, the max-pool, four
# 3x3 convolutions of layer1, four of layer2 (the first strided), four of layer3 with
# dilation 2 (an effective kernel of 5)
RECEPTIVE_PATH = ((7, 2, False), (3, 2, False), *((3, 1, False),) * 4, (3, 2, False),
                  *((3, 1, False),) * 3, *((5, 1, False),) * 4)
# the two levels of the correlation filter (the paper's SoCL-CF: conv1 and layer3)
DCF_LEVELS = (0, 3)


def resnet_channels(width: float) -> tuple[int, ...]:
    """Channel counts of conv1, layer1, layer2 and layer3 at `width`."""
    w = float(width)
    if not (math.isfinite(w) and w > 0):
        raise ValueError(f"width must be a finite number > 0, got {width!r}")
    return tuple(max(8, round(w * c)) for c in BASE_CHANNELS)


def resnet_output_size(size: int) -> int:
    """Side of layer3's (and the embedding's) grid for a size x size input: conv1,
    the max-pool and layer2 each halve it, rounding up (padded): 127 -> 16, 255 -> 32."""
    return _halved(int(size), 3)


def _halved(size: int, times: int) -> int:
    """The side after `times` padded stride-2 layers (each rounds up)."""
    for _ in range(times):
        size = (size - 1) // 2 + 1
    return size


def resnet_flops(width: float, size: int, out_channels: int | None = None) -> float:
    """FLOPs (2 x multiply-adds) of the convolutions of one forward pass on one
    size x size image (the 1x1 projections and the adjust layer included; batch norm,
    ReLU and pooling are not counted)."""
    c1, c_l1, c_l2, c_l3 = resnet_channels(width)
    out = c_l3 if out_channels is None else int(out_channels)
    s = int(size)
    if s < 16:
        raise ValueError(f"size must be an integer >= 16, got {size!r}")
    s1, s2, s3 = (_halved(s, k) for k in (1, 2, 3))  # conv1, the max-pool, layer2
    macs = (s1 * s1 * 49 * 3 * c1                                    # conv1
            + s2 * s2 * 9 * (c1 * c_l1 + 3 * c_l1 * c_l1)             # layer1
            + (c1 != c_l1) * s2 * s2 * c1 * c_l1
            + s3 * s3 * (9 * (c_l1 * c_l2 + 3 * c_l2 * c_l2) + c_l1 * c_l2)  # layer2
            + s3 * s3 * (9 * (c_l2 * c_l3 + 3 * c_l3 * c_l3) + c_l2 * c_l3)  # layer3
            + s3 * s3 * c_l3 * out)                                   # adjust
    return 2.0 * macs


def _check_level(level) -> int:
    if isinstance(level, bool) or int(level) != level or not 0 <= int(level) < len(
            LEVEL_NAMES):
        raise ValueError(f"levels must be indices in [0, {len(LEVEL_NAMES) - 1}] "
                         f"({', '.join(LEVEL_NAMES)}), got {level!r}")
    return int(level)


class SiamResNet18(nnx.Module):
    """ResNet-18 to layer3 (dilated) plus a 1x1 adjust layer; see the module docstring."""

    # the levels the trackers take by default: the box head's (layer2 and layer3, as in
    # IoU-Net / ATOM) and the correlation filter's (conv1 and layer3, the paper's SoCL-CF)
    box_head_levels = (2, 3)
    dcf_levels = DCF_LEVELS
    level_names = LEVEL_NAMES
    min_input_size = 16

    def __init__(self, *, width: float = 1.0, out_channels: int | None = None,
                 num_splits: int = 1, rngs: nnx.Rngs):
        self.width = float(width)
        if isinstance(num_splits, bool) or int(num_splits) != num_splits or num_splits < 1:
            raise ValueError(f"num_splits must be an integer >= 1, got {num_splits!r}")
        _batch_norm = _norm_factory(int(num_splits))  # > 1: MoCo's shuffled-BN groups
        c1, c_l1, c_l2, c_l3 = self.channels = resnet_channels(width)
        out = c_l3 if out_channels is None else out_channels
        if isinstance(out, bool) or int(out) != out or out < 1:
            raise ValueError(f"out_channels must be an integer >= 1, got {out_channels!r}")
        self.conv1 = _conv(3, c1, 7, 2, rngs)
        self.bn1 = _batch_norm(c1, rngs)
        self.layer1 = nnx.List([BasicBlock(c1, c_l1, 1, _batch_norm, rngs),
                                BasicBlock(c_l1, c_l1, 1, _batch_norm, rngs)])
        self.layer2 = nnx.List([BasicBlock(c_l1, c_l2, 2, _batch_norm, rngs),
                                BasicBlock(c_l2, c_l2, 1, _batch_norm, rngs)])
        self.layer3 = nnx.List([BasicBlock(c_l2, c_l3, 1, _batch_norm, rngs, dilation=2),
                                BasicBlock(c_l3, c_l3, 1, _batch_norm, rngs, dilation=2)])
        self.adjust = nnx.Conv(c_l3, int(out), (1, 1), use_bias=True,
                               kernel_init=nnx.initializers.xavier_uniform(), rngs=rngs)
        self.feature_dim = int(out)

    def __call__(self, x: jax.Array) -> jax.Array:
        """The embedding (N, h, w, out_channels) of raw 0-255 images (N, H, W, 3)."""
        return self.features(x, (len(LEVEL_NAMES) - 1,))[0]

    def features(self, x: jax.Array, levels=DCF_LEVELS) -> tuple[jax.Array, ...]:
        """The outputs of `levels` (0 conv1 after its BN and ReLU, before the max-pool;
        1-3 layer1-3; 4 adjust), increasing, from one pass that stops at the last."""
        x, levels = check_feature_request(x, levels, _check_level, self.min_input_size)
        mean = jnp.asarray(IMAGENET_MEAN, jnp.float32) * 255.0
        std = jnp.asarray(IMAGENET_STD, jnp.float32) * 255.0
        h = (x.astype(jnp.float32) - mean) / std
        h = jax.nn.relu(self.bn1(self.conv1(h)))
        out = [h] if 0 in levels else []
        if levels[-1] == 0:
            return tuple(out)
        h = nnx.max_pool(h, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        for level, blocks in ((1, self.layer1), (2, self.layer2), (3, self.layer3)):
            for block in blocks:
                h = block(h)
            if level in levels:
                out.append(h)
            if level == levels[-1]:
                return tuple(out)
        out.append(self.adjust(h))
        return tuple(out)

    def level_channels(self, levels=DCF_LEVELS) -> tuple[int, ...]:
        """The channel counts of the outputs of `features(x, levels)`."""
        return tuple((*self.channels, self.feature_dim)[_check_level(lv)] for lv in levels)

    def level_geometry(self, levels=DCF_LEVELS) -> tuple[tuple[int, float], ...]:
        """(stride, offset) of each of `features(x, levels)`: cell i is centred on input
        pixel stride * i (symmetric padding: offset 0)."""
        return tuple((LEVEL_STRIDES[_check_level(lv)], 0.0) for lv in levels)

    @staticmethod
    def embedding_grid(size: int) -> tuple[int, int, float]:
        """(g, stride, offset) of the embedding (`__call__`) of a size x size input: a
        g x g grid whose cell i is centred on input pixel offset + stride * i."""
        return resnet_output_size(size), LEVEL_STRIDES[-1], 0.0

    @staticmethod
    def receptive_field() -> int:
        """Side in input pixels of the region one embedding cell sees: 227 (layer3's
        dilated blocks; the 1x1 adjust adds nothing)."""
        return receptive_field(RECEPTIVE_PATH)


__all__ = ["DCF_LEVELS", "IMAGENET_MEAN", "IMAGENET_STD", "LEVEL_NAMES", "SiamResNet18",
           "resnet_channels", "resnet_flops", "resnet_output_size"]
