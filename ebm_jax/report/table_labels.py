"""What a docs table that is not a stored run says it is (`ebm_jax.report.stored`): a
hand copy, labelled above with the commands that rerun it (`<!-- copy: ... -->`, its
label written by `copy_block`), or a reference table that holds no result; and which
tables of a page carry neither (`unlabelled_tables`)."""

from __future__ import annotations

import re
from pathlib import Path

from ebm_jax.report.provenance import StoredError

# the markers of the blocks `ebm_jax.report.stored` fills in
BLOCK_KINDS = "stored|claims|include|api|compare|experiments|gpu|copy"

REFERENCE = "<!-- reference table -->"


def copy_block(root: Path, arg: str, page: Path) -> str:
    """The label of a hand-copied table: `<!-- copy: NAME:VARIANT ... -->` (the
    configs' runs that made it) or `<!-- copy: python benchmarks/SCRIPT ARGS -->` (or
    `bash benchmarks/SCRIPT.sh`)."""
    from ebm_jax.config import ConfigError, load_config

    arg = arg.strip()
    if arg.startswith(("python ", "bash ")):
        script = arg.split()[1]
        if not (root / script).is_file() or not script.startswith("benchmarks/"):
            raise StoredError(f"{page}: <!-- copy: {arg} --> names no benchmark of "
                              "benchmarks/")
        return (f"<sub>Copied by hand from a benchmark's report made before reports "
                f"carried their provenance; `{arg}` reruns it.</sub>\n")
    specs = arg.split()
    if not specs or not all(":" in sp for sp in specs):
        raise StoredError(f"{page}: <!-- copy: {arg} --> needs NAME:VARIANT [...] or "
                          "python benchmarks/SCRIPT")
    for spec in specs:
        try:
            load_config(spec)
        except ConfigError as e:
            raise StoredError(f"{page}: <!-- copy: {arg} -->: {spec} no longer loads "
                              f"({e})") from None
    runs = ", ".join(f"`ebm-jax run {sp}`" for sp in specs[:-1])
    runs = f"{runs} and `ebm-jax run {specs[-1]}`" if runs else f"`ebm-jax run {specs[0]}`"
    one = len(specs) == 1
    return (f"<sub>Copied by hand from {'a run' if one else 'runs'} made before results "
            f"carried their provenance (not yet a stored run); {runs} "
            f"{'reruns it' if one else 'rerun them'}.</sub>\n")


def unlabelled_tables(text: str) -> list[int]:
    """The first lines (1-based) of the tables of a page that are neither inside a
    generated block nor labelled above (a copy block or `<!-- reference table -->`
    after the previous heading or table); fenced code is skipped."""
    out, block, fence, labelled, in_table = [], None, False, False, False
    for i, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        if fence:
            continue
        if block is not None:
            if line.startswith(f"<!-- /{block} -->"):
                labelled = block == "copy"
                block = None
            continue
        if m := _BLOCK_OPEN.match(line):
            block = m.group(1)
            continue
        if line.strip() == REFERENCE:
            labelled = True
        elif line.startswith("#"):
            labelled = False
        if re.match(r" {0,3}\|", line):  # four spaces in would be code
            if not in_table and not labelled:
                out.append(i)
            if not in_table:
                labelled = False
            in_table = True
        else:
            in_table = False
    return out


_BLOCK_OPEN = re.compile(rf"<!-- ({BLOCK_KINDS}): ")
