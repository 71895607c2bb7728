"""The training stage of the tracker's box head (Gustafsson et al. 2020, sec. 5: the box
branch trained with KLD-IS, NCE, NCE+ or ML-IS): pairs of frames of the training
sequences, the box energy on a given tracking backbone (Box-Siam's), Adam.

    trained = train_box_head(ctx, sequences, data_identity=..., backbone=model,
                             backbone_identity=box_siam_identity,
                             settings=BoxHeadSettings(method="nce+", steps=600))
    tracker, params = make_box_head_tracker(trained.net.backbone, trained.net.head,
                                            settings)

    <workdir>/box-head-<method>[-joint]-s<seed>-<hash>   checkpoints, metrics

The stage resumes where it stopped (`TrainStage`); its identity holds the data's and
the backbone's identities, every setting, the levels, `joint` and the seed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import optax
from flax import nnx

from ebm_jax.data.tracking_pairs import pair_batches
from ebm_jax.models.box_head import BoxEnergyHead, BoxHeadNet
from ebm_jax.recipes.tracking_stages import timed_runner
from ebm_jax.tracking.box_head import (BoxHeadSettings, make_box_head_loss,
                                       make_box_head_tracker)
from ebm_jax.tracking.siamfc import SiamFCSettings
from ebm_jax.train import create_train_state, make_train_step, merge_model
from ebm_jax.train.stages import StageFigures, TrainStage


@dataclasses.dataclass(frozen=True)
class TrainedBoxHead:
    """A finished (or resumed) box-head stage: its name and full identity, its figures
    (`StageFigures`) and the trained `BoxHeadNet` (backbone and head)."""

    name: str
    identity: dict
    figures: StageFigures
    net: Any


def build_box_head(backbone, settings: BoxHeadSettings, key,
                   levels: Sequence[int] | None = None) -> BoxEnergyHead:
    """A `BoxEnergyHead` for `backbone`'s `levels` (their channels, strides, offsets;
    default the backbone's `box_head_levels`), of the widths of `settings`, initialised
    from `key`."""
    levels = backbone.box_head_levels if levels is None else levels
    geometry = backbone.level_geometry(levels)
    return BoxEnergyHead(backbone.level_channels(levels),
                         strides=[g[0] for g in geometry], offsets=[g[1] for g in geometry],
                         width=settings.width, hidden=settings.hidden,
                         pool_size=settings.pool_size,
                         ref_pool_size=settings.ref_pool_size, rngs=nnx.Rngs(key))


def train_box_head(ctx, sequences, *, data_identity, backbone, backbone_identity,
                   settings: BoxHeadSettings, joint: bool = False,
                   siamfc: SiamFCSettings = SiamFCSettings(),
                   levels: Sequence[int] | None = None, name: str | None = None,
                   save_every: int | None = None) -> TrainedBoxHead:
    """Trains (or resumes) the box head on pairs of `sequences` (`pair_batches`: their
    z/x regions are the reference and test frames; the crops are made in the jitted
    step, `box_head_crops`), `settings.steps` Adam steps of `settings.lr`. The backbone
    is frozen (its parameters outside the optimiser, its features under
    stop_gradient) unless `joint`, which trains both; it runs in eval mode either way.
    Keys: the head's init `ctx.key(name, "init")`, the steps' `ctx.key(name, "train")`
    folded with the step, the pairs' order `ctx.seed_of(name, "pairs")`. `levels`:
    default the backbone's `box_head_levels` (AlexNet conv3 + conv5, ResNet-18 layer2 +
    layer3)."""
    if not isinstance(settings, BoxHeadSettings):
        raise TypeError(f"settings must be a BoxHeadSettings, got {type(settings).__name__}")
    levels = tuple(int(lv) for lv in (backbone.box_head_levels if levels is None else levels))
    joint = bool(joint)
    name = name or f"box-head-{settings.method}{'-joint' if joint else ''}-s{ctx.seed}"
    identity = {"data": data_identity, "backbone": backbone_identity,
                "settings": dataclasses.asdict(settings),
                "siamfc": dataclasses.asdict(siamfc), "levels": list(levels),
                "joint": joint, "seed": int(ctx.seed)}
    every = max(1, settings.steps // 20)
    stage = TrainStage(name, identity, settings.steps, log_every=every,
                       save_every=save_every or every * 5)
    head = build_box_head(backbone, settings, stage.key(ctx, "init"), levels)
    net = BoxHeadNet(backbone, head, levels=levels, frozen=not joint)
    trainable = net.trainable_filter
    opt = optax.adam(settings.lr)
    graphdef, state = create_train_state(net, opt, stage.key(ctx, "train"),
                                         trainable=trainable)
    step = make_train_step(graphdef, make_box_head_loss(settings, siamfc), opt, ctx.mesh,
                           trainable=trainable)
    batches = pair_batches(sequences, batch_size=settings.batch_size,
                           max_gap=settings.max_gap, seed=ctx.seed_of(name, "pairs"),
                           exemplar_size=siamfc.exemplar_size,
                           search_size=siamfc.search_size, context=siamfc.context)
    ctx.log(f"stage {name}: {settings.steps} steps of {settings.batch_size} pairs "
            f"({settings.method}, M = {settings.num_samples}, "
            f"{'joint' if joint else 'frozen backbone'}) from {batches.num_sequences} "
            f"sequences ({batches.num_frames} usable frames)")
    state, figures = stage.run(ctx, state, step, batches)
    return TrainedBoxHead(name, stage.full_identity, figures, merge_model(graphdef, state))


def box_head_runner(net, settings: BoxHeadSettings, *, refine: bool = True,
                    siamfc: SiamFCSettings = SiamFCSettings(),
                    levels: Sequence[int] | None = None):
    """`run(seq) -> (boxes, seconds)` of the box-head tracker (`make_box_head_tracker`,
    jitted) of a trained `BoxHeadNet`; `refine=False` is its coarse tracker (SiamFC's
    centre, one scale, the previous size), the same model without the refinement.
    Compiled before the first timed frame (`timed_runner`). `levels`: default those the
    net was trained on."""
    tracker, params = make_box_head_tracker(
        net.backbone, net.head, settings, siamfc,
        levels=net.levels_used if levels is None else levels, refine=refine)
    return timed_runner(tracker, params)


__all__ = ["TrainedBoxHead", "box_head_runner", "build_box_head", "train_box_head"]
