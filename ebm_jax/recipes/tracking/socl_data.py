"""The SoCL recipe's data, before training (`ebm_jax.recipes.tracking.socl`'s `check`
and `run`): the validation split held out, point annotations made from the boxes where
asked (`points_from_boxes`), the annotation budgets' plan of Table 2 / Figure 9, the
correlation filter's layout checked, and `Opened`, what `check` hands to `run`.
"""

from __future__ import annotations

import dataclasses

from ebm_jax.config import ConfigError
from ebm_jax.recipes.tracking import socl_stages as stages
from ebm_jax.recipes.tracking import stages as tstages


def check_dcf(cfg) -> None:
    """The correlation filter's levels and crop fit the backbone (before training)."""
    from flax import nnx

    from ebm_jax.models.tracking_backbones import tracking_backbone
    from ebm_jax.tracking.dcf import level_layout

    model = tracking_backbone(cfg.backbone, width=cfg.width, rngs=nnx.Rngs(0))
    names = model.level_names
    if cfg.dcf.levels is not None and max(cfg.dcf.levels) >= len(names):
        raise ConfigError(f"--config.dcf.levels must be {cfg.backbone} levels in [0, "
                          f"{len(names) - 1}] ({', '.join(names)}; by default "
                          f"{model.dcf_levels}), got {cfg.dcf.levels!r}")
    try:
        level_layout(model, cfg.dcf)
    except ValueError as error:
        raise ConfigError(f"--config.dcf: {error}") from error


def held_out(cfg, data):
    """(data with the training split less its last `validation_sequences`, (those
    sequences, their identity) or None): every arm trains on the first alone."""
    if not cfg.validation_sequences:
        return data, None
    return tstages.held_out(data, cfg), tstages.validation_split(data, cfg)


def with_points(cfg, ctx, data):
    """The tracking recipe's data; with `points_from_boxes`, training sequences without
    points get the box centres (and shifted centres) as their point annotations."""
    if not cfg.points_from_boxes:
        return data
    train = [stages.points_from_boxes(s, cfg.point_shift, ctx.seed_of("points", s.name))
             for s in data.train]
    identity = {**data.identity, "train": {"of": data.identity["train"],
                                           "points_from_boxes": cfg.point_shift}}
    return dataclasses.replace(data, train=train, identity=identity)


def budget_plan(cfg, ctx, data) -> dict:
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


@dataclasses.dataclass(frozen=True)
class Opened:
    """What `check` opened, for `run`: the data (its training split less the validation
    sequences), the validation split ((sequences, identity); None without one) and the
    budget plan ({(method, hours): (sequence indices, annotated frames)}; None when no
    arm has a budget)."""

    data: tstages.TrackingData
    validation: tuple | None
    plan: dict | None


__all__ = ["Opened", "budget_plan", "check_dcf", "held_out", "with_points"]
