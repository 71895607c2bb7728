"""The tracking recipe's report (`ebm_jax.recipes.tracking.run`): from the arms'
results, the tables per evaluation set (mean +- sd over seeds), the paired differences
of each experiment's pairs, the figures (success and precision plots, strips of frames,
AUC per arm) and the JSON payload; the MoCo start's probe where the run has one.
"""

from __future__ import annotations

import functools

from ebm_jax.models.tracking_backbones import backbone_title
from ebm_jax.recipes.tracking import stages
from ebm_jax.recipes.tracking.arms import pairs_of
from ebm_jax.report import Report
from ebm_jax.report import box_head as box_head_report
from ebm_jax.report import tracking as report
from ebm_jax.report.statistics import arm_difference, mean_sd, paired_seeds_and_sequences


def tracking_report(cfg, ctx, data, arms, res, validation) -> Report:
    """The `Report` of a tracking run: `res` the arms' results (`run_arms`),
    `validation` the record of settings chosen on validation (None where none were)."""
    pairs = pairs_of(arms)
    if any("coarse" in rows for rows in res.rows.values()):
        # each refined tracker against its own coarse centre: what the refinement adds
        pairs += [(a.label, "coarse") for a in arms if a.tracker.name == "box-head"]
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
        for a, b in pairs:
            summary[s][f"{a} vs {b}"] = (
                paired_seeds_and_sequences(rows[a], rows[b]) if validation is not None
                else arm_difference(rows[a], rows[b]))
    test = data.eval_sets["generated-test"]
    strips = test[:cfg.strip_sequences]
    figures = {}
    net = backbone_title(cfg.backbone, cfg.pretrained is not None, cfg.init)
    title = (f"Box-Siam (SiamFC, {net} width {cfg.width}) trained {cfg.steps} steps on "
             f"{len(data.train)} {report.training_data_name(cfg.train_data)} "
             f"sequences; seeds {list(cfg.seeds)}")
    if validation is not None:
        heads = ("DiMP's centre refined by box heads" if cfg.experiment.startswith("dimp")
                 else "Box heads")
        title = (f"{heads} (KLD-IS, NCE, NCE+, ML-IS) on Box-Siam (SiamFC, {net} width "
                 f"{cfg.width}, {cfg.steps} steps; heads {cfg.box_head.steps} steps"
                 f"{', joint' if cfg.box_head_joint else ', frozen backbone'}) against "
                 f"SiamFC's scale search; {len(data.train) - cfg.validation_sequences} "
                 f"training + {cfg.validation_sequences} validation sequences; seeds "
                 f"{list(cfg.seeds)}")
        markdown = box_head_report.box_head_markdown(
            summary, pairs, validation, title=title, seeds=cfg.seeds,
            reference=cfg.reference, reference_note=cfg.reference_note)
        figures["generated-test_auc.png"] = functools.partial(
            report.auc_dots_figure, results["generated-test"], "generated-test")
        markdown += "\n![AUC per arm, seeds as dots](generated-test_auc.png)\n"
    else:
        markdown = report.report_markdown(summary, pairs, title=title,
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
    if cfg.init == "moco":
        payload["start"] = start = backbone_start(cfg, ctx, data)
        markdown += report.start_markdown(start["probe"], start["settings"])
    return Report(payload, markdown, figures)




def backbone_start(cfg, ctx, data) -> dict:
    """The MoCo start's settings and probe, for the results (`init="moco"`)."""
    import dataclasses as dc

    from ebm_jax.recipes.tracking.backbone_pretraining import probe

    return {"settings": dc.asdict(cfg.moco),
            "probe": probe(cfg, ctx, stages.held_out(data, cfg))}


__all__ = ["backbone_start", "tracking_report"]
