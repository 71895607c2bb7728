"""Tables and plots of the tracking experiments: the OTB success and precision plots
(Wu et al. 2013, with the GOT-10k toolkit's definitions), GOT-10k's AO and SR (Huang et
al. 2019), and strips of frames with the true and tracked boxes.

A summary is {eval set: {tracker: {metric: {"mean", "sd"}}, "<a> vs <b>": {"mean",
"se", "num_sequences"}, ...}} (the pairs of the experiment's table), the sd over
training seeds (None for one seed) and the paired differences' standard error over
sequences (`ebm_jax.report.statistics`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ebm_jax.report.tables import fmt, markdown_table

LABELS = {"static": "never moves (first box)", "random": "SiamFC, random backbone",
          "box-siam": "Box-Siam (SiamFC on boxes)"}
SHORT = {"box-siam": "Box-Siam"}  # in the paired differences' lines
COLOURS = {"static": "tab:grey", "random": "tab:blue", "box-siam": "tab:red"}
METRICS = (("auc", "AUC", 100), ("precision", "prec. @20px", 100),
           ("norm_precision", "norm. prec.", 100), ("ao", "AO", 100),
           ("sr50", "SR0.5", 100), ("sr75", "SR0.75", 100), ("fps", "FPS", 1))


def _cell(m: Mapping, scale: float) -> str:
    if m.get("mean") is None:
        return "-"
    spec = ".1f"
    if m.get("sd") is None:
        return fmt(m["mean"], spec, scale)
    return f"{fmt(m['mean'], spec, scale)} +- {fmt(m['sd'], spec, scale)}"


def report_markdown(summary: Mapping, pairs: Sequence[tuple[str, str]], *, title: str,
                    seeds: Sequence[int], reference: Mapping[str, str] | None = None,
                    reference_note: str = "") -> str:
    """One table per evaluation set (its trackers in the summary's order), then the
    paired differences in AUC of `pairs` (a, b): a - b."""
    parts = [f"## {title}\n"]
    spread = "mean +- sd over the training seeds" if len(seeds) > 1 else "one seed"
    compared = {f"{a} vs {b}" for a, b in pairs}
    for set_name, rows in summary.items():
        body = [[LABELS.get(t, t)] + [_cell(rows[t][k], s) for k, _, s in METRICS]
                for t in rows if t not in compared]
        parts.append(f"### {set_name} ({spread}; scores in %)\n\n"
                     + markdown_table(["tracker"] + [h for _, h, _ in METRICS], body,
                                      align="l" + "r" * len(METRICS)))
        lines = []
        for a, b in pairs:
            d = rows.get(f"{a} vs {b}")
            if d and d.get("se") is not None:
                z = d["mean"] / d["se"] if d["se"] > 0 else float("inf")
                verdict = ("a difference beyond 2 standard errors" if abs(z) > 2
                           else "not a difference beyond 2 standard errors")
                lines.append(f"- {SHORT.get(a, LABELS.get(a, a))} - {LABELS.get(b, b)}: AUC "
                             f"{100 * d['mean']:+.1f} +- {100 * d['se']:.1f} (standard "
                             f"error over {d['num_sequences']} sequences, paired): "
                             f"{verdict}.")
        if lines:
            parts.append("\n".join(lines) + "\n")
    if reference:
        parts.append("Published (OTB-2015 / GOT-10k, full-size data and net): "
                     + "; ".join(f"{k} {v}" for k, v in reference.items())
                     + (f". {reference_note}" if reference_note else "") + "\n")
    return "\n".join(parts)


def _curves_figure(rows: Mapping[str, list[dict]], set_name: str, key: str, x, xlabel,
                   ylabel, label_value):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 3.6), dpi=120)
    for t, runs in rows.items():
        if not runs:
            continue
        curves = np.asarray([r[key] for r in runs], np.float64)
        mean = curves.mean(0)
        line, = ax.plot(x, mean, color=COLOURS.get(t),
                        label=f"{LABELS.get(t, t)} [{label_value(runs):.3f}]")
        if len(curves) > 1:
            ax.fill_between(x, curves.min(0), curves.max(0), color=line.get_color(),
                            alpha=0.2)
    ax.set(xlabel=xlabel, ylabel=ylabel, xlim=(x[0], x[-1]), ylim=(0, 1),
           title=f"{set_name}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left" if key == "success_curve" else "lower right")
    fig.tight_layout()
    return fig


def success_figure(rows, set_name: str):
    """The OTB success plot (IoU thresholds 0..1), AUC in the legend."""
    return _curves_figure(rows, set_name, "success_curve", np.linspace(0, 1, 21),
                          "overlap threshold", "success rate",
                          lambda runs: float(np.mean([r["auc"] for r in runs])))


def precision_figure(rows, set_name: str):
    """The OTB precision plot (centre error 0..50 px), precision at 20 px in the
    legend."""
    return _curves_figure(rows, set_name, "precision_curve", np.arange(51),
                          "location error threshold (px)", "precision",
                          lambda runs: float(np.mean([r["precision"] for r in runs])))


def strip_figure(sequences, preds: Mapping[str, Mapping[str, list]], num_frames: int):
    """A row of `num_frames` evenly spaced frames per sequence with the true box (green)
    and each tracker's box."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    rows = len(sequences)
    fig, axes = plt.subplots(rows, num_frames, figsize=(1.8 * num_frames, 1.5 * rows),
                             dpi=110, squeeze=False)
    for i, seq in enumerate(sequences):
        idx = np.linspace(0, len(seq) - 1, num_frames).round().astype(int)
        for ax, t in zip(axes[i], idx):
            ax.imshow(seq.read_frame(int(t)))
            boxes = [("true", "lime", seq.boxes[t])] + [
                (name, COLOURS.get(name, "tab:orange"), np.asarray(p[seq.name][t]))
                for name, p in preds.items() if seq.name in p]
            for _, colour, b in boxes:
                if np.all(np.isfinite(b)):  # xywh, 1-indexed: the pixel edge is x - 1.5
                    ax.add_patch(Rectangle((b[0] - 1.5, b[1] - 1.5), b[2], b[3], fill=False,
                                           edgecolor=colour, linewidth=1.2))
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{seq.name} #{t + 1}", fontsize=6)
    handles = [Rectangle((0, 0), 1, 1, fill=False, edgecolor=c, label=lab) for lab, c in
               [("true", "lime")] + [(LABELS.get(n, n), COLOURS.get(n, "tab:orange"))
                                     for n in preds]]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=7)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig
