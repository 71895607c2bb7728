"""SoCL (Wu & Chan, "Learning Tracking Representations from Single Point Annotations"):
SiamFC's backbone learned from point annotations by soft contrastive learning, against
its baselines, on the generated tracking benchmark. One recipe for the paper's
experiments; `experiment` picks the arms (rows) that are trained and tracked, from the
table `EXPERIMENTS` (each experiment's arms, their pairs and the paper's figures):

    table1    GST, +SNS, +mix-up, +LST (sec. 4.2, Table 1)
    figure7   theta_b and b_p sweeps (Fig. 7; theta_p ~ U[b_p, 1))
    figure8   BCE-Siam on pseudo boxes thresholded from TOP maps at each alpha vs
              SoCL-Siam (Fig. 8)
    table2    Box-Siam vs SoCL-Siam at equal annotation time (10.2 s per box, 2.27 s per
              point), at each budget, and the start both train from (Table 2 /
              Fig. 9)
    table6    SoCL-Siam on clean points vs points shifted `point_shift` px (Table 6)
    table3    the correlation filter tracker (`dcf`) on the backbone before SoCL training
              (Init-CF; the paper's Res18-CF on an ImageNet ResNet-18), after it (SoCL-CF)
              and after Box-Siam training (Box-CF), beside SoCL-Siam and Box-Siam
              (sec. 3.4 and 4.4, Table 3)
    table5    pseudo boxes from a box every T frames and points (SoCL-CF, the 20 px rule)
              train the NCE+ box head on SoCL-Siam's backbone, against the head on every
              true box and on the sparse boxes alone; the pseudo boxes' quality per T
              (sec. 3.4 and 4.6, Table 5's scheme; `ebm_jax.recipes.tracking.sparse_boxes`)
    table4    annotation and training fees from the counts and the measured times
              (Table 4)
    lst       +mix-up against +LST under each variant of the choices the paper leaves
              open (TOP temperature, region, b_p, eq. 9's denominator, eq. 10's
              queries, the mix-ups' pool), on the validation split only

Every arm is trained once per seed in `seeds` and tracks the generated test split with
the SiamFC tracker; tables give mean +- sd over seeds and paired differences (same
seed: the same initial weights and batch order), and a difference is called real only
where it exceeds twice its standard error. The hyperparameters are the paper's (tau,
theta_b, b_p, Adam 3e-4 with a x0.1 drop at half); the model width, the number of steps,
the batch of videos and the context size are scaled to the machine and chosen before
any test-split result was seen. Stages: `ebm_jax.recipes.tracking.socl_stages`; each
experiment's arms and their training: `ebm_jax.recipes.tracking.socl_arms`; the arm type and the
runner shared with the tracking recipe: `ebm_jax.recipes.tracking.arms`. Config
files start from `preset` (quick, tiny, paper), so that the configs that share stages
cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import math

from ebm_jax.config import ADDED_FIELD, Checks, ConfigError
from ebm_jax.contrastive.socl import SoCLSettings
from ebm_jax.recipes.tracking import socl_arms as arms_lib
from ebm_jax.recipes.tracking import socl_diagnostics
from ebm_jax.recipes.tracking.backbone_pretraining import MOCO_SCREEN
from ebm_jax.recipes.tracking import socl_stages as stages
from ebm_jax.recipes import tracking
from ebm_jax.recipes.tracking import stages as tstages
from ebm_jax.recipes.tracking.socl_arms import SoCLRun, budgeted, point_kinds
from ebm_jax.recipes.tracking.arms import pairs_of, run_arms
from ebm_jax.recipes.tracking.socl_data import (Opened, budget_plan, check_dcf, held_out,
                                                with_points)
from ebm_jax.recipes.tracking.socl_experiments import EXPERIMENTS, arms_of, count_stages
from ebm_jax.report import Report
from ebm_jax.tracking.box_head import BoxHeadSettings
from ebm_jax.tracking.dcf import DCFSettings
from ebm_jax.train.stages import RunContext

__all__ = ["EXPERIMENTS", "BoxHeadSettings", "Config", "DCFSettings", "arms_of", "check",
           "count_stages", "preset", "run"]

@dataclasses.dataclass(frozen=True)
class Config(tracking.Config):
    """The tracking recipe's data and Box-Siam fields, plus SoCL's. The defaults are the
    quick profile (2 CPU cores; `PRESETS["quick"]`): the tracking recipe's quick data,
    width, Box-Siam steps and seeds (its defaults), so that the two share data and
    stages; tau, theta_b and b_p default to SoCLSettings' (the paper's)."""

    experiment: str = "table1"
    # the tracking recipe's DiMP settings do not apply to SoCL's tables: None, so that a
    # change of DiMP's defaults leaves SoCL's configs (and their stored runs) as they are
    dimp: None = None
    points: str = "clean"  # SoCL's point annotations: "clean" (box centres) or "noisy"
    annotate_every: int = 2  # annotated frames: every this-many-th frame
    # softmax temperature of the TOP map (the paper names none): a number > 0, or
    # "calibrated": set per feature grid so that the theta_b mass covers about the
    # target's extent estimated from the proposals (`socl_stages.top_temperature`)
    top_temperature: float | str = 1.0
    videos: int = 12  # N: videos per batch (2N frames; the paper: 96 videos, batch 192)
    socl_steps: int = 300
    socl_lr: float = 3e-4
    socl_lr_drop: float = 0.5  # lr x 0.1 after this fraction of the steps
    input_size: int = 159  # context region side in input pixels (10 x 10 feature grid)
    context_side: float = 144.0  # context region side in frame pixels
    # the context region in receptive fields of one embedding cell (a cell that sees
    # most of the region can carry a code of the scene, which tells the videos apart
    # without the target): > 0 grows input_size to at least this many fields, the
    # smallest such size of input_size's residue modulo the embedding's stride (the
    # same grid alignment; AlexNet: 159 -> 175 at 2, ResNet-18: 159 -> 455), and
    # context_side with it (the frame's scale kept); 0: input_size as set
    region_fields: float = 0.0
    shift_jitter: float = 0.125  # region centre moved up to this x the side
    scale_jitter: float = 1.25  # region side scaled within [1/s, s]
    tau: float = SoCLSettings.tau
    theta_b: float = SoCLSettings.theta_b
    b_p: float = SoCLSettings.b_p
    # the loss's choices the paper leaves open (`SoCLSettings`; the LST study's
    # switches): the positive in eq. 9's denominator (InfoNCE) or not (as printed), eq.
    # 10 for z_i and z_j or z_i alone, mix-ups of the batch's hardest SNS or the pair's
    include_positive: bool = SoCLSettings.include_positive
    symmetric: bool = SoCLSettings.symmetric
    mix_scope: str = SoCLSettings.mix_scope
    # fine-tuning that keeps a start (SiamRPN++'s; `ebm_jax.tracking.socl_siam`):
    # "none" or a backbone level (resnet18: conv1 (the stem), layer1, layer2, layer3;
    # alexnet: conv1-conv4) that, with every level before it, keeps its start;
    # the backbone's (every level but the embedding's) learning rate x this, in (0, 1];
    # every batch norm on its start's statistics
    freeze: str = "none"
    backbone_lr_scale: float = 1.0
    freeze_bn: bool = False
    # the diagnostics of every report (`socl_diagnostics`): pairs of regions of the
    # validation split (the test split without one); 0: none
    diagnostic_pairs: int = 32
    theta_b_sweep: tuple[float, ...] = (0.5, 0.65, 0.8, 0.95)
    b_p_sweep: tuple[float, ...] = (0.2, 0.4, 0.6, 0.8)
    alphas: tuple[float, ...] = (0.3, 0.5, 0.7)
    budgets_hours: tuple[float, ...] = (0.16, 0.32, 0.63, 1.26)
    box_seconds: float = 10.2  # annotation time per box (the paper's)
    point_seconds: float = 2.27  # per point, with its TOP map (1.87 + 0.4)
    box_fee: float = 0.036  # dollars per box (Table 4)
    point_fee: float = 0.005  # dollars per point
    gpu_hour_fee: float = 0.9  # dollars per GPU hour (Table 4)
    points_from_boxes: bool = False  # sequences without points.txt: box centres as points
    dcf: DCFSettings = DCFSettings()  # the correlation filter tracker of table3 / table5
    sparse_every: int = 10  # table5: T, a box every T frames (the paper: 10)
    sparse_every_sweep: tuple[int, ...] = (5, 10, 20)  # table5: the pseudo boxes' T sweep
    failure_radius: float = 20.0  # table5: px from the point that make a failure
    # lst: the variants of the LST study (`socl_arms.LST_VARIANTS`), trained on the
    # training split less its last `validation_sequences` and tracked on those alone
    lst_variants: tuple[str, ...] = tuple(arms_lib.LST_VARIANTS)
    # moco_start: the MoCo start's settings screened on the probe's validation split
    # (`backbone_pretraining.MOCO_SCREEN`, each a change of --config.moco)
    moco_screen: tuple[str, ...] = dataclasses.field(default=tuple(MOCO_SCREEN),
                                                     metadata=ADDED_FIELD)
    # True: each training seed s fine-tunes its own MoCo start (pretrained with MoCo seed
    # moco.seed + s), so that the sd over seeds holds the start's variation; False:
    # one start (moco.seed) for every seed, as the paper's one ImageNet file
    # (`socl_arms.seed_config`)
    moco_per_seed: bool = dataclasses.field(default=False, metadata=ADDED_FIELD)

    FIELD_GROUPS = {
        **tracking.Config.FIELD_GROUPS,
        "MoCo start": ("moco", "moco_screen", "moco_per_seed"),
        "SoCL training": ("points", "annotate_every", "top_temperature", "videos",
                          "socl_steps", "socl_lr", "socl_lr_drop", "input_size",
                          "context_side", "region_fields", "shift_jitter", "scale_jitter",
                          "tau", "theta_b", "b_p", "include_positive", "symmetric",
                          "mix_scope", "freeze", "backbone_lr_scale", "freeze_bn",
                          "diagnostic_pairs", "points_from_boxes", "dcf"),
        "SoCL tables": ("theta_b_sweep", "b_p_sweep", "alphas", "budgets_hours",
                        "box_seconds", "point_seconds", "box_fee", "point_fee",
                        "gpu_hour_fee", "sparse_every", "sparse_every_sweep",
                        "failure_radius", "lst_variants"),
    }

    def unused_groups(self) -> tuple[str, ...]:
        """The tracking sections SoCL's tables do not read: the box head but for Table
        5's sparse-box head, DiMP always, the MoCo start unless init="moco"; moco_start
        reads the data, the backbone and the MoCo start alone."""
        unused = ["DiMP"] + (["MoCo start"] if self.init != "moco" else [])
        if self.experiment != "table5":
            unused.append("box head")
        if self.experiment == "moco_start":  # the MoCo start alone: nothing trains on it
            unused += ["Box-Siam (SiamFC) training and tracking", "SoCL training",
                       "SoCL tables"]
        return tuple(unused)

    def __post_init__(self):
        super().__post_init__()
        c = Checks(self)
        c.one_of("experiment", tuple(EXPERIMENTS))
        c.one_of("points", ("clean", "noisy"))
        for f in ("annotate_every", "socl_steps", "sparse_every"):
            c.int_range(f, 1)
        if not self.sparse_every_sweep or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 1
                for v in self.sparse_every_sweep):
            raise ConfigError(f"--config.sparse_every_sweep must be a non-empty tuple of "
                              f"integers >= 1 (T), got {self.sparse_every_sweep!r}")
        c.each_in("lst_variants", tuple(arms_lib.LST_VARIANTS))
        c.each_in("moco_screen", tuple(MOCO_SCREEN))
        c.boolean("moco_per_seed")
        if self.moco_per_seed and self.init != "moco":
            raise ConfigError(f"--config.moco_per_seed=true needs --config.init=moco (it "
                              f"draws a MoCo start per seed), got init={self.init!r}")
        if self.moco_per_seed and self.experiment == "moco_start":
            raise ConfigError("--config.moco_per_seed=true does not apply to the moco_start "
                              "experiment (it pretrains one start per setting screened, "
                              "with --config.moco.seed)")
        if self.experiment == "moco_start" and self.init != "moco":
            raise ConfigError(f"--config.init must be 'moco' for the moco_start experiment "
                              f"(it screens the MoCo start's settings), got {self.init!r}")
        if self.experiment == "lst" and self.validation_sequences < 1:
            raise ConfigError("--config.validation_sequences must be >= 1 for the lst "
                              "experiment (it is measured on held-out training sequences, "
                              "never on the test split)")
        c.int_range("videos", 2)
        c.int_range("input_size", 1, 1024)
        c.float_range("region_fields", 0.0, self._max_region_fields())
        if self.region_fields:
            self._grow_region()
        exemplar = tstages.SIAMFC.exemplar_size
        if self.input_size < exemplar:
            raise ConfigError(
                f"--config.input_size must be >= {exemplar} (SiamFC's exemplar), got "
                f"{self.input_size}: a context region smaller than the exemplar the "
                "tracker correlates gives a feature grid smaller than its template")
        if self.top_temperature != "calibrated" and (
                isinstance(self.top_temperature, (str, bool))
                or not isinstance(self.top_temperature, (int, float))
                or not (math.isfinite(self.top_temperature) and self.top_temperature > 0)):
            raise ConfigError(f"--config.top_temperature must be a finite number > 0 or "
                              f"'calibrated', got {self.top_temperature!r}")
        from ebm_jax.models.tracking_backbones import backbone_class
        from ebm_jax.tracking.socl_siam import freeze_levels

        levels = freeze_levels(backbone_class(self.backbone))
        if self.freeze not in ("none", *levels):
            raise ConfigError(f"--config.freeze must be 'none' or a level of the "
                              f"{self.backbone} backbone before its embedding "
                              f"({', '.join(levels)}), got {self.freeze!r}")
        c.float_range("backbone_lr_scale", 0.0, 1.0, open_low=True)
        c.boolean("freeze_bn")
        c.int_range("diagnostic_pairs", 0, 1024)
        for f in ("socl_lr", "tau", "context_side", "box_seconds",
                  "failure_radius",
                  "point_seconds", "box_fee", "point_fee", "gpu_hour_fee"):
            c.positive(f)
        c.float_range("socl_lr_drop", 0.0, 1.0)
        if not isinstance(self.dcf, DCFSettings):
            raise ConfigError(f"--config.dcf must be a DCFSettings, got "
                              f"{type(self.dcf).__name__}")
        c.float_range("shift_jitter", 0.0, 0.5)
        c.float_range("scale_jitter", 1.0, 4.0)
        for f in ("theta_b", "b_p"):
            c.float_range(f, 0.0, 1.0, open_low=True)
        c.boolean("include_positive")
        c.boolean("symmetric")
        c.one_of("mix_scope", ("batch", "pair"))
        for f, values, low in (("theta_b_sweep", self.theta_b_sweep, 0.0),
                               ("b_p_sweep", self.b_p_sweep, 0.0),
                               ("alphas", self.alphas, 0.0),
                               ("budgets_hours", self.budgets_hours, 0.0)):
            if not values or not all(isinstance(v, (int, float)) and v > low
                                     and (f == "budgets_hours" or v <= 1) for v in values):
                rng = "(0, inf)" if f == "budgets_hours" else "(0, 1]"
                raise ConfigError(f"--config.{f} must be a non-empty tuple of values in "
                                  f"{rng}, got {values!r}")

    def _max_region_fields(self) -> float:
        """The most receptive fields a region can span on this backbone within
        --config.input_size's limit of 1024 px (rounded down to 0.01)."""
        from ebm_jax.models.tracking_backbones import backbone_class

        try:
            net = backbone_class(self.backbone)
            field, stride = net.receptive_field(), net.embedding_grid(self.input_size)[1]
        except (ValueError, KeyError):  # an unknown backbone: named by its own check
            return 16.0
        return math.floor(100 * (1024 - (1024 - self.input_size) % stride) / field) / 100

    def _grow_region(self) -> None:
        """input_size and context_side for `region_fields` (idempotent: a region
        already that large is kept, so `dataclasses.replace` changes nothing)."""
        from ebm_jax.models.tracking_backbones import backbone_class

        net = backbone_class(self.backbone)
        field, stride = net.receptive_field(), net.embedding_grid(self.input_size)[1]
        need = math.ceil(self.region_fields * field)
        size = self.input_size
        if size < need:
            size += math.ceil((need - size) / stride) * stride
        if size > 1024:
            raise ConfigError(
                f"--config.region_fields={self.region_fields:g} needs a {size} px region "
                f"for the {self.backbone} backbone (receptive field {field} px), above "
                f"--config.input_size's limit of 1024: at most "
                f"{math.floor(100 * (1024 - (1024 - self.input_size) % stride) / field) / 100:g} "
                "fields")
        if size != self.input_size:
            object.__setattr__(self, "context_side",
                               self.context_side * size / self.input_size)
            object.__setattr__(self, "input_size", size)


# The named presets the SoCL config files start from (`preset`): every experiment of a
# variant shares its data, widths and schedules (and so its stages); "quick" is the
# Config defaults, "paper" the tracking recipe's paper data and Box-Siam schedule.
PRESETS = {
    "quick": {},
    "tiny": dict(tracking.TINY_DATA, num_train_sequences=4, steps=2, batch_size=2,
                 socl_steps=2, videos=2, input_size=127, context_side=64.0,
                 annotate_every=2, strip_sequences=0, theta_b_sweep=(0.5, 0.8),
                 b_p_sweep=(0.6,), alphas=(0.5,)),
    # GOT-10k train: 1000 epochs of 9335 videos / 96 per batch, lr x 0.1 at 500
    "paper": dict(tracking.PAPER_DATA, socl_steps=97_240, videos=96, input_size=255,
                  context_side=255.0, annotate_every=1, points_from_boxes=True),
}


# the "moco" variant: the quick profile from the project's MoCo-pretrained ResNet-18,
# fine-tuned with the backbone learning rate x0.1 (the setting chosen on validation)
MOCO_START = dict(init="moco", backbone="resnet18", backbone_lr_scale=0.1)


# the scene-shortcut studies (docs: "SoCL: the scene shortcut"), as named variants of
# the MoCo start: four times the videos, each annotated every 8th frame; the targets
# of a scene in groups of 4 (negatives that share the scene); moving on one path
MORE_VIDEOS = dict(annotate_every=8, diagnostic_pairs=256)
SCENE_GROUPS = dict(scene_group=4)
SCENE_PATH = dict(scene_group=4, scene_path=True)
# Table 1 and Figure 8 from the MoCo start on 160 videos, with and without the shortcut
MOCO160 = {"moco160": ("moco", dict(num_train_sequences=160, **MORE_VIDEOS)),
           "moco160_path": ("moco", dict(num_train_sequences=160, **MORE_VIDEOS,
                                         **SCENE_PATH))}


def preset(variant: str, *, quick: dict | None = None, tiny: dict | None = None,
           paper: dict | None = None, moco: dict | None = None,
           studies: dict | None = None, **fields) -> Config:
    """The Config of preset `variant` ("quick", "tiny", "paper", or "moco": quick with
    `MOCO_START`) with `fields`, and the fields given for that variant (`quick=`,
    `tiny=`, `paper=`, `moco=`) over them. `studies` = {name: (preset, fields)} names
    further variants, each a preset (or another study) with fields over it (one command
    per docs table)."""
    if studies and variant in studies:
        base, extra = studies[variant]
        rest = {k: v for k, v in studies.items() if k != variant}  # no cycles
        return dataclasses.replace(preset(base, quick=quick, tiny=tiny, paper=paper,
                                          moco=moco, studies=rest, **fields), **extra)
    if variant == "moco":
        return dataclasses.replace(preset("quick", quick=quick, **fields),
                                   **{**MOCO_START, **(moco or {})})
    return tracking.config_from_preset(Config, PRESETS, variant, fields,
                                       {"quick": quick, "tiny": tiny, "paper": paper})


extras = tracking.extras  # the tracking data: records streamed by grain


def check(cfg: Config, ctx: RunContext) -> Opened:
    """The tracking recipe's checks (roots, devices, memory, the data), then SoCL's: a
    batch must fit, the training sequences must carry points and every budget must buy
    enough sequences. Returns the opened data and budget plan, which `run` takes."""
    from ebm_jax import checks
    from ebm_jax.models.tracking_backbones import tracking_backbone_flops

    data, validation = held_out(cfg, with_points(cfg, ctx, tracking.check(cfg, ctx)))
    if any(a.tracker.name == "dcf" for a in arms_of(cfg)):
        check_dcf(cfg)
    if cfg.experiment == "table5":
        from ebm_jax.tracking.pseudo_boxes import check_points_on_frame

        # the 20 px rule moves the tracker onto these points. They may leave the frame:
        # the readers have checked them against the boxes (a box centre lies off the
        # frame where the box is partly out of view; a noisy point may too)
        for seq in data.train:
            check_points_on_frame(stages.point_annotations(seq, cfg.points), seq.image_size,
                                  f"--config.points={cfg.points}: sequence {seq.name!r}, ",
                                  off_frame=math.inf)
    if (2 * cfg.videos) % ctx.num_devices:
        raise ValueError(f"2 x --config.videos ({2 * cfg.videos}) must be divisible by "
                         f"--devices {ctx.num_devices}")
    checks.fits_in_memory(
        f"a SoCL batch ({2 * cfg.videos} regions of {cfg.input_size}x{cfg.input_size}, "
        f"{cfg.backbone} width {cfg.width})",
        2 * cfg.videos * 0.4 * tracking_backbone_flops(cfg.backbone, cfg.width,
                                                       cfg.input_size),
        hint="lower --config.videos, --config.input_size or --config.width")
    for kind in point_kinds(arms_of(cfg)):
        annotated = [stages.annotated_frames(s, kind, cfg.annotate_every) for s in data.train]
        if sum(len(a) > 1 for a in annotated) < cfg.videos:
            raise ValueError(f"--config.videos={cfg.videos} videos per batch, but only "
                             f"{sum(len(a) > 1 for a in annotated)} training sequences have "
                             f"two annotated frames ({kind} points)")
    return Opened(data, validation,
                  budget_plan(cfg, ctx, data) if budgeted(arms_of(cfg)) else None)


def run(cfg: Config, ctx: RunContext, opened: Opened | None = None) -> Report:
    from ebm_jax.report import socl as report

    opened = opened if opened is not None else Opened(
        *held_out(cfg, with_points(cfg, ctx, tstages.open_data(cfg, ctx))), None)
    data, plan, validation = opened.data, opened.plan, opened.validation
    if cfg.experiment == "moco_start":  # no arm: the start's settings on the probe's val
        from ebm_jax.recipes.tracking.backbone_pretraining import screen
        from ebm_jax.report.moco_start import moco_screen_report

        return moco_screen_report(
            cfg, screen(cfg, ctx, tstages.held_out(data, cfg), cfg.moco_screen), data.train)
    arms = arms_of(cfg)
    if plan is None and budgeted(arms):
        plan = budget_plan(cfg, ctx, data)
    tops = {kind: stages.top_cache(ctx, data.train, data.identity["train"], kind,
                                   cfg.annotate_every) for kind in point_kinds(arms)}
    env = SoCLRun(cfg, ctx, data, plan, tops)
    if cfg.experiment == "lst":  # chosen on validation: the test split is never tracked
        split = "generated-validation"
        eval_sets = {split: (validation[1], validation[0])}
    else:
        split = "generated-test"
        eval_sets = {split: (data.identity[split], data.eval_sets[split])}
    res = run_arms(env, ctx, arms, cfg.seeds, eval_sets, tracker_crop=cfg.tracker_crop)
    diagnostics = socl_diagnostics.run_diagnostics(env, arms, res.trained, validation)
    experiment = EXPERIMENTS[cfg.experiment]
    extra = experiment.after(env, arms, res, eval_sets) if experiment.after else None
    rows = res.rows[split]
    # an arm on another arm's backbone trained nothing of its own
    training = {a.label: [{"seed": seed, **(res.trained[seed][a.label].figures.asdict()
                                            if res.trained[seed][a.label].figures
                                            and not dict(a.about).get("backbone_of")
                                            else {})}
                          for seed in cfg.seeds] for a in arms}
    budget = ({f"{m} {h:g} h": {"sequences": len(i), "frames": s}
               for (m, h), (i, s) in plan.items()} if plan is not None else None)
    return report.socl_report(cfg, arms, rows, training, res.static[split],
                              split=split.removeprefix("generated-"),
                              pairs=pairs_of(arms), paper=EXPERIMENTS[cfg.experiment].paper,
                              tops=tops, train=data.train, budget=budget, extra=extra,
                              diagnostics=diagnostics, start=_start(cfg, ctx, data))


def _start(cfg: Config, ctx: RunContext, data) -> dict | None:
    """The MoCo start's settings and probe (`tracking.backbone_start`; of the first
    seed's start), with `moco_per_seed` every seed's start in figures under "per_seed"
    (`backbone_pretraining.start_figures`); None without `init="moco"`."""
    if cfg.init != "moco":
        return None
    start = tracking.backbone_start(arms_lib.seed_config(cfg, cfg.seeds[0]), ctx, data)
    if cfg.moco_per_seed:
        from ebm_jax.recipes.tracking.backbone_pretraining import start_figures

        held = tstages.held_out(data, cfg)
        start["per_seed"] = [{"seed": seed, **start_figures(arms_lib.seed_config(cfg, seed),
                                                            ctx, held)}
                             for seed in cfg.seeds]
    return start
