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
          "box-siam": "Box-Siam (SiamFC on boxes)",
          "coarse": "Box-Siam centre only (one scale, no refinement)",
          "box-head-kld-is": "box head, KLD-IS", "box-head-nce": "box head, NCE",
          "box-head-nce+": "box head, NCE+", "box-head-ml-is": "box head, ML-IS"}
SHORT = {"box-siam": "Box-Siam"}  # in the paired differences' lines
COLOURS = {"static": "tab:grey", "random": "tab:blue", "box-siam": "tab:red",
           "coarse": "tab:olive", "box-head-kld-is": "tab:purple",
           "box-head-nce": "tab:cyan", "box-head-nce+": "tab:orange",
           "box-head-ml-is": "tab:brown", "pseudo boxes": "tab:orange",
           "sparse boxes": "tab:blue"}
METRICS = (("auc", "AUC", 100), ("precision", "prec. @20px", 100),
           ("norm_precision", "norm. prec.", 100), ("ao", "AO", 100),
           ("sr50", "SR0.5", 100), ("sr75", "SR0.75", 100), ("fps", "FPS", 1))


def training_data_name(train_data: str) -> str:
    """The name of a run's training data (`--config.train_data`) in titles."""
    return {"generated": "generated", "got10k": "GOT-10k"}.get(train_data, train_data)


def start_markdown(probe: Mapping, settings: Mapping,
                   per_seed: Sequence[Mapping] | None = None) -> str:
    """The MoCo-pretrained start's section (`ebm_jax.recipes.tracking.backbone_pretraining`): its
    settings and its probe on digits-on-photos beside the random initialisation; with
    `per_seed` (each training seed's own start, `backbone_pretraining.start_figures`),
    one row per seed: its MoCo seed, final InfoNCE loss and probe."""
    n_train, n_test = probe["images"]
    about = (f"MoCo on {settings['crops']} unlabelled crops of the training "
             f"frames and photos ({settings['steps']} steps of {settings['batch_size']}, "
             f"{settings['input_size']} px views, queue {settings['queue_size']})")
    if per_seed:
        rows = [[str(r["seed"]), str(r["settings"]["seed"]), fmt(r["final_loss"], ".3f"),
                 fmt(r["probe"]["random"]["knn"], ".1f"),
                 fmt(r["probe"]["random"]["linear"], ".1f"),
                 fmt(r["probe"]["moco"]["knn"], ".1f"),
                 fmt(r["probe"]["moco"]["linear"], ".1f")]
                for r in per_seed]
        return (f"\nBackbone starts, one per training seed: {about}, each pretrained with "
                f"its own MoCo seed. Their final InfoNCE loss (chance "
                f"{fmt(per_seed[0]['chance_loss'], '.2f')}) and probe on digits-on-photos "
                f"({n_train} training / {n_test} test images, cell mean of the embedding; "
                f"accuracy %), at random initialisation and after MoCo:\n\n"
                + markdown_table(["seed", "MoCo seed", "final loss", "random kNN",
                                  "random linear", "MoCo kNN", "MoCo linear"], rows,
                                 align="lrrrrrr"))
    rows = [[name, fmt(probe[key]["knn"], ".1f"), fmt(probe[key]["linear"], ".1f")]
            for name, key in (("random initialisation", "random"), ("MoCo", "moco"))]
    return (f"\nBackbone start: {about}. Its "
            f"probe on digits-on-photos ({n_train} training / {n_test} test images, cell "
            f"mean of the embedding; accuracy %):\n\n"
            + markdown_table(["backbone", "kNN (k = 20)", "linear"], rows, align="lrr"))


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
        parts.append(_scores_table(set_name, rows, compared, spread))
        lines = []
        several = [(a, b) for a, b in pairs  # two or more seeds: both errors, a table
                   if (rows.get(f"{a} vs {b}") or {}).get("se_seeds") is not None]
        if several:
            parts.append("Paired differences (AUC points):\n\n"
                         + paired_table(several, rows))
        for a, b in pairs:
            d = rows.get(f"{a} vs {b}")
            if d and d.get("se_seeds") is not None:
                continue
            elif d and d.get("se") is not None:
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


def _scores_table(set_name: str, rows: Mapping, compared, spread: str) -> str:
    body = [[LABELS.get(t, t)] + [_cell(rows[t][k], s) for k, _, s in METRICS]
            for t in rows if t not in compared]
    return (f"### {set_name} ({spread}; scores in %)\n\n"
            + markdown_table(["tracker"] + [h for _, h, _ in METRICS], body,
                             align="l" + "r" * len(METRICS)))


# The EBM regression paper, Table 4 (AUC / Success, %): the columns of its three EBM trackers
PAPER_TABLE4_COLUMNS = ("DiMP-KLD-IS", "DiMP-NCE", "DiMP-NCE+")


def _se(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def paired_table(pairs: Sequence[tuple[str, str]], rows: Mapping) -> str:
    """The paired differences in AUC of `pairs` (a, b) found in `rows`
    (`statistics.paired_seeds_and_sequences`), a row each: a - b, both standard errors,
    and whether it is a difference (beyond twice the larger of them)."""
    body = []
    for a, b in pairs:
        d = rows.get(f"{a} vs {b}")
        if d is None:
            continue
        verdict = ("one seed: no verdict" if d["se_seeds"] is None
                   else "**yes**" if d["real"] else "no")
        body.append([f"{SHORT.get(a, LABELS.get(a, a))} - {LABELS.get(b, b)}",
                     f"{100 * d['mean']:+.1f}", _se(d["se_seeds"]),
                     _se(d["se_sequences"]), verdict])
    seeds = next((len(rows[f"{a} vs {b}"]["seeds"]) for a, b in pairs
                  if f"{a} vs {b}" in rows), 0)
    return markdown_table(["a - b", "AUC", f"se over {seeds} seeds", "se over sequences",
                           "beyond 2 se (both)"], body, align="lrrrl")


# the config fields that fix a tracking run's test data: two runs compare only where
# they agree on the ones both record
TEST_DATA_FIELDS = ("train_data", "got10k_root", "otb_root", "num_test_sequences",
                    "num_frames", "frame_height", "frame_width", "seed")


def _tracking_config(results, name: str) -> Mapping:
    """The config of a tracking or SoCL results.json (tables {set: {arm: rows per seed}},
    SoCL's "static" table aside); a ValueError naming `name` for anything else."""
    meta = results.get("ebm_jax") if isinstance(results, Mapping) else None
    recipe = meta.get("recipe") if isinstance(meta, Mapping) else None
    tables = results.get("tables") if isinstance(results, Mapping) else None
    arms = [a for s, a in tables.items() if s != "static"] if isinstance(
        tables, Mapping) else None
    rows = [r for a in arms or () if isinstance(a, Mapping) for r in a.values()]
    if (recipe not in ("tracking", "socl") or arms is None
            or not all(isinstance(a, Mapping) for a in arms)
            or not all(isinstance(r, list) and all(isinstance(x, Mapping) and "seed" in x
                                                   for x in r) for r in rows)):
        raise ValueError(f"{name} is not a tracking or SoCL results.json (recipe "
                         f"{recipe!r}; tables of arms with rows per seed)")
    return meta.get("config") or {}


def _evaluation_sets(results) -> dict:
    """{evaluation set: {arm: rows per seed}} of a tracking or SoCL results.json. SoCL
    results hold their one set's arms under "arms", its name in "split" (the tracking
    recipe's "generated-<split>"); their "static" table, the tracker that never moves,
    has no seeds."""
    tables = results["tables"]
    if results["ebm_jax"]["recipe"] == "socl":
        return {f"generated-{results.get('split', 'test')}": tables.get("arms", {})}
    return {s: a for s, a in tables.items() if s != "static"}


def compare_results(results_a: Mapping, arm_a: str, results_b: Mapping, arm_b: str, *,
                    names: tuple[str, str] = ("A", "B")) -> str:
    """Arm `arm_a` of one tracking or SoCL results.json minus arm `arm_b` of another
    (or the same), on every evaluation set both have, paired by seed and by test
    sequence (`statistics.paired_seeds_and_sequences`): the two must share their test
    data (`TEST_DATA_FIELDS`) and at least 2 seeds. A Markdown table, AUC in points,
    with both standard errors; `*` where the mean is beyond twice the larger."""
    from ebm_jax.report.statistics import paired_seeds_and_sequences

    ca, cb = (_tracking_config(r, n) for r, n in zip((results_a, results_b), names))
    for field in TEST_DATA_FIELDS:
        if field in ca and field in cb and ca[field] != cb[field]:
            raise ValueError(f"{names[0]} and {names[1]} differ in {field} "
                             f"({ca[field]!r} vs {cb[field]!r}): arms compare by "
                             "sequence only on the same test data")

    sets_a, sets_b = _evaluation_sets(results_a), _evaluation_sets(results_b)

    def arm(sets, label, name, set_name):
        rows = sets[set_name]
        if label not in rows:
            raise ValueError(f"{name}: no arm {label!r} on {set_name} (its arms: "
                             f"{', '.join(sorted(rows)) or 'none'})")
        return rows[label]

    sets = [s for s in sets_a if s in sets_b]
    if not sets:
        raise ValueError(f"{names[0]} and {names[1]} share no evaluation set")
    body = []
    for set_name in sets:
        a = arm(sets_a, arm_a, names[0], set_name)
        b = arm(sets_b, arm_b, names[1], set_name)
        _check_pairs(set_name, (arm_a, a), (arm_b, b))
        d = paired_seeds_and_sequences(a, b)
        if len(d["seeds"]) < 2:
            raise ValueError(f"a paired comparison needs at least 2 seeds both arms have; "
                             f"on {set_name} they share {d['seeds']}")
        body.append([set_name, f"{100 * d['mean']:+.1f}" + (" *" if d["real"] else ""),
                     _se(d["se_seeds"]), _se(d["se_sequences"]),
                     " ".join(f"{100 * x:+.1f}" for x in d["per_seed"])])
    return markdown_table([f"{arm_a} - {arm_b}", "AUC (points)", "se seeds",
                           "se sequences", "per seed"], body, align="lrrrr")


def _check_pairs(set_name: str, *arms: tuple[str, Sequence[Mapping]]) -> None:
    """A ValueError saying why, where two arms' rows share no seed to pair: an arm
    tracked once with no training seed (the tracker that never moves, "static"), or
    arms of disjoint training seeds."""
    seeds = [[r["seed"] for r in rows] for _, rows in arms]
    if set(seeds[0]) & set(seeds[1]):
        return
    (label_a, _), (label_b, _) = arms
    unseeded = [label for (label, _), s in zip(arms, seeds) if None in s]
    why = (f"{' and '.join(repr(u) for u in unseeded)} is tracked once, with no "
           "training seed, and a comparison pairs the arms seed by seed; compare two "
           "arms trained per seed" if unseeded else
           f"{label_a!r} has seeds {sorted(seeds[0])} and {label_b!r} has seeds "
           f"{sorted(seeds[1])}, none in common")
    raise ValueError(f"nothing to pair on {set_name}: {why}")


def auc_dots_figure(rows: Mapping[str, list[dict]], set_name: str):
    """AUC per arm: each seed a dot, the mean a bar."""
    import matplotlib.pyplot as plt

    names = [t for t, runs in rows.items() if runs and t != "static"]
    fig, ax = plt.subplots(figsize=(1.0 + 0.9 * len(names), 3.4), dpi=120)
    for i, t in enumerate(names):
        auc = np.asarray([r["auc"] for r in rows[t]], np.float64)
        colour = COLOURS.get(t, "tab:grey")
        ax.bar(i, auc.mean(), color=colour, alpha=0.35, width=0.7)
        ax.scatter(np.full(len(auc), i) + np.linspace(-0.12, 0.12, len(auc)), auc,
                   color=colour, s=18, zorder=3)
    ax.set_xticks(range(len(names)), [LABELS.get(t, t) for t in names], rotation=30,
                  ha="right", fontsize=7)
    ax.set(ylabel="AUC (OTB success)", title=f"{set_name}: AUC per arm, seeds as dots")
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig


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
