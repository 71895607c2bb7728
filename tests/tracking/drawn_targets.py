"""A drawn textured target and a fixed two-level 'backbone' of pooled pixels, shared by
the correlation filter and pseudo-box tests."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


class PixelPyramid(nnx.Module):
    """A fixed two-level 'backbone': the pixels minus 128 averaged over 4 x 4 and 8 x 8
    blocks (strides 4 and 8), so that the tracker's geometry is tested apart from any
    learned features."""

    dcf_levels = (0, 4)  # the filter's default levels (`DCFSettings.for_backbone`)

    def __init__(self):
        self.calls = nnx.Variable(jnp.zeros((), jnp.int32))  # a state to carry

    def features(self, x, levels):
        x = jnp.asarray(x, jnp.float32) - 128.0
        out = []
        for level in levels:
            s = 4 if level == 0 else 8
            out.append(jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, s, s, 1),
                                             (1, s, s, 1), "VALID") / s**2)
        return tuple(out)

    def level_geometry(self, levels):
        return tuple((4 if level == 0 else 8, 1.5 if level == 0 else 3.5)
                     for level in levels)


RNG = np.random.default_rng(0)
TEXTURE = RNG.integers(0, 256, (24, 30, 3)).astype(np.uint8)
BACKGROUND = RNG.integers(90, 131, (150, 200, 3)).astype(np.uint8)


def drawn_frame(x, y, shape=(150, 200)):
    """The background with TEXTURE pasted at the 1-indexed top-left (x, y), clipped."""
    frame = BACKGROUND[:shape[0], :shape[1]].copy()
    h, w = TEXTURE.shape[:2]
    y0, x0 = y - 1, x - 1
    top, left = max(y0, 0), max(x0, 0)
    bottom, right = min(y0 + h, shape[0]), min(x0 + w, shape[1])
    if bottom > top and right > left:
        frame[top:bottom, left:right] = TEXTURE[top - y0:bottom - y0, left - x0:right - x0]
    return frame


def drawn_sequence(n=24):
    xs = [int(40 + 3 * t) for t in range(n)]
    ys = [int(round(50 + 1.5 * t + 4 * np.sin(t / 3))) for t in range(n)]
    return [drawn_frame(x, y) for x, y in zip(xs, ys)], np.array(
        [[x, y, 30, 24] for x, y in zip(xs, ys)], np.float64)
