"""DiMP's classifier as a training stage and a tracker of the tracking recipe (Bhat et
al. 2019; the centre of the EBM regression paper's tracker, sec. 5): `train_dimp` trains
`DiMPNet` on a Box-Siam backbone with DiMP's samples, `dimp_runner` tracks with it
(`ebm_jax.tracking.dimp_tracker`). `dimp_centre_arms`: the arms of the "dimp-centre"
experiment (`experiments.EXPERIMENTS`), its centre beside SiamFC's and the DCF's;
`dimp_box_head_arms`: the "dimp-box-head" experiment, the EBM regression paper's Table 4
as the paper builds it (DiMP's centre refined by the energy-based box head of each loss:
DiMP-KLD-IS, DiMP-NCE, DiMP-NCE+, DiMP-ML-IS), beside the same heads on SiamFC's centre;
`choose_dimp_box_head_arms`: the same with the heads' settings chosen on validation
("dimp-box-head-chosen").
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping

import optax
from flax import nnx

from ebm_jax.data.dimp_samples import dimp_sample_batches
from ebm_jax.data.pipeline import stream_steps
from ebm_jax.ops.jitter import CropJitter
from ebm_jax.models.tracking_backbones import backbone_class, tracking_backbone
from ebm_jax.recipes.tracking import stages
from ebm_jax.recipes.tracking.arms import Arm, Tracker, dcf_tracker, reuse_model
from ebm_jax.recipes.tracking.box_head import (LOSS_PAIRS, box_head_tracker,
                                               choose_box_head_settings, train_box_head_arm)
from ebm_jax.recipes.tracking.stages import (Trained, TrackingRun, box_siam_arm,
                                             timed_runner, training_split)
from ebm_jax.tracking import dimp
from ebm_jax.tracking import dimp_online as online
from ebm_jax.tracking.box_head import BoxHeadSettings
from ebm_jax.tracking.box_head_tracker import make_box_refiner
from ebm_jax.tracking.dcf import DCFSettings
from ebm_jax.tracking.dimp_tracker import DiMPTrackerSettings, make_dimp_tracker
from ebm_jax.tracking.dimp_training import DiMPNet, make_dimp_loss
from ebm_jax.train import create_train_state, make_train_step, merge_model
from ebm_jax.train.stages import TrainStage


@dataclasses.dataclass(frozen=True)
class DiMPTraining:
    """The classifier's training and tracking settings. The feature grid of a
    `crop_size` px crop covers `search_area_factor` x the target's sqrt(w h) (DiMP: 5;
    the crop itself is `dimp.crop_context` times larger, the margin AlexNet's valid
    convolutions eat), so that on the default 255 px crop the stride-8 conv5 grid is
    22 x 22 and the target spans 22 / 5 = 4.4 cells against the 4 x 4 filter (DiMP: 3.6
    cells on 18). The label's std is `label_sigma_factor` of the target's extent in
    cells (DiMP: 1/4). The backbone is frozen (DiMP trains it; a joint variant is not
    built yet)."""

    steps: int = 300
    batch_size: int = 4
    lr: float = 2e-3
    channels: int = 32
    level: int = 4  # the backbone level (AlexNet conv5; ResNet-18 layer3 = 3)
    crop_size: int = 255
    search_area_factor: float = 5.0
    max_gap: int = 50
    num_iter: int = 5
    label_sigma_factor: float = 0.25
    filter_size: int = 4
    # tracking: a peak below this score is "not found" (no move, no update). DiMP-50's
    # 0.25 is for its scores; this classifier's peaks are lower (median 0.16-0.23 on the
    # validation split), and at 0.25 71% of its frames were "not found" (seed 0 of
    # dimp_centre:quick: precision@20 33.9% on validation; 42.9% at 0.05, every frame
    # found). Chosen there, on validation.
    not_found_threshold: float = 0.05

    def __post_init__(self):
        for name, low in (("steps", 1), ("batch_size", 1), ("channels", 1), ("level", 0),
                          ("crop_size", 32), ("max_gap", 6), ("num_iter", 0),
                          ("filter_size", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"DiMPTraining.{name} must be an integer >= {low}, got "
                                 f"{v!r}")
        for name, high in (("lr", 1.0), ("search_area_factor", 20.0),
                           ("label_sigma_factor", 2.0), ("not_found_threshold", 0.999)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= high:
                raise ValueError(f"DiMPTraining.{name} must be a number in (0, {high:g}], "
                                 f"got {v!r}")

    @property
    def predictor(self) -> dimp.PredictorSettings:
        return dimp.PredictorSettings(filter_size=self.filter_size, num_iter=self.num_iter)

    @property
    def tracker(self) -> DiMPTrackerSettings:
        return DiMPTrackerSettings(predictor=self.predictor, online=online.OnlineSettings(
                                       not_found_threshold=self.not_found_threshold),
                                   search_area_factor=self.search_area_factor,
                                   crop_size=self.crop_size)

    def label_sigma(self, stride: float, offset: float) -> float:
        """The label's std in cells: the factor x the target's extent in cells (the
        grid's cells over the search area factor)."""
        cells = dimp.grid_cells(self.crop_size, stride, offset)
        return self.label_sigma_factor * cells / self.search_area_factor

    def check_geometry(self, stride: float, offset: float) -> None:
        """One ValueError, before training, where the crop's feature grid is smaller
        than the filter."""
        n = dimp.grid_cells(self.crop_size, stride, offset)
        if self.filter_size > n:
            raise ValueError(f"DiMPTraining.filter_size {self.filter_size} is larger than "
                             f"the feature grid ({n} x {n} cells on a {self.crop_size} px "
                             f"crop); allowed: 1 to {n}, or a larger crop_size")

    def sample_batches(self, sequences, stride: float, offset: float, *, seed: int):
        """`steps` batches of DiMP's samples of `sequences` (`dimp_sample_batches`:
        `batch_size` samples within `max_gap`, crops of `crop_size` px cut
        `crop_factor` x the target's size around jittered boxes), streamed."""
        jitter = CropJitter(search_area_factor=self.crop_factor(stride, offset))
        return stream_steps(dimp_sample_batches(
            sequences, batch_size=self.batch_size, max_gap=self.max_gap, seed=seed,
            jitter=jitter, out_size=self.crop_size), self.steps)

    def crop_factor(self, stride: float, offset: float) -> float:
        """The crop's side over the target's sqrt(w h): the search area times the
        crop's context (`dimp.crop_context`)."""
        return self.search_area_factor * dimp.crop_context(self.crop_size, stride, offset)


# DiMPTraining's fields that only the tracker reads: not part of the training's identity
TRACKING_ONLY = ("not_found_threshold",)


def train_dimp(ctx, sequences, *, data_identity, backbone, backbone_identity,
               settings: DiMPTraining, seed: int) -> Trained:
    """Trains (or resumes) DiMP's classifier (`DiMPNet`, frozen backbone) on DiMP's
    samples of `sequences`, `settings.steps` Adam steps. Keys: the branch's init
    `ctx.key(name, "init")`, the steps' `ctx.key(name, "train")`, the samples'
    `ctx.seed_of(name, "samples")`."""
    name = f"dimp-s{seed}"
    # "frozen": the backbone in eval mode (its batch norm on running statistics); the
    # stages trained before it ran batch statistics and are not reused
    trained_by = {k: v for k, v in dataclasses.asdict(settings).items()
                  if k not in TRACKING_ONLY}
    identity = {"data": data_identity, "backbone": backbone_identity,
                "settings": trained_by, "seed": int(seed), "frozen": "eval"}
    every = max(1, settings.steps // 20)
    stage = TrainStage(name, identity, settings.steps, log_every=every,
                       save_every=every * 5)
    net = DiMPNet(backbone, settings.level, settings.predictor, channels=settings.channels,
                  frozen_backbone=True,
                  rngs=nnx.Rngs(params=stage.key(ctx, "init")))
    settings.check_geometry(net.stride, net.offset)
    opt = optax.adam(settings.lr)
    graphdef, state = create_train_state(net, opt, stage.key(ctx, "train"))
    loss_fn = make_dimp_loss(settings.predictor,
                             settings.label_sigma(net.stride, net.offset))
    step = make_train_step(graphdef, loss_fn, opt, ctx.mesh)
    batches = settings.sample_batches(sequences, net.stride, net.offset,
                                      seed=ctx.seed_of(name, "samples"))
    ctx.log(f"stage {name}: {settings.steps} steps of {settings.batch_size} samples "
            f"(3 training + 3 test frames) from {batches.num_sequences} sequences")
    state, figures = stage.run(ctx, state, step, batches)
    return Trained(merge_model(graphdef, state), {"trained": stage.full_identity}, figures,
                   name)


def dimp_runner(net, settings: DiMPTrackerSettings):
    """`run(seq) -> (boxes, seconds)` of DiMP's tracker with a trained `DiMPNet`."""
    tracker, params = make_dimp_tracker(net, settings)
    return timed_runner(tracker, params)


@dataclasses.dataclass(frozen=True)
class DiMPBoxHead:
    """The settings of DiMP's tracker with the box head as its box branch."""

    dimp: DiMPTrackerSettings
    box_head: BoxHeadSettings


def dimp_box_head_runner(model, settings: DiMPBoxHead):
    """`run(seq) -> (boxes, seconds)` of DiMP's tracker whose found boxes the box head
    refines (`make_box_refiner` as `make_dimp_tracker`'s box branch); `model` is
    (a `DiMPNet`, a trained `BoxHeadNet`)."""
    dimp_net, head_net = model
    refiner = make_box_refiner(head_net.backbone, head_net.head, settings.box_head,
                               stages.SIAMFC, levels=head_net.levels_used)
    tracker, params = make_dimp_tracker(dimp_net, settings.dimp, refiner=refiner)
    return timed_runner(tracker, params)


def dimp_with_head(env: TrackingRun, seed: int, used, *, head: str) -> Trained:
    """An arm's training function that trains nothing: the same seed's DiMP classifier
    and box head of arm `head`, composed (`dimp_box_head_runner` tracks them)."""
    d, h = used["DiMP centre"], used[head]
    return Trained((d.model, h.model), {"dimp": d.identity, "head": h.identity})


def dimp_arm(env: TrackingRun, seed: int, used) -> Trained:
    """DiMP's classifier trained on the same seed's frozen Box-Siam backbone and the
    arms' training split (`train_dimp`)."""
    box = used["box-siam"]
    sequences, identity = training_split(env.data, env.cfg)
    return train_dimp(env.ctx, sequences, data_identity=identity, backbone=box.model,
                      backbone_identity=box.identity["trained"], settings=env.cfg.dimp,
                      seed=seed)


def dimp_centre_arms(cfg) -> list[Arm]:
    """The centres a box branch would refine (does DiMP's classifier find the target
    more often than SiamFC's centre?): SiamFC at one scale with the size kept, the
    correlation filter on the same backbone, DiMP's classifier; all size-free."""
    one_scale = dataclasses.replace(stages.SIAMFC, scale_num=1)
    return [
        Arm("box-siam", "box-siam", box_siam_arm, compared_with=("static",)),
        Arm("SiamFC centre", "siamfc-centre",
            functools.partial(reuse_model, label="box-siam"), uses=("box-siam",),
            tracker=Tracker("siamfc", one_scale, stages.siamfc_runner)),
        Arm("DCF centre", "dcf-centre", functools.partial(reuse_model, label="box-siam"),
            uses=("box-siam",), tracker=dcf_tracker(DCFSettings().for_backbone(
                backbone_class(cfg.backbone)))),
        Arm("DiMP centre", "dimp-centre", dimp_arm, uses=("box-siam",),
            tracker=Tracker("dimp", cfg.dimp.tracker, dimp_runner),
            compared_with=("SiamFC centre", "DCF centre")),
    ]


def dimp_box_head_arms(cfg, chosen: Mapping[str, BoxHeadSettings] | None = None
                       ) -> list[Arm]:
    """The EBM regression paper's Table 4 as the paper builds it: per loss of
    `box_head_methods`, the box head (trained on the frozen Box-Siam backbone,
    `cfg.box_head`'s settings, or `chosen[loss]`'s where they were chosen on the
    validation split) refining DiMP's centre ("DiMP-<loss>"), compared with DiMP's
    centre alone, with the same head on SiamFC's centre, and with the other losses
    (`LOSS_PAIRS`); Box-Siam's scale search, DiMP's centre and DiMP's centre sized by
    SiamFC's scale search beside them."""
    methods = cfg.box_head_methods
    scaled = dataclasses.replace(cfg.dimp.tracker, scale_num=stages.SIAMFC.scale_num,
                                 scale_step=stages.SIAMFC.scale_step,
                                 scale_penalty=stages.SIAMFC.scale_penalty,
                                 scale_lr=stages.SIAMFC.scale_lr)
    arms = [Arm("box-siam", "box-siam", box_siam_arm, compared_with=("static",)),
            Arm("DiMP centre", "dimp-centre", dimp_arm, uses=("box-siam",),
                tracker=Tracker("dimp", cfg.dimp.tracker, dimp_runner),
                compared_with=("box-siam",)),
            # DiMP's centre sized by SiamFC's scale search: what the box branch must beat
            Arm("DiMP scale search", "dimp-scales",
                functools.partial(reuse_model, label="DiMP centre"), uses=("DiMP centre",),
                tracker=Tracker("dimp", scaled, dimp_runner),
                compared_with=("DiMP centre", "box-siam"))]
    def settings_of(m: str) -> BoxHeadSettings:
        return chosen[m] if chosen else dataclasses.replace(cfg.box_head, method=m)

    for m in methods:
        settings = settings_of(m)
        arms.append(Arm(f"box-head-{m}", f"box-head-{m}",
                        functools.partial(train_box_head_arm, settings=settings),
                        tracker=box_head_tracker(settings), uses=("box-siam",),
                        compared_with=("box-siam",), about=(("loss", m), ("centre", "SiamFC"))))
    for m in methods:
        settings = settings_of(m)
        versus = ("DiMP centre", "DiMP scale search", f"box-head-{m}") + tuple(
            f"DiMP-{b}" for a, b in LOSS_PAIRS if a == m and b in methods)
        arms.append(Arm(f"DiMP-{m}", f"dimp-{m}",
                        functools.partial(dimp_with_head, head=f"box-head-{m}"),
                        uses=("DiMP centre", f"box-head-{m}"),
                        tracker=Tracker("dimp-box-head",
                                        DiMPBoxHead(cfg.dimp.tracker, settings),
                                        dimp_box_head_runner),
                        compared_with=versus, about=(("loss", m), ("centre", "DiMP"))))
    return arms


def choose_dimp_box_head_arms(env: TrackingRun, seeds) -> tuple[list[Arm], dict]:
    """The "dimp-box-head-chosen" experiment's arms: `dimp_box_head_arms` with each
    loss's training sigmas, length and refinement step lengths chosen on the validation
    split by the refinement probe (`box_head.choose_box_head_settings`), never on the
    test split; and the validation record."""
    chosen, record = choose_box_head_settings(env, seeds)
    return dimp_box_head_arms(env.cfg, chosen), record


def check_dimp_chosen(cfg) -> None:
    """`check_dimp_centre`, and no SiamFC tracker options (they are options of SiamFC's
    centre, which DiMP's tracker does not use); the Config itself requires a validation
    split for this experiment."""
    check_dimp_centre(cfg)
    if cfg.tracker_choices:
        raise ValueError(f"--config.tracker_choices must be empty for the "
                         f"dimp-box-head-chosen experiment: they are options of SiamFC's "
                         f"centre, which DiMP's tracker does not use; got "
                         f"{cfg.tracker_choices!r}")


def check_dimp_centre(cfg) -> None:
    """DiMP's filter against the crop's feature grid on the config's backbone level
    (`DiMPTraining.check_geometry`), before anything is trained: the backbone is built
    abstractly (`nnx.eval_shape`), for its level's geometry alone."""
    abstract = nnx.eval_shape(lambda: tracking_backbone(cfg.backbone, width=cfg.width,
                                                        rngs=nnx.Rngs(0)))
    ((stride, offset),) = abstract.level_geometry((cfg.dimp.level,))
    cfg.dimp.check_geometry(stride, offset)


__all__ = ["DiMPBoxHead", "DiMPTraining", "check_dimp_centre", "check_dimp_chosen",
           "choose_dimp_box_head_arms", "dimp_arm",
           "dimp_box_head_arms", "dimp_box_head_runner", "dimp_centre_arms", "dimp_runner",
           "dimp_with_head", "train_dimp"]
