"""Box-Siam: SiamFC (Bertinetto et al. 2016) trained on ground-truth boxes, the
fully-supervised baseline of SoCL (Wu & Chan, Table 2), evaluated with the OTB and GOT-10k
toolkit metrics beside two trackers that learn nothing: one that never moves (the first
box in every frame) and SiamFC with its random initial backbone.

Stages (see `ebm_jax.recipes.tracking.stages`):

    <workdir>/data/<split>-<hash>         the generated benchmark (train and test splits,
                                          disjoint photos)
    <workdir>/box-siam-s<seed>-<hash>     training, one stage per training seed
    <workdir>/eval-<tracker>-<hash>/      per-sequence results of each tracker and set

The training seeds (`seeds`) give the error bars: each seed trains its own Box-Siam
from its own random start, and the random-backbone baseline of that seed is that start.
No hyperparameter is tuned: the tracking and training settings are SiamFC's published
ones (Bertinetto et al. 2016, SiamFC); only the model width, the number of steps and the data size
are scaled to the machine.

The "box-head" experiment (the EBM regression paper, sec. 5, Table 4;
`ebm_jax.recipes.tracking.box_head`) adds, per seed and loss, a box head trained on
that seed's Box-Siam, refined on the head's energy, against SiamFC's own scale search;
its settings are chosen on the last `validation_sequences` of the training split:

    <workdir>/box-head-<method>-s<seed>-<hash>        a head's training
    <workdir>/eval-box-head-<method>-s<seed>-<hash>/  its tracking (validation: one
                                                      stage per candidate; test)
    <workdir>/eval-coarse-s<seed>-<hash>/             the coarse tracker
"""

from __future__ import annotations

import dataclasses
import math

from ebm_jax import checks
from ebm_jax.config import ADDED_FIELD, MATMUL_PRECISIONS, Checks, ConfigError
from ebm_jax.models.tracking_backbones import BACKBONES
from ebm_jax.recipes.tracking import stages as stages
from ebm_jax.recipes.tracking.backbone_pretraining import MoCoPretraining
from ebm_jax.recipes.tracking.dimp_stages import DiMPTraining
from ebm_jax.recipes.tracking.box_head import TRACKER_CHOICES
from ebm_jax.recipes.tracking.arms import run_arms
from ebm_jax.recipes.tracking.experiments import EXPERIMENTS, count_stages
from ebm_jax.recipes.tracking.presets import (PAPER_DATA, PRESETS, TINY_DATA, TINY_MOCO,
                                              config_from_preset)
from ebm_jax.recipes.tracking.results import backbone_start, tracking_report
from ebm_jax.recipes.tracking.stages import TrackingRun, training_split
from ebm_jax.report import Report
from ebm_jax.tracking.box_head import TRACKING_METHODS, BoxHeadSettings
from ebm_jax.train.stages import RunContext

__all__ = ["BoxHeadSettings", "Config", "EXPERIMENTS", "MoCoPretraining", "PAPER_DATA", "PRESETS",
           "TINY_DATA", "TINY_MOCO", "backbone_start", "check", "config_from_preset",
           "count_stages", "preset", "run"]

INITS = ("random", "moco")  # the backbone's start besides an ImageNet file (`pretrained`)

@dataclasses.dataclass(frozen=True)
class Config:
    """The defaults are the quick profile (`PRESETS["quick"]`: AlexNet width 0.25, 50
    train / 30 test sequences of 80 frames at 320x240, 600 steps, three training seeds;
    about 35-40 min on 2 CPU cores); config files start from `preset`."""

    train_data: str = "generated"  # "generated", or "got10k" (needs got10k_root)
    # the precision of float32 matrix products and convolutions
    # (`jax.default_matmul_precision`): "highest" (full float32: what a CPU computes
    # under any setting, so every result made on a CPU), "high", or "default" (the
    # backend's fast passes, TF32 on NVIDIA GPUs, which moved a MoCo start and SoCL by
    # several AUC points on one GPU: docs/gpu.md). Set away from "highest", every stage
    # of the run is its own (`RunContext.run_identity`)
    matmul_precision: str = dataclasses.field(default="highest", metadata=ADDED_FIELD)
    data_root: str | None = None  # where the generated benchmark goes (default <workdir>/data)
    # how the generated splits are stored and read: "records" (ArrayRecord, written
    # once, pairs streamed through grain; `ebm_jax.data.tracking_records`) or "folders"
    # (GOT-10k folders of JPEG frames). Both give the same frames and annotations, so
    # the same batches: not part of any stage's identity
    data_format: str = "records"
    got10k_root: str | None = None  # a local GOT-10k (train/, val/): val is evaluated
    otb_root: str | None = None  # a local OTB folder: evaluated when given
    num_train_sequences: int = 50  # sequences of the generated training split
    num_test_sequences: int = 30  # sequences of the generated test split
    num_frames: int = 80  # frames per generated sequence
    frame_height: int = 240  # px, the generated frames' height
    frame_width: int = 320  # px, the generated frames' width
    point_shift: float = 20.0  # px, the noisy point annotation's shift (for SoCL)
    box_every: int = 10  # T of the sparse box annotations (for SoCL)
    # the generated training split's scene groups (`TrackingSpec.scene_group`): this
    # many consecutive sequences share background photo, camera path and illumination
    # (SoCL's batches then take whole groups: negatives that share the scene); 1: none
    scene_group: int = 1
    # the scene group's targets move together too (`TrackingSpec.scene_path`): each on
    # the path of the group's first target, so the background around it is shared
    scene_path: bool = False
    width: float = 0.25  # the backbone's channel multiplier (1.0: the published nets)
    # the backbone every arm trains (`ebm_jax.models.tracking_backbones`): "alexnet"
    # (SiamFC's, the default) or "resnet18" (dilated layer3, SoCL's in the paper), and
    # a torchvision ImageNet ResNet-18 state dict (resnet18-*.pth, read without torch)
    # the resnet18 arms start from (width 1.0); None: random initialisation
    backbone: str = "alexnet"
    pretrained: str | None = None
    # "random", or "moco": the backbone pretrained offline by MoCo on the training
    # split's unlabelled frames and photo pool (`ebm_jax.recipes.tracking.backbone_pretraining`,
    # with the settings `moco`), the start of every arm in place of random weights
    init: str = "random"
    moco: MoCoPretraining = MoCoPretraining()
    # SiamFC's tracking crops: "continuous" (sub-pixel corners) or "rounded" (the
    # PyTorch port's whole-pixel corners, `ebm_jax.ops.crops.crop_square_rounded`)
    tracker_crop: str = "continuous"
    # SiamFC's training pairs and crops (Box-Siam, BCE-Siam): "project" (search crop
    # 255, its centre moved up to 8 px, labels that follow it, exemplar and search frame
    # in random order, sides >= 8 px) or "port" (the PyTorch port's: 239, both crops
    # moved up to 4 px, centred labels, the exemplar the earlier frame, sides 20-500 px
    # and 0.01-0.5 of the frame; `stages.SIAMFC_TRAINING`)
    siamfc_training: str = "project"
    steps: int = 600  # Box-Siam's SGD steps
    batch_size: int = 8  # Box-Siam's training pairs per step
    lr_start: float = 1e-2  # Box-Siam's learning rate, decayed geometrically to lr_end
    lr_end: float = 1e-5  # the learning rate at the last step
    momentum: float = 0.9  # SGD momentum
    weight_decay: float = 5e-4  # L2 weight decay
    max_gap: int = 100  # frames of a training pair are fewer than this apart
    seeds: tuple[int, ...] = (0, 1, 2)  # training seeds (Box-Siam and its random start)
    strip_sequences: int = 3  # test sequences drawn as a strip of frames with boxes
    strip_frames: int = 6  # frames per strip
    reference: tuple[tuple[str, str], ...] = ()  # the paper's figures: (dataset, value)
    reference_note: str = ""  # a note printed under the paper's figures
    seed: int = 0  # the data's seed
    experiment: str = "box-siam"  # a row of EXPERIMENTS: the arms trained and tracked
    # the box-head experiment (the EBM regression paper, sec. 5): the head's settings (the method inside
    # is set per arm), the losses compared, joint training of the backbone, and the
    # validation split (the last `validation_sequences` of the generated training split,
    # trained on by no arm) on which the refinement's step lengths (`step_scales` x
    # box_head.step_lengths) and the training sigmas (`sigma_grid`; () = box_head.sigmas
    # only: each more entry trains every head again) are chosen per method
    box_head: BoxHeadSettings = BoxHeadSettings()
    box_head_methods: tuple[str, ...] = ("kld-is", "nce", "nce+", "ml-is")  # the losses
    box_head_joint: bool = False  # the backbone trains with the head (else frozen)
    validation_sequences: int = 0  # the training split's last ones, a validation split
    step_scales: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)  # step-length multipliers tried
    sigma_grid: tuple[tuple[float, ...], ...] = ()  # training sigmas tried (validation)
    # early stopping: shorter training lengths (steps, each < box_head.steps) probed on
    # the validation split beside box_head.steps; each head trains once to the longest,
    # through these (`train_box_head`'s prefix stages); () = box_head.steps only
    box_head_lengths: tuple[int, ...] = ()
    # the tracker options compared on the validation split by tracking AUC, once the
    # step lengths are chosen (`box_head.TRACKER_CHOICES`); () keeps
    # box_head's own
    tracker_choices: tuple[str, ...] = tuple(TRACKER_CHOICES)
    # the DiMP experiments: DiMP's classifier on the frozen Box-Siam backbone (its
    # centre against SiamFC's and the DCF's; refined by the box head), or trained with
    # the box head on one batch (dimp-joint: a DiMPJointTraining)
    dimp: DiMPTraining = DiMPTraining()

    # `ebm-jax show`'s sections (`ebm_jax.config_show`); fields in none are "settings"
    FIELD_GROUPS = {
        "data": ("train_data", "data_root", "data_format", "got10k_root", "otb_root",
                 "num_train_sequences", "num_test_sequences", "num_frames",
                 "frame_height", "frame_width", "point_shift", "box_every", "scene_group",
                 "scene_path", "seed", "validation_sequences"),
        "backbone": ("width", "backbone", "pretrained", "init"),
        "MoCo start": ("moco",),
        "Box-Siam (SiamFC) training and tracking": (
            "tracker_crop", "siamfc_training", "steps", "batch_size", "lr_start", "lr_end",
            "momentum", "weight_decay", "max_gap"),
        "box head": ("box_head", "box_head_methods", "box_head_joint", "step_scales",
                     "sigma_grid", "box_head_lengths", "tracker_choices"),
        "DiMP": ("dimp",),
        "report": ("seeds", "strip_sequences", "strip_frames", "reference",
                   "reference_note"),
    }

    def unused_groups(self) -> tuple[str, ...]:
        """The sections of `FIELD_GROUPS` this config's experiment does not read."""
        unused = []
        if self.init != "moco":
            unused.append("MoCo start")
        if self.experiment not in ("box-head", "dimp-box-head", "dimp-box-head-chosen",
                                   "dimp-joint"):
            unused.append("box head")
        if not str(self.experiment).startswith("dimp"):
            unused.append("DiMP")
        return tuple(unused)

    def __post_init__(self):
        c = Checks(self)
        c.one_of("train_data", ("generated", "got10k"))
        c.one_of("matmul_precision", MATMUL_PRECISIONS)
        c.one_of("data_format", ("records", "folders"))
        if type(self) is Config:  # a recipe built on this Config checks its own table
            c.one_of("experiment", tuple(EXPERIMENTS))
        for f in ("num_train_sequences", "num_test_sequences", "steps", "batch_size",
                  "max_gap", "box_every"):
            c.int_range(f, 1)
        c.int_range("num_frames", 2)
        c.int_range("frame_height", 64, 4096)
        c.int_range("frame_width", 64, 4096)
        c.int_range("strip_sequences", 0)
        c.int_range("strip_frames", 1, 20)
        c.float_range("point_shift", 0.0, 1000.0)
        c.int_range("scene_group", 1, 64)
        if self.scene_group > 1 and self.train_data != "generated":
            raise ConfigError(f"--config.scene_group groups the generated training "
                              f"split's sequences: it needs --config.train_data=generated, "
                              f"got {self.train_data!r}")
        c.boolean("scene_path")
        if self.scene_path and self.scene_group == 1:
            raise ConfigError("--config.scene_path moves a scene group's targets together: "
                              "it needs --config.scene_group in [2, 64], got 1")
        c.float_range("width", 0.0625, 4.0)
        c.one_of("backbone", BACKBONES)
        if self.pretrained is not None and self.backbone != "resnet18":
            raise ConfigError(f"--config.pretrained (a torchvision ResNet-18 state dict) "
                              f"needs --config.backbone=resnet18, got "
                              f"--config.backbone={self.backbone}")
        c.one_of("init", INITS)
        c.one_of("tracker_crop", ("continuous", "rounded"))
        c.one_of("siamfc_training", tuple(stages.SIAMFC_TRAINING))
        if self.init == "moco" and self.pretrained is not None:
            raise ConfigError("--config.init=moco and --config.pretrained are two starts "
                              "for one backbone: give one")
        if self.init == "moco" and self.backbone != "resnet18":
            raise ConfigError(f"--config.init=moco pretrains ResNet-18: it needs "
                              f"--config.backbone=resnet18, got --config.backbone="
                              f"{self.backbone}")
        if not isinstance(self.moco, MoCoPretraining):
            raise ConfigError(f"--config.moco must be a MoCoPretraining, got "
                              f"{type(self.moco).__name__}")
        c.positive("lr_start")
        c.positive("lr_end")
        c.float_range("momentum", 0.0, 1.0, open_high=True)
        c.float_range("weight_decay", 0.0, 1.0)
        c.seed()
        if self.lr_end > self.lr_start:
            raise ConfigError(f"--config.lr_end ({self.lr_end}) must be <= "
                              f"--config.lr_start ({self.lr_start})")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or not all(
                isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**31
                for s in self.seeds):
            raise ConfigError("--config.seeds must be distinct integers in [0, 2^31), "
                              f"got {self.seeds!r}")
        if self.train_data == "got10k" and self.got10k_root is None:
            raise ConfigError("--config.train_data=got10k needs --config.got10k_root (a "
                              "local GOT-10k folder with train/ and val/)")
        self._check_box_head()

    def _check_box_head(self):
        c = Checks(self)
        if not isinstance(self.box_head, BoxHeadSettings):
            raise ConfigError(f"--config.box_head must be a BoxHeadSettings, got "
                              f"{type(self.box_head).__name__}")
        c.each_in("box_head_methods", TRACKING_METHODS)
        if len(set(self.box_head_methods)) != len(self.box_head_methods):
            raise ConfigError(f"--config.box_head_methods must be distinct, got "
                              f"{self.box_head_methods!r}")
        c.boolean("box_head_joint")
        # (a GOT-10k training split's size is known once read: `check`)
        c.int_range("validation_sequences", 0, self.num_train_sequences - 1
                    if self.train_data == "generated" else None)
        if (self.experiment in ("box-head", "dimp-box-head-chosen")
                and self.validation_sequences < 1):
            raise ConfigError(f"--config.validation_sequences must be >= 1 for the "
                              f"{self.experiment} experiment (its step lengths and sigmas "
                              f"are chosen there, never on the test split)")
        if not self.step_scales or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool)
                and math.isfinite(x) and x > 0 for x in self.step_scales):
            raise ConfigError(f"--config.step_scales must be one or more numbers > 0, got "
                              f"{self.step_scales!r}")
        if self.tracker_choices:
            c.each_in("tracker_choices", tuple(TRACKER_CHOICES))
        if len(set(self.tracker_choices)) != len(self.tracker_choices):
            raise ConfigError(f"--config.tracker_choices must be distinct, got "
                              f"{self.tracker_choices!r}")
        lengths = self.box_head_lengths
        if not all(isinstance(n, int) and not isinstance(n, bool)
                   and 1 <= n < self.box_head.steps for n in lengths) \
                or len(set(lengths)) != len(lengths):
            raise ConfigError(f"--config.box_head_lengths must be distinct integers in [1, "
                              f"{self.box_head.steps - 1}] (below --config.box_head.steps="
                              f"{self.box_head.steps}), got {lengths!r}")
        for sigmas in self.sigma_grid:
            if not sigmas or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                     and math.isfinite(x) and x > 0 for x in sigmas):
                raise ConfigError(f"--config.sigma_grid must hold groups of numbers > 0 "
                                  f"(\"0.05,0.5;0.1,1.0\"), got {self.sigma_grid!r}")


def preset(variant: str, *, quick: dict | None = None, tiny: dict | None = None,
           paper: dict | None = None, **fields) -> Config:
    """The Config of preset `variant` ("quick", "tiny" or "paper") with `fields`, and
    the fields given for that variant (`quick=`, `tiny=`, `paper=`) over them."""
    return config_from_preset(Config, PRESETS, variant, fields,
                              {"quick": quick, "tiny": tiny, "paper": paper})


def extras(cfg: Config) -> tuple[str, ...]:
    """The tracking data are records streamed by grain (`ebm_jax.data.pipeline`)."""
    return ("data",)


def check(cfg: Config, ctx: RunContext) -> stages.TrackingData:
    """Every error that can be known before training: roots, devices, memory, then the
    data itself (generated once; every sequence validated by its reader). Returns the
    opened data, which `run` takes."""
    stages.check_pretrained(cfg)  # the user's file first: read, refused in seconds
    for field in ("got10k_root", "otb_root"):
        if getattr(cfg, field) is not None:
            checks.existing_dir(f"--config.{field}", getattr(cfg, field))
    if cfg.batch_size % ctx.num_devices:
        raise ValueError(f"--config.batch_size {cfg.batch_size} must be divisible by "
                         f"--devices {ctx.num_devices}")
    stages.generated_specs(cfg, ctx)  # the generator's own checks of the sizes
    if cfg.init == "moco" and cfg.moco.batch_size % ctx.num_devices:
        raise ConfigError(f"--config.moco.batch_size {cfg.moco.batch_size} must be "
                          f"divisible by --devices {ctx.num_devices}")
    from ebm_jax.models.tracking_backbones import tracking_backbone_flops

    region = int(round(1.25 * 255))
    checks.fits_in_memory(
        f"a training batch ({cfg.batch_size} pairs of {region}x{region} regions, "
        f"{cfg.backbone} width {cfg.width})",
        # activations of forward + backward: ~4 bytes per FLOP / 10 is generous for AlexNet
        cfg.batch_size * 0.4 * (tracking_backbone_flops(cfg.backbone, cfg.width, 255)
                                + tracking_backbone_flops(cfg.backbone, cfg.width, 127)),
        hint="lower --config.batch_size or --config.width")
    experiment = EXPERIMENTS.get(cfg.experiment)  # SoCL's check calls this one too
    if experiment is not None and experiment.check is not None:
        experiment.check(cfg)
    data = stages.open_data(cfg, ctx)
    from ebm_jax.data.tracking_pairs import pair_batches

    if cfg.validation_sequences >= len(data.train):
        raise ConfigError(f"--config.validation_sequences ({cfg.validation_sequences}) "
                          f"must be fewer than the {len(data.train)} training sequences")
    pairs = stages.SIAMFC_TRAINING[cfg.siamfc_training][1]
    pair_batches(training_split(data, cfg)[0], batch_size=cfg.batch_size,
                 max_gap=cfg.max_gap, seed=0, **pairs)
    return data


def run(cfg: Config, ctx: RunContext, data: stages.TrackingData | None = None) -> Report:
    data = data if data is not None else stages.open_data(cfg, ctx)
    eval_sets = {s: (data.identity[s], seqs) for s, seqs in data.eval_sets.items()}
    experiment = EXPERIMENTS[cfg.experiment]
    if experiment.track_validation and cfg.validation_sequences:
        # a diagnostic: measured on the validation split (nothing is chosen on it)
        val, val_identity = stages.validation_split(data, cfg)
        eval_sets["generated-val"] = (val_identity, val)
    env = TrackingRun(cfg, ctx, data)
    arms, validation = experiment.arms(cfg), None
    if experiment.choose is not None:  # the trackers' settings, before any testing
        arms, validation = experiment.choose(env, cfg.seeds)
    res = run_arms(env, ctx, arms, cfg.seeds, eval_sets, tracker_crop=cfg.tracker_crop)
    if experiment.after is not None:
        experiment.after(env, arms, res, eval_sets)
    return tracking_report(cfg, ctx, data, arms, res, validation)


