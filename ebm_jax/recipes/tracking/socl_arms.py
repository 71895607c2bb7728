"""The arms of the SoCL recipe's experiments (`ebm_jax.recipes.tracking.socl.EXPERIMENTS`): what
each arm trains and on which sequences, and each experiment's table of arms (Wu & Chan,
"Learning Tracking Representations from Single Point Annotations": Tables 1-6, Figures
7 and 8). Every `cfg` is the recipe's Config, which this module never imports: a recipe
imports its arms, never the reverse.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from ebm_jax.recipes.tracking import socl_stages as stages
from ebm_jax.recipes.tracking import sparse_boxes
from ebm_jax.recipes.tracking import stages as tstages
from ebm_jax.recipes.tracking.arms import Arm, Trained, dcf_tracker, reuse_model

__all__ = ["LST_VARIANTS", "START", "SoCLRun", "TRAINED", "arm_settings", "budgeted",
           "figure7", "figure8", "for_seed", "lst_study", "point_kinds", "seed_config",
           "split_overrides",
           "start_label", "table1", "table2", "table3", "table4", "table5", "table6",
           "train_bce_siam", "train_box_siam", "train_random", "train_socl",
           "training_key"]


@dataclasses.dataclass(frozen=True)
class SoCLRun:
    """What an arm's training function gets: the config, the run, the data, the budget
    plan and the TOP proposals of each kind of points ({kind: `top_cache`})."""

    cfg: Any  # the SoCL recipe's Config
    ctx: Any  # the RunContext
    data: tstages.TrackingData
    plan: dict | None
    tops: dict


def seed_config(cfg, seed: int):
    """The config a training seed's arms train with: `cfg`, but with
    `cfg.moco_per_seed` the MoCo start of seed `seed` (MoCo seed `cfg.moco.seed + seed`:
    its own pretraining stage, `moco-s<seed>`), so that the seeds' spread holds the
    start's variation as well as SoCL's."""
    if not getattr(cfg, "moco_per_seed", False):
        return cfg
    return dataclasses.replace(cfg, moco=dataclasses.replace(cfg.moco,
                                                             seed=cfg.moco.seed + seed))


def for_seed(env: SoCLRun, seed: int) -> SoCLRun:
    """`env` with the config of training seed `seed` (`seed_config`)."""
    cfg = seed_config(env.cfg, seed)
    return env if cfg is env.cfg else dataclasses.replace(env, cfg=cfg)


def point_kinds(arms) -> list[str]:
    """The kinds of points the arms train on, in the table's order."""
    return list(dict.fromkeys(dict(a.about)["points"] for a in arms
                              if a.method in ("socl", "bce-siam")))


def budgeted(arms) -> bool:
    """Whether an arm trains on an annotation budget's sequences (the budget plan)."""
    return any(dict(a.about).get("budget_hours") is not None for a in arms)


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


def _sequences(env: SoCLRun, method: str, budget_hours: float | None):
    """(indices of the training sequences, data identity) of a method at a budget."""
    idx = list(range(len(env.data.train)))
    ident = {"of": env.data.identity["train"], "every": env.cfg.annotate_every}
    if budget_hours is not None:
        sub, _ = env.plan[(method, budget_hours)]
        if sub != idx:
            idx, ident = sub, {**ident, "sequences": [int(i) for i in sub]}
    return idx, ident


def train_random(env: SoCLRun, seed: int, earlier) -> Trained:
    """No training: the initial weights every SoCL arm of the seed starts from (random,
    ImageNet's conv1-layer3 where `cfg.pretrained`, or MoCo's with `init="moco"`)."""
    env = for_seed(env, seed)
    cfg, ctx = env.cfg, env.ctx
    return Trained(tstages.build_model(cfg, ctx, f"socl-s{seed}", env.data),
                   {"start_of": f"socl-s{seed}", "width": cfg.width, "run_seed": ctx.seed,
                    **tstages.backbone_identity(cfg, env.data)})


def train_box_siam(env: SoCLRun, seed: int, earlier, *,
                   budget_hours: float | None = None) -> Trained:
    """Box-Siam on the true boxes of the annotated frames (of a budget's sequences)."""
    env = for_seed(env, seed)
    idx, ident = _sequences(env, "box-siam", budget_hours)
    annotated = [np.asarray(stages.annotated_frames(s, "clean", env.cfg.annotate_every))
                 for s in env.data.train]
    return tstages.train_box_siam(env.cfg, env.ctx, env.data, seed,
                                  sequences=_subset(env.data.train, idx, annotated),
                                  data_identity={**ident, "boxes": "true"})


def train_bce_siam(env: SoCLRun, seed: int, earlier, *, points: str,
                   alpha: float) -> Trained:
    """BCE-Siam: SiamFC's loss on the pseudo boxes thresholded at `alpha` from the TOP
    maps of the annotated frames (paper Fig. 8)."""
    env = for_seed(env, seed)
    _, ident = _sequences(env, "bce-siam", None)
    pseudo = stages.pseudo_box_sequences(env.data.train, env.tops[points], points, alpha)
    return tstages.train_box_siam(
        env.cfg, env.ctx, env.data, seed, sequences=pseudo, name=f"bce-siam-s{seed}",
        data_identity={**ident, "boxes": "pseudo", "alpha": alpha, "points": points,
                       "top": dataclasses.asdict(stages.TOP_SETTINGS)})


# the config fields an arm may set for its own SoCL training (the TOP maps' softmax
# temperature, the context region's side and the fine-tuning options); the rest of an
# arm's `socl` overrides are SoCLSettings'
CONFIG_FIELDS = ("top_temperature", "context_side", "backbone_lr_scale", "freeze_bn",
                 "freeze")


# the arm methods that train a stage of their own (the others reuse one, or none)
TRAINED = ("socl", "box-siam", "bce-siam")


def split_overrides(cfg, socl: tuple) -> tuple[Any, tuple]:
    """(the config with the `CONFIG_FIELDS` of an arm's `socl` overrides, the rest: the
    SoCLSettings overrides as (field, value) pairs)."""
    region = {k: v for k, v in socl if k in CONFIG_FIELDS}
    return (dataclasses.replace(cfg, **region) if region else cfg,
            tuple((k, v) for k, v in socl if k not in CONFIG_FIELDS))


def arm_settings(cfg, arm: Arm) -> tuple[Any, Any]:
    """(config, SoCLSettings) an arm trains with: the run's, with the arm's overrides."""
    arm_cfg, rest = split_overrides(cfg, dict(arm.about)["socl"])
    return arm_cfg, stages.socl_settings(arm_cfg, rest)


def training_key(cfg, arm: Arm) -> tuple:
    """What an arm's training stage depends on beyond the seed and the data: arms of
    equal keys train the same stage (Figure 7's paper values are the plain SoCL-Siam
    stage), so the run counts it once."""
    about = dict(arm.about)
    arm_cfg, settings = arm_settings(cfg, arm)
    return (arm.method, about["points"], about["budget_hours"], about["alpha"], settings,
            tuple(getattr(arm_cfg, k) for k in CONFIG_FIELDS))


def train_socl(env: SoCLRun, seed: int, earlier, *, label: str, points: str,
               socl: tuple = (), budget_hours: float | None = None) -> Trained:
    """SoCL-Siam (loss 10) on the `points` annotations, with the overrides `socl` (of
    SoCLSettings, and of the config's `CONFIG_FIELDS`), on a budget's sequences when
    given."""
    env = for_seed(env, seed)
    idx, ident = _sequences(env, "socl", budget_hours)
    tops = env.tops[points]
    sub = _subset(env.data.train, idx)
    sub_tops = {j: tops[i] for j, i in enumerate(idx) if i in tops}
    cfg, rest = split_overrides(env.cfg, socl)
    return stages.train_socl(cfg, env.ctx, sub, sub_tops, points, ident, rest, seed,
                             label=label, data=env.data)


def _arm(label: str, method: str, *, socl: tuple = (), alpha: float | None = None,
         points: str = "clean", budget_hours: float | None = None,
         x: float | None = None, compared_with: tuple[str, ...] = (),
         backbone_of: str | None = None, tracker=None) -> Arm:
    """An arm of a SoCL table: its training function from `method` and its settings;
    with `backbone_of`, the model of that arm (same seed) with `tracker` (default
    SiamFC's)."""
    extra = {} if tracker is None else {"tracker": tracker}
    if backbone_of is not None:
        return Arm(label, method, functools.partial(reuse_model, label=backbone_of),
                   uses=(backbone_of,), compared_with=tuple(compared_with), x=x,
                   about=(("socl", socl), ("alpha", alpha), ("points", points),
                          ("budget_hours", budget_hours), ("backbone_of", backbone_of)),
                   **extra)
    train = {
        "random": train_random,
        "box-siam": functools.partial(train_box_siam, budget_hours=budget_hours),
        "bce-siam": functools.partial(train_bce_siam, points=points, alpha=alpha),
        "socl": functools.partial(train_socl, label=label, points=points, socl=socl,
                                  budget_hours=budget_hours),
    }[method]
    return Arm(label, method, train, compared_with=tuple(compared_with), x=x,
               about=(("socl", socl), ("alpha", alpha), ("points", points),
                      ("budget_hours", budget_hours)))


def start_label(cfg) -> str:
    """The label of a table's no-training arm, naming the start every SoCL arm of the
    seed trains from: "random backbone", "MoCo start" (`init="moco"`) or "ImageNet
    start" (`pretrained`)."""
    if cfg.init == "moco":
        return "MoCo start"
    return "random backbone" if cfg.pretrained is None else "ImageNet start"


def table1(cfg) -> list[Arm]:
    p, lst, start = cfg.points, "+LST (SoCL)", start_label(cfg)
    return [_arm("GST", "socl", socl=(("use_sns", False), ("use_mix", False),
                                      ("use_lst", False)), points=p),
            _arm("+SNS", "socl", socl=(("use_mix", False), ("use_lst", False)), points=p,
                 compared_with=("GST",)),
            _arm("+mix-up", "socl", socl=(("use_lst", False),), points=p,
                 compared_with=("+SNS",)),
            _arm(lst, "socl", points=p, compared_with=("+mix-up", "GST", start)),
            _arm(start, "random")]


def figure7(cfg) -> list[Arm]:
    arms = []
    for field, sweep, chosen in (("theta_b", cfg.theta_b_sweep, cfg.theta_b),
                                 ("b_p", cfg.b_p_sweep, cfg.b_p)):
        base = f"{field}={chosen:g}" if chosen in sweep else None  # the paper's value
        arms += [_arm(f"{field}={v:g}", "socl", socl=((field, float(v)),), points=cfg.points,
                      x=v, compared_with=(base,) if base and v != chosen else ())
                 for v in sweep]
    return arms


def figure8(cfg) -> list[Arm]:
    start = start_label(cfg)
    bce = [_arm(f"BCE-Siam alpha={a:g}", "bce-siam", alpha=float(a), points=cfg.points, x=a)
           for a in cfg.alphas]
    return bce + [_arm("SoCL-Siam", "socl", points=cfg.points,
                       compared_with=(*(a.label for a in bce), start)),
                  _arm(start, "random")]


def table2(cfg) -> list[Arm]:
    """Box-Siam and SoCL-Siam at each budget, and the start both train from (no
    annotation at all): does either keep it?"""
    start = start_label(cfg)
    return [a for h in cfg.budgets_hours for a in (
        _arm(f"Box-Siam {h:g} h", "box-siam", budget_hours=float(h), x=h),
        _arm(f"SoCL-Siam {h:g} h", "socl", points=cfg.points, budget_hours=float(h), x=h,
             compared_with=(f"Box-Siam {h:g} h", start)))] + [_arm(start, "random")]


def table6(cfg) -> list[Arm]:
    clean = "SoCL-Siam, clean points"
    return [_arm(clean, "socl", points="clean"),
            _arm(f"SoCL-Siam, points shifted {cfg.point_shift:g} px", "socl",
                 points="noisy", compared_with=(clean,))]


def table3(cfg) -> list[Arm]:
    dcf, start = dcf_tracker(tstages.dcf_settings(cfg)), start_label(cfg)
    return [_arm("Box-Siam", "box-siam"),
            _arm("SoCL-Siam", "socl", points=cfg.points, compared_with=("Box-Siam",)),
            _arm(start, "random"),
            _arm("Init-CF", "init-cf", backbone_of=start, tracker=dcf),
            _arm("Box-CF", "box-cf", backbone_of="Box-Siam", tracker=dcf),
            _arm("SoCL-CF", "socl-cf", backbone_of="SoCL-Siam", tracker=dcf,
                 compared_with=("Init-CF", "Box-CF", "SoCL-Siam"))]


def table5(cfg) -> list[Arm]:
    return sparse_boxes.sparse_box_arms(cfg, _arm("SoCL-Siam", "socl", points=cfg.points))


# The LST study's variants (`lst`): each changes one choice the paper leaves open or
# does not state, from the recipe's defaults ("paper": TOP temperature 1, the config's
# region, b_p 0.6, eq. 9 without the positive in its denominator, eq. 10 for z_i alone
# as printed, mix-ups of the batch's hardest SNS). b_p acts on the LSTs alone. Until
# the study chose the printed eq. 10, the default was the symmetrised form: its variant
# is now "symmetrised eq. 10" (it was "eq. 10 for z_i only" the other way round).
LST_VARIANTS = {
    "paper": (),
    "TOP temperature 4": (("top_temperature", 4.0),),
    "TOP temperature calibrated": (("top_temperature", "calibrated"),),
    "region 216 px": (("context_side", 216.0),),
    "b_p 0.9": (("b_p", 0.9),),
    "b_p 0.3": (("b_p", 0.3),),
    "InfoNCE denominator": (("include_positive", True),),
    "symmetrised eq. 10": (("symmetric", True),),
    "own-pair mix-ups": (("mix_scope", "pair"),),
    # fine-tuning that keeps a start (SiamRPN++'s): the backbone's learning rate x0.1,
    # every batch norm on its start's statistics (the freeze depth is per backbone:
    # --config.freeze)
    "backbone lr x0.1": (("backbone_lr_scale", 0.1),),
    "frozen batch norm": (("freeze_bn", True),),
}
LST_ONLY = ("b_p",)  # settings that change nothing without LSTs


def lst_study(cfg) -> list[Arm]:
    """The start every arm of a seed trains from (no SoCL training: random, MoCo's or
    ImageNet's weights), then for each of `cfg.lst_variants`: +mix-up and +LST (Table
    1's last two rows) with that variant, compared in pairs and each with the start
    (does SoCL keep or improve it?); a variant that changes only the LSTs shares the
    paper's +mix-up arm (the same stage)."""
    arms, p = [_arm(START, "random")], cfg.points
    for name in cfg.lst_variants:
        over = LST_VARIANTS[name]
        mix_over = tuple((k, v) for k, v in over if k not in LST_ONLY)
        mix = f"+mix-up, {name}" if mix_over else "+mix-up, paper"
        if mix not in [a.label for a in arms]:
            arms.append(_arm(mix, "socl", socl=(("use_lst", False), *mix_over), points=p,
                             compared_with=(START,)))
        arms.append(_arm(f"+LST, {name}", "socl", socl=over, points=p,
                         compared_with=(mix, START)))
    return arms


START = "start (no SoCL training)"  # the LST study's arm of the initial weights


def table4(cfg) -> list[Arm]:
    return [_arm("Box-Siam", "box-siam"),
            _arm("SoCL-Siam", "socl", points=cfg.points, compared_with=("Box-Siam",))]
