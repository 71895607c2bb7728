"""The SoCL report's figures (`ebm_jax.report.socl`): AUC per arm, the sweeps of Fig. 7
and 8, the annotation budgets of Fig. 9, and the TOP proposals' recall (Fig. 4)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

def bar_figure(labels, rows, title):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(labels)), 3.4), dpi=120)
    for i, lab in enumerate(labels):
        v = 100 * np.asarray([r["auc"] for r in rows[lab]])
        ax.bar(i, v.mean(), yerr=v.std(ddof=1) if len(v) > 1 else None, capsize=4,
               color="tab:red" if "SoCL" in lab or "LST" in lab else "tab:blue", alpha=0.8)
        ax.plot(np.full(len(v), i), v, "k.", ms=4)
    ax.set_xticks(range(len(labels)), labels, rotation=20, fontsize=7, ha="right")
    ax.set(ylabel="AUC (%)", title=title)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def sweep_figure(groups: Mapping[str, Sequence], rows, xlabel: str, title: str,
                  hline: str | None = None, start: str | None = None):
    """AUC (mean +- sd over seeds) against the swept value of each group of arms, with
    the arm `hline` (Fig. 8's SoCL-Siam) and the `start` the arms train from as levels."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.4), dpi=120,
                             squeeze=False)
    for ax, (name, arms) in zip(axes[0], groups.items()):
        x = np.asarray([a.x for a in arms], np.float64)
        v = np.asarray([[r["auc"] for r in rows[a.label]] for a in arms]) * 100
        sd = v.std(axis=1, ddof=1) if v.shape[1] > 1 else np.zeros(len(x))
        ax.errorbar(x, v.mean(1), yerr=sd, marker="o", capsize=4, label=name)
        if hline is not None:
            level_line(ax, rows[hline], hline, "tab:red")
        if start is not None:
            level_line(ax, rows[start], start, "tab:gray")
        ax.set(xlabel=xlabel if len(groups) == 1 else name, ylabel="AUC (%)", title=title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def recall_figure(curves: Mapping[str, np.ndarray], ks: np.ndarray):
    """Target recall at IoU 0.5 against the number of kept proposals (paper Fig. 4)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.2, 3.4), dpi=120)
    for name, r in curves.items():
        ax.plot(ks, r, marker=".", label=f"{name} points")
    ax.set(xscale="log", xlabel="kept proposals (after NMS)", ylabel="target recall (IoU 0.5)",
           ylim=(0, 1), title="TOP proposals, generated train split")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def level_line(ax, rows, label: str, color: str) -> None:
    """An arm of no x (SoCL-Siam in Fig. 8, the start in Table 2) as a horizontal line
    at its mean AUC over seeds, with a band of +- sd."""
    h = 100 * np.asarray([r["auc"] for r in rows])
    ax.axhline(h.mean(), color=color, label=f"{label} (mean +- sd)")
    if len(h) > 1:
        ax.axhspan(h.mean() - h.std(ddof=1), h.mean() + h.std(ddof=1), color=color,
                   alpha=0.15)


def budget_figure(groups, rows, title, start=None):
    """AUC against annotation hours, Box-Siam and SoCL-Siam (paper Fig. 9), and the
    start both train from where the table has it."""
    import matplotlib.pyplot as plt

    from matplotlib.ticker import NullFormatter

    fig, ax = plt.subplots(figsize=(4.6, 3.4), dpi=120)
    budgets = sorted({a.x for arms in groups.values() for a in arms})
    for name, arms in groups.items():
        x = np.asarray([a.x for a in arms])
        v = 100 * np.asarray([[r["auc"] for r in rows[a.label]] for a in arms])
        sd = v.std(axis=1, ddof=1) if v.shape[1] > 1 else None
        ax.errorbar(x, v.mean(1), yerr=sd, marker="o", capsize=4,
                    label="Box-Siam" if name == "box-siam" else "SoCL-Siam")
    if start is not None:
        level_line(ax, rows[start], start, "tab:gray")
    ax.set(xscale="log", xlabel="annotation hours", ylabel="AUC (%)", title=title)
    ax.set_xticks(budgets, [f"{h:g}" for h in budgets])  # the budgets, not powers of 10
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
