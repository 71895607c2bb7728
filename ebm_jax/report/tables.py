"""Markdown tables and the formatting of figures with their error bars (the statistics
themselves: `ebm_jax.report.statistics`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ebm_jax.report.statistics import mean_sd


def fmt(value, spec: str = ".3f", scale: float = 1.0, missing: str = "-") -> str:
    """`value * scale` formatted, or `missing` for None / NaN."""
    if value is None:
        return missing
    v = float(value) * scale
    return missing if not np.isfinite(v) else format(v, spec)


def mean_sd_cell(values: Sequence[float], spec: str = ".3f", scale: float = 1.0) -> str:
    """"mean +- sd" over seeds (`statistics.mean_sd` of the values x `scale`), or the
    single value, or "-" for none."""
    mean, sd = mean_sd(np.asarray([x for x in values if x is not None], np.float64) * scale)
    if mean is None:
        return "-"
    return format(mean, spec) if sd is None else f"{format(mean, spec)} +- {format(sd, spec)}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence], *,
                   align: str | None = None) -> str:
    """A Markdown table; `align` is one character per column ('l' or 'r')."""
    align = align or "l" * len(headers)
    rule = ["---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(map(str, headers)) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def signed_points(d: dict) -> str:
    """A `paired_difference` of fractions in points: "+m +- se", with * beyond 2 se."""
    cell = f"{100 * d['mean']:+.1f}"
    if d["se"] is not None:
        cell += f" +- {100 * d['se']:.1f}" + (" *" if d["beyond_2se"] else "")
    return cell
