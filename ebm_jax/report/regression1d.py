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


# Figure 2's comparison (sec. 4.1): "NCE and NCE+ significantly outperform ML-IS and
# KLD-IS for small number of samples M"
FIGURE2_PAIRS = (("nce", "ml-is"), ("nce", "kld-is"), ("nce+", "ml-is"), ("nce+", "kld-is"))


def _models(records: Sequence[dict], method: str, m: int) -> list[list[float]] | None:
    """Every model's D_KL of `method` at M = `m`, one list per dataset (in the records'
    order), or None where a dataset lacks the record."""
    rs = [r for r in records if r["method"] == method and r["num_samples"] == m]
    datasets = list(dict.fromkeys(r["dataset"] for r in records))
    by = {r["dataset"]: r for r in rs}
    if any(d not in by or "kl_all" not in by[d] for d in datasets):
        return None
    return [[np.nan if v is None else float(v) for v in by[d]["kl_all"]] for d in datasets]


def _mean_se(strata: list[list[float]]) -> dict:
    """The strata's (datasets') mean of their finite values' means, and its standard
    error sqrt(sum se_k^2) / K (None where a stratum has one finite value)."""
    from ebm_jax.report.statistics import standard_error

    finite = [np.asarray(v, np.float64)[np.isfinite(v)] for v in strata]
    dropped = sum(len(v) for v in strata) - sum(v.size for v in finite)
    if any(v.size == 0 for v in finite):
        return {"mean": None, "se": None, "dropped": dropped}
    ses = [standard_error(v) for v in finite]
    se = None if None in ses else float(np.sqrt(np.sum(np.square(ses))) / len(finite))
    return {"mean": float(np.mean([v.mean() for v in finite])), "se": se,
            "dropped": dropped}


def figure2_models_markdown(records: Sequence[dict],
                            pairs: Sequence[tuple[str, str]] = FIGURE2_PAIRS) -> str:
    """Figure 2 over every model, with error bars: each method's D_KL at each M as the
    mean over all models of its ensemble (not the top k) +- the standard error over
    models (datasets averaged), and the differences the paper's claim is about, each
    method's models against another's (independent initialisations, so unpaired:
    `statistics.stratified_difference`, a stratum per dataset), in bold where beyond
    twice their standard error. A model whose D_KL is not finite is left out and
    counted."""
    from ebm_jax.report.statistics import stratified_difference

    methods, ms, _ = _sweep_values(records)

    def cell(d: dict, spec: str) -> str:
        if d["mean"] is None:
            return "-"
        text = (f"{d['mean']:{spec}}" if d["se"] is None
                else f"{d['mean']:{spec}} +- {d['se']:.3f}")
        if d.get("beyond_2se"):
            text = f"**{text}**"
        return text + (f" ({d['dropped']} not finite)" if d["dropped"] else "")

    rows = []
    for meth in methods:
        row = [meth]
        for m in ms:
            models = _models(records, meth, m)
            row.append(cell(_mean_se(models), ".3f") if models else "-")
        rows.append(row)
    out = [markdown_table(["method", *[f"M={m}" for m in ms]], rows,
                          align="l" + "r" * len(ms))]
    diff_rows = []
    for a, b in pairs:
        if a not in methods or b not in methods:
            continue
        row = [f"{a} - {b}"]
        for m in ms:
            ma, mb = _models(records, a, m), _models(records, b, m)
            row.append(cell(stratified_difference(ma, mb), "+.3f") if ma and mb else "-")
        diff_rows.append(row)
    if diff_rows:
        out.append(markdown_table(["D_KL difference", *[f"M={m}" for m in ms]], diff_rows,
                                  align="l" + "r" * len(ms)))
    return "\n\n".join(t.strip("\n") for t in out) + "\n"


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


__all__ = ["FIGURE2_PAIRS", "figure2_markdown", "figure2_models_markdown", "plot_densities",
           "plot_kl_against_m", "table1_markdown"]
