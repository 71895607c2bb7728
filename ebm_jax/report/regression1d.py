"""Tables and plots of the 1D regression comparison (the paper's sec. 4.1): Table 1
(D_KL and seconds per epoch of every method), Figure 2 (D_KL against the number of
samples M) and the learned densities p(y|x) beside the ground truth.

A record (one method on one dataset, one ensemble) holds at least `method`, `dataset`,
`num_models`, `epochs`, `num_samples` (M, None for SM), `kl_top_k`, `top_k` and
`seconds_per_epoch` (per model).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ebm_jax.report.tables import fmt, markdown_table

EXTENT = (-3.0, 3.0, -3.0, 3.0)  # the evaluation grid's x and y range


def _mean(values) -> float | None:
    vals = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(vals)) if vals and len(vals) == len(values) else None


def table1_markdown(records: Sequence[dict], datasets: Sequence[int],
                    reference_kl: Mapping[str, float] | None = None,
                    reference_seconds: Mapping[str, float] | None = None, *,
                    setting: str = "", reference_setting: str = "") -> str:
    """Table 1: the top-k mean D_KL per dataset and their mean, beside the paper's
    figure (the two datasets averaged), and seconds per epoch per model beside the
    paper's. The two timings are at the settings named in their headers (`setting`:
    this run's M, chains and device; `reference_setting`: the paper's), which differ, so
    their ratio is no speed-up."""
    reference_kl, reference_seconds = reference_kl or {}, reference_seconds or {}
    by = {(r["method"], r["dataset"]): r for r in records}
    methods = list(dict.fromkeys(r["method"] for r in records))
    head = ["method", *[f"D_KL d{d}" for d in datasets], "D_KL mean", "paper D_KL",
            "s/epoch/model" + (f" at {setting}" if setting else ""),
            "paper s/epoch" + (f" at {reference_setting}" if reference_setting else ""),
            "models x epochs (top-k)"]
    rows = []
    for m in methods:
        rs = [by.get((m, d)) for d in datasets]
        present = [r for r in rs if r]
        kl = [r["kl_top_k"] if r else None for r in rs]
        spe = _mean([r["seconds_per_epoch"] for r in present]) if present else None
        size = (f"{present[0]['num_models']} x {present[0]['epochs']} "
                f"(top-{present[0]['top_k']})") if present else ""
        rows.append([m, *[fmt(v) for v in kl], fmt(_mean(kl)),
                     fmt(reference_kl.get(m)), fmt(spe), fmt(reference_seconds.get(m), ".2f"),
                     size])
    return markdown_table(head, rows, align="l" + "r" * (len(head) - 2) + "l")


def _sweep_values(records: Sequence[dict]):
    methods = list(dict.fromkeys(r["method"] for r in records))
    ms = sorted({r["num_samples"] for r in records if r["num_samples"] is not None})
    table = {}
    for meth in methods:
        for m in ms:
            vals = [r["kl_top_k"] for r in records
                    if r["method"] == meth and r["num_samples"] == m]
            table[meth, m] = _mean(vals) if vals else None
    return methods, ms, table


def figure2_markdown(records: Sequence[dict]) -> str:
    """Figure 2 as a table: the top-k mean D_KL (datasets averaged) against M."""
    methods, ms, table = _sweep_values(records)
    head = ["method", *[f"M={m}" for m in ms]]
    rows = [[meth, *[fmt(table[meth, m]) for m in ms]] for meth in methods]
    return markdown_table(head, rows, align="l" + "r" * len(ms))


def plot_kl_against_m(records: Sequence[dict]):
    """Figure 2: D_KL (top-k mean, datasets averaged) against M, log-log."""
    import matplotlib.pyplot as plt

    methods, ms, table = _sweep_values(records)
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for meth in methods:
        pts = [(m, table[meth, m]) for m in ms if table[meth, m] is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o", label=meth)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("M (samples per example)")
    ax.set_ylabel("D_KL (top-k mean, datasets averaged)")
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def plot_densities(dataset: int, p_true: np.ndarray,
                   panels: Sequence[tuple[str, np.ndarray]]):
    """The ground truth p(y|x) and one learned density per method (each (grid, grid),
    rows over x normalised over y), on one colour scale."""
    import matplotlib.pyplot as plt

    panels = [("ground truth", p_true), *panels]
    cols = min(len(panels), 5)
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3 * cols, 2.8 * rows), squeeze=False)
    vmax = float(np.quantile(p_true, 0.999))
    for ax, (title, dens) in zip(axes.flat, panels):
        ax.imshow(np.asarray(dens).T, origin="lower", extent=EXTENT, aspect="auto",
                  vmin=0, vmax=vmax, cmap="viridis")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("x")
        ax.set_ylabel("y")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"p(y|x), dataset {dataset}")
    fig.tight_layout()
    return fig


__all__ = ["figure2_markdown", "plot_densities", "plot_kl_against_m", "table1_markdown"]
