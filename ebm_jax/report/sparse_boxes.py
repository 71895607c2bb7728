"""The sparse-box experiment's part of the SoCL report (Wu & Chan, sec. 3.4 and Table 5's
scheme): the pseudo boxes' quality for each T, the annotation cost per frame and per
arm, the pseudo-box head's AO as a fraction of the all-box head's, a plot of IoU
against T (seeds as dots) and a strip of frames with the sparse, pseudo and true boxes.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np

from ebm_jax.report.tables import fmt, markdown_table, mean_sd_cell


def iou_figure(sweep: Mapping[str, list], title: str):
    """Mean IoU of the pseudo boxes with the true ones against T, one dot per seed and
    the mean as a line."""
    import matplotlib.pyplot as plt

    ts = sorted(int(t) for t in sweep)
    fig, ax = plt.subplots(figsize=(4.4, 3.2), dpi=120)
    for t in ts:
        v = [r["mean_iou"] for r in sweep[str(t)]]
        ax.plot(np.full(len(v), t), v, "k.", ms=5)
    ax.plot(ts, [np.mean([r["mean_iou"] for r in sweep[str(t)]]) for t in ts], "o-",
            color="tab:orange", label="mean over seeds")
    ax.set(xlabel="T (a box every T frames)", ylabel="mean IoU with the true box",
           title=title, xticks=ts)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def sparse_box_section(extra: Mapping, train, *, every: int, strip_frames: int
                       ) -> tuple[list[str], dict]:
    """Markdown lines and figures of the sparse-box record (`pseudo_box_sweep`)."""
    from ebm_jax.report.tracking import strip_figure

    md, figures = [], {}
    head = ["T", "mean IoU", "IoU > 0.5 (%)", "failures / 100 frames",
            "tracker s / frame", "annotation s / frame"]
    columns = (("mean_iou", ".3f", 1.0), ("iou_above_0.5", ".1f", 100.0),
               ("failures_per_100", ".1f", 1.0), ("tracker_seconds", ".3f", 1.0),
               ("annotation_seconds", ".2f", 1.0))
    body = [[t] + [mean_sd_cell([r[k] for r in rows], spec, scale)
                   for k, spec, scale in columns]
            for t, rows in sorted(extra["sweep"].items(), key=lambda kv: int(kv[0]))]
    md.append("Pseudo boxes of SoCL-CF from a box every T frames and a point in the others "
              "(a failure: the tracker's centre more than the failure radius from the "
              "point; mean +- sd over seeds, over the frames without an annotated box). "
              "Annotation seconds per frame: 2.27 (1 - 1/T) + 10.2 / T + the tracker's "
              "measured median seconds per frame (the paper: 0.1 s, 3.16 s at T = 10):\n")
    md.append(markdown_table(head, body, align="r" * len(head)))
    ratio = extra["ao_ratio_pseudo_to_all"]
    if ratio["mean"] is not None:
        md.append(f"The head on pseudo boxes (T = {every}) reaches "
                  f"{100 * ratio['mean']:.1f}%"
                  + ("" if ratio["sd"] is None else f" +- {100 * ratio['sd']:.1f}")
                  + " of the AO of the head on every true box (per seed: "
                  + ", ".join(f"{100 * r:.1f}%" for r in extra["ao_ratio_per_seed"])
                  + "; the paper: 92.7%).\n")
    ann = extra["annotation"]
    md.append(f"Annotation hours of the {ann['frames']} training frames with a box, per "
              "arm (seconds per frame in brackets):\n")
    md.append(markdown_table(["arm", "hours", "s / frame"],
                             [[a, fmt(h, ".2f"), fmt(ann["seconds_per_frame"][a], ".2f")]
                              for a, h in ann["hours"].items()], align="lrr"))
    figures["pseudo_box_iou.png"] = functools.partial(
        iou_figure, extra["sweep"], "pseudo boxes against T")
    md.append("![pseudo-box IoU against T](pseudo_box_iou.png)\n")
    strip = extra.get("strip")
    if strip is not None and strip_frames > 0:
        seq = train[strip["sequence"]]
        keyed = np.asarray(strip["keyed"], bool)
        sparse = np.where(keyed[:, None], np.asarray(seq.boxes, np.float64), np.nan)
        pseudo = np.where(keyed[:, None], np.nan, np.asarray(strip["boxes"], np.float64))
        figures["pseudo_box_strip.png"] = functools.partial(
            strip_figure, [seq], {"sparse boxes": {seq.name: sparse},
                                  "pseudo boxes": {seq.name: pseudo}}, strip_frames)
        md.append("![a training sequence: true (green), sparse (blue) and pseudo (orange) "
                  "boxes](pseudo_box_strip.png)\n")
    return md, figures
