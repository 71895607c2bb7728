"""Linear evaluation of a frozen encoder: features without touching the encoder, a
classifier that learns a separable problem, the few-label subset."""

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


def test_features_do_not_depend_on_the_chunking():
    enc = _TinyEncoder(nnx.Rngs(1))
    images = jnp.asarray(RNG.uniform(size=(37, 8, 8, 3)), jnp.float32)
    a = extract_features(enc, images, batch_size=16, use_head=True)
    b = extract_features(enc, images, batch_size=64, use_head=True)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    one = extract_features(enc, images[5:6], batch_size=16, use_head=True)
    np.testing.assert_allclose(one[0], a[5], rtol=1e-5, atol=1e-6)


def test_few_label_indices():
    labels = np.repeat(np.arange(3), 20)
    idx = few_label_indices(labels, 3, 5, seed=0)
    assert np.bincount(labels[idx]).tolist() == [5, 5, 5]
    assert np.array_equal(idx, few_label_indices(labels, 3, 5, seed=0))
    assert not np.array_equal(idx, few_label_indices(labels, 3, 5, seed=1))
    with pytest.raises(ValueError, match="few_labels 25 exceeds the 20 training images"):
        few_label_indices(labels, 3, 25, seed=0)
