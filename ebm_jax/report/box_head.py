"""The box-head experiment's report (the EBM regression paper, sec. 5, Table 4): the
verdicts on its paired differences, the refinement probe's table, the choices made on
the validation split (step lengths and sigmas by the probe, tracker options by
tracking AUC) and the whole Markdown section; the scores tables and paired lines are
the tracking report's (`ebm_jax.report.tracking`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ebm_jax.report.statistics import mean_sd, paired_difference
from ebm_jax.report.tables import markdown_table
from ebm_jax.report.tracking import (LABELS, PAPER_TABLE4_COLUMNS, SHORT, _scores_table,
                                     paired_table)


def box_head_verdicts(rows: Mapping, pairs: Sequence[tuple[str, str]]) -> list[str]:
    """What the table supports about the paper's two claims (the box head beats scale
    search by a wide margin; how the losses order): a line for each difference beyond 2
    standard errors (over seeds and over sequences), then one line naming the pairs
    that are not separated, and one the pairs of a single seed (no verdict)."""
    out, within, one_seed = [], [], []
    for a, b in pairs:
        d = rows.get(f"{a} vs {b}")
        if d is None:
            continue
        la, lb = LABELS.get(a, a), LABELS.get(b, b)
        what = ("SiamFC's scale search (Box-Siam)" if b == "box-siam" else lb)
        if d["se_seeds"] is None:
            one_seed.append(f"{la} and {what}")
        elif not d["real"]:
            within.append(f"{la} and {what}")
        else:
            rel = "is above" if d["mean"] > 0 else "is below"
            out.append(f"- {la} {rel} {what} by {100 * abs(d['mean']):.1f} AUC points.")
    if within:
        out.append(f"- Not separated (within 2 standard errors): {'; '.join(within)}.")
    if one_seed:
        out.append(f"- One seed, no verdict: {'; '.join(one_seed)}.")
    return out


def one_seed_pair(a: str, b: str, d: Mapping) -> str:
    """A paired difference of one seed: its mean and standard error over sequences."""
    se = "-" if d["se_sequences"] is None else f"{100 * d['se_sequences']:.1f}"
    return (f"{SHORT.get(a, LABELS.get(a, a))} - {LABELS.get(b, b)}: "
            f"{100 * d['mean']:+.1f} (se {se})")


def validation_table(validation: Mapping) -> str:
    """Mean validation score (%: IoU after refinement, the probe's) over seeds of every
    candidate (rows) and method (columns), the chosen one of each method marked *."""
    methods = list(validation["score"])
    labels = list(dict.fromkeys(k for m in methods for k in validation["score"][m]))
    body = []
    for k in labels:
        row = [k]
        for m in methods:
            v = validation["score"][m].get(k)
            mark = " *" if validation["choice"][m]["candidate"] == k else ""
            row.append("-" if v is None else f"{100 * sum(v) / len(v):.1f}{mark}")
        body.append(row)
    return markdown_table(["candidate"] + methods, body, align="l" + "r" * len(methods))


def refinement_table(rows: Mapping[str, list[dict]]) -> str:
    """The refinement probe of one split: per method (and the analytic Gaussian energy,
    the control), mean +- sd over seeds of the IoU of the perturbed true box before and
    after refinement, their paired difference with its standard error over seeds, the
    rate the true box outranks the jittered ones (chance beside it) and Spearman's rho
    of f with IoU; a head whose refinement does not raise the IoU beyond 2 standard
    errors (over seeds; with one seed, over its pairs) is marked as not worth tracking
    with."""
    def ms(values, scale=100.0, fmt=".1f"):
        m, sd = mean_sd([scale * v for v in values])
        return "-" if m is None else f"{m:{fmt}}" + ("" if sd is None else f" +- {sd:{fmt}}")

    body = []
    first = next(iter(rows.values()))
    body.append(["Gaussian energy on the truth (control)",
                 ms([r["iou_start"] for r in first]),
                 ms([r["control_iou_refined"] for r in first]), "", "100", "", "",
                 "the plumbing"])
    for method, per_seed in rows.items():
        gain = paired_difference([r["iou_refined"] for r in per_seed],
                                 [r["iou_start"] for r in per_seed])
        se = gain["se"]
        over = "seeds"
        if se is None and per_seed[0].get("gain_se_pairs") is not None:
            se, over = per_seed[0]["gain_se_pairs"], "pairs"  # one seed: its pairs' spread
            gain = dict(gain, se=se)
        raises = se is not None and gain["mean"] > 2 * se
        verdict = (f"raises IoU (beyond 2 se over {over})" if raises else
                   "does not raise IoU: not worth tracking with" if se is not None
                   else "one seed, no verdict")
        body.append([LABELS.get(f"box-head-{method}", method),
                     ms([r["iou_start"] for r in per_seed]),
                     ms([r["iou_refined"] for r in per_seed]),
                     f"{100 * gain['mean']:+.1f}" + ("" if gain["se"] is None
                                                     else f" ({100 * gain['se']:.1f})"),
                     ms([r["outranks"] for r in per_seed], fmt=".0f"),
                     f"{100 * per_seed[0]['chance_outranks']:.0f}",
                     ms([r["rank_correlation"] for r in per_seed], 1.0, ".2f"), verdict])
    return markdown_table(["energy", "IoU start %", "IoU refined %", "gain (se)",
                           "truth outranks %", "chance %", "rho(f, IoU)", "verdict"],
                          body, align="lrrrrrrl")


def box_head_markdown(summary: Mapping, pairs: Sequence[tuple[str, str]],
                      validation: Mapping, *, title: str, seeds: Sequence[int],
                      reference=(), reference_note: str = "") -> str:
    """The box-head experiment (the EBM regression paper, sec. 5, Table 4): per evaluation set the
    scores table (the coarse tracker's row is the box heads' FPS without refinement),
    the paired differences with both standard errors and the verdicts; the validation
    choice; the paper's Table 4 (`reference`: (dataset, "KLD-IS / NCE / NCE+")) beside,
    at a different scale."""
    parts = [f"## {title}\n"]
    spread = "mean +- sd over the training seeds" if len(seeds) > 1 else "one seed"
    compared = {f"{a} vs {b}" for a, b in pairs}
    for set_name, rows in summary.items():
        parts.append(_scores_table(set_name, rows, compared, spread))
        present = [(a, b) for a, b in pairs if f"{a} vs {b}" in rows]
        if present and all(rows[f"{a} vs {b}"]["se_seeds"] is None for a, b in present):
            # one seed: the errors over sequences alone, and no verdict, said once
            parts.append("Paired differences (a - b, AUC points; one seed, so the standard "
                         "error is over the test sequences alone and no verdict is made):"
                         "\n\n" + "\n".join(
                             f"- {one_seed_pair(a, b, rows[f'{a} vs {b}'])}"
                             for a, b in present) + "\n")
        elif present:
            parts.append("Paired differences (a - b, AUC points; standard errors over "
                         "the seeds and over the test sequences):\n\n"
                         + paired_table(present, rows))
            parts.append("What holds here (only differences beyond 2 standard errors "
                         "are claimed):\n\n"
                         + "\n".join(box_head_verdicts(rows, pairs)) + "\n")
    refinement = validation.get("refinement", {})
    for split, what in (("validation", "the validation split (held-out training "
                                       "sequences)"),
                        ("test", "the test split (unseen targets), after the choice")):
        if refinement.get(split):
            parts.append(f"Box refinement on {what}: each pair's true box perturbed "
                         "(N(0, 0.1^2) per relative coordinate), refined by the head's "
                         "gradient ascent with the chosen step lengths; mean +- sd over "
                         "seeds, the gain with its standard error over seeds.\n\n"
                         + refinement_table(refinement[split]))
    parts.append(f"Chosen on the validation split ({len(validation['sequences'])} "
                 "held-out training sequences, never the test split): the training "
                 "sigmas and the refinement's centre and size step lengths of each "
                 "loss, by mean IoU after refinement over seeds (%, * = chosen).\n\n"
                 + validation_table(validation))
    if validation.get("tracker"):
        parts.append("Tracker options chosen on the validation split by tracking AUC "
                     "(%, mean over seeds, * = chosen), with the chosen step lengths; the "
                     "coarse tracker (SiamFC's centre, the previous size) beside them.\n\n"
                     + tracker_table(validation["tracker"]))
    if reference:
        body = [[name] + [v.strip() for v in str(values).split("/")]
                for name, values in reference]
        parts.append("The paper's Table 4 (AUC / Success %, DiMP with ResNet-50 trained on "
                     "TrackingNet, LaSOT, GOT-10k and COCO, real benchmarks): a different "
                     "scale from the table above (an AlexNet SiamFC on generated "
                     "sequences), so compare orders, not numbers.\n\n"
                     + markdown_table(["dataset", *PAPER_TABLE4_COLUMNS], body,
                                      align="lrrr")
                     + (f"\n{reference_note}\n" if reference_note else ""))
    return "\n".join(parts)


def tracker_table(tracker: Mapping) -> str:
    """Validation tracking AUC (%, mean over seeds) of every tracker option (rows) and
    method (columns), the chosen one marked *, and the coarse tracker's row."""
    methods = list(tracker["auc"])
    labels = list(dict.fromkeys(k for m in methods for k in tracker["auc"][m]))
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    body = [[k] + [f"{100 * mean(tracker['auc'][m][k]):.1f}"
                   + (" *" if tracker["choice"][m] == k else "") for m in methods]
            for k in labels]
    coarse = f"{100 * mean(tracker['coarse_auc']):.1f}"
    body.append(["coarse (no refinement)"] + [coarse] * len(methods))
    body.append(["refined beats coarse"] + ["yes" if tracker["beats_coarse"][m] else
                                            "no: not worth tracking with"
                                            for m in methods])
    return markdown_table(["tracker option"] + methods, body,
                          align="l" + "r" * len(methods))


__all__ = ["box_head_markdown", "box_head_verdicts", "refinement_table", "tracker_table",
           "validation_table"]
