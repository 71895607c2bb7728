"""The report of the box heads' sharper refinement probe
(`ebm_jax.recipes.tracking.box_head_probe`): per head (trained apart or jointly with
DiMP's classifier, per loss) and per set (validation, test, and the "outside" split of
procedural photos, in several draws), the refinement from starts of IoU 0.5, 0.7 and
0.8, by one ascent and by the tracker's own procedure, and with the pair's own
reference against another target's.

Each probe (`box_head_stages.probe_box_head`'s "from_starts") gives, per start IoU, the
mean over its pairs and the standard error over them. A figure of the report is the
mean over the probes of a group (seeds; seeds x draws for "outside") with up to three
standard errors, and is called beyond its error bars only where |mean| exceeds twice
the largest:
- over pairs: sqrt(sum se_i^2) / n over the n probes (each probe's own pairs);
- over seeds: the sd over seeds of the per-seed figure (averaged over draws) /
  sqrt(seeds), with two seeds or more;
- over draws ("outside" only): the sd over draws of the per-draw figure (averaged over
  seeds) / sqrt(draws): how much the figure depends on which photos the split is made
  of.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ebm_jax.report.tables import markdown_table

__all__ = ["FIGURES", "GROUPS", "probe_markdown", "probe_summary", "refined_iou_figure",
           "tracking_markdown", "tracking_summary"]

GROUPS = ("validation", "test", "outside")
# figure name -> (from_starts key of the mean, of its standard error over pairs)
FIGURES = {"gain": ("gain", "gain_se"),
           "procedure_gain": ("procedure_gain", "procedure_gain_se"),
           "own_minus_other": ("own_minus_other", "own_minus_other_se"),
           "iou_refined": ("iou_refined", None)}


def group_of(set_name: str) -> str:
    """"outside-2" -> "outside"; the other sets are their own group."""
    return "outside" if set_name.startswith("outside") else set_name


def _figure(rows: Sequence[Mapping], level: str, key: str, se_key: str | None) -> dict:
    """One figure over the probes `rows` of a group (see the module)."""
    values = [r["from_starts"][level][key] for r in rows]
    own = None if se_key is None else [r["from_starts"][level][se_key] for r in rows]
    return _summarise(rows, values, own, "pairs")


def _summarise(rows: Sequence[Mapping], values: Sequence[float],
               own_se: Sequence[float] | None, own_unit: str) -> dict:
    """The mean of `values` (one per row of a group) with its standard errors: over
    each row's own units (`own_se`, e.g. its pairs or its sequences), over seeds and
    over draws (see the module); `beyond_2se` where |mean| exceeds twice the largest."""
    values = np.asarray(values, np.float64)
    out = {"mean": float(values.mean()), "probes": len(rows)}
    ses = {}
    if own_se is not None and all(x is not None for x in own_se):  # None: one unit
        ses[own_unit] = float(np.sqrt(np.sum(np.asarray(own_se, np.float64) ** 2))
                              / len(rows))
    for unit, field in (("seeds", "seed"), ("draws", "draw")):
        keys = sorted({r.get(field) for r in rows if r.get(field) is not None})
        if len(keys) > 1:
            means = [values[[r.get(field) == k for r in rows]].mean() for k in keys]
            ses[unit] = float(np.std(means, ddof=1) / np.sqrt(len(keys)))
    out["se"] = ses
    largest = max(ses.values()) if ses else None
    out["beyond_2se"] = largest is not None and abs(out["mean"]) > 2 * largest
    return out


def probe_summary(rows: Sequence[Mapping], levels: Sequence[str]) -> dict:
    """{group: {"<heads> <loss>": {level: {figure: {mean, se: {pairs, seeds, draws},
    beyond_2se, probes}}}}} from the probe rows (each with "heads", "loss", "seed",
    "set", "draw" (outside only) and the probe's "from_starts")."""
    out: dict = {}
    for group in GROUPS:
        mine = [r for r in rows if group_of(r["set"]) == group]
        for head in dict.fromkeys((r["heads"], r["loss"]) for r in mine):
            probes = [r for r in mine if (r["heads"], r["loss"]) == head]
            out.setdefault(group, {})[" ".join(head)] = {
                level: {name: _figure(probes, level, *keys)
                        for name, keys in FIGURES.items()} for level in levels}
    return out


def _cell(f: Mapping) -> str:
    """IoU points: "+14.2 (0.9)", the largest standard error in brackets, * beyond 2."""
    largest = max(f["se"].values()) if f["se"] else None
    cell = f"{100 * f['mean']:+.1f}"
    if largest is not None:
        cell += f" ({100 * largest:.1f})" + (" *" if f["beyond_2se"] else "")
    return cell


def _difference(a: Mapping, b: Mapping) -> str:
    """a - b of two independent groups' figures, se the root sum of their largest."""
    sa, sb = (max(f["se"].values()) if f["se"] else None for f in (a, b))
    d = a["mean"] - b["mean"]
    if sa is None or sb is None:
        return f"{100 * d:+.1f}"
    se = float(np.hypot(sa, sb))
    return f"{100 * d:+.1f} ({100 * se:.1f})" + (" *" if abs(d) > 2 * se else "")


def probe_markdown(summary: Mapping, levels: Sequence[str], *, outside_draws: int,
                   seeds: Sequence[int]) -> str:
    """One table per group (gains in IoU points with the largest standard error), and
    the outside split against the test split."""
    lo, mid, hi = levels[0], levels[len(levels) // 2], levels[-1]
    headers = ["heads", "loss", *(f"from {lv}" for lv in levels), f"procedure from {hi}",
               f"own - other ref. from {mid}"]
    parts = []
    titles = {"validation": "Validation split (the training pool's photos, held-out "
                            "targets)",
              "test": "Test split (the test pool's photos)",
              "outside": f"Outside split (procedural photos, {outside_draws} draws)"}
    for group in GROUPS:
        if group not in summary:
            continue
        rows = []
        for head, by_level in summary[group].items():
            kind, loss = head.split(" ", 1)
            rows.append([kind, loss, *(_cell(by_level[lv]["gain"]) for lv in levels),
                         _cell(by_level[hi]["procedure_gain"]),
                         _cell(by_level[mid]["own_minus_other"])])
        parts.append(f"### {titles[group]}\n\n" + markdown_table(
            headers, rows, align="ll" + "r" * (len(headers) - 2)))
    if "outside" in summary and "test" in summary:
        rows = []
        for head in summary["test"]:
            if head not in summary["outside"]:
                continue
            kind, loss = head.split(" ", 1)
            rows.append([kind, loss, *(_difference(summary["outside"][head][lv]["gain"],
                                                   summary["test"][head][lv]["gain"])
                                       for lv in (lo, mid))])
        parts.append("### Outside minus test\n\n" + markdown_table(
            ["heads", "loss", f"gain from {lo}", f"gain from {mid}"], rows,
            align="llrr"))
    return (f"Gains of IoU in points (refined minus start, mean over seeds {list(seeds)}"
            " and draws), with the largest of their standard errors (over pairs, seeds, "
            "draws) in brackets; * beyond twice it.\n\n" + "\n".join(parts))


def tracking_summary(rows: Sequence[Mapping]) -> dict:
    """{group: {"box_siam": AUC with its standard errors (over each set's sequences,
    seeds, draws), "never_moves": the AUC of the tracker that never moves}} from rows of
    Box-Siam's own tracker (SiamFC's scale search), one per seed and set, each with
    "seed", "set", "draw", "auc", "auc_se" (over the set's sequences) and "static_auc"."""
    out = {}
    for group in GROUPS:
        mine = [r for r in rows if group_of(r["set"]) == group]
        if mine:
            out[group] = {
                "box_siam": _summarise(mine, [r["auc"] for r in mine],
                                       [r["auc_se"] for r in mine], "sequences"),
                "never_moves": float(np.mean([r["static_auc"] for r in mine]))}
    return out


def tracking_markdown(summary: Mapping) -> str:
    """Box-Siam's own tracker on each set of the probe, and the outside split minus the
    test split: whether the backbone that places the boxes still finds the targets
    where the heads are probed."""
    def auc(f: Mapping) -> str:
        largest = max(f["se"].values()) if f["se"] else None
        return f"{100 * f['mean']:.1f}" + ("" if largest is None else f" ({100 * largest:.1f})")

    rows = [[group, auc(summary[group]["box_siam"]),
             f"{100 * summary[group]['never_moves']:.1f}"] for group in summary]
    if "outside" in summary and "test" in summary:
        rows.append(["outside - test", _difference(summary["outside"]["box_siam"],
                                                   summary["test"]["box_siam"]), ""])
    return ("### Box-Siam's own tracker on the probe's sets\n\n"
            "SiamFC's scale search with the Box-Siam backbone the heads refine on: its AUC "
            "(%, mean over seeds and draws, the largest standard error over sequences, "
            "seeds and draws in brackets) beside the tracker that never moves; in the "
            "last row, * where the difference exceeds twice its standard error.\n\n"
            + markdown_table(["set", "Box-Siam AUC", "never moves AUC"], rows,
                             align="lrr"))


def refined_iou_figure(summary: Mapping, levels: Sequence[str]):
    """Refined IoU (one ascent) against the start IoU, one panel per group, one line
    per head; the diagonal is no change."""
    import matplotlib.pyplot as plt

    groups = [g for g in GROUPS if g in summary]
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.6),
                             sharey=True, squeeze=False)
    x = [float(lv) for lv in levels]
    for ax, group in zip(axes[0], groups):
        for head, by_level in summary[group].items():
            ax.plot(x, [by_level[lv]["iou_refined"]["mean"] for lv in levels], marker="o",
                    label=head, linestyle="--" if head.startswith("joint") else "-")
        ax.plot([x[0], x[-1]], [x[0], x[-1]], color="grey", lw=0.8)
        ax.set_title(group)
        ax.set_xlabel("start IoU")
    axes[0][0].set_ylabel("IoU after one ascent")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    return fig
