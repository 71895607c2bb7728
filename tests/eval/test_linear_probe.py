"""Linear evaluation of a frozen encoder: features without touching the encoder, a
classifier that learns a separable problem, the few-label subset."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ebm_jax.eval.linear_probe import (
    classifier_accuracy,
    extract_features,
    few_label_indices,
    train_linear_classifier,
)
from tests.tolerances import EPS32, assert_within, float32_sum_atol

RNG = np.random.default_rng(0)


class _TinyEncoder(nnx.Module):
    """conv -> batch norm -> relu -> mean pool -> linear(8) -> L2 normalise."""

    def __init__(self, rngs):
        self.conv = nnx.Conv(3, 4, (3, 3), rngs=rngs)
        self.bn = nnx.BatchNorm(4, rngs=rngs)
        self.fc = nnx.Linear(4, 8, rngs=rngs)

    def __call__(self, x):
        h = jax.nn.relu(self.bn(self.conv(x))).mean(axis=(1, 2))
        z = self.fc(h)
        return z / jnp.linalg.norm(z, axis=-1, keepdims=True)


def test_linear_evaluation_trains_only_the_classifier():
    enc = _TinyEncoder(nnx.Rngs(0))
    before = [np.asarray(a) for a in jax.tree.leaves(nnx.state(enc))]
    images = jnp.asarray(RNG.uniform(size=(40, 8, 8, 3)), jnp.float32)
    feats = extract_features(enc, images, batch_size=16, use_head=True)
    assert feats.shape == (40, 8)
    after = [np.asarray(a) for a in jax.tree.leaves(nnx.state(enc))]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))  # weights and stats
    # a linearly separable toy problem is learned
    x = RNG.normal(size=(200, 5)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int32) + 2 * (x[:, 2] > 1).astype(np.int32)
    w, b, hist = train_linear_classifier(x, y, 4, key=jax.random.key(0), epochs=30,
                                         batch_size=50)
    assert hist[-1] < hist[0] and classifier_accuracy(w, b, x, y) > 0.9
    with pytest.raises(ValueError, match=r"labels must be in \[0, 2\)"):
        train_linear_classifier(x, y, 2, key=jax.random.key(0))


def _tiny_encoder_atol(enc, images):
    """A bound on the difference of two float32 evaluations of `_TinyEncoder` (eval
    mode) per output, by a running error analysis along its layers (tests/tolerances.py):
    the convolution's 27 products and bias, the batch norm's affine map (and 3
    roundings), the 64-position mean, the 4-input linear layer, then the L2
    normalisation (2-Lipschitz in dz / |z|, plus its 8-term norm)."""
    f64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
    conv = partial(jax.lax.conv_general_dilated, window_strides=(1, 1), padding="SAME",
                   dimension_numbers=("NHWC", "HWIO", "NHWC"))
    w, b = f64(enc.conv.kernel[...]), f64(enc.conv.bias[...])
    h = f64(conv(images, w.astype(np.float32))) + b
    e = float32_sum_atol(3 * 3 * 3 + 1, f64(conv(jnp.abs(images), np.abs(w).astype(
        np.float32))) + np.abs(b))
    bn = enc.bn  # eval mode: the running statistics
    k = f64(bn.scale[...]) / np.sqrt(f64(bn.var[...]) + bn.epsilon)
    h = np.maximum((h - f64(bn.mean[...])) * k + f64(bn.bias[...]), 0)
    e = (e * np.abs(k) + 3 * EPS32 * h).mean(axis=(1, 2)) + float32_sum_atol(
        64, h.mean(axis=(1, 2)))
    w, b = f64(enc.fc.kernel[...]), f64(enc.fc.bias[...])
    h = h.mean(axis=(1, 2))
    e = e @ np.abs(w) + float32_sum_atol(4 + 1, np.abs(h) @ np.abs(w) + np.abs(b))
    z = h @ w + b
    norm = np.linalg.norm(z, axis=-1, keepdims=True)
    return (2 * np.linalg.norm(e, axis=-1, keepdims=True) / norm
            + float32_sum_atol(8 + 2, 1.0))


def test_features_do_not_depend_on_the_chunking():
    enc = _TinyEncoder(nnx.Rngs(1))
    images = jnp.asarray(RNG.uniform(size=(37, 8, 8, 3)), jnp.float32)
    a = extract_features(enc, images, batch_size=16, use_head=True)
    b = extract_features(enc, images, batch_size=64, use_head=True)
    # other batch shapes, so perhaps other kernels: two float32 orders
    atol = _tiny_encoder_atol(enc, images)
    assert_within(a, b, atol)
    one = extract_features(enc, images[5:6], batch_size=16, use_head=True)
    assert_within(one[0], a[5], atol[5])


def test_few_label_indices():
    labels = np.repeat(np.arange(3), 20)
    idx = few_label_indices(labels, 3, 5, seed=0)
    assert np.bincount(labels[idx]).tolist() == [5, 5, 5]
    assert np.array_equal(idx, few_label_indices(labels, 3, 5, seed=0))
    assert not np.array_equal(idx, few_label_indices(labels, 3, 5, seed=1))
    with pytest.raises(ValueError, match="few_labels 25 exceeds the 20 training images"):
        few_label_indices(labels, 3, 25, seed=0)
