"""The argument checks shared by the tracking backbones' `features(x, levels)`
(`SiamFCAlexNet`, `SiamResNet18`)."""

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
