"""Markdown tables and the formatting of figures with their error bars."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def fmt(value, spec: str = ".3f", scale: float = 1.0, missing: str = "-") -> str:
    """`value * scale` formatted, or `missing` for None / NaN."""
    if value is None:
        return missing
    v = float(value) * scale
    return missing if not np.isfinite(v) else format(v, spec)


def mean_sd(values: Sequence[float], spec: str = ".3f", scale: float = 1.0) -> str:
    """"mean +- sd" over seeds (sample sd, ddof=1), or the single value."""
    v = np.asarray([x for x in values if x is not None], np.float64) * scale
    if v.size == 0:
        return "-"
    if v.size == 1:
        return format(v[0], spec)
    return f"{format(v.mean(), spec)} +- {format(v.std(ddof=1), spec)}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence], *,
                   align: str | None = None) -> str:
    """A Markdown table; `align` is one character per column ('l' or 'r')."""
    align = align or "l" * len(headers)
    rule = ["---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(map(str, headers)) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def paired_difference(values_a: Sequence[float], values_b: Sequence[float]) -> dict:
    """a - b paired by seed: the mean, its standard error over seeds (sd / sqrt(n);
    None for one seed), n, and whether the mean is beyond 2 standard errors (the only
    differences the reports claim)."""
    d = np.asarray(values_a, np.float64) - np.asarray(values_b, np.float64)
    se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else None
    return {"mean": float(d.mean()), "se": se, "n": len(d),
            "beyond_2se": se is not None and abs(float(d.mean())) > 2 * se}


def signed_points(d: dict) -> str:
    """A `paired_difference` of fractions in points: "+m +- se", with * beyond 2 se."""
    cell = f"{100 * d['mean']:+.1f}"
    if d["se"] is not None:
        cell += f" +- {100 * d['se']:.1f}" + (" *" if d["beyond_2se"] else "")
    return cell
