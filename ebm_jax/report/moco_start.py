"""The MoCo start's screen (`socl_table1_ablation:moco_start`,
`ebm_jax.recipes.tracking.backbone_pretraining.screen`): its table and plot."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ebm_jax.models.tracking_backbones import backbone_title
from ebm_jax.report import Report
from ebm_jax.report.tables import markdown_table
from ebm_jax.report.tracking import training_data_name


def moco_screen_report(cfg, rows: Mapping[str, Mapping], train) -> Report:
    """The MoCo start's screen (`ebm_jax.recipes.tracking.backbone_pretraining.screen`):
    per setting its probe on the validation split (kNN k = 20 and linear accuracy, %,
    with the binomial standard error over the validation images: one pretraining seed,
    so the images are the one source of spread measured) and its final InfoNCE loss
    beside chance, under the random initialisation's row; a bar plot of the same."""
    first = next(iter(rows.values()))
    n_train, n_val = first["probe"]["images"]

    def cell(acc: float) -> str:
        p = acc / 100
        return f"{acc:.1f} ({100 * np.sqrt(p * (1 - p) / n_val):.1f})"

    def label(r: Mapping) -> str:
        s = r["settings"]
        return f"queue {s['queue_size']} over {s['crops']} crops, {s['steps']} steps"

    net = backbone_title(cfg.backbone, cfg.pretrained is not None, cfg.init)
    body = [["random initialisation", "-", cell(first["probe"]["random"]["knn"]),
             cell(first["probe"]["random"]["linear"]), "-"]]
    for name, r in rows.items():
        loss = "-" if r["final_loss"] is None else (
            f"{r['final_loss']:.2f} ({r['chance_loss']:.2f})")
        body.append([label(r), name, cell(r["probe"]["moco"]["knn"]),
                     cell(r["probe"]["moco"]["linear"]), loss])
    md = [f"## SoCL moco_start: the MoCo start of {net} width {cfg.width}, "
          f"{len(train)} {training_data_name(cfg.train_data)} training sequences\n",
          "### Scores\n",
          f"The probe's validation split (digits on training photos: {n_train} training "
          f"and {n_val} held-out images; the test split is not read), one pretraining "
          "seed; accuracy % (its binomial standard error over the validation images).\n",
          markdown_table(["MoCo pretraining", "setting", "val kNN (k = 20) %",
                          "val linear %", "InfoNCE loss at the end (chance)"], body,
                         align="llrrr"),
          "![validation accuracy of each MoCo start](probe.png)\n"]
    payload = {"experiment": "socl-moco_start", "split": "val",
               "tables": {"screen": {k: dict(v) for k, v in rows.items()}}}

    def figure():
        import matplotlib.pyplot as plt

        names = ["random"] + list(rows)
        knn = [first["probe"]["random"]["knn"]] + [r["probe"]["moco"]["knn"]
                                                   for r in rows.values()]
        lin = [first["probe"]["random"]["linear"]] + [r["probe"]["moco"]["linear"]
                                                      for r in rows.values()]
        fig, ax = plt.subplots(figsize=(max(4.0, 1.3 * len(names)), 3.4), dpi=120)
        x = np.arange(len(names))
        for off, vals, what in ((-0.2, knn, "kNN (k = 20)"), (0.2, lin, "linear")):
            p = np.asarray(vals) / 100
            ax.bar(x + off, 100 * p, width=0.4, yerr=100 * np.sqrt(p * (1 - p) / n_val),
                   capsize=3, label=what, alpha=0.8)
        ax.set_xticks(x, names, rotation=15, fontsize=7, ha="right")
        ax.set(ylabel="val accuracy (%)", title=f"MoCo start, {net}: probe on val")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        return fig

    return Report(payload, "\n".join(md), {"probe.png": figure})
