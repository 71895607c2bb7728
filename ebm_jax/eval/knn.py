"""The weighted kNN classifier of InstDisc (Wu et al. 2018, sec. 3.4, "Weighted k-Nearest
Neighbor Classifier"; k = 200, T = 0.1 there; MoCo's monitor too): each test feature
votes with its k most similar training features (cosine similarity), each vote
weighted exp(sim / T)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ebm_jax import checks


def knn_predict(test_features, train_features, train_labels, num_classes: int,
                k: int = 200, temperature: float = 0.1, chunk: int = 256) -> jax.Array:
    """Predicted labels (N_test,) from L2-normalised features; `chunk` test rows at a
    time bound the (chunk, N_train) similarity matrix."""
    t = checks.positive("temperature", temperature)
    c = checks.int_at_least("num_classes", num_classes, 1)
    train_features = jnp.asarray(train_features)
    n_train = train_features.shape[0]
    labels = jnp.asarray(train_labels)
    if labels.shape != (n_train,):
        raise ValueError(f"train_labels must have shape ({n_train},), got {labels.shape}")
    if int(jnp.min(labels)) < 0 or int(jnp.max(labels)) >= c:
        raise ValueError(f"train_labels must be in [0, {c}), got range "
                         f"[{int(jnp.min(labels))}, {int(jnp.max(labels))}]")
    k = checks.int_at_least("k", k, 1)
    if k > n_train:  # never clamped: a reported k is the k used
        raise ValueError(f"k must be in [1, {n_train}] (the number of training "
                         f"features), got {k}")

    @jax.jit
    def rows(x):
        sim = x @ train_features.T
        top, idx = jax.lax.top_k(sim, k)
        votes = jax.nn.one_hot(labels[idx], c) * jnp.exp(top / t)[..., None]
        return jnp.argmax(jnp.sum(votes, axis=1), axis=-1)

    test_features = jnp.asarray(test_features)
    return jnp.concatenate([rows(test_features[i:i + chunk])
                            for i in range(0, test_features.shape[0], chunk)])


def knn_accuracy(test_features, test_labels, train_features, train_labels,
                 num_classes: int, k: int = 200, temperature: float = 0.1) -> float:
    pred = knn_predict(test_features, train_features, train_labels, num_classes, k,
                       temperature)
    return float(jnp.mean(pred == jnp.asarray(test_labels)))
