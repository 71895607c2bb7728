"""Tables and figures of the detection experiment (the paper's sec. 4.2): Table 2
(methods), Figures 3 and 4 (AP and ML-IS training cost against M), Figure 5 (NCE+
against beta) and Table 3 (NCE sigmas).

Each row is one head stage: {"stage", "method", "num_samples", "hyperparameters",
"finite", "seconds_per_iteration", "final_loss", and, when evaluated, "initial", "nms"
and "refined" ({"AP", "AP50", "AP75"} in [0, 1]), "refine_seconds", "num_boxes",
"num_left_image" (refined boxes dropped for leaving the image)}. Over
several seeds (`aggregate_seeds`) the figures are means, with "sd" ({which: {key: sd}}),
"gain" (refined - initial AP, paired by seed: mean, se, beyond_2se), "refine_gain"
(refined - guided-NMS AP, paired by seed: what the refinement steps alone add to the
same boxes) and "per_seed".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ebm_jax.report.statistics import paired_difference
from ebm_jax.report.tables import markdown_table, signed_points

TITLES = {"table2": "Table 2: methods", "m": "Figures 3 and 4: AP (and s / iter) against M",
          "beta": "Figure 5: NCE+ against beta", "sigma": "Table 3: NCE sigmas"}


APS = ("AP", "AP50", "AP75")
STAGES = ("initial", "nms", "refined")


def aggregate_seeds(rows: Sequence[dict], seeds: Sequence[int]) -> dict:
    """One head's rows of several seeds as one row (see the module docstring); one seed
    gives its row with its seed."""
    if len(rows) == 1:
        return {**rows[0], "seed": int(seeds[0])}
    first = rows[0]
    out = {k: first[k] for k in ("stage", "method", "num_samples", "hyperparameters")}
    out["finite"] = all(r["finite"] for r in rows)
    sp = [r["seconds_per_iteration"] for r in rows if r["seconds_per_iteration"]]
    out["seconds_per_iteration"] = float(np.median(sp)) if sp else None
    out["steps"] = first["steps"]
    if all("refined" in r for r in rows):
        out["sd"] = {}
        for which in STAGES:
            vals = {k: [r[which][k] for r in rows] for k in APS}
            out[which] = {k: float(np.mean(v)) for k, v in vals.items()}
            out["sd"][which] = {k: float(np.std(v, ddof=1)) for k, v in vals.items()}
        out["gain"] = paired_difference([r["refined"]["AP"] for r in rows],
                             [r["initial"]["AP"] for r in rows])
        out["refine_gain"] = paired_difference([r["refined"]["AP"] for r in rows],
                                               [r["nms"]["AP"] for r in rows])
        out["num_boxes"] = int(np.mean([r["num_boxes"] for r in rows]))
    out["per_seed"] = [{**r, "seed": int(s)} for r, s in zip(rows, seeds)]
    return out


def ap(row: dict, which: str, key: str = "AP") -> str:
    """A row's AP in % (one decimal; "mean +- sd" over seeds), or n/a when it was not
    evaluated."""
    if which not in row:
        return "n/a"
    sd = row.get("sd", {}).get(which, {}).get(key)
    return f"{100 * row[which][key]:.1f}" + ("" if sd is None else f" +- {100 * sd:.1f}")


def _m_cell(row: dict | None, method: str) -> str:
    if row is None:
        return "-"
    if not row["finite"]:
        return "NaN"
    cost = row["seconds_per_iteration"]
    return ap(row, "refined") + (f" ({cost:.3f}s)" if method == "ml-is" and cost else "")


def _table2(rows, reference) -> str:
    first = next((r for r in rows if "initial" in r), None)
    parts = []
    if first:
        parts.append(f"Detector boxes (initial): AP {ap(first, 'initial')}, AP50 "
                     f"{ap(first, 'initial', 'AP50')}, AP75 {ap(first, 'initial', 'AP75')}.\n")
    paper = {m: v for m, *v in reference}

    def difference(r, key, which):  # paired over seeds, else the one seed's difference
        return (signed_points(r[key]) if key in r
                else f"{100 * (r['refined']['AP'] - r[which]['AP']):+.1f}"
                if "refined" in r else "n/a")

    body = []
    for r in rows:
        sp = r["seconds_per_iteration"]
        body.append([r["method"].upper(), r["num_samples"], ap(r, "refined"),
                     ap(r, "refined", "AP50"), ap(r, "refined", "AP75"), ap(r, "nms"),
                     difference(r, "gain", "initial"), difference(r, "refine_gain", "nms"),
                     f"{sp:.3f}" if sp else "n/a",
                     " / ".join(f"{v:.1f}" for v in paper.get(r["method"], ())) or "-"])
    multi = any("per_seed" in r for r in rows)
    se = ", mean +- se" if multi else ""
    parts.append(markdown_table(["method", "M", "AP", "AP50", "AP75", "AP after guided NMS",
                                 "AP - initial" + se, "AP - after NMS (refinement)" + se,
                                 "s / iter", "paper AP / AP50 / AP75"], body))
    nce = next((r for r in rows if r["method"] == "nce" and "per_seed" in r
                and "refined" in r), None)
    if nce is not None:
        base = [p["refined"]["AP"] for p in nce["per_seed"]]
        diffs = [[r["method"].upper(), signed_points(paired_difference(
            [p["refined"]["AP"] for p in r["per_seed"]], base))]
            for r in rows if r is not nce and "refined" in r and "per_seed" in r]
        parts.append("\nRefined AP minus NCE's, paired by seed (points, mean +- se; * "
                     "beyond 2 se):\n")
        parts.append(markdown_table(["method", "AP - NCE"], diffs))
    return "\n".join(parts)


def _sweep_m(rows) -> str:
    ms = sorted({r["num_samples"] for r in rows})
    body = []
    for method in dict.fromkeys(r["method"] for r in rows):
        cells = {r["num_samples"]: r for r in rows if r["method"] == method}
        body.append([method.upper()] + [_m_cell(cells.get(m), method) for m in ms])
    return markdown_table(["method"] + [f"M={m}" for m in ms], body)


def _sweep_beta(rows) -> str:
    body = [[r["method"].upper(), r["hyperparameters"].get("beta", "-"), ap(r, "refined"),
             ap(r, "refined", "AP50"), ap(r, "refined", "AP75")] for r in rows]
    return markdown_table(["run", "beta", "AP", "AP50", "AP75"], body)


def _paper_sigma(reference, sigmas) -> float | None:
    """The paper's AP of a sigma set: reference rows are (sigma_1, sigma_2, sigma_3, AP)."""
    for *sig, value in reference:
        if np.allclose(sig, sigmas):
            return value
    return None


def _sweep_sigma(rows, reference) -> str:
    body = []
    for r in rows:
        sig = r["hyperparameters"]["sigmas"]
        paper = _paper_sigma(reference, sig)
        body.append([", ".join(f"{s:g}" for s in sig), ap(r, "refined"),
                     ap(r, "refined", "AP50"), ap(r, "refined", "AP75"),
                     f"{paper:.2f}" if paper is not None else "-"])
    return markdown_table(["sigmas", "AP", "AP50", "AP75", "paper (val AP)"], body)


def detection_markdown(tables: dict[str, list[dict]], info: dict, *,
                       reference_table2: Sequence = (), reference_table3: Sequence = ()) -> str:
    """The Markdown of a run: `info` holds the data and settings shown in the header
    (name, data, num_train, num_val, image_size, pool_size, channels, hidden,
    head_steps, boxes_per_batch, refine_steps, wall_seconds, devices)."""
    i = info
    parts = [f"# Detection box refinement ({i['data']} data, {i['name']})\n",
             f"{i['num_train']} training images; scored on {i['num_val']} "
             f"{i.get('eval_split', 'val')} images"
             f"{'' if i.get('guided_nms', True) else ' (no guided NMS)'} at "
             f"{i['image_size']}px; head: PrRoIPool {i['pool_size']}x{i['pool_size']} on "
             f"{i['channels']} channels, FC {i['hidden']}, {i['head_steps']} steps of "
             f"{i['boxes_per_batch']} boxes; T = {i['refine_steps']} refinement steps. "
             "AP in %, COCO evaluator"
             + (f"; mean +- sd over seeds {', '.join(map(str, i['seeds']))}"
                if len(i.get("seeds", ())) > 1 else "") + ".\n"]
    for name, rows in tables.items():
        parts.append(f"## {TITLES[name]}\n")
        if name == "table2":
            parts.append(_table2(rows, reference_table2))
        elif name == "m":
            parts.append(_sweep_m(rows))
        elif name == "beta":
            parts.append(_sweep_beta(rows))
        elif name == "sigma":
            parts.append(_sweep_sigma(rows, reference_table3))
    if "wall_seconds" in i:
        parts.append(f"Wall time {i['wall_seconds']:.0f} s on {i['devices']} device(s).\n")
    return "\n".join(parts)


def _refined(rows) -> list[float]:
    return [100 * r["refined"]["AP"] if "refined" in r else np.nan for r in rows]


def _plot_table2(rows):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(4.0, 0.8 * len(rows) + 2), 3.8))
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [100 * r["initial"]["AP"] if "initial" in r else np.nan for r in rows],
           0.4, label="detector (initial)", color="gray")
    ax.bar(x + 0.2, _refined(rows), 0.4, label="refined", color="C0")
    ax.set_xticks(x, [r["method"].upper() for r in rows], rotation=30)
    ax.set_ylabel("AP (%)")
    ax.set_title("Table 2: AP before and after refinement")
    ax.legend()
    fig.tight_layout()
    return fig


def _plot_m(rows):
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for method in dict.fromkeys(r["method"] for r in rows):
        rs = sorted((r for r in rows if r["method"] == method), key=lambda r: r["num_samples"])
        a.plot([r["num_samples"] for r in rs], _refined(rs), "o-", label=method.upper())
        if method == "ml-is":
            b.plot([r["num_samples"] for r in rs],
                   [r["seconds_per_iteration"] or np.nan for r in rs], "o-", color="C0")
    first = next((r for r in rows if "initial" in r), None)
    if first:
        a.axhline(100 * first["initial"]["AP"], color="gray", ls="--", label="initial")
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("M")
    a.set_ylabel("AP after refinement (%)")
    a.set_title("Figure 3: AP against M")
    a.legend()
    b.set_ylabel("training s / iteration")
    b.set_title("Figure 4: ML-IS training cost")
    fig.tight_layout()
    return fig


def _plot_beta(rows):
    import matplotlib.pyplot as plt

    plus = sorted((r for r in rows if r["method"] == "nce+"),
                  key=lambda r: r["hyperparameters"]["beta"])
    fig, ax = plt.subplots(figsize=(5, 3.8))
    ax.plot([r["hyperparameters"]["beta"] for r in plus], _refined(plus), "o-",
            label="NCE+")
    for r in rows:
        if r["method"] == "nce" and "refined" in r:
            ax.axhline(100 * r["refined"]["AP"], color="C1", ls="--", label="NCE")
    ax.set_xlabel("beta")
    ax.set_ylabel("AP after refinement (%)")
    ax.set_title("Figure 5: NCE+ against beta")
    ax.legend()
    fig.tight_layout()
    return fig


def _plot_sigma(rows, reference):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.8))
    x = [r["hyperparameters"]["sigmas"][0] for r in rows]
    ax.plot(x, _refined(rows), "o-", label="this run")
    paper = [_paper_sigma(reference, r["hyperparameters"]["sigmas"]) for r in rows]
    if any(p is not None for p in paper):
        ax.plot(x, [np.nan if p is None else p for p in paper], "s--", color="gray",
                label="paper (COCO)")
    ax.set_xscale("log")
    ax.set_xlabel("sigma_1 (sigmas = sigma_1, 2 sigma_1, 4 sigma_1)")
    ax.set_ylabel("AP after refinement (%)")
    ax.set_title("Table 3: NCE against its sigmas")
    ax.legend()
    fig.tight_layout()
    return fig


def detection_figures(tables: dict[str, list[dict]], *,
                      reference_table3: Sequence = ()) -> dict[str, Callable]:
    """{file name: make_figure} of the run's tables (for `Report.figures`)."""
    figures: dict[str, Callable] = {}
    if "table2" in tables:
        figures["table2_methods.png"] = lambda: _plot_table2(tables["table2"])
    if "m" in tables:
        figures["figure3_4_m.png"] = lambda: _plot_m(tables["m"])
    if "beta" in tables:
        figures["figure5_beta.png"] = lambda: _plot_beta(tables["beta"])
    if "sigma" in tables:
        figures["table3_sigmas.png"] = lambda: _plot_sigma(tables["sigma"],
                                                           reference_table3)
    return figures
