"""ResNet-18 / ResNet-50 (and ResNet-10 / a ResNet-4 for tests) encoders in Flax NNX for
contrastive learning (MoCo, He et al. 2020; InstDisc, Wu et al. 2018).

    enc = resnet_encoder("resnet18", small_images=True, head="linear", rngs=nnx.Rngs(0))
    z = enc(images)          # (N, 128), L2-normalised

- `small_images=True`: a 3x3 stride-1 stem and no max-pool (CIFAR-sized inputs);
  otherwise the ImageNet 7x7 stride-2 stem with a 3x3 max-pool.
- head "linear" (MoCo v1: fc to 128-d), "mlp" (MoCo v2: fc-ReLU-fc, hidden = feature
  width), or None (the pooled backbone features, e.g. for linear evaluation).
- `width`: channels of the stem and first stage (64 in the published nets; stages
  double it); smaller widths make the CPU profiles affordable.
- `num_splits > 1` uses `SplitBatchNorm` (the single-device shuffle-BN substitute).
- `features(x)` returns the pooled backbone features (512 or 2048), unnormalised.

Batch norm follows `model.train()` / `model.eval()` (NNX's `use_running_average`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
from flax import nnx

from ebm_jax.models.norm import SplitBatchNorm

ARCHS = {
    "resnet4": ("basic", (1,)),  # stem + one block, no downsampling: the tests' net
    "resnet10": ("basic", (1, 1, 1, 1)),
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
}


def _norm_factory(num_splits: int) -> Callable[[int, nnx.Rngs], nnx.Module]:
    if num_splits > 1:
        return lambda c, rngs: SplitBatchNorm(c, num_splits, rngs=rngs)
    return lambda c, rngs: nnx.BatchNorm(c, momentum=0.9, epsilon=1e-5, rngs=rngs)


def _conv(c_in, c_out, k, stride, rngs, dilation: int = 1):
    """k x k convolution, no bias, He-normal kernel, padded by dilation * (k // 2) on
    every side (torchvision's symmetric padding: the output keeps the input's centre)."""
    return nnx.Conv(c_in, c_out, (k, k), strides=(stride, stride),
                    padding=dilation * (k // 2), kernel_dilation=(dilation, dilation),
                    use_bias=False, kernel_init=nnx.initializers.he_normal(), rngs=rngs)


def _projection(c_in, c_out, stride, norm, rngs):
    """1x1 conv + norm on the skip path when the shape changes, else None."""
    if stride == 1 and c_in == c_out:
        return None
    return nnx.Sequential(_conv(c_in, c_out, 1, stride, rngs), norm(c_out, rngs))


class BasicBlock(nnx.Module):
    expansion = 1

    def __init__(self, c_in, width, stride, norm, rngs, dilation: int = 1):
        c_out = width
        self.conv1 = _conv(c_in, width, 3, stride, rngs, dilation)
        self.bn1 = norm(width, rngs)
        self.conv2 = _conv(width, c_out, 3, 1, rngs, dilation)
        self.bn2 = norm(c_out, rngs)
        self.proj = _projection(c_in, c_out, stride, norm, rngs)

    def __call__(self, x):
        y = jax.nn.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        skip = x if self.proj is None else self.proj(x)
        return jax.nn.relu(y + skip)


class Bottleneck(nnx.Module):
    expansion = 4

    def __init__(self, c_in, width, stride, norm, rngs):
        c_out = width * 4
        self.conv1, self.bn1 = _conv(c_in, width, 1, 1, rngs), norm(width, rngs)
        self.conv2, self.bn2 = _conv(width, width, 3, stride, rngs), norm(width, rngs)
        self.conv3, self.bn3 = _conv(width, c_out, 1, 1, rngs), norm(c_out, rngs)
        self.proj = _projection(c_in, c_out, stride, norm, rngs)

    def __call__(self, x):
        y = jax.nn.relu(self.bn1(self.conv1(x)))
        y = jax.nn.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        skip = x if self.proj is None else self.proj(x)
        return jax.nn.relu(y + skip)


class ResNetEncoder(nnx.Module):
    def __init__(self, arch: str = "resnet18", *, in_channels: int = 3,
                 small_images: bool = False, head: str | None = "linear", dim: int = 128,
                 num_splits: int = 1, width: int = 64, rngs: nnx.Rngs):
        if arch not in ARCHS:
            raise ValueError(f"arch must be one of {sorted(ARCHS)}, got {arch!r}")
        if head not in ("linear", "mlp", None):
            raise ValueError(f"head must be 'linear', 'mlp' or None, got {head!r}")
        for name, value in (("in_channels", in_channels), ("dim", dim),
                            ("num_splits", num_splits), ("width", width)):
            if int(value) != value or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        kind, layers = ARCHS[arch]
        block = BasicBlock if kind == "basic" else Bottleneck
        norm = _norm_factory(num_splits)
        self.arch, self.in_channels, self.small_images = arch, in_channels, small_images
        self.width = width
        k, s = (3, 1) if small_images else (7, 2)
        self.stem = _conv(in_channels, width, k, s, rngs)
        self.stem_bn = norm(width, rngs)
        blocks, c = [], width
        for stage, n in enumerate(layers):
            stage_width = width * 2**stage
            for i in range(n):
                stride = 2 if (stage > 0 and i == 0) else 1
                blocks.append(block(c, stage_width, stride, norm, rngs))
                c = stage_width * block.expansion
        self.blocks = nnx.List(blocks)
        self.feature_dim = c
        self.head_kind = head
        if head == "linear":
            self.head = nnx.Linear(c, dim, rngs=rngs)
        elif head == "mlp":
            self.head = nnx.Sequential(nnx.Linear(c, c, rngs=rngs), jax.nn.relu,
                                       nnx.Linear(c, dim, rngs=rngs))
        else:
            self.head = None

    def features(self, x: jax.Array) -> jax.Array:
        x = jnp.asarray(x)
        if x.ndim != 4 or x.shape[-1] != self.in_channels:
            raise ValueError(f"images must have shape (N, H, W, {self.in_channels}), "
                             f"got {x.shape}")
        h = jax.nn.relu(self.stem_bn(self.stem(x)))
        if not self.small_images:
            h = nnx.max_pool(h, (3, 3), strides=(2, 2), padding="SAME")
        for blk in self.blocks:
            h = blk(h)
        return jnp.mean(h, axis=(1, 2))

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.features(x)
        if self.head is None:
            return h
        z = self.head(h)
        return z / jnp.maximum(jnp.linalg.norm(z, axis=-1, keepdims=True), 1e-12)


resnet_encoder = ResNetEncoder
resnet18 = partial(ResNetEncoder, "resnet18")
resnet50 = partial(ResNetEncoder, "resnet50")
