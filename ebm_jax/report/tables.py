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
