"""Box-Siam: SiamFC (Bertinetto et al. 2016) trained on ground-truth boxes, the
fully-supervised baseline of SoCL (seed 003, Table 2), evaluated with the OTB and GOT-10k
toolkit metrics beside two trackers that learn nothing: one that never moves (the first
box in every frame) and SiamFC with its random initial backbone.

Stages (see `ebm_jax.recipes.tracking_stages`):

    <workdir>/data/<split>-<hash>         the generated benchmark (train and test splits,
                                          disjoint photos)
    <workdir>/box-siam-s<seed>-<hash>     training, one stage per training seed
    <workdir>/eval-<tracker>-<hash>/      per-sequence results of each tracker and set

The training seeds (`seeds`) give the error bars: each seed trains its own Box-Siam
from its own random start, and the random-backbone baseline of that seed is that start.
No hyperparameter is tuned: the tracking and training settings are SiamFC's published
ones (REFERENCE.md sec. 4); only the model width, the number of steps and the data size
are scaled to the machine.

The "box-head" experiment (seed 000 sec. 5, Table 4; `box_head_arms`) adds, per seed and
loss, a box head trained on that seed's Box-Siam (`box_head_stages.train_box_head`),
tracked by SiamFC's centre at one scale refined on the head's energy, against SiamFC's
own scale search. Its refinement step lengths (and optionally training sigmas) are
chosen on the last `validation_sequences` of the training split, which no arm trains on
(`choose_box_head_settings`), before the test split is tracked once per arm; the same
trackers without the refinement give the coarse FPS (`coarse_evaluation`):

    <workdir>/box-head-<method>-s<seed>-<hash>        a head's training
    <workdir>/eval-box-head-<method>-s<seed>-<hash>/  its tracking (validation: one
                                                      stage per candidate; test)
    <workdir>/eval-coarse-s<seed>-<hash>/             the coarse tracker
"""

from __future__ import annotations

import dataclasses
import functools
import math

from ebm_jax import checks
from ebm_jax.config import Checks, ConfigError
from ebm_jax.recipes import tracking_stages as stages
from ebm_jax.recipes.box_head_stages import box_head_runner, train_box_head
from ebm_jax.recipes.tracking_arms import (Arm, Experiment, Tracker, Trained, pairs_of,
                                           run_arms)
from ebm_jax.report import Report
from ebm_jax.report import tracking as report
from ebm_jax.report.statistics import (mean_sd, paired_seeds_and_sequences,
                                       sequence_difference)
from ebm_jax.tracking.box_head import TRACKING_METHODS, BoxHeadSettings
from ebm_jax.train.stages import RunContext

__all__ = ["BoxHeadSettings", "Config", "check", "preset", "run"]

@dataclasses.dataclass(frozen=True)
class Config:
    """The defaults are the quick profile (`PRESETS["quick"]`: AlexNet width 0.25, 50
    train / 30 test sequences of 80 frames at 320x240, 600 steps, three training seeds;
    about 35-40 min on 2 CPU cores); config files start from `preset`."""

    train_data: str = "generated"  # "generated", or "got10k" (needs got10k_root)
    data_root: str | None = None  # where the generated benchmark goes (default <workdir>/data)
    got10k_root: str | None = None  # a local GOT-10k (train/, val/): val is evaluated
    otb_root: str | None = None  # a local OTB folder: evaluated when given
    num_train_sequences: int = 50
    num_test_sequences: int = 30
    num_frames: int = 80
    frame_height: int = 240
    frame_width: int = 320
    point_shift: float = 20.0  # px, the noisy point annotation's shift (for SoCL)
    box_every: int = 10  # T of the sparse box annotations (for SoCL)
    width: float = 0.25  # AlexNet channel multiplier (1.0: the published net)
    steps: int = 600
    batch_size: int = 8
    lr_start: float = 1e-2
    lr_end: float = 1e-5
    momentum: float = 0.9
    weight_decay: float = 5e-4
    max_gap: int = 100  # frames of a training pair are fewer than this apart
    seeds: tuple[int, ...] = (0, 1, 2)  # training seeds (Box-Siam and its random start)
    strip_sequences: int = 3  # test sequences drawn as a strip of frames with boxes
    strip_frames: int = 6
    reference: tuple[tuple[str, str], ...] = ()
    reference_note: str = ""
    seed: int = 0  # the data's seed
    experiment: str = "box-siam"  # a row of EXPERIMENTS: the arms trained and tracked
    # the box-head experiment (seed 000 sec. 5): the head's settings (the method inside
    # is set per arm), the losses compared, joint training of the backbone, and the
    # validation split (the last `validation_sequences` of the generated training split,
    # trained on by no arm) on which the refinement's step lengths (`step_scales` x
    # box_head.step_lengths) and the training sigmas (`sigma_grid`; () = box_head.sigmas
    # only: each more entry trains every head again) are chosen per method
    box_head: BoxHeadSettings = BoxHeadSettings()
    box_head_methods: tuple[str, ...] = ("kld-is", "nce", "nce+", "ml-is")
    box_head_joint: bool = False
    validation_sequences: int = 0
    step_scales: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    sigma_grid: tuple[tuple[float, ...], ...] = ()

    def __post_init__(self):
        c = Checks(self)
        c.one_of("train_data", ("generated", "got10k"))
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
        c.float_range("width", 0.0625, 4.0)
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
        if not isinstance(self.box_head_joint, bool):
            raise ConfigError(f"--config.box_head_joint must be True or False, got "
                              f"{self.box_head_joint!r}")
        # (a GOT-10k training split's size is known once read: `check`)
        c.int_range("validation_sequences", 0, self.num_train_sequences - 1
                    if self.train_data == "generated" else None)
        if self.experiment == "box-head" and self.validation_sequences < 1:
            raise ConfigError("--config.validation_sequences must be >= 1 for the box-head "
                              "experiment (its step lengths and sigmas are chosen there, "
                              "never on the test split)")
        if not self.step_scales or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool)
                and math.isfinite(x) and x > 0 for x in self.step_scales):
            raise ConfigError(f"--config.step_scales must be one or more numbers > 0, got "
                              f"{self.step_scales!r}")
        for sigmas in self.sigma_grid:
            if not sigmas or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                     and math.isfinite(x) and x > 0 for x in sigmas):
                raise ConfigError(f"--config.sigma_grid must hold groups of numbers > 0 "
                                  f"(\"0.05,0.5;0.1,1.0\"), got {self.sigma_grid!r}")


# The named presets config files start from (`preset`): configs that share stages take
# their sizes from here, so that they cannot drift apart. "quick" is the Config defaults.
TINY_DATA = dict(num_test_sequences=2, num_frames=8, frame_height=96, frame_width=128,
                 width=0.125, seeds=(0,))  # seconds; the tests
PAPER_DATA = dict(  # the published net and SiamFC's schedule: 50 epochs of 6650 pairs
    num_train_sequences=500, num_test_sequences=100, num_frames=150, frame_height=360,
    frame_width=480, width=1.0, steps=41_560, batch_size=8, seeds=(0, 1, 2))
PRESETS = {
    "quick": {},
    "tiny": dict(TINY_DATA, num_train_sequences=3, steps=4, batch_size=4,
                 strip_sequences=1, strip_frames=3),
    "paper": PAPER_DATA,
}


def config_from_preset(config_type, presets: dict, variant: str, fields: dict,
                       per_variant: dict):
    """`config_type` with the preset `variant`, then `fields`, then the fields
    `per_variant[variant]`; a ConfigError names the variants for an unknown one."""
    if variant not in presets:
        raise ConfigError(f"variant must be one of {list(presets)}, got {variant!r}")
    unknown = sorted(set(per_variant) - set(presets))
    if unknown:
        raise ConfigError(f"per-variant fields of {unknown}: the variants are "
                          f"{list(presets)}")
    return config_type(**{**presets[variant], **fields, **(per_variant.get(variant) or {})})


def preset(variant: str, *, quick: dict | None = None, tiny: dict | None = None,
           paper: dict | None = None, **fields) -> Config:
    """The Config of preset `variant` ("quick", "tiny" or "paper") with `fields`, and
    the fields given for that variant (`quick=`, `tiny=`, `paper=`) over them."""
    return config_from_preset(Config, PRESETS, variant, fields,
                              {"quick": quick, "tiny": tiny, "paper": paper})


def check(cfg: Config, ctx: RunContext) -> stages.TrackingData:
    """Every error that can be known before training: roots, devices, memory, then the
    data itself (generated once; every sequence validated by its reader). Returns the
    opened data, which `run` takes."""
    for field in ("got10k_root", "otb_root"):
        if getattr(cfg, field) is not None:
            checks.existing_dir(f"--config.{field}", getattr(cfg, field))
    if cfg.batch_size % ctx.num_devices:
        raise ValueError(f"--config.batch_size {cfg.batch_size} must be divisible by "
                         f"--devices {ctx.num_devices}")
    stages.generated_specs(cfg, ctx)  # the generator's own checks of the sizes
    from ebm_jax.models.alexnet import alexnet_flops

    region = int(round(1.25 * 255))
    checks.fits_in_memory(
        f"a training batch ({cfg.batch_size} pairs of {region}x{region} regions, AlexNet "
        f"width {cfg.width})",
        # activations of forward + backward: ~4 bytes per FLOP / 10 is generous for AlexNet
        cfg.batch_size * 0.4 * (alexnet_flops(cfg.width, 255) + alexnet_flops(cfg.width, 127)),
        hint="lower --config.batch_size or --config.width")
    data = stages.open_data(cfg, ctx)
    from ebm_jax.data.tracking_pairs import pair_batches

    if cfg.validation_sequences >= len(data.train):
        raise ConfigError(f"--config.validation_sequences ({cfg.validation_sequences}) "
                          f"must be fewer than the {len(data.train)} training sequences")
    pair_batches(training_split(data, cfg)[0], batch_size=cfg.batch_size,
                 max_gap=cfg.max_gap, seed=0)
    return data


@dataclasses.dataclass(frozen=True)
class TrackingRun:
    """What an arm's training function gets: the config, the run and the opened data."""

    cfg: Config
    ctx: RunContext
    data: stages.TrackingData


def training_split(data: stages.TrackingData, cfg: Config) -> tuple[list, dict]:
    """The sequences the arms train on, and their identity: the training split less
    its last `validation_sequences` (the validation split; all of it when 0)."""
    v = cfg.validation_sequences
    if not v:
        return data.train, data.identity["train"]
    return data.train[:-v], {"sequences": data.identity["train"], "held_out_last": v}


def validation_split(data: stages.TrackingData, cfg: Config) -> tuple[list, dict]:
    """The last `validation_sequences` of the training split, and their identity."""
    v = cfg.validation_sequences
    return data.train[-v:], {"sequences": data.identity["train"], "last": v}


def train_box_siam(env: TrackingRun, seed: int, used) -> Trained:
    """Box-Siam: SiamFC trained on the training split's boxes (less the validation
    split, where there is one)."""
    if not env.cfg.validation_sequences:
        return stages.train_box_siam(env.cfg, env.ctx, env.data, seed)
    sequences, identity = training_split(env.data, env.cfg)
    return stages.train_box_siam(env.cfg, env.ctx, env.data, seed, sequences=sequences,
                                 data_identity=identity)


def random_start(env: TrackingRun, seed: int, used) -> Trained:
    """SiamFC with the random initial backbone of the same seed's Box-Siam."""
    box = used["box-siam"]
    return Trained(stages.build_model(env.cfg, env.ctx, box.stage),
                   {"start_of": box.identity["trained"]})


def train_box_head_arm(env: TrackingRun, seed: int, used, *,
                       settings: BoxHeadSettings) -> Trained:
    """The box head of `settings` (its loss: `settings.method`) on the same seed's
    Box-Siam backbone (frozen unless `box_head_joint`), trained on the training split
    less the validation split (`box_head_stages.train_box_head`)."""
    box, joint = used["box-siam"], env.cfg.box_head_joint
    sequences, identity = training_split(env.data, env.cfg)
    sigmas = "" if settings.sigmas == env.cfg.box_head.sigmas else "-sigmas" + "_".join(
        f"{x:g}" for x in settings.sigmas)
    t = train_box_head(env.ctx, sequences, data_identity=identity, backbone=box.model,
                       backbone_identity=box.identity["trained"], settings=settings,
                       joint=joint, siamfc=stages.SIAMFC,
                       name=f"box-head-{settings.method}{sigmas}"
                            f"{'-joint' if joint else ''}-s{seed}")
    return Trained(t.net, {"trained": t.identity}, t.figures, t.name)


def box_head_tracker(settings: BoxHeadSettings) -> Tracker:
    """SiamFC's centre (one scale) refined by the box head of `settings`."""
    return Tracker("box-head", settings, box_head_runner)


# the loss comparisons of Table 4 (a - b), where both are in box_head_methods
LOSS_PAIRS = (("nce+", "kld-is"), ("nce+", "nce"), ("nce", "kld-is"))


def box_head_arms(cfg: Config, chosen: dict | None = None) -> list[Arm]:
    """Seed 000's Table 4 here: Box-Siam with SiamFC's own scale search, and one box
    head per loss of `box_head_methods` on that Box-Siam's backbone, compared with the
    scale search and with each other (`LOSS_PAIRS`). `chosen`: the settings of each
    method chosen on the validation split (`choose_box_head_settings`); without it,
    `cfg.box_head`'s."""
    chosen = chosen or {}
    arms = [Arm("box-siam", "box-siam", train_box_siam)]
    for m in cfg.box_head_methods:
        settings = chosen.get(m) or dataclasses.replace(cfg.box_head, method=m)
        versus = ("box-siam",) + tuple(f"box-head-{b}" for a, b in LOSS_PAIRS
                                       if a == m and b in cfg.box_head_methods)
        arms.append(Arm(f"box-head-{m}", f"box-head-{m}",
                        functools.partial(train_box_head_arm, settings=settings),
                        tracker=box_head_tracker(settings), uses=("box-siam",),
                        compared_with=versus, about=(("loss", m),)))
    return arms


def best_candidate(scores: dict[str, list[float]]) -> str:
    """The candidate of highest mean score over seeds (`scores`: candidate -> one score
    per seed); a tie goes to the first in `scores`' order."""
    if not scores:
        raise ValueError("no candidates to choose from")
    means = {k: sum(v) / len(v) for k, v in scores.items()}
    return max(means, key=lambda k: (means[k], -list(means).index(k)))


def candidate_label(sigmas, scale: float) -> str:
    return f"sigmas {'/'.join(f'{x:g}' for x in sigmas)}, steps x{scale:g}"


def choose_box_head_settings(env: TrackingRun, seeds) -> tuple[dict, dict]:
    """Per method of `box_head_methods`, the refinement's step lengths (`step_scales`
    x box_head.step_lengths) and the training sigmas (`sigma_grid`) of highest mean
    AUC over `seeds` on the validation split (the last `validation_sequences` of the
    training split; no arm trains on them), never on the test split. Each candidate's
    tracking is cached per sequence like every evaluation. Returns ({method: settings},
    the validation record for results.json)."""
    cfg, ctx = env.cfg, env.ctx
    val, val_id = validation_split(env.data, cfg)
    sigma_grid = cfg.sigma_grid or (cfg.box_head.sigmas,)
    scores = {m: {} for m in cfg.box_head_methods}
    candidates = {m: {} for m in cfg.box_head_methods}
    for seed in seeds:
        used = {"box-siam": train_box_siam(env, seed, {})}
        for m in cfg.box_head_methods:
            for sigmas in sigma_grid:
                trained = dataclasses.replace(cfg.box_head, method=m, sigmas=sigmas)
                t = train_box_head_arm(env, seed, used, settings=trained)
                for scale in cfg.step_scales:
                    s = dataclasses.replace(trained, step_lengths=tuple(
                        scale * x for x in cfg.box_head.step_lengths))
                    label = candidate_label(sigmas, scale)
                    ident = {**t.identity, "set": val_id,
                             "tracking": dataclasses.asdict(s)}
                    recs = stages.evaluate(ctx, f"box-head-{m}-s{seed}", ident,
                                           "validation", val, box_head_runner(t.model, s),
                                           progress_desc=f"{m} s{seed} {label} on "
                                                         "validation")
                    scores[m].setdefault(label, []).append(stages.scores(recs, val)["auc"])
                    candidates[m][label] = s
    choice = {m: best_candidate(scores[m]) for m in cfg.box_head_methods}
    for m, label in choice.items():
        ctx.log(f"validation: {m} takes {label} (mean AUC "
                f"{sum(scores[m][label]) / len(scores[m][label]):.3f})")
    record = {"sequences": [q.name for q in val], "seeds": list(seeds),
              "auc": scores, "choice": {m: {
                  "candidate": label, "step_lengths": list(candidates[m][label].step_lengths),
                  "sigmas": list(candidates[m][label].sigmas)}
                  for m, label in choice.items()}}
    return {m: candidates[m][label] for m, label in choice.items()}, record


def coarse_evaluation(env: TrackingRun, arms, res, eval_sets) -> None:
    """The box-head arms' coarse tracker (the same model with refine=False: SiamFC's
    centre at one scale, the previous size kept), tracked on every set and seed for
    its FPS beside the refined one's (`coarse_fps` in each box-head row). With a frozen
    backbone it is the same tracker for every loss (one cached evaluation per seed and
    set), added to the results as the arm "coarse" (compared with nothing)."""
    cfg, ctx = env.cfg, env.ctx
    heads = [a for a in arms if a.tracker.name == "box-head"]
    for set_name, (set_id, sequences) in eval_sets.items():
        coarse = []
        for seed in cfg.seeds:
            for arm in heads:
                t = res.trained[seed][arm.label]
                model = (t.identity["trained"] if cfg.box_head_joint
                         else t.identity["trained"]["backbone"])
                ident = {"model": model, "set": set_id, "refine": False,
                         "tracking": dataclasses.asdict(stages.SIAMFC)}
                recs = stages.evaluate(ctx, f"coarse-s{seed}", ident, set_name, sequences,
                                       box_head_runner(t.model, arm.tracker.settings,
                                                       refine=False),
                                       progress_desc=f"coarse s{seed} on {set_name}")
                row = {"seed": seed, **stages.scores(recs, sequences)}
                rows = res.rows[set_name][arm.label]
                next(r for r in rows if r["seed"] == seed)["coarse_fps"] = row["fps"]
                if not cfg.box_head_joint and arm is heads[0]:
                    coarse.append(row)
                    res.records[set_name].setdefault("coarse", {})[seed] = recs
        if coarse:
            res.rows[set_name] = {"box-siam": res.rows[set_name]["box-siam"],
                                  "coarse": coarse,
                                  **{k: v for k, v in res.rows[set_name].items()
                                     if k != "box-siam"}}


def choose_box_head_arms(env: TrackingRun, seeds) -> tuple[list[Arm], dict]:
    """The box-head arms with the settings chosen on the validation split
    (`choose_box_head_settings`), and the validation record."""
    chosen, record = choose_box_head_settings(env, seeds)
    return box_head_arms(env.cfg, chosen), record


# The table of experiments: each one's arms, in the order of its tables, each with its
# training, its tracker (SiamFC's scale search unless given), the arms whose models it
# uses (same seed) and the arms it is compared with ("static": the first box in every
# frame, tracked once per set). A new tracker is one more line here.
EXPERIMENTS = {
    "box-siam": Experiment(lambda cfg: [
        Arm("random", "random", random_start, uses=("box-siam",)),
        Arm("box-siam", "box-siam", train_box_siam, compared_with=("static", "random"))]),
    "box-head": Experiment(box_head_arms, paper="seed 000 Table 4",
                           choose=choose_box_head_arms, after=coarse_evaluation),
}


def run(cfg: Config, ctx: RunContext, data: stages.TrackingData | None = None) -> Report:
    data = data if data is not None else stages.open_data(cfg, ctx)
    eval_sets = {s: (data.identity[s], seqs) for s, seqs in data.eval_sets.items()}
    env = TrackingRun(cfg, ctx, data)
    experiment = EXPERIMENTS[cfg.experiment]
    arms, validation = experiment.arms(cfg), None
    if experiment.choose is not None:  # the trackers' settings, before any testing
        arms, validation = experiment.choose(env, cfg.seeds)
    res = run_arms(env, ctx, arms, cfg.seeds, eval_sets)
    if experiment.after is not None:
        experiment.after(env, arms, res, eval_sets)
    training = {}  # training stage -> its figures
    for seed in cfg.seeds:
        for t in res.trained[seed].values():
            if t.stage is not None:
                training[t.stage] = {"identity_hash": ctx.stage_dir(
                    t.stage, t.identity["trained"]).name, **t.figures.asdict()}
    results: dict[str, dict[str, list[dict]]] = {}  # set -> tracker -> one row per seed
    for set_name, rows in res.rows.items():
        results[set_name] = {"static": [{"seed": None, **res.static[set_name]}], **rows}
    trackers = list(results["generated-test"])
    strip_boxes = {label: {r["name"]: r["boxes"]
                           for r in records[cfg.seeds[0]][:cfg.strip_sequences]}
                   for label, records in res.records["generated-test"].items()}
    summary = {s: {t: {k: dict(zip(("mean", "sd"), mean_sd([x.get(k) for x in r])))
                       for k in ("auc", "precision", "norm_precision", "ao", "sr50",
                                 "sr75", "fps")}
                   for t, r in rows.items()} for s, rows in results.items()}
    for s, rows in results.items():
        auc = {t: [r["sequence_auc"] for r in rows[t]] for t in trackers}
        for a, b in pairs_of(arms):
            summary[s][f"{a} vs {b}"] = (
                paired_seeds_and_sequences(rows[a], rows[b]) if validation is not None
                else sequence_difference(auc[a], auc[b]))
    test = data.eval_sets["generated-test"]
    strips = test[:cfg.strip_sequences]
    figures = {}
    title = (f"Box-Siam (SiamFC, AlexNet width {cfg.width}) trained {cfg.steps} steps on "
             f"{len(data.train)} generated sequences; seeds {list(cfg.seeds)}")
    if validation is not None:
        title = (f"Box heads (KLD-IS, NCE, NCE+, ML-IS) on Box-Siam (SiamFC, AlexNet width "
                 f"{cfg.width}, {cfg.steps} steps; heads {cfg.box_head.steps} steps"
                 f"{', joint' if cfg.box_head_joint else ', frozen backbone'}) against "
                 f"SiamFC's scale search; {len(data.train) - cfg.validation_sequences} "
                 f"training + {cfg.validation_sequences} validation sequences; seeds "
                 f"{list(cfg.seeds)}")
        markdown = report.box_head_markdown(summary, pairs_of(arms), validation,
                                            title=title, seeds=cfg.seeds,
                                            reference=cfg.reference,
                                            reference_note=cfg.reference_note)
        figures["generated-test_auc.png"] = functools.partial(
            report.auc_dots_figure, results["generated-test"], "generated-test")
        markdown += "\n![AUC per arm, seeds as dots](generated-test_auc.png)\n"
    else:
        markdown = report.report_markdown(summary, pairs_of(arms), title=title,
                                          seeds=cfg.seeds, reference=dict(cfg.reference),
                                          reference_note=cfg.reference_note)
    for s in results:
        curves = {t: results[s][t] for t in trackers}
        figures[f"{s}_success.png"] = functools.partial(report.success_figure, curves, s)
        figures[f"{s}_precision.png"] = functools.partial(report.precision_figure, curves, s)
        markdown += f"\n![success plot, {s}]({s}_success.png) " \
                    f"![precision plot, {s}]({s}_precision.png)\n"
    if strips:
        figures["strips.png"] = functools.partial(report.strip_figure, strips, strip_boxes,
                                                  cfg.strip_frames)
        markdown += "\n![frames with the true (green) and tracked boxes](strips.png)\n"
    payload = {"experiment": cfg.experiment, "train_sequences": len(data.train),
               "eval_sets": {s: len(v) for s, v in data.eval_sets.items()},
               "training": training, "tables": results, "summary": summary,
               "reference": dict(cfg.reference)}
    if validation is not None:
        payload["arms"] = [a.describe() for a in arms]
        payload["validation"] = validation
    return Report(payload, markdown, figures)
