from __future__ import annotations

import numpy as np
import pytest

from ebm_jax.ops.xcorr import xcorr, xcorr_broadcast
from tests.tolerances import assert_within, float32_sum_atol


def _sliding_dot(z, x):
    """Direct reference in float64: out[i, j] = sum z * x[i:i+hz, j:j+wz] (no flip)."""
    z, x = np.asarray(z, np.float64), np.asarray(x, np.float64)
    hz, wz, _ = z.shape
    ho, wo = x.shape[0] - hz + 1, x.shape[1] - wz + 1
    out = np.zeros((ho, wo))
    for i in range(ho):
        for j in range(wo):
            out[i, j] = np.sum(z * x[i:i + hz, j:j + wz])
    return out


def test_xcorr_equals_sliding_dot_product_per_pair():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(3, 3, 2, 5)).astype(np.float32)
    x = rng.normal(size=(3, 7, 6, 5)).astype(np.float32)
    out = np.asarray(xcorr(z, x))
    assert out.shape == (3, 5, 5)
    for b in range(3):  # float32 sums of 3 * 2 * 5 = 30 products (tests/tolerances.py)
        assert_within(out[b], _sliding_dot(z[b], x[b]),
                      float32_sum_atol(30, _sliding_dot(np.abs(z[b]), np.abs(x[b]))))
    # each template only sees its own search map: changing x[1] leaves pair 0 alone
    # (the same jitted program on the same pair 0, so bit for bit)
    x2 = x.copy()
    x2[1] += 100
    np.testing.assert_array_equal(np.asarray(xcorr(z, x2))[0], out[0])


def test_xcorr_hand_case_is_not_flipped():
    z = np.zeros((1, 2, 2, 1), np.float32)
    z[0, 0, 1, 0] = 1.0  # picks x[i, j + 1]
    x = np.arange(9, dtype=np.float32).reshape(1, 3, 3, 1)
    np.testing.assert_array_equal(np.asarray(xcorr(z, x))[0], [[1, 2], [4, 5]])


def test_xcorr_broadcast_equals_sliding_dot_product():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(3, 4, 6)).astype(np.float32)
    x = rng.normal(size=(3, 8, 9, 6)).astype(np.float32)
    out = np.asarray(xcorr_broadcast(z, x))
    assert out.shape == (3, 6, 6)
    # float32 sums of 3 * 4 * 6 = 72 products (tests/tolerances.py), in any order: also
    # between the broadcast and the per-pair kernels
    scale = np.stack([_sliding_dot(np.abs(z), np.abs(x[s])) for s in range(3)])
    for s in range(3):
        assert_within(out[s], _sliding_dot(z, x[s]), float32_sum_atol(72, scale[s]))
    assert_within(out, xcorr(np.stack([z] * 3), x), float32_sum_atol(72, scale))


def test_xcorr_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="batch size"):
        xcorr(np.zeros((2, 3, 3, 4)), np.zeros((3, 5, 5, 4)))
    with pytest.raises(ValueError, match="channels"):
        xcorr(np.zeros((2, 3, 3, 4)), np.zeros((2, 5, 5, 3)))
    with pytest.raises(ValueError, match="at least"):
        xcorr_broadcast(np.zeros((6, 6, 4)), np.zeros((2, 5, 5, 4)))


def test_xcorr_equals_the_grouped_convolution_form_and_its_gradient():
    import jax

    from ebm_jax.ops.xcorr import xcorr_grouped

    rng = np.random.default_rng(5)
    z = rng.normal(size=(3, 3, 2, 4)).astype(np.float32)
    x = rng.normal(size=(3, 7, 6, 4)).astype(np.float32)
    # two float32 orders of 3 * 2 * 4 = 24 products per output (tests/tolerances.py)
    assert_within(xcorr(z, x), xcorr_grouped(z, x),
                  float32_sum_atol(24, xcorr(np.abs(z), np.abs(x))))

    def grads(f, z, x):
        return jax.grad(lambda z, x: (f(z, x) ** 2).sum(), argnums=(0, 1))(z, x)

    # d/dz sum f^2 = 2 sum_ij f_ij x[i + ., j + .]: a sum over the 5 x 5 outputs of f,
    # itself within 24 products' rounding; the same gradient of the absolute values
    # bounds the sum of the absolute terms (likewise for x, over 3 x 2 terms)
    scales = grads(xcorr, np.abs(z), np.abs(x))
    for a, b, scale in zip(grads(xcorr, z, x), grads(xcorr_grouped, z, x), scales):
        assert_within(a, b, float32_sum_atol(24 + 25, scale))
