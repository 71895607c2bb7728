"""The tracking backbones by name, for configs (`--config.backbone`):

    model = tracking_backbone("resnet18", width=0.25, rngs=nnx.Rngs(0))
    tracking_backbone_flops("resnet18", 0.25, 255)   # FLOPs of one 255 x 255 image

    "alexnet"   SiamFC's AlexNet (`SiamFCAlexNet`): unpadded, total stride 8, the
                backbone SiamFC and Box-Siam train from scratch (SiamFC, sec. 2.4)
    "resnet18"  ResNet-18 to a dilated layer3 plus a 1x1 adjust layer (`SiamResNet18`):
                the backbone SoCL-Siam and SoCL-CF fine-tune from ImageNet in the paper
                (Wu & Chan, sec. 4.1); stride 8, padded

Both take raw 0-255 RGB images and offer `features(x, levels)`, `level_geometry`,
`level_channels`, `embedding_grid(size)` and the default levels of the box head
(`box_head_levels`) and of the correlation filter (`dcf_levels`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from ebm_jax.models.alexnet import SiamFCAlexNet, alexnet_flops
from ebm_jax.models.siam_resnet import SiamResNet18, resnet_flops

BACKBONES = ("alexnet", "resnet18")


def check_backbone(name: str) -> str:
    if name not in BACKBONES:
        raise ValueError(f"backbone must be one of {', '.join(BACKBONES)}, got {name!r}")
    return name


def detached_copy(module: nnx.Module) -> nnx.Module:
    """A copy of `module` that shares no array with it: a branch built on a trained
    backbone (the box head's `BoxHeadNet`, DiMP's `DiMPNet`) holds its own, so a train
    step that donates the branch's state leaves the backbone that other arms use intact."""
    graphdef, state = nnx.split(module)
    return nnx.merge(graphdef, jax.tree.map(lambda x: jnp.array(x, copy=True), state))


def backbone_class(name: str) -> type:
    """The module class of backbone `name`."""
    return {"alexnet": SiamFCAlexNet, "resnet18": SiamResNet18}[check_backbone(name)]


def tracking_backbone(name: str, *, width: float, rngs: nnx.Rngs) -> nnx.Module:
    """A freshly initialised backbone `name` of channel multiplier `width`."""
    return backbone_class(name)(width=width, rngs=rngs)


def backbone_title(name: str, pretrained: bool = False, init: str = "random") -> str:
    """The backbone's name for titles: "AlexNet", "ResNet-18", "ResNet-18 (ImageNet)"
    (from a pretrained file), "ResNet-18 (MoCo)" (`init="moco"`)."""
    title = {"alexnet": "AlexNet", "resnet18": "ResNet-18"}[check_backbone(name)]
    if pretrained:
        return f"{title} (ImageNet)"
    return f"{title} (MoCo)" if init == "moco" else title


def tracking_backbone_flops(name: str, width: float, size: int) -> float:
    """FLOPs (2 x multiply-adds) of the convolutions of backbone `name` on one
    size x size image."""
    flops = {"alexnet": alexnet_flops, "resnet18": resnet_flops}[check_backbone(name)]
    return flops(width, size)


class PooledEncoder(nnx.Module):
    """A tracking backbone as a MoCo encoder (He et al. 2020, sec. 3.3; v2's MLP head,
    Chen et al. 2020): images in [0, 1] (N, H, W, 3) -> the backbone's embedding of the
    0-255 pixels, averaged over its cells, -> fc, ReLU, fc to `dim` -> unit rows. The
    backbone (`self.backbone`) is what a tracker then takes; the head is left behind.
    `num_splits` is passed to a backbone that takes it (MoCo's shuffled batch norm)."""

    def __init__(self, backbone: str, *, width: float, dim: int = 128, num_splits: int = 1,
                 rngs: nnx.Rngs):
        cls = backbone_class(backbone)
        kwargs = {"num_splits": num_splits} if num_splits != 1 else {}
        self.backbone = cls(width=width, rngs=rngs, **kwargs)
        c = self.backbone.feature_dim
        self.head = nnx.Sequential(nnx.Linear(c, c, rngs=rngs), jax.nn.relu,
                                   nnx.Linear(c, int(dim), rngs=rngs))

    def features(self, x: jax.Array) -> jax.Array:
        """(N, C): the backbone's embedding of images in [0, 1], averaged over cells."""
        return jnp.mean(self.backbone(jnp.asarray(x, jnp.float32) * 255.0), axis=(1, 2))

    def __call__(self, x: jax.Array) -> jax.Array:
        z = self.head(self.features(x))
        return z / jnp.maximum(jnp.linalg.norm(z, axis=-1, keepdims=True), 1e-12)


__all__ = ["BACKBONES", "PooledEncoder", "backbone_class", "backbone_title", "check_backbone",
           "tracking_backbone", "tracking_backbone_flops"]
