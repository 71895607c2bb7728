"""The README's table of experiments, generated from `docs/experiments.toml` (what each
row is: its configs, the paper's table, the page, the GPU figure) and from the measured
wall times that `ebm-jax list` prints (`experiments/wall_times.json`, which storing a
run writes), so that the README's times are the catalogue's own.

Each `[[row]]` has

    configs   config files under experiments/ (globs allowed: "tracking/socl_*.py")
    paper     the paper and its table or figure
    page      the docs page of the experiment ("socl.md")
    gpu       optional: a figure measured on a GPU (docs/gpu.md has every one)
    note      optional: what the time column says besides (or instead of) the times

Every config under experiments/ belongs to exactly one row: a new config that the
README does not list fails `python -m ebm_jax.report.stored check`, naming it.
The block in a page: `<!-- experiments: README -->` ... `<!-- /experiments -->`.
"""

from __future__ import annotations

from pathlib import Path

from ebm_jax.config import CONFIG_ROOT
from ebm_jax.config_catalog import duration_range, find_configs, wall_times
from ebm_jax.report.provenance import StoredError, read_tables

ROWS = Path("docs") / "experiments.toml"
FIELDS = ("configs", "paper", "page")
VARIANT = "quick"  # the docs' tables are quick runs
MACHINE = "CPU cores"  # the column's machine: entries measured on CPU cores


def load(root: Path) -> list[dict]:
    """The rows of `docs/experiments.toml`, each with `files`: its config paths
    relative to experiments/; one StoredError naming the file and row otherwise."""
    path = root / ROWS
    rows = read_tables(path, "row", "a table of experiments")
    configs = root / CONFIG_ROOT
    every = {p.relative_to(configs).as_posix() for p in find_configs(configs)}
    seen: dict[str, int] = {}
    for i, r in enumerate(rows, 1):
        where = f"{path}: row {i}"
        if not isinstance(r.get("configs"), list) or not r["configs"] or not all(
                isinstance(c, str) and c for c in r["configs"]):
            raise StoredError(f"{where}: configs must be a list of config files under "
                              f"{CONFIG_ROOT}/")
        missing = [f for f in FIELDS[1:] if not isinstance(r.get(f), str) or not r[f].strip()]
        if missing:
            raise StoredError(f"{where} ({r['configs'][0]}) lacks {', '.join(missing)}")
        if not (root / "docs" / r["page"]).is_file():
            raise StoredError(f"{where}: page docs/{r['page']} does not exist")
        files = []
        for c in r["configs"]:
            found = sorted(q for q in (p.relative_to(configs).as_posix()
                                       for p in configs.glob(c)) if q in every)
            if not found:
                raise StoredError(f"{where}: {c!r} names no config under {CONFIG_ROOT}/")
            files += found
        for f in files:
            if f in seen:
                raise StoredError(f"{where}: {f} is in row {seen[f]} already")
            seen[f] = i
        r["files"] = files
    left = sorted(every - set(seen))
    if left:
        raise StoredError(f"{path}: no row lists {', '.join(left)} (every config under "
                          f"{CONFIG_ROOT}/ is in the README's table)")
    return rows


def time_cell(files: list[str], times: dict, note: str = "") -> str:
    """The quick variants' wall times on CPU cores as `ebm-jax list` has them: one
    config's entries, or the range over a row's configs, with the machines."""
    seconds, machines, unmeasured = [], [], []
    for f in files:
        # a run that reused finished stages is no whole run's time
        entries = [e for e in times.get(f, {}).get(VARIANT, [])
                   if MACHINE in e["machine"] and not e.get("reused_stages")]
        if not entries:
            unmeasured.append(Path(f).stem)
        for e in entries:
            s = e["seconds"]
            seconds += s if isinstance(s, list) else [s]
            cpu = e["machine"].split(", ", 1)[-1]
            if cpu not in machines:
                machines.append(cpu)
    parts = []
    if seconds:
        parts.append(f"{duration_range(min(seconds), max(seconds))} "
                     f"({', '.join(machines)})")
        if unmeasured and len(files) > 1:
            parts.append(f"{', '.join(unmeasured)} not measured whole")
    if note:
        parts.append(note)
    return "; ".join(parts) if parts else "not measured"


def table(root: Path, which: str, page: Path) -> str:
    if which != "README":
        raise StoredError(f"{page}: <!-- experiments: {which} --> (the one table of "
                          "experiments is the README's: <!-- experiments: README -->)")
    times = wall_times(root / CONFIG_ROOT)
    where = "" if page.parent.resolve() == (root / "docs").resolve() else "docs/"
    rows = ["| config | paper, table | quick on 2 CPU cores | on one GPU | page |",
            "|---|---|---|---|---|"]
    for r in load(root):
        files = r["files"]
        shown = (", ".join(f"`{CONFIG_ROOT}/{f}`" for f in files) if len(files) <= 3
                 else ", ".join(f"`{CONFIG_ROOT}/{c}`" for c in r["configs"])
                 + f" ({len(files)} configs)")
        title = r["page"].removesuffix(".md")
        cells = [shown, r["paper"], time_cell(files, times, r.get("note", "")),
                 r.get("gpu", ""), f"[{title}]({where}{r['page']})"]
        rows.append("| " + " | ".join(" ".join(c.split()).replace("|", "\\|")
                                      for c in cells) + " |")
    return "\n".join(rows) + "\n"
