from __future__ import annotations

import numpy as np
import pytest

from ebm_jax.ops.xcorr import xcorr, xcorr_broadcast


def _sliding_dot(z, x):
    """Direct reference: out[i, j] = sum z * x[i:i+hz, j:j+wz] (no flip)."""
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
    for b in range(3):
        np.testing.assert_allclose(out[b], _sliding_dot(z[b], x[b]), rtol=1e-5, atol=1e-5)
    # each template only sees its own search map: changing x[1] leaves pair 0 alone
    x2 = x.copy()
    x2[1] += 100
    np.testing.assert_allclose(np.asarray(xcorr(z, x2))[0], out[0], rtol=1e-6)


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
    for s in range(3):
        np.testing.assert_allclose(out[s], _sliding_dot(z, x[s]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, np.asarray(xcorr(np.stack([z] * 3), x)), rtol=1e-5,
                               atol=1e-5)


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
    np.testing.assert_allclose(np.asarray(xcorr(z, x)), np.asarray(xcorr_grouped(z, x)),
                               rtol=1e-5, atol=1e-5)

    def grads(f):
        return jax.grad(lambda z, x: (f(z, x) ** 2).sum(), argnums=(0, 1))(z, x)

    for a, b in zip(grads(xcorr), grads(xcorr_grouped)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)
