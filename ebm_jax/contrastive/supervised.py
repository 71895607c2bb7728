"""The supervised baseline of the contrastive tables (He et al. 2020, Table 1's
"supervised" row; Wu et al. 2018, Table 1): the same encoder trained with softmax
cross-entropy on the same augmented views, the ceiling a frozen linear probe of a
self-supervised encoder is compared with.

    loss = mean_i -log softmax(W enc(aug(x_i)) + b)[y_i]
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
import optax


def make_supervised_loss(*, augment: Callable, image_size: int) -> Callable:
    """`loss_fn(model, (images, labels), key) -> (loss, metrics)` for `ebm_jax.train`
    (model: a module with `encoder` and `classifier`,
    `ebm_jax.models.contrastive.Supervised`)."""
    from ebm_jax.ops.augment import augment_batch

    def loss_fn(model, batch, key):
        images, labels = batch
        x = augment_batch(augment, key, images, size=image_size)
        logits = model.classifier(model.encoder(x))
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        return loss, {"accuracy": jnp.mean(jnp.argmax(logits, -1) == labels)}

    return loss_fn
