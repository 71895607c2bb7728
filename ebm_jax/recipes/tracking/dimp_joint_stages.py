"""DiMP's classifier and the energy-based box head trained jointly, on one batch and one
backbone, as DiMP (Bhat et al. 2019, sec. 3.4) and the EBM regression paper's trackers
(sec. 5, Table 4) train their two branches: the "dimp-joint" experiment
(`experiments.EXPERIMENTS`).

Per seed and loss of `box_head_methods`, one stage (`train_dimp_joint`) trains a
`DiMPJointNet` (`ebm_jax.tracking.dimp_joint`) from the same seed's Box-Siam backbone:
the classifier's loss plus `box_weight` x the head's on DiMP's samples, the backbone
frozen (`backbone_lr` 0) or trained with both losses. The head then refines DiMP's
found boxes on crops cut as in its training (PrDiMP's processing: a crop of DiMP's
side, `joint_box_settings`). Rows: Box-Siam's scale search, per loss the joint
tracker ("DiMP-<loss> joint") and its classifier's centre alone ("DiMP-<loss> joint
centre"), paired with each other and between losses (`LOSS_PAIRS`).

    <workdir>/dimp-joint-<loss>-s<seed>-<hash>   checkpoints, metrics
"""

from __future__ import annotations

import dataclasses
import functools
import math

import optax
from flax import nnx

from ebm_jax.models.tracking_backbones import tracking_backbone
from ebm_jax.recipes.tracking import stages
from ebm_jax.recipes.tracking.arms import Arm, Tracker
from ebm_jax.recipes.tracking.box_head import LOSS_PAIRS
from ebm_jax.recipes.tracking.box_head_stages import build_box_head
from ebm_jax.recipes.tracking.dimp_stages import (TRACKING_ONLY, DiMPBoxHead, DiMPTraining,
                                                  check_dimp_centre, dimp_box_head_runner,
                                                  dimp_runner)
from ebm_jax.recipes.tracking.stages import Trained, TrackingRun, box_siam_arm, training_split
from ebm_jax.tracking.box_head import BoxHeadSettings
from ebm_jax.tracking.dimp_joint import DiMPJointNet, make_joint_loss, param_groups
from ebm_jax.train import create_train_state, make_train_step, merge_model
from ebm_jax.train.stages import TrainStage


@dataclasses.dataclass(frozen=True)
class DiMPJointTraining(DiMPTraining):
    """DiMP's training settings (`DiMPTraining`: steps, batch of samples, the
    classifier's learning rate `lr`, crops) and the joint ones: `box_weight`, the box
    head's loss weight beside the classifier's (DiMP weighs its IoU loss 1 against the
    classifier's 100; with Adam and a frozen backbone the weight changes nothing, the
    branches sharing no parameter), and `backbone_lr`, the backbone's Adam learning
    rate (0: frozen, in eval mode with its gradient stopped; DiMP trains its backbone's
    last block at a tenth of the classifier's rate). The head learns at
    `box_head.lr`."""

    box_weight: float = 1.0
    backbone_lr: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        w, b = self.box_weight, self.backbone_lr
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not (
                math.isfinite(w) and 0 < w <= 1e3):
            raise ValueError(f"DiMPJointTraining.box_weight must be a number in (0, 1000], "
                             f"got {w!r}")
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not (
                math.isfinite(b) and 0 <= b <= 1):
            raise ValueError(f"DiMPJointTraining.backbone_lr must be a number in [0, 1] "
                             f"(0: frozen), got {b!r}")

    @property
    def frozen(self) -> bool:
        return self.backbone_lr == 0


def _geometry(cfg) -> tuple[float, float]:
    """(stride, offset) of DiMP's level on the config's backbone, built abstractly."""
    abstract = nnx.eval_shape(lambda: tracking_backbone(cfg.backbone, width=cfg.width,
                                                        rngs=nnx.Rngs(0)))
    ((stride, offset),) = abstract.level_geometry((cfg.dimp.level,))
    return stride, offset


def joint_box_settings(cfg, method: str) -> BoxHeadSettings:
    """The box head's settings in the joint tracker: `cfg.box_head` with `method`, cut
    as DiMP's samples are (PrDiMP's processing: a crop of DiMP's side, the classifier's
    search area times its crop context), so that the refinement's crops match the
    training crops."""
    factor = cfg.dimp.crop_factor(*_geometry(cfg))
    return dataclasses.replace(cfg.box_head, method=method, processing="prdimp",
                               search_area_factor=float(factor))


def check_dimp_joint(cfg) -> None:
    """Before anything trains: the config's `dimp` is a `DiMPJointTraining`, its crop is
    the box head's (the refinement cuts `SIAMFC.search_size` px crops), and the filter
    fits the crop's grid (`check_dimp_centre`)."""
    if not isinstance(cfg.dimp, DiMPJointTraining):
        raise ValueError(f"the dimp-joint experiment needs --config.dimp as a "
                         f"DiMPJointTraining (its box_weight, backbone_lr), got "
                         f"{type(cfg.dimp).__name__}")
    size = stages.SIAMFC.search_size
    if cfg.dimp.crop_size != size:
        raise ValueError(f"DiMPJointTraining.crop_size must be {size} in the dimp-joint "
                         f"experiment (the box head refines {size} px crops), got "
                         f"{cfg.dimp.crop_size}")
    check_dimp_centre(cfg)
    for m in cfg.box_head_methods:
        joint_box_settings(cfg, m)  # a search area the box head's range refuses


def train_dimp_joint(ctx, sequences, *, data_identity, backbone, backbone_identity,
                     settings: DiMPJointTraining, box_settings: BoxHeadSettings,
                     seed: int) -> Trained:
    """Trains (or resumes) a `DiMPJointNet` from `backbone` on DiMP's samples of
    `sequences`: `settings.steps` steps of `make_joint_loss`, Adam per group (the
    backbone at `backbone_lr`, or outside the optimiser when frozen; the classifier at
    `settings.lr`; the head at `box_settings.lr`). Keys: the classifier's init
    `ctx.key(name, "init")`, the head's `ctx.key(name, "head")`, the steps'
    `ctx.key(name, "train")`, the samples' `ctx.seed_of(name, "samples")`. Returns the
    model (classifier `DiMPNet`, box `BoxHeadNet`), both on the trained backbone."""
    name = f"dimp-joint-{box_settings.method}-s{seed}"
    trained_by = {k: v for k, v in dataclasses.asdict(settings).items()
                  if k not in TRACKING_ONLY}
    identity = {"data": data_identity, "backbone": backbone_identity,
                "settings": trained_by, "box_head": box_settings.training_identity(),
                "seed": int(seed), "frozen": "eval"}
    every = max(1, settings.steps // 20)
    stage = TrainStage(name, identity, settings.steps, log_every=every,
                       save_every=every * 5)
    head = build_box_head(backbone, box_settings, stage.key(ctx, "head"))
    net = DiMPJointNet(backbone, settings.level, settings.predictor, head,
                       channels=settings.channels, frozen_backbone=settings.frozen,
                       rngs=nnx.Rngs(params=stage.key(ctx, "init")))
    clf = net.classifier
    settings.check_geometry(clf.stride, clf.offset)
    opt = optax.multi_transform(
        {"backbone": (optax.set_to_zero() if settings.frozen
                      else optax.adam(settings.backbone_lr)),
         "classifier": optax.adam(settings.lr), "head": optax.adam(box_settings.lr)},
        param_groups)
    trainable = (nnx.All(nnx.Param, nnx.Not(nnx.PathContains("backbone")))
                 if settings.frozen else nnx.Param)
    graphdef, state = create_train_state(net, opt, stage.key(ctx, "train"),
                                         trainable=trainable)
    loss_fn = make_joint_loss(settings.predictor, settings.label_sigma(clf.stride, clf.offset),
                              box_settings, box_weight=settings.box_weight)
    step = make_train_step(graphdef, loss_fn, opt, ctx.mesh, trainable=trainable)
    batches = settings.sample_batches(sequences, clf.stride, clf.offset,
                                      seed=ctx.seed_of(name, "samples"))
    ctx.log(f"stage {name}: {settings.steps} steps of {settings.batch_size} samples "
            f"(3 training + 3 test frames; {box_settings.method}, M = "
            f"{box_settings.num_samples}, backbone "
            f"{'frozen' if settings.frozen else f'at lr {settings.backbone_lr:g}'}) from "
            f"{batches.num_sequences} sequences")
    state, figures = stage.run(ctx, state, step, batches)
    trained = merge_model(graphdef, state)
    return Trained((trained.classifier, trained.box), {"trained": stage.full_identity},
                   figures, name)


def joint_arm(env: TrackingRun, seed: int, used, *, method: str) -> Trained:
    """The joint stage of loss `method` on the same seed's Box-Siam backbone and the
    arms' training split."""
    box = used["box-siam"]
    sequences, identity = training_split(env.data, env.cfg)
    return train_dimp_joint(env.ctx, sequences, data_identity=identity, backbone=box.model,
                            backbone_identity=box.identity["trained"],
                            settings=env.cfg.dimp,
                            box_settings=joint_box_settings(env.cfg, method), seed=seed)


def joint_centre(env: TrackingRun, seed: int, used, *, label: str) -> Trained:
    """The classifier of arm `label`'s joint model alone (DiMP's centre, no box
    branch)."""
    joint = used[label]
    return Trained(joint.model[0], {"centre_of": joint.identity["trained"]})


def dimp_joint_arms(cfg) -> list[Arm]:
    """The arms of the "dimp-joint" experiment (see the module)."""
    methods = cfg.box_head_methods
    arms = [Arm("box-siam", "box-siam", box_siam_arm, compared_with=("static",))]
    for m in methods:
        label = f"DiMP-{m} joint"
        versus = (f"{label} centre",) + tuple(
            f"DiMP-{b} joint" for a, b in LOSS_PAIRS if a == m and b in methods)
        arms += [
            Arm(label, f"dimp-joint-{m}", functools.partial(joint_arm, method=m),
                uses=("box-siam",),
                tracker=Tracker("dimp-box-head",
                                DiMPBoxHead(cfg.dimp.tracker, joint_box_settings(cfg, m)),
                                dimp_box_head_runner),
                compared_with=versus + ("box-siam",),
                about=(("loss", m), ("centre", "DiMP, joint"))),
            Arm(f"{label} centre", f"dimp-joint-{m}-centre",
                functools.partial(joint_centre, label=label), uses=(label,),
                tracker=Tracker("dimp", cfg.dimp.tracker, dimp_runner),
                about=(("loss", m), ("centre", "DiMP, joint"), ("box", "none")))]
    return arms


__all__ = ["DiMPJointTraining", "check_dimp_joint", "dimp_joint_arms", "joint_arm",
           "joint_box_settings", "joint_centre", "train_dimp_joint"]
