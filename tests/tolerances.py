"""Float32 tolerances for the tests, derived from the arithmetic rather than from what
one CPU printed: XLA picks other kernels (and so other summation orders) on another CPU
(AVX-512 or not), another batch shape or another device count.

A sum of n float32 terms, in any order, is within (n - 1) u sum|terms| of the exact sum
of the rounded terms (u = eps32 / 2; Higham, Accuracy and Stability of Numerical
Algorithms, 2002, eq. 4.4); a dot product or a convolution output with n products adds
u |term| per product, so it is within n u sum|products|. Rounding the terms themselves
costs u each. So `float32_sum_atol` = n eps32 sum|terms| bounds both

- one float32 sum against its exact (closed-form) value, and
- two float32 evaluations of the same sum against each other (two orders, two kernels),

in the worst case. Pairwise and vectorised sums do far better; the bound holds for any.
Through a small network the bound is carried layer by layer, to first order (a running
error analysis: `toy_mlp_atol`, the tiny encoder of tests/eval/test_linear_probe.py).
Through deep networks with normalisation layers no such bound is useful: there the
tests compare bit for bit where the program is the same, and check the arithmetic on a
one-layer stand-in (tests/detection/test_features.py).

Where exact equality is the point (the same jitted program on the same inputs in the
same process, a resumed run against an uninterrupted one with the same shapes, integer
results), the tests compare bit for bit and say so instead.
"""

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)  # 2**-23, the spacing of float32 at 1


def float32_sum_atol(n, abs_sum):
    """Worst-case difference between float32 evaluations of a sum (or dot product,
    convolution output) of `n` terms whose absolute values sum to `abs_sum` (a scalar
    or an array, one scale per output), or between one of them and the exact value."""
    return n * EPS32 * np.asarray(abs_sum, np.float64)


def assert_within(actual, desired, atol):
    """Assert |actual - desired| <= atol elementwise (`atol` broadcasts: one bound per
    value, e.g. `float32_sum_atol(k, |w| conv |x|)` for a convolution); NaN fails."""
    actual, desired = np.asarray(actual, np.float64), np.asarray(desired, np.float64)
    assert actual.shape == desired.shape, (actual.shape, desired.shape)
    atol = np.broadcast_to(np.asarray(atol, np.float64), actual.shape)
    excess = np.abs(actual - desired) - atol
    if not np.all(excess <= 0):
        i = np.unravel_index(np.argmax(np.nan_to_num(excess, nan=np.inf)), excess.shape)
        raise AssertionError(
            f"{np.sum(~(excess <= 0))} of {excess.size} values differ by more than their "
            f"float32 bound; worst at {tuple(map(int, i))}: {float(actual[i])!r} vs "
            f"{float(desired[i])!r}, bound {float(atol[i]):.3g}")


def toy_mlp_atol(model, x, y):
    """Elementwise bound on the difference of two float32 evaluations of
    `ebm_jax.models.ToyEnergyMLP` at (x, y) (any summation orders, e.g. the written-out
    `many` against the vmapped network): a running error analysis in float64 along the
    network, to first order. Each linear layer adds `float32_sum_atol(d_in + 1, |h| @ |W|
    + |b|)` to the bound carried in through |W|; relu and tanh are 1-Lipschitz (tanh adds
    two roundings of its output), a residual sum one rounding."""
    def lin(layer, h, e):
        w = np.asarray(layer.kernel[...], np.float64)
        b = np.asarray(layer.bias[...], np.float64)
        terms = np.abs(h) @ np.abs(w) + np.abs(b)
        return h @ w + b, e @ np.abs(w) + float32_sum_atol(w.shape[0] + 1, terms)

    def tanh(h, e):
        h = np.tanh(h)
        return h, e + 2 * EPS32 * np.abs(h)

    def residual(layer, h, e):
        t, et = tanh(*lin(layer, h, e))
        return t + h, et + e + EPS32 * np.abs(t + h)

    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    hx, ex = lin(model.x1, x, np.zeros_like(x))
    hx, ex = lin(model.x2, np.maximum(hx, 0), ex)
    hx = np.maximum(hx, 0)
    hy, ey = tanh(*lin(model.y1, y, np.zeros_like(y)))
    lead = np.broadcast_shapes(hx.shape[:-1], hy.shape[:-1])
    h, e = (np.concatenate([np.broadcast_to(a, lead + a.shape[-1:]) for a in pair], -1)
            for pair in ((hx, hy), (ex, ey)))
    h, e = tanh(*lin(model.joint, h, e))
    h, e = residual(model.res1, h, e)
    h, e = residual(model.res2, h, e)
    return lin(model.out, h, e)[1][..., 0]
