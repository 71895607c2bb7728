"""Tables and the feature plot of the contrastive experiments (linear evaluation of
frozen encoders, He et al. 2020, sec. 4.1; Wu et al. 2018, sec. 4.1).

Each table row is a dict with the run's `name`, `method`, `momentum`, `queue_size`,
the linear-evaluation figures (`linear_accuracy`, `few_label_accuracy`,
`knn<k>_accuracy` for each k) and the pretraining figures (`images_per_second`,
`seconds`), each the mean over seeds, with their sample sd under `sd` (None for one
seed) and the per-seed figures under `seeds`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ebm_jax.report.statistics import paired_difference
from ebm_jax.report.tables import fmt, markdown_table, signed_points

TITLES = {
    "main": "Linear evaluation of frozen features",
    "momentum": "Momentum ablation (MoCo, K = {K})",
    "mechanism": "Mechanism ablation (same encoder, loss temperature and schedule)",
    "queue": "Queue size K (MoCo, m = {m})",
}


def row_label(table: str, r: Mapping, batch_size: int) -> str:
    """The first column of a row: the method, or the ablated setting."""
    if r["method"] in ("random", "pixels", "supervised"):
        return r["method"]
    if table == "momentum":
        return f"m = {r['momentum']:g}"
    if table == "queue":
        return f"K = {r['queue_size']}"
    if table == "mechanism":
        k = batch_size - 1 if r["method"] == "end-to-end" else r["queue_size"]
        return f"{r['method']} (K = {k})"
    return r["method"]


def _pm(r: Mapping, key: str) -> str:
    """A figure in % as "mean +- sd" (or the mean alone for one seed)."""
    sd = (r.get("sd") or {}).get(key)
    m = fmt(r.get(key), ".1f", 100)
    return m if sd is None else f"{m} +- {100 * sd:.1f}"


def table_markdown(table: str, rows: Sequence[Mapping], *, batch_size: int,
                   few_labels: int, queue_size: int, momentum: float,
                   knn_ks: Sequence[int] = (200,),
                   reference: Mapping[str, str] | None = None) -> str:
    """One table as Markdown; a "paper" column when `reference` ({row label: the
    paper's figure}) names one of its rows."""
    labels = [row_label(table, r, batch_size) for r in rows]
    reference = dict(reference or {})
    with_ref = any(lab in reference for lab in labels)
    headers = ["encoder" if table == "main" else "run", "linear acc. %",
               f"linear acc. %, {few_labels} labels/class",
               *[f"kNN acc. %, k = {k}" for k in knn_ks], "pretrain img/s", "pretrain s"]
    body = []
    for lab, r in zip(labels, rows):
        body.append([lab, _pm(r, "linear_accuracy"), _pm(r, "few_label_accuracy"),
                     *[_pm(r, f"knn{k}_accuracy") for k in knn_ks],
                     fmt(r.get("images_per_second"), ".0f"), fmt(r.get("seconds"), ".0f")]
                    + ([reference.get(lab, "")] if with_ref else []))
    if with_ref:
        headers.append("paper %")
    title = TITLES[table].format(K=queue_size, m=momentum)
    return f"### {title}\n\n" + markdown_table(headers, body,
                                               align="l" + "r" * (len(headers) - 1))


def paired_differences(tables: Mapping[str, Sequence[Mapping]],
                       per_seed: Mapping[str, Sequence[Mapping]], *,
                       reference: str, keys: Sequence[str]) -> list[dict]:
    """Each run of `tables` (other than `reference`) minus the run `reference`, seed by
    seed (the same data split, so the comparison is paired): per figure of `keys`, the
    mean and standard error over seeds (sd / sqrt(n); None for one seed) and whether the
    mean is beyond 2 standard errors."""
    ref = {r["seed"]: r for r in per_seed[reference]}
    names = list(dict.fromkeys(r["name"] for rows in tables.values() for r in rows))
    out = []
    for name in names:
        if name == reference:
            continue
        row = {"name": name, "reference": reference}
        for k in keys:
            row[k] = paired_difference([r[k] for r in per_seed[name]],
                                       [ref[r["seed"]][k] for r in per_seed[name]])
        out.append(row)
    return out


def differences_markdown(differences: Sequence[Mapping], keys: Sequence[str],
                         headers: Sequence[str]) -> str:
    """The paired differences as a table: points, mean +- se over seeds, `*` where
    beyond 2 se."""
    body = []
    for d in differences:
        body.append([d["name"], *[signed_points(d[k]) for k in keys]])
    ref = differences[0]["reference"] if differences else ""
    return (f"### Paired difference from {ref} (points, mean +- se over seeds; * beyond "
            "2 se)\n\n" + markdown_table(["run", *headers], body,
                                          align="l" + "r" * len(headers)))


def check_contrastive_results(results, name: str = "results") -> None:
    """A ValueError unless `results` is a contrastive results.json (the only kind
    `compare_results` pairs): a JSON object of the contrastive recipe whose tables are
    lists of runs, each with its `name`."""
    supported = "compare supports contrastive results (recipe contrastive)"
    if not isinstance(results, Mapping):
        raise ValueError(f"{supported}; {name} is not a results.json (a JSON "
                         f"{type(results).__name__}, not an object)")
    meta = results.get("ebm_jax")
    recipe = meta.get("recipe") if isinstance(meta, Mapping) else None
    if recipe is not None and recipe != "contrastive":
        raise ValueError(f"{supported}; {name} is a {recipe} result")
    tables = results.get("tables")
    if not (isinstance(tables, Mapping) and tables and all(
            isinstance(rows, list) and all(isinstance(r, Mapping) and "name" in r
                                           for r in rows) for rows in tables.values())):
        raise ValueError(f"{supported}; {name} is not one (its tables are not lists of "
                         "named runs)")


def compare_results(results_a: Mapping, run_a: str, results_b: Mapping, run_b: str, *,
                    names: tuple[str, str] = ("A", "B")) -> str:
    """Run `run_a` of one contrastive results.json minus run `run_b` of another (or
    the same), paired by seed: the two must share their data, split and seeds (so each
    seed's runs saw the same images). A Markdown table of every figure both have, in
    points, mean +- se over seeds, `*` beyond 2 se."""
    def find(results, run, name):
        for rows in results.get("tables", {}).values():
            for r in rows:
                if r["name"] == run:
                    return r
        runs = sorted({r["name"] for rows in results.get("tables", {}).values()
                       for r in rows})
        raise ValueError(f"{name}: no run {run!r} (its runs: {', '.join(runs) or 'none'})")

    for results, name in zip((results_a, results_b), names):
        check_contrastive_results(results, name)
    for field in ("data", "eval_split", "num_train", "num_test", "seeds"):
        if results_a.get(field) != results_b.get(field):
            raise ValueError(f"{names[0]} and {names[1]} differ in {field} "
                             f"({results_a.get(field)!r} vs {results_b.get(field)!r}): "
                             "runs compare by seed only on the same data and seeds")
    a, b = find(results_a, run_a, names[0]), find(results_b, run_b, names[1])
    if "seeds" not in a or "seeds" not in b or len(a["seeds"]) < 2:
        raise ValueError("a paired comparison needs runs of at least 2 seeds "
                         "(--config.seeds); these have one")
    keys = [k for k in a if k.endswith("_accuracy") and k != "linear_train_accuracy"
            and k in b]
    by_b = {r["seed"]: r for r in b["seeds"]}
    body = [[k.removesuffix("_accuracy").replace("_", " "), signed_points(paired_difference(
        [r[k] for r in a["seeds"]], [by_b[r["seed"]][k] for r in a["seeds"]]))]
        for k in keys]
    return markdown_table([f"{run_a} - {run_b}", "points, mean +- se"], body, align="lr")


def report_markdown(tables: Mapping[str, Sequence[Mapping]], *, title: str,
                    batch_size: int, few_labels: int, queue_size: int, momentum: float,
                    knn_ks: Sequence[int] = (200,),
                    reference: Mapping[str, str] | None = None,
                    reference_note: str = "",
                    differences: Sequence[Mapping] | None = None) -> str:
    """Every table under one heading; the paper's figures (`reference`) beside the
    rows they belong to, explained by `reference_note`; the paired differences from
    the floor when given."""
    parts = [f"## {title}", ""]
    for name, rows in tables.items():
        parts.append(table_markdown(name, rows, batch_size=batch_size,
                                    few_labels=few_labels, queue_size=queue_size,
                                    momentum=momentum, knn_ks=knn_ks, reference=reference))
    if differences:
        keys = ("linear_accuracy", "few_label_accuracy",
                *[f"knn{k}_accuracy" for k in knn_ks])
        headers = ("linear", f"{few_labels} labels/class", *[f"kNN k = {k}" for k in knn_ks])
        parts.append(differences_markdown(differences, keys, headers))
    if reference and reference_note:
        parts.append(reference_note + "\n")
    return "\n".join(parts)


def embedding_figure(features: Mapping[str, np.ndarray], labels: np.ndarray, *,
                     method: str = "tsne", seed: int = 0):
    """One panel per encoder: a 2-D t-SNE (scikit-learn, on the first 50 principal
    components) or PCA of its test features, coloured by class. Returns the Figure."""
    import matplotlib.pyplot as plt

    if method not in ("tsne", "pca"):
        raise ValueError(f"method must be 'tsne' or 'pca', got {method!r}")
    fig, axes = plt.subplots(1, len(features), figsize=(4 * len(features), 4))
    axes = np.atleast_1d(axes)
    sc = None
    for ax, (name, f) in zip(axes, features.items()):
        f = np.asarray(f, np.float64)
        x = (f - f.mean(0)) / (f.std(0) + 1e-6)
        _, _, vt = np.linalg.svd(x, full_matrices=False)
        if method == "tsne":
            from sklearn.manifold import TSNE

            x50 = x @ vt[: min(50, x.shape[1])].T
            perplexity = min(30.0, max(2.0, (len(x) - 1) / 3))
            xy = TSNE(2, init="pca", random_state=seed,
                      perplexity=perplexity).fit_transform(x50)
        else:
            xy = x @ vt[:2].T
        sc = ax.scatter(xy[:, 0], xy[:, 1], c=labels, cmap="tab10", s=6)
        ax.set_title(name)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(sc, ax=list(axes), shrink=0.8, label="class")
    name = {"tsne": "t-SNE", "pca": "PCA"}[method]
    fig.suptitle(f"{name} of frozen test features")
    return fig
