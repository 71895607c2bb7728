"""The sharper refinement probe of the energy-based box heads (the EBM regression paper,
sec. 5; DiMP's tracker, Bhat et al. 2019), on targets and photos the heads never saw.

Per seed, per loss of `box_head_methods` and per kind of head of `heads`:
- "apart": the head trained on the frozen Box-Siam backbone on its own
  (`box_head.train_box_head_arm`: the heads of `ebm_table4_box_head.py` and
  `ebm_table4_dimp.py`), refining crops cut as SiamFC's;
- "joint": the head trained jointly with DiMP's classifier
  (`dimp_joint_stages.joint_arm`: the heads of `ebm_table4_dimp_joint.py`), refining
  crops cut as DiMP's samples are.
Each head is probed (`box_head_stages.probe_box_head`) on `probe_pairs` pairs of each
set: the validation split (held-out targets, the training pool's photos), the test split
(the test pool's photos) and `outside_draws` draws of the "outside" split
(`outside_sequences` sequences of procedural photos, a new pool per draw:
`ebm_jax.data.procedural_textures`). From starts of IoU 0.5, 0.7 and 0.8, the probe
gives the refined IoU of one ascent and of the tracker's own procedure (jittered copies,
each ascended, the top-k mean), and with another target's reference features (a head
that refines as well with them does not use its reference). The report
(`ebm_jax.report.box_head_probe`) gives each gain with its standard errors over pairs,
over seeds and over draws of the outside split's photos. Nothing is chosen: the heads
are trained with the config's settings. Beside the probe, Box-Siam's own tracker
(SiamFC's scale search) tracks every set, so that the report says whether the backbone
the heads refine on still finds the targets where the heads are probed.

The default work directory is the tracking recipe's (`runs/tracking`), so that a probe
after `ebm_table4_dimp.py` and `ebm_table4_dimp_joint.py` reuses their stages.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping

import numpy as np

from ebm_jax.config import Checks, ConfigError
from ebm_jax.recipes.tracking import Config as TrackingConfig
from ebm_jax.recipes.tracking import check as tracking_check
from ebm_jax.recipes.tracking import extras as tracking_extras
from ebm_jax.recipes.tracking import stages
from ebm_jax.recipes.tracking.arms import Arm, run_arms
from ebm_jax.recipes.tracking.box_head import train_box_head_arm
from ebm_jax.recipes.tracking.box_head_stages import START_IOUS, probe_box_head
from ebm_jax.recipes.tracking.data import generated_specs, generated_split
from ebm_jax.recipes.tracking.dimp_joint_stages import (DiMPJointTraining, check_dimp_joint,
                                                        joint_arm, joint_box_settings)
from ebm_jax.recipes.tracking.stages import TrackingRun, box_siam_arm
from ebm_jax.report import Report
from ebm_jax.report import box_head_probe as report
from ebm_jax.report.statistics import standard_error
from ebm_jax.train.stages import RunContext

HEADS = ("apart", "joint")
WORKDIR = "runs/tracking"  # the tracking recipe's: its heads' stages are reused


@dataclasses.dataclass(frozen=True)
class Config(TrackingConfig):
    """The tracking recipe's Config (data, Box-Siam, `box_head`, `box_head_methods`,
    `dimp` as a `DiMPJointTraining` for the joint heads) and the probe's own fields."""

    experiment: str = "probe"
    validation_sequences: int = 10
    dimp: DiMPJointTraining = DiMPJointTraining()
    heads: tuple[str, ...] = HEADS  # "apart" and / or "joint"
    probe_pairs: int = 256  # pairs per head, seed and set
    probe_batch: int = 16  # pairs per compiled batch; probe_pairs is a multiple of it
    outside_sequences: int = 30  # sequences per draw of the outside split
    outside_draws: int = 3  # draws of its procedural photos (>= 2: an se over draws)

    FIELD_GROUPS = {**TrackingConfig.FIELD_GROUPS,
                    "probe": ("heads", "probe_pairs", "probe_batch", "outside_sequences",
                              "outside_draws")}

    def unused_groups(self) -> tuple[str, ...]:
        unused = ("MoCo start",) if self.init != "moco" else ()
        return unused + (() if "joint" in self.heads else ("DiMP",))

    def __post_init__(self):
        super().__post_init__()
        c = Checks(self)
        c.one_of("experiment", ("probe",))
        c.each_in("heads", HEADS)
        if len(set(self.heads)) != len(self.heads):
            raise ConfigError(f"--config.heads must be distinct, got {self.heads!r}")
        c.int_range("probe_batch", 2, 256)
        c.int_range("probe_pairs", self.probe_batch, 65_536)
        if self.probe_pairs % self.probe_batch:
            raise ConfigError(f"--config.probe_pairs ({self.probe_pairs}) must be a "
                              f"multiple of --config.probe_batch ({self.probe_batch})")
        c.int_range("outside_sequences", 1, 10_000)
        c.int_range("outside_draws", 2, 100)
        c.int_range("validation_sequences", 1, self.num_train_sequences - 1
                    if self.train_data == "generated" else None)
        if "joint" in self.heads and not isinstance(self.dimp, DiMPJointTraining):
            raise ConfigError(f"--config.heads with \"joint\" needs --config.dimp as a "
                              f"DiMPJointTraining, got {type(self.dimp).__name__}")


@dataclasses.dataclass(frozen=True)
class Opened:
    """What `check` opened: the data and the outside split's draws ({name: (identity,
    sequences)})."""

    data: stages.TrackingData
    outside: dict


def outside_specs(cfg: Config, ctx: RunContext) -> list:
    """The `TrackingSpec` of each draw of the outside split: the test split's sizes,
    `outside_sequences` sequences, its own seed (the run's "data" seed of "outside-<d>"),
    so its own procedural photos."""
    test = generated_specs(cfg, ctx)["test"]
    return [dataclasses.replace(test, split="outside", num_sequences=cfg.outside_sequences,
                                seed=ctx.seed_of("data", f"outside-{d}") % 2**31)
            for d in range(cfg.outside_draws)]


extras = tracking_extras  # the tracking data: records streamed by grain


def check(cfg: Config, ctx: RunContext) -> Opened:
    """The tracking recipe's checks and data, the joint heads' crop (`check_dimp_joint`),
    then the outside split's draws, generated once."""
    if "joint" in cfg.heads:
        check_dimp_joint(cfg)
    specs = outside_specs(cfg, ctx)  # the generator's checks before anything is written
    data = tracking_check(cfg, ctx)
    outside = {}
    for d, spec in enumerate(specs):
        sequences, identity = generated_split(cfg, ctx, spec)
        outside[f"outside-{d}"] = (identity, sequences)
    return Opened(data, outside)


def _head(env: TrackingRun, seed: int, used: Mapping, kind: str, method: str):
    """(net, settings) of the head of `kind` and loss `method` of seed `seed`."""
    if kind == "apart":
        settings = dataclasses.replace(env.cfg.box_head, method=method)
        return train_box_head_arm(env, seed, used, settings=settings).model, settings
    t = joint_arm(env, seed, used, method=method)
    return t.model[1], joint_box_settings(env.cfg, method)


def run(cfg: Config, ctx: RunContext, opened: Opened | None = None) -> Report:
    opened = opened if opened is not None else check(cfg, ctx)
    env = TrackingRun(cfg, ctx, opened.data)
    val, val_identity = stages.validation_split(opened.data, cfg)
    # name -> (draw of the outside split or None, sequences)
    sets = {"validation": (None, val), "test": (None, opened.data.eval_sets["generated-test"]),
            **{name: (d, seqs) for d, (name, (_, seqs)) in enumerate(opened.outside.items())}}
    # Box-Siam's own tracker on each set: does the backbone the heads refine on still
    # find the targets there (the outside split's photos are new to it too)?
    identities = {"validation": val_identity, "test": opened.data.identity["generated-test"],
                  **{name: ident for name, (ident, _) in opened.outside.items()}}
    tracked = run_arms(env, ctx, [Arm("box-siam", "box-siam", box_siam_arm)], cfg.seeds,
                       {name: (identities[name], seqs) for name, (_, seqs) in sets.items()})
    tracking = [{"seed": row["seed"], "set": name, "draw": sets[name][0],
                 "auc": row["auc"], "auc_se": standard_error(np.asarray(row["sequence_auc"])),
                 "static_auc": tracked.static[name]["auc"]}
                for name in sets for row in tracked.rows[name]["box-siam"]]
    batches = cfg.probe_pairs // cfg.probe_batch
    rows = []
    for seed in cfg.seeds:
        used = {"box-siam": box_siam_arm(env, seed, {})}
        for kind in cfg.heads:
            for m in cfg.box_head_methods:
                net, settings = _head(env, seed, used, kind, m)
                for set_name, (draw, sequences) in sets.items():
                    ctx.log(f"probing the {kind} {m} head s{seed} on {set_name} "
                            f"({cfg.probe_pairs} pairs)")
                    p = probe_box_head(net, sequences, settings, stages.SIAMFC,
                                       seed=ctx.seed_of("probe", set_name),
                                       num_batches=batches, batch_size=cfg.probe_batch)
                    rows.append({"heads": kind, "loss": m, "seed": seed, "set": set_name,
                                 "draw": draw, "pairs": p["pairs"], "head": p["head"],
                                 "head_se": p["head_se"], "control": p["control"],
                                 "from_starts": p["from_starts"]})
    levels = [f"{x:g}" for x in START_IOUS]
    summary = report.probe_summary(rows, levels)
    tracked_summary = report.tracking_summary(tracking)
    markdown = (f"## The box heads' refinement probe\n\n"
                f"{len(cfg.box_head_methods)} losses x heads {list(cfg.heads)}, seeds "
                f"{list(cfg.seeds)}; {cfg.probe_pairs} pairs per head, seed and set; "
                f"{cfg.outside_draws} draws of {cfg.outside_sequences} outside "
                f"sequences.\n\n"
                + report.probe_markdown(summary, levels, outside_draws=cfg.outside_draws,
                                        seeds=cfg.seeds)
                + "\n" + report.tracking_markdown(tracked_summary)
                + "\n![Refined IoU against start IoU](refined_iou.png)\n")
    payload = {"experiment": "probe", "levels": levels, "summary": summary,
               "probes": rows, "box_siam_tracking": tracking,
               "box_siam_summary": tracked_summary, "sets": identities}
    figures = {"refined_iou.png": functools.partial(report.refined_iou_figure, summary,
                                                    levels)}
    return Report(payload, markdown, figures)


def preset(variant: str, **fields) -> Config:
    """The probe's Config at the tracking recipe's preset `variant` ("quick", "tiny",
    "paper") with `fields` (`ebm_jax.recipes.tracking.presets`)."""
    from ebm_jax.recipes.tracking.presets import PRESETS, config_from_preset

    per_variant = {k: fields.pop(k) for k in ("quick", "tiny", "paper") if k in fields}
    return config_from_preset(Config, PRESETS, variant, fields, per_variant)


__all__ = ["Config", "HEADS", "Opened", "WORKDIR", "check", "outside_specs", "preset", "run"]
