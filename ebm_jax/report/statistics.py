"""The statistics every report states, in one place: mean +- sd over training seeds, and
paired differences with their standard errors over seeds and over test sequences.

The error bars follow the seeds' design: each training seed is one replicate (its own
random start and batch order), so a figure is reported as its mean and sample sd over
seeds (ddof=1; no sd for one seed). Two arms trained with the same seed are paired (the
same start and batches), so a comparison is the mean of the per-seed differences with
its standard error sd / sqrt(n). A tracking comparison also pairs the test sequences:
the per-sequence difference (each arm averaged over its seeds first) has a standard error
over sequences, which speaks to the test set's size where the seeds' speaks to training
noise. A difference is called real only beyond twice its standard error(s).

Replicates that share nothing (the 1D comparison's models: each method's ensemble has
its own initialisations) are not paired: `stratified_difference` compares two groups of
independent replicates per stratum (a dataset) with Welch's standard error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["aggregate", "arm_difference", "mean_sd", "paired_difference",
           "paired_seeds_and_sequences", "sequence_difference", "standard_error",
           "stratified_difference"]


def standard_error(d: np.ndarray) -> float | None:
    """sd / sqrt(n) of the differences `d` (sample sd, ddof=1); None for one value."""
    return float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else None


def mean_sd(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """(mean, sample sd) over seeds of the values that are not None; (None, None) when
    none is, and sd None for a single value."""
    v = np.asarray([x for x in values if x is not None], np.float64)
    if v.size == 0:
        return None, None
    return float(v.mean()), (float(v.std(ddof=1)) if v.size > 1 else None)


def aggregate(per_seed: Sequence[Mapping], keys: Sequence[str]) -> dict:
    """The row of a table from one dict per seed: the mean over seeds of each figure of
    `keys` (None where any seed has none) and their sample sds under "sd"."""
    mean, sd = {}, {}
    for k in keys:
        vals = [r.get(k) for r in per_seed]
        if any(v is None for v in vals):
            mean[k], sd[k] = None, None
            continue
        mean[k], sd[k] = mean_sd(vals)
    return {**mean, "sd": sd}


def paired_difference(values_a: Sequence[float], values_b: Sequence[float]) -> dict:
    """a - b paired by seed: the mean, its standard error over seeds (None for one
    seed), n, and whether the mean is beyond 2 standard errors (the only differences
    the reports claim)."""
    d = np.asarray(values_a, np.float64) - np.asarray(values_b, np.float64)
    se = standard_error(d)
    return {"mean": float(d.mean()), "se": se, "n": len(d),
            "beyond_2se": se is not None and abs(float(d.mean())) > 2 * se}


def sequence_difference(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> dict:
    """a - b paired by test sequence: `a` and `b` hold one list of per-sequence figures
    per seed (a seedless arm has one list); each arm is averaged over its seeds first.
    The mean difference and its standard error over sequences."""
    d = np.mean(np.asarray(a, np.float64), 0) - np.mean(np.asarray(b, np.float64), 0)
    return {"mean": float(d.mean()), "se": standard_error(d), "num_sequences": int(len(d))}


def arm_difference(a: Sequence[Mapping], b: Sequence[Mapping], key: str = "auc") -> dict:
    """a - b of two tracking arms' rows (one per seed, each with "seed", `key` and
    "sequence_" + `key`; a seedless arm, such as the tracker that never moves, has one
    row of seed None, which pairs with every seed of the other): the difference paired by
    sequence of the seed-averaged arms ("mean", "se" over sequences, "num_sequences";
    `sequence_difference`) and, with two or more seeds, the same paired by seed too
    ("se_seeds", "se_sequences", "per_seed", "seeds", "real": beyond twice the larger
    standard error; `paired_seeds_and_sequences`)."""
    out = sequence_difference([r[f"sequence_{key}"] for r in a],
                              [r[f"sequence_{key}"] for r in b])
    if max(len(a), len(b)) < 2:
        return out
    return {**out, **paired_seeds_and_sequences(a, b, key)}


def paired_seeds_and_sequences(a: Sequence[Mapping], b: Sequence[Mapping],
                               key: str = "auc") -> dict:
    """a - b of two arms' rows (one per seed, each with "seed", `key` and "sequence_" +
    `key`): the per-seed differences of the seeds both have, their mean and standard
    error over seeds, the per-sequence difference's standard error over sequences, and
    `real`: the mean is beyond twice the larger of the two. A seedless arm (one row of
    seed None, such as the tracker that never moves) pairs with every seed of the
    other."""

    def seeded(rows, other):
        if len(rows) == 1 and rows[0].get("seed") is None:
            return [{**rows[0], "seed": r["seed"]} for r in other]
        return rows

    a, b = seeded(a, b), seeded(b, a)
    ra, rb = {r["seed"]: r for r in a}, {r["seed"]: r for r in b}
    seeds = sorted(set(ra) & set(rb))
    by_seed = paired_difference([ra[s][key] for s in seeds], [rb[s][key] for s in seeds])
    by_sequence = sequence_difference([ra[s][f"sequence_{key}"] for s in seeds],
                                      [rb[s][f"sequence_{key}"] for s in seeds])
    se_seed, se_seq = by_seed["se"], by_sequence["se"]
    real = (se_seed is not None and se_seq is not None
            and abs(by_seed["mean"]) > 2 * max(se_seed, se_seq))
    d = np.asarray([ra[s][key] for s in seeds], np.float64) - np.asarray(
        [rb[s][key] for s in seeds], np.float64)
    return {"mean": by_seed["mean"], "se_seeds": se_seed, "se_sequences": se_seq,
            "per_seed": d.tolist(), "real": bool(real), "seeds": seeds}


def stratified_difference(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> dict:
    """a - b of independent replicates, not paired, in strata: `a[k]` and `b[k]` are
    the replicates of stratum k (e.g. the models of an ensemble on dataset k). Each
    stratum's difference of means has Welch's standard error sqrt(s_a^2/n_a +
    s_b^2/n_b) (sample variances, ddof=1); the strata are averaged, mean and se
    sqrt(sum se_k^2) / K. Non-finite replicates (a diverged model) are left out and
    counted in "dropped". se is None where a stratum has fewer than two finite
    replicates in an arm; "beyond_2se" says whether the mean is beyond twice it."""
    if len(a) != len(b) or not a:
        raise ValueError(f"stratified_difference: {len(a)} and {len(b)} strata; the two "
                         "arms need the same number, at least one")
    means, variances, dropped = [], [], 0
    for xa, xb in zip(a, b):
        xa, xb = np.asarray(xa, np.float64), np.asarray(xb, np.float64)
        fa, fb = xa[np.isfinite(xa)], xb[np.isfinite(xb)]
        dropped += int(xa.size - fa.size + xb.size - fb.size)
        if not fa.size or not fb.size:
            return {"mean": None, "se": None, "dropped": dropped, "beyond_2se": False}
        means.append(fa.mean() - fb.mean())
        variances.append(None if min(fa.size, fb.size) < 2 else
                         fa.var(ddof=1) / fa.size + fb.var(ddof=1) / fb.size)
    k = len(means)
    mean = float(np.mean(means))
    se = (None if any(v is None for v in variances)
          else float(np.sqrt(np.sum(variances)) / k))
    return {"mean": mean, "se": se, "dropped": dropped,
            "beyond_2se": se is not None and abs(mean) > 2 * se}
