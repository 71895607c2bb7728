"""Reports: what a run writes to its `--out` directory, in one scheme for every
experiment.

    <out>/results.json   the payload (tables as records, settings, versions, timing)
    <out>/results.md     the tables as Markdown, figures linked
    <out>/<name>.png     each figure

A recipe returns a `Report`; `write_results` writes it. Results of an earlier run are
never mixed with new ones: the new results are written to a fresh sibling directory
and swapped in whole, so no stale plot stays beside new tables. A non-empty `--out`
that this project did not write is refused before training (`check_out`).
"""

from ebm_jax.report.output import (
    MANIFEST,
    Report,
    check_out,
    write_results,
)
from ebm_jax.report.tables import fmt, markdown_table, mean_sd_cell

__all__ = ["MANIFEST", "Report", "check_out", "fmt", "markdown_table", "mean_sd_cell",
           "write_results"]
