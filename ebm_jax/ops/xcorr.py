"""Cross-correlation of template features over search features, SiamFC's similarity
function f(z, x) = phi(z) * phi(x) (Bertinetto et al. 2016, sec. 2.2, eq. 2; the bias b
and the 0.001 output scale are the caller's).

    r = xcorr(fz, fx)                 # (B, hz, wz, C), (B, hx, wx, C) -> (B, ho, wo)
    r = xcorr_broadcast(fz[0], fx)    # (hz, wz, C), (S, hx, wx, C)    -> (S, ho, wo)

`xcorr` correlates each template with its own search map. The PyTorch port does it as
one grouped convolution (`_fast_xcorr`: the batch folded into channels,
feature_group_count = B); XLA's CPU backend runs that convolution's gradient about
100x slower than the same sum written as hz * wz shifted products
(sum over (u, v) of x[:, u:u+ho, v:v+wo, :] . z[:, u, v, :]), which is what it computes
here; `xcorr_grouped` keeps the grouped-convolution form (equal up to rounding, tested).
Outputs are "valid": ho = hx - hz + 1, wo = wx - wz + 1.
Cross-correlation, not convolution: the template is not flipped.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

_DIMS = ("NHWC", "HWIO", "NHWC")


def _check(z: jax.Array, x: jax.Array, z_rank: int) -> None:
    if z.ndim != z_rank:
        raise ValueError(f"z must have rank {z_rank}, got shape {z.shape}")
    if x.ndim != 4:
        raise ValueError(f"x must have shape (N, hx, wx, C), got {x.shape}")
    hz, wz, c = z.shape[-3:]
    if x.shape[-1] != c:
        raise ValueError(f"z and x must have the same channels, got z {z.shape} and "
                         f"x {x.shape}")
    if x.shape[1] < hz or x.shape[2] < wz:
        raise ValueError(f"x's spatial size {x.shape[1:3]} must be at least z's "
                         f"{(hz, wz)}")


def _batched_pair(z, x) -> tuple[jax.Array, jax.Array]:
    z, x = jnp.asarray(z), jnp.asarray(x)
    _check(z, x, 4)
    if z.shape[0] != x.shape[0]:
        raise ValueError(f"z and x must have the same batch size, got z {z.shape} and "
                         f"x {x.shape}")
    return z, x


def xcorr(z: jax.Array, x: jax.Array) -> jax.Array:
    """Batched cross-correlation: out[b, i, j] = sum_{u, v, c} z[b, u, v, c] *
    x[b, i + u, j + v, c], for z (B, hz, wz, C) and x (B, hx, wx, C) (SiamFC, sec. 2.2,
    eq. 2), as hz * wz shifted products (see the module docstring)."""
    z, x = _batched_pair(z, x)
    _, hz, wz, _ = z.shape
    ho, wo = x.shape[1] - hz + 1, x.shape[2] - wz + 1
    out = None
    for u in range(hz):
        for v in range(wz):
            term = jnp.einsum("bijc,bc->bij", x[:, u:u + ho, v:v + wo], z[:, u, v])
            out = term if out is None else out + term
    return out


def xcorr_grouped(z: jax.Array, x: jax.Array) -> jax.Array:
    """Batched cross-correlation: out[b, i, j] = sum_{u, v, c} z[b, u, v, c] *
    x[b, i + u, j + v, c], for z (B, hz, wz, C) and x (B, hx, wx, C); one grouped
    convolution with feature_group_count = B (SiamFC, sec. 2.2; the port's
    `_fast_xcorr`)."""
    z, x = _batched_pair(z, x)
    b, hx, wx, c = x.shape
    # channels ordered (batch, channel): group g sees x[g]'s C channels
    lhs = jnp.transpose(x, (1, 2, 0, 3)).reshape(1, hx, wx, b * c)
    rhs = jnp.transpose(z, (1, 2, 3, 0))  # (hz, wz, C, B): in = C per group, out = B
    out = jax.lax.conv_general_dilated(lhs, rhs, (1, 1), "VALID", dimension_numbers=_DIMS,
                                       feature_group_count=b)
    return jnp.transpose(out[0], (2, 0, 1))


def xcorr_broadcast(z: jax.Array, x: jax.Array) -> jax.Array:
    """One template z (hz, wz, C) over S search maps x (S, hx, wx, C) -> (S, ho, wo):
    the tracker's multi-scale search (SiamFC, sec. 2.2 and 2.4)."""
    z, x = jnp.asarray(z), jnp.asarray(x)
    _check(z, x, 3)
    out = jax.lax.conv_general_dilated(x, z[..., None], (1, 1), "VALID",
                                       dimension_numbers=_DIMS)
    return out[..., 0]
