"""DiMP's classifier loss for training (Bhat et al. 2019, sec. 3.4): a sample is a
sequence's training frames (the target model is predicted from them) and test frames
(the predicted model is scored on them).

    loss_fn = make_classifier_loss(PredictorSettings(), label_sigma=0.9)
    value, metrics = loss_fn(features_net, predictor_params, batch)

    net = DiMPNet(backbone, level=4, settings=PredictorSettings(), rngs=nnx.Rngs(0))
    loss_fn = make_dimp_loss(PredictorSettings(), label_sigma=0.9)   # on crops
    value, metrics = loss_fn(net, dimp_sample_batches(...)(step), key)

`batch` holds, for B sequences, the backbone level of the training frames
"train_levels" (B, Ntr, H, W, Cin) with their boxes "train_boxes" (B, Ntr, 4, xyxy in
cells) and of the test frames "test_levels" (B, Nte, H, W, Cin) with their target
centres "test_centers" (B, Nte, 2, xy in cells). The features net (`DiMPFeatures`)
runs on every frame at once; the predictor (`ebm_jax.tracking.dimp`), pure, is vmapped
over the sequences. The loss is DiMP's hinge against a Gaussian label of std
`label_sigma` cells on the test frames, for every iterate of the optimizer, weighted
as DiMP weighs them (`iterate_weights`); the metrics add the final filter's centre
error on the test frames (cells, from the score peak) and the optimizer's own loss
before and after its iterations.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from ebm_jax.models.dimp_features import DiMPFeatures
from ebm_jax.models.tracking_backbones import detached_copy
from ebm_jax.tracking import dimp


def sequence_loss(params: dict, settings: dimp.PredictorSettings, train_feats, init_feats,
                  train_boxes, test_feats, test_centers, label_sigma: float,
                  threshold: float = 0.05):
    """One sequence's weighted test loss and its metrics (see the module)."""
    fs = settings.filter_size
    _, iterates, opt_losses = dimp.predict_filter(params, settings, train_feats,
                                                  train_boxes, init_features=init_feats)
    out_hw = dimp.score_size(test_feats.shape[1:3], fs)
    centers = dimp.score_center(test_centers, fs)
    labels = jax.vmap(lambda c: dimp.gaussian_label(c, out_hw, label_sigma))(centers)
    scores = jax.vmap(lambda f: dimp.apply_filter(test_feats, f))(iterates)  # (I, Nte, H, W)
    per_iter = jax.vmap(lambda s: dimp.classification_loss(s, labels, threshold))(scores)
    weights = dimp.iterate_weights(settings.num_iter)
    final = scores[-1]
    peak = jnp.argmax(final.reshape(final.shape[0], -1), axis=-1)
    peak_yx = jnp.stack([peak // out_hw[1], peak % out_hw[1]], -1).astype(jnp.float32)
    error = jnp.linalg.norm(peak_yx - centers, axis=-1)
    return jnp.sum(weights * per_iter) / jnp.sum(weights), {
        "test_loss_initial": per_iter[0], "test_loss_final": per_iter[-1],
        "center_error_cells": jnp.mean(error),
        "optimizer_loss_before": opt_losses[0], "optimizer_loss_after": opt_losses[-1]}


def make_classifier_loss(settings: dimp.PredictorSettings, label_sigma: float,
                         threshold: float = 0.05):
    """`loss_fn(features_net, predictor_params, batch) -> (loss, metrics)`, the mean over
    the batch's sequences (see the module)."""
    settings.check()
    if not label_sigma > 0:
        raise ValueError(f"label_sigma must be > 0 cells, got {label_sigma!r}")
    if not 0 < threshold < 1:
        raise ValueError(f"threshold must be in (0, 1), got {threshold!r}")

    def loss_fn(net, params, batch):
        tr, te = batch["train_levels"], batch["test_levels"]
        b, ntr, nte = tr.shape[0], tr.shape[1], te.shape[1]
        frames = jnp.concatenate([tr.reshape(-1, *tr.shape[2:]),
                                  te.reshape(-1, *te.shape[2:])])
        feats = net(frames)
        init = net.filter_features(feats[:b * ntr])
        train_feats = feats[:b * ntr].reshape(b, ntr, *feats.shape[1:])
        test_feats = feats[b * ntr:].reshape(b, nte, *feats.shape[1:])
        init = init.reshape(b, ntr, *init.shape[1:])
        losses, metrics = jax.vmap(
            lambda a, i, bx, t, c: sequence_loss(params, settings, a, i, bx, t, c,
                                                 label_sigma, threshold))(
            train_feats, init, batch["train_boxes"], test_feats, batch["test_centers"])
        return jnp.mean(losses), jax.tree.map(jnp.mean, metrics)

    return loss_fn


class DiMPNet(nnx.Module):
    """DiMP's classifier branch on a tracking backbone: the backbone (`backbone`, an
    `ebm_jax.models.tracking_backbones` net), the classification features on one of its
    levels (`features`, `DiMPFeatures`) and the predictor's learned parameters (label,
    mask and spatial-weight functions, beta, lambda) as Params. `frozen_backbone`: the
    backbone's gradients are stopped and it runs in eval mode, its batch norm on its
    running statistics (the frozen-backbone variant: the features the classifier
    learns on are those it tracks with). The backbone is copied, arrays included
    (`detached_copy`): training the net (whose train step donates its state) leaves the
    caller's backbone as it was."""

    def __init__(self, backbone, level: int, settings: dimp.PredictorSettings, *,
                 channels: int = 32, frozen_backbone: bool = False, rngs: nnx.Rngs):
        settings.check()
        self.backbone = detached_copy(backbone)
        if frozen_backbone:
            self.backbone.eval()
        self.level = int(level)
        self.frozen_backbone = bool(frozen_backbone)
        (in_channels,) = backbone.level_channels((self.level,))
        ((stride, offset),) = backbone.level_geometry((self.level,))
        self.stride, self.offset = float(stride), float(offset)
        self.features = DiMPFeatures(in_channels, channels,
                                     filter_size=settings.filter_size, rngs=rngs)
        init = dimp.init_predictor_params(settings)
        self.predictor = nnx.Dict({k: nnx.Param(v) for k, v in init.items()})

    def predictor_params(self) -> dict:
        return {k: v[...] for k, v in self.predictor.items()}

    def levels(self, crops: jax.Array) -> jax.Array:
        """The backbone level of crops (..., S, S, 3) of 0-255 pixels."""
        lead = crops.shape[:-3]
        x = crops.reshape(-1, *crops.shape[-3:])
        (level,) = self.backbone.features(x, (self.level,))
        if self.frozen_backbone:
            level = jax.lax.stop_gradient(level)
        return level.reshape(*lead, *level.shape[1:])


def make_dimp_loss(settings: dimp.PredictorSettings, label_sigma: float,
                   threshold: float = 0.05):
    """`loss_fn(net, batch, key) -> (loss, metrics)` for `make_train_step`: `net` a
    `DiMPNet`, batch the samples of `ebm_jax.data.dimp_samples.dimp_sample_batches`
    (crops of 0-255 pixels, boxes xyxy in crop pixels); the backbone level of every
    crop, the boxes and centres in its cells (`dimp.to_cells`), then
    `make_classifier_loss`. (`key` is unused: the samples carry their own jitter.)"""
    classifier = make_classifier_loss(settings, label_sigma, threshold)

    def loss_fn(net, batch, key):
        del key
        train = net.levels(jnp.asarray(batch["train"], jnp.float32))
        test = net.levels(jnp.asarray(batch["test"], jnp.float32))
        cells = dimp.to_cells(batch["train_boxes"], net.stride, net.offset)
        test_boxes = dimp.to_cells(batch["test_boxes"], net.stride, net.offset)
        centers = 0.5 * (test_boxes[..., :2] + test_boxes[..., 2:])
        return classifier(net.features, net.predictor_params(),
                          {"train_levels": train, "train_boxes": cells,
                           "test_levels": test, "test_centers": centers})

    return loss_fn
