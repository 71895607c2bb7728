"""SoCL-Siam: SiamFC's backbone trained from scratch with the soft contrastive loss on
point annotations only (Wu & Chan, "Learning Tracking Representations from Single Point
Annotations", sec. 3.2-3.3, "Siamese Tracking"); the trained backbone then tracks with
the unchanged SiamFC tracker (`ebm_jax.tracking.siamfc.make_tracker`).

    loss_fn = make_socl_siam_loss(SoCLSettings())
    step = make_train_step(graphdef, loss_fn, optax.adam(3e-4), mesh)

A batch (`ebm_jax.data.socl_pairs.context_batches`) holds two context regions of each of
N videos and their TOP maps on the backbone's feature grid.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp

from ebm_jax.contrastive.socl import SoCLSettings, socl_loss


def make_socl_siam_loss(settings: SoCLSettings = SoCLSettings()) -> Callable:
    """`loss_fn(model, batch, key) -> (loss, metrics)` for `make_train_step`: batch =
    {"i_images", "j_images": (N, S, S, 3) uint8, "h_i", "h_j": (N, g, g) TOP maps}; the
    model (batch-norm mode is the caller's) embeds all 2N regions in one call, and loss
    (10) of sec. 3.2.4 is taken over the two frames' feature maps."""

    def loss_fn(model, batch, key):
        i_images, j_images = batch["i_images"], batch["j_images"]
        n = i_images.shape[0]
        features = model(jnp.concatenate([i_images, j_images], axis=0))
        if features.shape[1:3] != batch["h_i"].shape[1:]:
            raise ValueError(f"the TOP maps' grid {batch['h_i'].shape[1:]} is not the "
                             f"backbone's feature grid {features.shape[1:3]}")
        return socl_loss(features[:n], features[n:], batch["h_i"], batch["h_j"], key,
                         settings)

    return loss_fn
