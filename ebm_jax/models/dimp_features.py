"""DiMP's classification features (Bhat et al. 2019, "Learning Discriminative Model
Prediction for Tracking", sec. 3.4 "Architecture details"), in Flax NNX.

    net = DiMPFeatures(in_channels=64, channels=32, rngs=nnx.Rngs(0))
    x = net(level)                 # (N, H, W, 32): the target model's features
    z = net.filter_features(x)     # what the initializer pools (sec. 3.3)

On one level of the backbone: conv 3x3 -> ReLU -> conv 3x3 to `channels`, then an
instance L2 normalisation (each sample scaled to sqrt(H W C) times `norm_scale` in L2
norm; pytracking's InstanceL2Norm), so that the filter's scale, and with it the
optimizer's regularisation, does not depend on the backbone's. The initializer's own
conv 3x3 (`filter_features`) maps those features to the space the initial filter is
pooled in (pytracking's FilterInitializerLinear). DiMP-50 uses 512 channels on
ResNet-50's layer3; the widths here are arguments.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx


class DiMPFeatures(nnx.Module):
    def __init__(self, in_channels: int, channels: int = 32, *, filter_size: int = 4,
                 rngs: nnx.Rngs):
        for name, v in (("in_channels", in_channels), ("channels", channels),
                        ("filter_size", filter_size)):
            if isinstance(v, bool) or int(v) != v or int(v) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        self.conv1 = nnx.Conv(in_channels, channels, (3, 3), padding="SAME", rngs=rngs)
        self.conv2 = nnx.Conv(channels, channels, (3, 3), padding="SAME", rngs=rngs)
        self.init_conv = nnx.Conv(channels, channels, (3, 3), padding="SAME", rngs=rngs)
        # pytracking's norm scale for the classifier: sqrt(1 / (C fh fw))
        self.norm_scale = math.sqrt(1.0 / (channels * filter_size * filter_size))

    def __call__(self, x: jax.Array) -> jax.Array:
        x = nnx.relu(self.conv1(x))
        return instance_l2_norm(self.conv2(x), self.norm_scale)

    def filter_features(self, x: jax.Array) -> jax.Array:
        return self.init_conv(x)


def instance_l2_norm(x: jax.Array, scale: float, eps: float = 1e-5) -> jax.Array:
    """Each sample (..., H, W, C) scaled so that sum(x^2) = scale^2 H W C."""
    n = x.shape[-3] * x.shape[-2] * x.shape[-1]
    ss = jnp.sum(x * x, axis=(-3, -2, -1), keepdims=True)
    return x * (scale * jnp.sqrt(n / (ss + eps)))
