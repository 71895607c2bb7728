"""Tables and plots of the SoCL experiments (Wu & Chan, "Learning Tracking
Representations from Single Point Annotations": Tables 1, 2, 4, 6 and Figures 4, 7, 8, 9)
on the generated tracking benchmark.

Each arm's scores are mean +- sd over training seeds. A comparison of two arms is
paired: the difference of their AUCs per seed (same initial weights and batch order for
SoCL arms), mean +- its standard error over seeds, and the per-sequence difference
(averaged over seeds) with its standard error over the test sequences; a difference is
called real only where it exceeds twice both standard errors.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import numpy as np

from ebm_jax.models.tracking_backbones import backbone_title
from ebm_jax.report import Report
from ebm_jax.report.statistics import paired_seeds_and_sequences
from ebm_jax.report.tables import fmt, markdown_table, mean_sd_cell
from ebm_jax.report.socl_figures import (bar_figure, budget_figure, recall_figure,
                                         sweep_figure)
from ebm_jax.report.tracking import start_markdown, training_data_name

GOT10K_FRAMES = 1.4e6  # boxes in GOT-10k's train split (the paper's Table 4)
METRICS = (("auc", "AUC"), ("precision", "prec. @20px"), ("ao", "AO"), ("sr50", "SR0.5"),
           ("sr75", "SR0.75"))
def _verdict(p: dict) -> str:
    if p["se_seeds"] is None:
        return "one seed: no error bar"
    return "beyond 2 standard errors" if p["real"] else "within 2 standard errors"


def fees(cfg, training: Mapping[str, list[dict]], tops: Mapping[str, Mapping],
         annotated_frames: int) -> dict:
    """Table 4 from our counts and measured times: annotation hours and fees of the
    train split's annotated frames, TOP-map seconds, training machine-hours."""
    top_seconds = {k: float(sum(float(np.sum(v["seconds"])) for v in t.values()))
                   for k, t in tops.items()}
    train_h = {lab: float(np.mean([r.get("seconds", 0.0) for r in rows]) / 3600)
               for lab, rows in training.items() if rows and rows[0].get("seconds")}
    n = annotated_frames
    return {
        "annotated_frames": n,
        "box": {"hours": n * cfg.box_seconds / 3600, "fee": n * cfg.box_fee},
        "point": {"hours": n * cfg.point_seconds / 3600, "fee": n * cfg.point_fee,
                  "top_map_hours_measured": {k: s / 3600 for k, s in top_seconds.items()}},
        "training_machine_hours": train_h,
        "training_fee_at_gpu_rate": {k: h * cfg.gpu_hour_fee for k, h in train_h.items()},
        "got10k_1.4M_frames": {  # the paper's Table 4 arithmetic at GOT-10k's size
            "box": {"hours": GOT10K_FRAMES * cfg.box_seconds / 3600,
                    "fee": GOT10K_FRAMES * cfg.box_fee},
            "point": {"hours": GOT10K_FRAMES * cfg.point_seconds / 3600,
                      "fee": GOT10K_FRAMES * cfg.point_fee}},
    }


def top_recall(tops: Mapping, train, ks=(1, 2, 4, 8, 16, 32, 64)) -> dict:
    from ebm_jax.tracking.top_maps import recall_at

    kept, truth = [], []
    for i, t in tops.items():
        for r, f in enumerate(t["frames"]):
            ok = np.isfinite(t["scores"][r])
            kept.append(np.asarray(t["boxes"][r][ok], np.float64))
            truth.append(np.asarray(train[i].boxes[int(f)], np.float64))
    ks = np.asarray(ks)
    return {"ks": ks.tolist(), "recall": np.asarray(
        recall_at(kept, np.stack(truth), ks), np.float64).tolist(), "frames": len(kept)}


def _fps_cell(label: str, rows: Sequence[dict]) -> str:
    fps = [r["fps"] for r in rows if r.get("fps")]
    if not fps:
        return f"{label} -"
    return f"{label} {np.median(fps):.1f} [{min(fps):.1f}, {max(fps):.1f}]"


# the diagnostics' columns (`ebm_jax.eval.backbone_diagnostics.diagnose`)
DIAGNOSTICS = (("uniformity", "cells' uniformity"), ("contrast", "response contrast"),
               ("identification", "target identified"), ("positive", "positive"),
               ("hardest_negative", "hardest negative"),
               ("pair_accuracy", "positive beats hardest"),
               ("target_accuracy", "GST-only accuracy, TOP map"),
               ("background_accuracy", "GST-only accuracy, background"))
# beside them where the split comes in scene groups: the same against the videos of
# the query's own scene alone
SCENE_DIAGNOSTICS = (("target_within_scene_accuracy", "within its scene, TOP map"),
                     ("background_within_scene_accuracy", "within its scene, background"))
PERCENT = ("identification", "pair_accuracy", "target_accuracy", "background_accuracy",
           "target_within_scene_accuracy", "background_within_scene_accuracy")


def context_line(diag: Mapping) -> str:
    """The context region against the receptive field of one embedding cell (SoCL's only
    negatives are other videos: a cell that sees most of the region can carry a code of
    the scene; the region should be at least twice the field)."""
    region, field = diag["region_px"], diag["receptive_field_px"]
    verdict = ("at least twice it" if region >= 2 * field else
               "under twice it: a target cell sees much of the scene around it, which "
               "identifies the video without the target; `--config.region_fields=2` "
               "makes it twice")
    return (f"- Context region {region} px, the embedding's receptive field {field} px "
            f"({region / field:.2f}x the field; {verdict}).")


def arm_temperature_lines(diag: Mapping) -> list[str]:
    """One line per TOP temperature (or theta_b) of arms that differ from the run's
    (the LST study's variants): its check, and the arms whose rows use it."""
    groups: dict = {}
    for label, a in diag.get("arm_temperatures", {}).items():
        key = (a["temperature"], a["top_check"]["theta_b"])
        groups.setdefault(key, (a, []))[1].append(label)
    lines = []
    for (t, theta_b), (a, labels) in groups.items():
        at_t, cal = a["top_check"]["temperature"], a["calibration"]
        how = "calibrated" if cal else "set"
        lines.append(f"- {', '.join(labels)}: TOP maps at temperature {t:.3g} ({how}), "
                     f"theta_b {theta_b:g}: {100 * at_t['target_cells_in_sns_pool']:.0f}% "
                     "of the target cells left in the SNS pool; the theta_b mass covers "
                     f"{at_t['mass_over_target_cells']:.2f}x the target's cells.")
    return lines


def diagnostics_markdown(diag: Mapping) -> list[str]:
    """The diagnostics section: the TOP maps' check and one row per backbone (the
    start, then each arm's), mean +- sd over seeds."""
    top = diag["top_check"]
    at_t, at_1 = top["temperature"], top["at_1"]
    cal = diag.get("calibration")
    how = (f"calibrated on {cal['frames']} training frames from the proposals' extent "
           f"(a median {cal['median_target_cells']:g} cells)" if cal else "as configured")
    lines = [f"Diagnostics on {diag['pairs']} pairs of regions of {diag['sequences']} "
             f"{diag['split']}-split sequences (frame i centred on the target, frame j "
             "moved; the target cells are those inside the true box).\n",
             f"- TOP maps at temperature {at_t['temperature']:.3g} ({how}): "
             f"{100 * at_t['target_cells_in_sns_pool']:.0f}% of the target cells left in "
             f"the SNS pool (theta_b {diag['theta_b']:g}); the theta_b mass covers "
             f"{at_t['mass_over_target_cells']:.2f}x the target's cells (median; "
             f"{top['median_target_cells']:g} cells). At temperature 1: "
             f"{100 * at_1['target_cells_in_sns_pool']:.0f}% and "
             f"{at_1['mass_over_target_cells']:.2f}x.",
             *arm_temperature_lines(diag),
             context_line(diag),
             "- Cells' uniformity: mean cosine of a cell to its map's mean (1: every cell "
             "alike). Response contrast: on frame j, the cosine with frame i's target "
             "template, (target mean - background mean) / sd. Target identified: the "
             "best cell of that response is a target cell. Positive / hardest negative: "
             "SoCL's GST cosine of the pair and of its most similar negative (other "
             "videos' GSTs, SNS, mix-ups: the run's negatives for every row, with the "
             "arm's own TOP maps), with the fraction of queries whose positive beats "
             "it. GST-only accuracy: the fraction of queries whose positive beats every "
             "other video's GST (no SNS, no mix-ups), with the TOP maps and with a map "
             "uniform on the cells outside the true box; the background at or above "
             "the TOP map: the scene tells the videos apart at least as well as the "
             "target (a scene shortcut).\n"]
    columns = DIAGNOSTICS + tuple(
        c for c in SCENE_DIAGNOSTICS
        if any(r.get(c[0]) is not None for rs in diag["rows"].values() for r in rs))
    if len(columns) > len(DIAGNOSTICS):
        lines[-1] = lines[-1].rstrip("\n")
        lines.append("- Within its scene: the GST-only accuracy with each query's "
                     "negatives the other videos of its own scene alone (the validation "
                     "split's scene groups; fewer negatives, so a higher chance level): "
                     "the background at or above the TOP map there, the background "
                     "around the target still tells a scene's videos apart.\n")
    head = ["backbone"] + [h for _, h in columns]
    body = []
    for label, rs in diag["rows"].items():
        cells = []
        for key, _ in columns:
            vals = [r[key] for r in rs if r.get(key) is not None]
            scale = 100 if key in PERCENT else 1
            fmt_ = ".0f" if scale == 100 else ".2f"
            cells.append(mean_sd_cell(vals, fmt_, scale) if vals else "-")
        body.append([label] + cells)
    lines.append(markdown_table(head, body, align="l" + "r" * len(columns)))
    return lines


def socl_report(cfg, arms, rows: Mapping[str, list[dict]], training, static_row: dict, *,
                pairs: Sequence[tuple[str, str]], paper: str, tops: Mapping, train,
                budget: Mapping | None, extra: Mapping | None = None,
                split: str = "test", start: Mapping | None = None,
                diagnostics: Mapping | None = None) -> Report:
    """The table of `arms` (mean +- sd over seeds), the paired differences a - b of
    `pairs` (the experiment's table says which), the paper's figures (`paper`), the
    diagnostics of every backbone on held-out regions (`diagnostics`, from
    `ebm_jax.recipes.tracking.socl_diagnostics`; beside every table, so that one that reverses
    the paper says why), TOP-map recall and times, budgets and fees, and the plot of the
    experiment. `split`: the generated split the rows were tracked on ("test", or
    "validation")."""
    labels = [a.label for a in arms]
    exp = cfg.experiment
    spread = f"mean +- sd over seeds {list(cfg.seeds)}" if len(cfg.seeds) > 1 else "one seed"
    head = ["arm"] + [h for _, h in METRICS] + ["AUC per seed", "train s"]
    body = []
    for lab in labels:
        rs = rows[lab]
        secs = [t.get("seconds") for t in training[lab] if t.get("seconds")]
        body.append([lab] + [mean_sd_cell([r[k] for r in rs], ".1f", 100) for k, _ in METRICS]
                    + [" / ".join(fmt(r["auc"], ".1f", 100) for r in rs),
                       fmt(np.mean(secs), ".0f") if secs else "-"])
    body.append(["never moves (first box)"] + [fmt(static_row[k], ".1f", 100)
                                               for k, _ in METRICS] + ["-", "-"])
    net = backbone_title(cfg.backbone, cfg.pretrained is not None, cfg.init)
    md = [f"## SoCL {exp}: SiamFC {net} width {cfg.width}, {cfg.socl_steps} SoCL steps of "
          f"{cfg.videos} videos, {len(train)} {training_data_name(cfg.train_data)} "
          "training sequences"
          + (f" in scene groups of {cfg.scene_group}" if cfg.scene_group > 1 else "")
          + (" (targets on one path)" if cfg.scene_path else "")
          + (", a MoCo start per seed" if getattr(cfg, "moco_per_seed", False) else "")
          + "\n",
          "### Scores\n",
          f"Generated {split} split, {static_row['num_sequences']} sequences, "
          f"{static_row['num_frames']} frames ({spread}; scores in %).\n",
          markdown_table(head, body, align="l" + "r" * (len(head) - 1))]
    diffs = {f"{a} - {b}": paired_seeds_and_sequences(rows[a], rows[b]) for a, b in pairs}
    lines = [f"- {k}: AUC {100 * p['mean']:+.1f} (se {fmt(p['se_seeds'], '.1f', 100)} over "
             f"seeds, {fmt(p['se_sequences'], '.1f', 100)} over sequences): {_verdict(p)}."
             for k, p in diffs.items()]
    md.append("Paired differences:\n\n" + "\n".join(lines) + "\n")
    md.append(f"The paper: {paper}.\n")
    # what says why, under its own heading (a page can include the scores alone)
    diag = ["### Diagnostics\n"]
    if diagnostics is not None:
        diag += diagnostics_markdown(diagnostics)
    if start is not None:  # the MoCo-pretrained backbone every arm starts from
        diag.append(start_markdown(start["probe"], start["settings"],
                                   start.get("per_seed")) + "\n")
    payload = {"experiment": f"socl-{exp}", "split": split,
               "arms": [a.describe() for a in arms],
               "tables": {"arms": rows, "static": static_row}, "paired": diffs,
               "training": training, "budget": budget}
    if start is not None:
        payload["start"] = start
    if diagnostics is not None:
        payload["diagnostics"] = diagnostics
    figures = {}
    if budget:
        md.append(markdown_table(["arm", "sequences", "annotated frames"],
                                 [[k, v["sequences"], v["frames"]] for k, v in budget.items()],
                                 align="lrr"))
    if tops:
        recall = {k: top_recall(t, train) for k, t in tops.items()}
        secs = np.concatenate([np.concatenate([v["seconds"] for v in t.values()])
                               for t in tops.values()])
        payload["top"] = {"recall": recall, "seconds_per_frame": {
            "median": float(np.median(secs)), "mean": float(np.mean(secs)),
            "frames": int(secs.size)}}
        diag.append(f"TOP maps: {secs.size} frames of {cfg.frame_width}x{cfg.frame_height}, "
                    f"{np.median(secs):.3f} s per frame (median; the paper: 0.4 s at "
                    "512x512). Target recall at IoU 0.5 with the top k kept proposals: "
                    + "; ".join(f"{k} points: " + ", ".join(
                        f"k={kk} {100 * v:.0f}%" for kk, v in zip(r["ks"], r["recall"]))
                        for k, r in recall.items()) + ".\n")
        first = next(iter(recall.values()))
        figures["top_recall.png"] = functools.partial(
            recall_figure, {k: np.asarray(r["recall"]) for k, r in recall.items()},
            np.asarray(first["ks"]))
        diag.append("![target recall against kept proposals](top_recall.png)\n")
    if exp == "table4":
        n = sum(len(t["frames"]) for t in next(iter(tops.values())).values()) if tops else 0
        payload["fees"] = f = fees(cfg, training, tops, n)
        g = f["got10k_1.4M_frames"]
        md.append(f"Fees of the {n} annotated training frames here, and at GOT-10k's 1.4M "
                  "(the paper's Table 4 arithmetic); training time measured here on the "
                  "CPU, priced at the paper's GPU rate:\n")
        md.append(markdown_table(
            ["", "annotation h", "annotation $", "GOT-10k h", "GOT-10k $",
             "training machine-h", "training $ at GPU rate"],
            [[lab, fmt(f[kind]["hours"], ".2f"), fmt(f[kind]["fee"], ".2f"),
              fmt(g[kind]["hours"], ",.0f"), fmt(g[kind]["fee"], ",.0f"),
              fmt(f["training_machine_hours"].get(lab), ".2f"),
              fmt(f["training_fee_at_gpu_rate"].get(lab), ".2f")]
             for lab, kind in (("Box-Siam", "box"), ("SoCL-Siam", "point"))],
            align="lrrrrrr"))
    if extra is not None and "sweep" in extra:
        from ebm_jax.report.sparse_boxes import sparse_box_section

        lines, figs = sparse_box_section(extra, train, every=cfg.sparse_every,
                                         strip_frames=cfg.strip_frames)
        md += lines
        figures.update(figs)
        payload["sparse_boxes"] = {k: v for k, v in extra.items() if k != "strip"}
    if any(a.tracker.name != "siamfc" for a in arms):
        md.append("Tracking speed (frames per second over each test sequence, the first "
                  "frame's init included, after compiling; median over seeds [min, max]): "
                  + "; ".join(_fps_cell(lab, rows[lab]) for lab in labels) + ".\n")
    title = f"SoCL {exp}, {net}, generated {split} split\n({spread})"
    start = next((a.label for a in arms if a.method == "random"), None)  # the arms' start
    if exp == "figure7":
        groups = {"theta_b": [a for a in arms if a.label.startswith("theta_b")],
                  "b_p (theta_p ~ U[b_p, 1))": [a for a in arms if a.label.startswith("b_p")]}
        figures["sweeps.png"] = functools.partial(sweep_figure, groups, rows, "", title)
    elif exp == "figure8":
        groups = {"BCE-Siam on pseudo boxes": [a for a in arms if a.method == "bce-siam"]}
        figures["sweeps.png"] = functools.partial(sweep_figure, groups, rows,
                                                  "alpha (pseudo-box threshold)", title,
                                                  hline="SoCL-Siam", start=start)
    elif exp == "table2":
        groups = {m: [a for a in arms if a.method == m] for m in ("box-siam", "socl")}
        figures["sweeps.png"] = functools.partial(budget_figure, groups, rows, title,
                                                  start)
    else:
        figures["auc.png"] = functools.partial(bar_figure, labels, rows, title)
    name = next(iter(k for k in figures if k in ("auc.png", "sweeps.png")), None)
    if name:
        md.append(f"![AUC of each arm]({name})\n")
    if len(diag) > 1:
        md += diag
    return Report(payload, "\n".join(md), figures)
