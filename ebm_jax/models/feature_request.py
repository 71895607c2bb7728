"""What the tracking backbones (`SiamFCAlexNet`, `SiamResNet18`) share: the argument
checks of their `features(x, levels)`, and the receptive field of a stack of layers."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import jax
import jax.numpy as jnp


def check_feature_request(x, levels: Iterable, check_level: Callable[[object], int],
                          min_side: int) -> tuple[jax.Array, tuple[int, ...]]:
    """(images as an array, levels as ints) after refusing levels that are not
    increasing valid indices (`check_level` names the allowed range), images not
    (N, H, W, 3), or images with a side under `min_side` pixels."""
    levels = tuple(check_level(lv) for lv in levels)
    if not levels or list(levels) != sorted(set(levels)):
        raise ValueError(f"levels must be increasing level indices, got {levels}")
    x = jnp.asarray(x)
    if x.ndim != 4 or x.shape[-1] != 3:
        raise ValueError(f"images must have shape (N, H, W, 3), got {x.shape}")
    if min(x.shape[1:3]) < min_side:
        raise ValueError(f"images must be at least {min_side} x {min_side} pixels, got "
                         f"{x.shape[1:3]}")
    return x, levels


def receptive_field(layers) -> int:
    """Side in input pixels of the region one output cell sees, through `layers` of
    (kernel, stride, ..., pool), a 3/2 max-pool after those whose last entry is true
    (the longest path: rf += (kernel - 1) * jump, jump *= stride)."""
    rf, jump = 1, 1
    for kernel, stride, *_, pool in layers:
        rf, jump = rf + (kernel - 1) * jump, jump * stride
        if pool:
            rf, jump = rf + 2 * jump, jump * 2
    return rf
