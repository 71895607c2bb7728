"""SoCL (Wu & Chan, "Learning Tracking Representations from Single Point Annotations"):
SiamFC's backbone learned from point annotations by soft contrastive learning, against
its baselines, on the generated tracking benchmark. One recipe for the paper's
experiments; `experiment` picks the arms (rows) that are trained and tracked:

    table1    GST, +SNS, +mix-up, +LST (sec. 4.2, Table 1)
    figure7   theta_b and b_p sweeps (Fig. 7; theta_p ~ U[b_p, 1))
    figure8   BCE-Siam on pseudo boxes thresholded from TOP maps at each alpha vs
              SoCL-Siam (Fig. 8)
    table2    Box-Siam vs SoCL-Siam at equal annotation time (10.2 s per box, 2.27 s per
              point), at each budget (Table 2 / Fig. 9)
    table6    SoCL-Siam on clean points vs points shifted `point_shift` px (Table 6)
    table4    annotation and training fees from the counts and the measured times
              (Table 4)

Every arm is trained once per seed in `seeds` and tracks the generated test split with
the SiamFC tracker; tables give mean +- sd over seeds and paired differences (same
seed: the same initial weights and batch order), and a difference is called real only
where it exceeds twice its standard error. The hyperparameters are the paper's (tau,
theta_b, b_p, Adam 3e-4 with a x0.1 drop at half); the model width, the number of steps,
the batch of videos and the context size are scaled to the machine and chosen before
any test-split result was seen. Stages: `ebm_jax.recipes.socl_stages`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ebm_jax.config import Checks, ConfigError
from ebm_jax.recipes import socl_stages as stages
from ebm_jax.recipes import tracking
from ebm_jax.recipes import tracking_stages as tstages
from ebm_jax.report import Report
from ebm_jax.train.stages import RunContext

__all__ = ["Config", "check", "run"]

EXPERIMENTS = ("table1", "figure7", "figure8", "table2", "table6", "table4")


@dataclasses.dataclass(frozen=True)
class Config(tracking.Config):
    """The tracking recipe's data and Box-Siam fields, plus SoCL's. The defaults are the
    quick profile (2 CPU cores): the data, width, Box-Siam steps and seeds of the
    tracking recipe's quick variant, so that the two share data and stages."""

    num_train_sequences: int = 50
    num_test_sequences: int = 30
    num_frames: int = 80
    width: float = 0.25
    steps: int = 600
    seeds: tuple[int, ...] = (0, 1, 2)
    experiment: str = "table1"
    points: str = "clean"  # SoCL's point annotations: "clean" (box centres) or "noisy"
    annotate_every: int = 2  # annotated frames: every this-many-th frame
    top_temperature: float = 1.0  # softmax temperature of the TOP map (the paper: 1)
    videos: int = 12  # N: videos per batch (2N frames; the paper: 96 videos, batch 192)
    socl_steps: int = 300
    socl_lr: float = 3e-4
    socl_lr_drop: float = 0.5  # lr x 0.1 after this fraction of the steps
    input_size: int = 159  # context region side in input pixels (10 x 10 feature grid)
    context_side: float = 144.0  # context region side in frame pixels
    shift_jitter: float = 0.125  # region centre moved up to this x the side
    scale_jitter: float = 1.25  # region side scaled within [1/s, s]
    tau: float = 0.5
    theta_b: float = 0.8
    b_p: float = 0.6
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

    def __post_init__(self):
        super().__post_init__()
        c = Checks(self)
        c.one_of("experiment", EXPERIMENTS)
        c.one_of("points", ("clean", "noisy"))
        for f in ("annotate_every", "socl_steps"):
            c.int_range(f, 1)
        c.int_range("videos", 2)
        c.int_range("input_size", 87, 1024)
        for f in ("top_temperature", "socl_lr", "tau", "context_side", "box_seconds",
                  "point_seconds", "box_fee", "point_fee", "gpu_hour_fee"):
            c.positive(f)
        c.float_range("socl_lr_drop", 0.0, 1.0)
        c.float_range("shift_jitter", 0.0, 0.5)
        c.float_range("scale_jitter", 1.0, 4.0)
        for f in ("theta_b", "b_p"):
            c.float_range(f, 0.0, 1.0, open_low=True)
        for f, values, low in (("theta_b_sweep", self.theta_b_sweep, 0.0),
                               ("b_p_sweep", self.b_p_sweep, 0.0),
                               ("alphas", self.alphas, 0.0),
                               ("budgets_hours", self.budgets_hours, 0.0)):
            if not values or not all(isinstance(v, (int, float)) and v > low
                                     and (f == "budgets_hours" or v <= 1) for v in values):
                rng = "(0, inf)" if f == "budgets_hours" else "(0, 1]"
                raise ConfigError(f"--config.{f} must be a non-empty tuple of values in "
                                  f"{rng}, got {values!r}")


def arms_of(cfg: Config) -> list[stages.Arm]:
    """The rows of `cfg.experiment`."""
    Arm, p = stages.Arm, cfg.points
    full = Arm("SoCL-Siam", "socl", points=p)
    if cfg.experiment == "table1":
        return [Arm("GST", "socl", (("use_sns", False), ("use_mix", False),
                                    ("use_lst", False)), points=p),
                Arm("+SNS", "socl", (("use_mix", False), ("use_lst", False)), points=p),
                Arm("+mix-up", "socl", (("use_lst", False),), points=p),
                Arm("+LST (SoCL)", "socl", points=p), Arm("random backbone", "random")]
    if cfg.experiment == "figure7":
        return ([Arm(f"theta_b={v:g}", "socl", (("theta_b", float(v)),), points=p, x=v)
                 for v in cfg.theta_b_sweep]
                + [Arm(f"b_p={v:g}", "socl", (("b_p", float(v)),), points=p, x=v)
                   for v in cfg.b_p_sweep])
    if cfg.experiment == "figure8":
        return ([Arm(f"BCE-Siam alpha={a:g}", "bce-siam", alpha=float(a), points=p, x=a)
                 for a in cfg.alphas] + [full, Arm("random backbone", "random")])
    if cfg.experiment == "table2":
        return [a for h in cfg.budgets_hours for a in (
            Arm(f"Box-Siam {h:g} h", "box-siam", budget_hours=float(h), x=h),
            Arm(f"SoCL-Siam {h:g} h", "socl", points=p, budget_hours=float(h), x=h))]
    if cfg.experiment == "table6":
        return [Arm("SoCL-Siam, clean points", "socl", points="clean"),
                Arm(f"SoCL-Siam, points shifted {cfg.point_shift:g} px", "socl",
                    points="noisy")]
    return [Arm("Box-Siam", "box-siam"), full]  # table4


def check(cfg: Config, ctx: RunContext) -> None:
    """The tracking recipe's checks (roots, devices, memory, the data), then SoCL's: a
    batch must fit and the training sequences must carry points."""
    from ebm_jax import checks
    from ebm_jax.models.alexnet import alexnet_flops

    tracking.check(cfg, ctx)
    if (2 * cfg.videos) % ctx.num_devices:
        raise ValueError(f"2 x --config.videos ({2 * cfg.videos}) must be divisible by "
                         f"--devices {ctx.num_devices}")
    checks.fits_in_memory(
        f"a SoCL batch ({2 * cfg.videos} regions of {cfg.input_size}x{cfg.input_size}, "
        f"AlexNet width {cfg.width})",
        2 * cfg.videos * 0.4 * alexnet_flops(cfg.width, cfg.input_size),
        hint="lower --config.videos, --config.input_size or --config.width")
    data = _open(cfg, ctx)
    kinds = {a.points for a in arms_of(cfg) if a.method in ("socl", "bce-siam")}
    for kind in kinds:
        annotated = [stages.annotated_frames(s, kind, cfg.annotate_every) for s in data.train]
        if sum(len(a) > 1 for a in annotated) < cfg.videos:
            raise ValueError(f"--config.videos={cfg.videos} videos per batch, but only "
                             f"{sum(len(a) > 1 for a in annotated)} training sequences have "
                             f"two annotated frames ({kind} points)")
    if cfg.experiment == "table2":
        _budget_plan(cfg, ctx, data)  # every budget buys enough sequences


def _open(cfg: Config, ctx):
    """The tracking recipe's data; with `points_from_boxes`, training sequences without
    points get the box centres (and shifted centres) as their point annotations."""
    data = tracking._open(cfg, ctx)
    if not cfg.points_from_boxes:
        return data
    train = [stages.points_from_boxes(s, cfg.point_shift, ctx.seed_of("points", s.name))
             for s in data.train]
    identity = {**data.identity, "train": {"of": data.identity["train"],
                                           "points_from_boxes": cfg.point_shift}}
    return dataclasses.replace(data, train=train, identity=identity)


def _budget_plan(cfg: Config, ctx, data) -> dict:
    """{(method, hours): (sequence indices, annotated frames)} of the table2 budgets."""
    annotated = [stages.annotated_frames(s, cfg.points, cfg.annotate_every)
                 for s in data.train]
    plan, total = {}, sum(len(a) for a in annotated)
    for h in cfg.budgets_hours:
        for method, per in (("box-siam", cfg.box_seconds), ("socl", cfg.point_seconds)):
            frames = int(h * 3600 / per)
            idx, spent = stages.budget_subset(data.train, annotated, frames,
                                              seed=ctx.seed_of("budget", "order"))
            if frames > total:
                raise ValueError(
                    f"--config.budgets_hours: {h:g} h buys {frames} {method} frames, more "
                    f"than the {total} annotated frames of the whole train split: lower "
                    "the budget or raise --config.num_train_sequences")
            need = cfg.videos if method == "socl" else 1
            if len(idx) < need:
                raise ValueError(
                    f"--config.budgets_hours: {h:g} h buys {frames} {method} frames, "
                    f"{len(idx)} sequences, but {method} needs at least {need}: raise the "
                    "budget or --config.num_train_sequences")
            plan[(method, h)] = (idx, spent)
    return plan


def _subset(sequences, idx, annotated=None):
    """The sequences `idx`, with boxes only on their annotated frames when given."""
    out = []
    for i in idx:
        seq = sequences[i]
        if annotated is not None:
            boxes = np.full_like(np.asarray(seq.boxes, np.float64), np.nan)
            boxes[annotated[i]] = seq.boxes[annotated[i]]
            seq = dataclasses.replace(seq, boxes=boxes)
        out.append(seq)
    return out


def _train(cfg: Config, ctx, data, arm: stages.Arm, seed: int, cache: dict):
    """(stage identity or None, model, training figures or None) of one arm and seed."""
    every = cfg.annotate_every
    all_idx = list(range(len(data.train)))
    idx, spent = all_idx, None
    if arm.budget_hours is not None:
        idx, spent = cache.setdefault("plan", _budget_plan(cfg, ctx, data))[
            (arm.method, arm.budget_hours)]
    ident = {"of": data.identity["train"], "every": every}
    if idx != all_idx:
        ident["sequences"] = [int(i) for i in idx]
    if arm.method == "random":
        return None, tstages.build_model(cfg, ctx, f"socl-s{seed}"), None
    if arm.method == "box-siam":
        annotated = [np.asarray(stages.annotated_frames(s, "clean", every))
                     for s in data.train]
        name, identity, figures, model = tstages.train_box_siam(
            cfg, ctx, data, seed, sequences=_subset(data.train, idx, annotated),
            data_identity={**ident, "boxes": "true"})
        return identity, model, figures
    key = ("top", arm.points)
    if key not in cache:
        cache[key] = stages.top_cache(cfg, ctx, data.train, data.identity["train"],
                                      arm.points)
    tops = cache[key]
    if arm.method == "bce-siam":
        pseudo = stages.pseudo_box_sequences(data.train, tops, arm.points, arm.alpha)
        name, identity, figures, model = tstages.train_box_siam(
            cfg, ctx, data, seed, sequences=pseudo, name=f"bce-siam-s{seed}",
            data_identity={**ident, "boxes": "pseudo", "alpha": arm.alpha,
                           "points": arm.points,
                           "top": dataclasses.asdict(stages.top_settings(cfg))})
        return identity, model, figures
    sub = _subset(data.train, idx)
    sub_tops = {j: tops[i] for j, i in enumerate(idx) if i in tops}
    name, identity, figures, model = stages.train_socl(cfg, ctx, sub, sub_tops, arm.points,
                                                       ident, arm, seed)
    return identity, model, figures


def run(cfg: Config, ctx: RunContext) -> Report:
    from ebm_jax.report import socl as report

    data = _open(cfg, ctx)
    arms, cache = arms_of(cfg), {}
    test = data.eval_sets["generated-test"]
    set_id = data.identity["generated-test"]
    settings = dataclasses.asdict(tstages.settings_of(cfg))
    rows: dict[str, list[dict]] = {a.label: [] for a in arms}
    training: dict[str, list[dict]] = {a.label: [] for a in arms}
    static = tstages.evaluate(ctx, "static", {"set": set_id}, "generated-test", test,
                              tstages.static_boxes, progress_desc="static")
    static_row = tstages.scores(static, test)
    for seed in cfg.seeds:
        for arm in arms:
            identity, model, figures = _train(cfg, ctx, data, arm, seed, cache)
            ident = ({"trained": identity} if identity is not None
                     else {"start_of": f"socl-s{seed}", "width": cfg.width,
                           "run_seed": ctx.seed})
            recs = tstages.evaluate(
                ctx, f"{arm.method}-s{seed}", {**ident, "set": set_id, "tracking": settings},
                "generated-test", test, tstages.siamfc_runner(model, cfg),
                progress_desc=f"{arm.label} s{seed}")
            row = {"seed": seed, **tstages.scores(recs, test)}
            rows[arm.label].append(row)
            training[arm.label].append({"seed": seed, **(figures.asdict() if figures else {})})
            ctx.log(f"{arm.label} (seed {seed}): AUC {row['auc']:.3f}, precision "
                    f"{row['precision']:.3f}, AO {row['ao']:.3f}")
    tops = {k[1]: v for k, v in cache.items() if isinstance(k, tuple) and k[0] == "top"}
    budget = ({f"{m} {h:g} h": {"sequences": len(i), "frames": s}
               for (m, h), (i, s) in cache["plan"].items()} if "plan" in cache else None)
    return report.socl_report(cfg, arms, rows, training, static_row, tops=tops,
                              train=data.train, budget=budget)
