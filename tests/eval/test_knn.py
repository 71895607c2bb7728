"""The weighted kNN classifier against hand-made neighbours and a brute-force one."""

import numpy as np
import pytest

from ebm_jax.eval.knn import knn_accuracy, knn_predict

RNG = np.random.default_rng(0)


def unit(*shape):
    x = RNG.normal(size=shape)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_knn_on_a_toy_set_with_known_neighbours():
    angles = np.array([0.0, 0.1, -0.1, 2.0, 2.1, 1.9, 4.0, 4.1])
    train = np.stack([np.cos(angles), np.sin(angles)], 1).astype(np.float32)
    labels = np.array([0, 0, 0, 1, 1, 1, 2, 2])
    test_angles = np.array([0.05, 2.05, 4.05, 1.2])
    test = np.stack([np.cos(test_angles), np.sin(test_angles)], 1).astype(np.float32)
    # k = 1: the nearest training point's label
    np.testing.assert_array_equal(knn_predict(test, train, labels, 3, k=1), [0, 1, 2, 1])
    # k = 3 weighted: class 2 has only two members, still wins near 4.05
    assert list(np.asarray(knn_predict(test[:3], train, labels, 3, k=3))) == [0, 1, 2]
    assert knn_accuracy(test[:3], [0, 1, 2], train, labels, 3, k=3) == 1.0
    # brute-force reference for a random set, k = 5, T = 0.1, chunked
    tr, te = unit(40, 6).astype(np.float32), unit(9, 6).astype(np.float32)
    lab = RNG.integers(0, 4, 40)
    ref = []
    for x in te:
        sim = tr @ x
        top = np.argsort(-sim)[:5]
        scores = np.zeros(4)
        for i in top:
            scores[lab[i]] += np.exp(sim[i] / 0.1)
        ref.append(np.argmax(scores))
    np.testing.assert_array_equal(knn_predict(te, tr, lab, 4, k=5, chunk=4), ref)
    with pytest.raises(ValueError, match=r"train_labels must be in \[0, 3\)"):
        knn_predict(te, tr, lab, 3)


def test_k_beyond_the_training_features_is_refused_not_clamped():
    train = np.eye(3, dtype=np.float32)
    with pytest.raises(ValueError, match=r"k must be in \[1, 3\] .* got 4"):
        knn_predict(train, train, np.arange(3), 3, k=4)
