"""The diagnostics of every SoCL report (`ebm_jax.eval.backbone_diagnostics`): on a few
dozen pairs of context regions of held-out sequences, whether each backbone, the start
of a seed and every arm's trained one, still tells its target from the background, and
whether the TOP maps cover the target (the fraction of target cells left in the SNS
pool), so that a table that reverses the paper carries the measurement that says why.

The pairs come from the validation split (the last `validation_sequences` of the
training split) where the run has one, else from the test split; they describe, they
choose nothing. Frame i's region is centred on the target's point, frame j's moved by
up to `shift_jitter` of its side (so that the target is not always at the centre);
both are `context_side` frame px resampled to `input_size`, as the training regions.
The target cells are those inside the true box (`box_cells`); the TOP proposals of the
pairs' frames are computed once and cached (`diag-top-clean-<hash>`).

Every `cfg` here is the recipe's Config (`ebm_jax.recipes.tracking.socl.Config`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ebm_jax.recipes.tracking import socl_stages as stages
from ebm_jax.recipes.tracking import stages as tstages

# arms whose models are backbones trained by the arm itself (not another arm's, not a
# box head's)
DIAGNOSED_METHODS = ("socl", "box-siam", "bce-siam")


@dataclasses.dataclass(frozen=True)
class DiagnosticPairs:
    """P pairs of regions: images (P, S, S, 3) uint8, target masks (P, g, g) bool, TOP
    maps at temperature 1 (P, g, g), the video of each pair, and where they are from;
    the scene of each pair where the split comes in scene groups (else None)."""

    split: str
    sequences: int
    images_i: np.ndarray
    images_j: np.ndarray
    mask_i: np.ndarray
    mask_j: np.ndarray
    h1_i: np.ndarray
    h1_j: np.ndarray
    video: np.ndarray
    scene: np.ndarray | None = None


def diagnostic_split(data, validation) -> tuple[str, list, dict]:
    """(name, sequences, identity) of the split the diagnostics use: the validation
    split where there is one, else the generated test split."""
    if validation is not None:
        return "validation", list(validation[0]), validation[1]
    return ("test", list(data.eval_sets["generated-test"]),
            data.identity["generated-test"])


def diagnostic_pairs(cfg, ctx, split: str, sequences, identity,
                     embedding_grid) -> DiagnosticPairs | None:
    """Up to `cfg.diagnostic_pairs` pairs, spread over the sequences (consecutive frames
    of those whose TOP proposals are cached, `frames / (pairs per sequence + 1)` apart);
    None with `diagnostic_pairs=0` or no usable pair."""
    from ebm_jax.data.socl_pairs import region_boxes, region_top_map
    from ebm_jax.ops.crops import crop_square_np
    from ebm_jax.tracking.top_maps import box_cells

    if not cfg.diagnostic_pairs or not sequences:
        return None
    seqs = [stages.points_from_boxes(s, 0.0, 0) for s in sequences]
    per = math.ceil(cfg.diagnostic_pairs / len(seqs))
    lengths = [len(stages.annotated_frames(s, "clean", 1)) for s in seqs]
    every = max(1, int(np.median(lengths)) // (per + 1))
    tops = stages.top_cache(ctx, seqs, {"diagnostics": split, "of": identity}, "clean",
                            every, name="diag-top")
    chains = [[(i, r) for r in range(min(per, len(tops[i]["frames"]) - 1))]
              for i in sorted(tops)]
    order = [p for k in range(per) for c in chains if k < len(c) for p in (c[k],)]
    order = order[:cfg.diagnostic_pairs]
    if not order:
        return None
    rng = np.random.default_rng(ctx.seed_of("socl-diagnostics", "jitter"))
    grid = embedding_grid(cfg.input_size)
    side = cfg.context_side
    out = {k: [] for k in ("images_i", "images_j", "mask_i", "mask_j", "h1_i", "h1_j")}
    for i, r in order:
        seq, top = seqs[i], tops[i]
        for tag, row in (("i", r), ("j", r + 1)):
            t = int(top["frames"][row])
            px, py = stages.point_annotations(seq, "clean")[t] - 1.0
            dx, dy = (rng.uniform(-1, 1, 2) * cfg.shift_jitter * side if tag == "j"
                      else (0.0, 0.0))
            centre = (py + dy, px + dx)
            image = crop_square_np(seq.read_frame(t), centre, side, cfg.input_size)
            out[f"images_{tag}"].append(np.clip(np.rint(image), 0, 255).astype(np.uint8))
            box = region_boxes(np.asarray(seq.boxes[t], np.float64), centre, side,
                               cfg.input_size)
            out[f"mask_{tag}"].append(box_cells(box, grid))
            out[f"h1_{tag}"].append(region_top_map(top["boxes"][row], top["scores"][row],
                                                   centre, side, cfg.input_size, 1.0,
                                                   embedding_grid))
    scene = None
    if split == "validation" and cfg.scene_group > 1:  # the training split's groups
        from ebm_jax.data.tracking import scene_ids

        ids = scene_ids([s.name for s in seqs], cfg.scene_group)
        scene = np.asarray([ids[i] for i, _ in order])
    return DiagnosticPairs(split=split, sequences=len({i for i, _ in order}),
                           video=np.asarray([i for i, _ in order]), scene=scene,
                           **{k: np.stack(v) for k, v in out.items()})


def features_of(model, images: np.ndarray, chunk: int = 32) -> np.ndarray:
    """(N, g, g, C) embeddings of `images` by `model` in eval mode (a copy: the model
    is not changed; `siamfc.model_embed`)."""
    import jax.numpy as jnp

    from ebm_jax.tracking.siamfc import model_embed

    embed, params = model_embed(model)
    return np.concatenate([np.asarray(embed(params, jnp.asarray(images[k:k + chunk])))
                           for k in range(0, len(images), chunk)])


def backbone_row(model, pairs: DiagnosticPairs, h_i, h_j, settings) -> dict:
    """`diagnose` of one backbone on the pairs, with TOP maps h_i, h_j."""
    from ebm_jax.eval.backbone_diagnostics import diagnose

    f = features_of(model, np.concatenate([pairs.images_i, pairs.images_j]))
    n = len(pairs.images_i)
    return diagnose(f[:n], f[n:], pairs.mask_i, pairs.mask_j, h_i, h_j, pairs.video,
                    settings, pairs.scene)


def top_check(pairs: DiagnosticPairs, temperature: float, theta_b: float) -> dict:
    """The TOP maps' check on the pairs' 2P regions: the fraction of target cells left
    in the SNS pool and the median theta_b mass cells / true target cells, at
    `temperature` and at 1."""
    from ebm_jax.eval.backbone_diagnostics import target_cells_in_sns_pool
    from ebm_jax.tracking.top_maps import mass_cells, retemper

    h1 = np.concatenate([pairs.h1_i, pairs.h1_j])
    mask = np.concatenate([pairs.mask_i, pairs.mask_j])
    out = {}
    for name, t in (("temperature", temperature), ("at_1", 1.0)):
        h = retemper(h1, t)
        out[name] = {"temperature": float(t),
                     "target_cells_in_sns_pool": float(np.mean(
                         target_cells_in_sns_pool(h, mask, theta_b))),
                     "mass_over_target_cells": float(np.median(
                         mass_cells(h, theta_b) / mask.sum(axis=(1, 2))))}
    out["median_target_cells"] = float(np.median(mask.sum(axis=(1, 2))))
    out["theta_b"] = float(theta_b)
    return out


def run_diagnostics(env, arms, trained: dict, validation) -> dict | None:
    """{"split", "sequences", "pairs", "region_px", "receptive_field_px" (of one
    embedding cell, input pixels), "temperature", "calibration", "top_check",
    "arm_temperatures", "rows": {"start": [per seed], arm label: [per seed]}}: the
    diagnostics of the start of each seed (`build_model` of the SoCL stage, as the
    random-backbone arm) and of every arm that trains a backbone of its own
    (`DIAGNOSED_METHODS`), on the pairs of `diagnostic_split`. The start's row and
    "top_check" use the run's TOP temperature (`top_temperature`) and SoCL settings;
    each arm's row its own TOP temperature and thresholds (an LST-study variant's) but
    the run's negatives (SNS and mix-ups, so that rows compare), with that
    temperature's TOP check in "arm_temperatures" ({label: {"temperature",
    "calibration", "top_check"}}) where it differs from the run's. None with
    `diagnostic_pairs=0`."""
    from ebm_jax.models.tracking_backbones import backbone_class
    from ebm_jax.recipes.tracking.socl_arms import arm_settings, seed_config
    from ebm_jax.tracking.top_maps import retemper

    cfg, ctx = env.cfg, env.ctx
    if not cfg.diagnostic_pairs:
        return None
    embedding_grid = backbone_class(cfg.backbone).embedding_grid
    split, sequences, identity = diagnostic_split(env.data, validation)
    pairs = diagnostic_pairs(cfg, ctx, split, sequences, identity, embedding_grid)
    if pairs is None:
        return None
    kind = next(iter(env.tops), None)
    temperatures = {}  # (top_temperature, theta_b) -> (temperature, calibration)

    def temperature_of(run_cfg, theta_b):
        key = (run_cfg.top_temperature, theta_b)
        if key not in temperatures:
            if run_cfg.top_temperature == "calibrated" and kind is not None:
                temperatures[key] = stages.top_temperature(
                    run_cfg, ctx, env.data.train, env.tops[kind], kind, embedding_grid,
                    theta_b)
            else:  # no proposals to calibrate on: temperature 1
                temperatures[key] = (1.0 if run_cfg.top_temperature == "calibrated"
                                     else float(run_cfg.top_temperature), None)
        return temperatures[key]

    def maps_at(t):
        return tuple(retemper(h, t).astype(np.float32) for h in (pairs.h1_i, pairs.h1_j))

    settings = stages.socl_settings(cfg)
    temperature, calibration = temperature_of(cfg, settings.theta_b)
    h_i, h_j = maps_at(temperature)
    diagnosed = [a for a in arms if a.method in DIAGNOSED_METHODS
                 and not dict(a.about).get("backbone_of")]
    own, arm_temperatures = {}, {}
    for arm in diagnosed:
        arm_cfg, arm_set = arm_settings(cfg, arm)
        # every row against the run's negatives (Table 1's GST row is no easier)
        arm_set = dataclasses.replace(arm_set, use_sns=settings.use_sns,
                                      use_mix=settings.use_mix)
        t, cal = temperature_of(arm_cfg, arm_set.theta_b)
        own[arm.label] = (arm_set, *((h_i, h_j) if t == temperature else maps_at(t)))
        if t != temperature or arm_set.theta_b != settings.theta_b:
            arm_temperatures[arm.label] = {
                "temperature": float(t), "calibration": cal,
                "top_check": top_check(pairs, t, arm_set.theta_b)}
    rows = {"start": []}
    for seed in sorted(trained):
        start = tstages.build_model(seed_config(cfg, seed), ctx, f"socl-s{seed}", env.data)
        rows["start"].append({"seed": seed, **backbone_row(start, pairs, h_i, h_j,
                                                           settings)})
        for arm in diagnosed:
            arm_set, a_i, a_j = own[arm.label]
            rows.setdefault(arm.label, []).append(
                {"seed": seed, **backbone_row(trained[seed][arm.label].model, pairs, a_i,
                                              a_j, arm_set)})
    ctx.log(f"diagnostics: {len(pairs.video)} pairs of the {split} split, "
            f"{len(rows)} backbones per seed")
    return {"split": split, "sequences": pairs.sequences, "pairs": int(len(pairs.video)),
            "region_px": int(cfg.input_size),
            "receptive_field_px": int(backbone_class(cfg.backbone).receptive_field()),
            "temperature": float(temperature), "theta_b": settings.theta_b,
            "calibration": calibration, "arm_temperatures": arm_temperatures,
            "top_check": top_check(pairs, temperature, settings.theta_b), "rows": rows}
