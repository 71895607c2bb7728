"""A stored run read back, and the blocks a page shows of it.

`docs/results/<name>/` holds a run's results.json (with its provenance) and results.md;
`read_results` reads one (one `StoredError` naming the file where it cannot),
`run_command` says the one command that reproduces it, `stored_block` is the text a
page includes between `<!-- stored: NAME -->` and `<!-- /stored -->` (the whole
results.md or one `#`-headed part, with the command and the provenance footer), and
`compare_block` the paired comparison of two stored runs (`<!-- compare: ... -->`).
`ebm_jax.report.stored` fills the pages with them and checks they are fresh.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ebm_jax.report import provenance
from ebm_jax.report.provenance import StoredError

RESULTS = Path("docs") / "results"


# ------------------------------------------------------------------------- reading


def _read_json(path: Path, what: str, missing: str = "") -> dict:
    """A results file's contents and its provenance (`provenance.read`); one
    StoredError naming `path` where it is missing, unreadable or without provenance."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise StoredError(f"{path}: no such file{missing}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoredError(f"{path}: not {what} ({e})") from None
    try:
        provenance.read(data, str(path))
    except ValueError as e:  # a run of before provenance was recorded
        raise StoredError(str(e)) from None
    return data


def read_results(folder: Path) -> dict:
    return _read_json(folder / "results.json", "a results file",
                      " (a stored run is a folder holding results.json and results.md)")


def read_benchmark(path: Path) -> dict:
    """A benchmark's report (`benchmarks/*.py --out DIR` writes DIR/<stem>.json)."""
    data = _read_json(path, "a benchmark's report")
    if "benchmark" not in data["ebm_jax"]["provenance"]:
        raise StoredError(f"{path}: a run's results, not a benchmark's report; store its "
                          "folder")
    if not path.with_suffix(".md").is_file():
        raise StoredError(f"{path}: its table {path.with_suffix('.md').name} is missing")
    return data


def stored_names(root: Path) -> list[str]:
    folder = root / RESULTS
    return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def run_command(p: dict) -> str:
    """The one command that reproduces a stored run (or benchmark report)."""
    if "benchmark" in p:
        import shlex

        b = p["benchmark"]
        args, drop = [], False
        for a, after in zip(b["args"], [*b["args"][1:], ""]):
            # a report written to a machine's own absolute path: the default serves
            if drop or (a == "--out" and Path(after).is_absolute()):
                drop = not drop
                continue
            args.append(a)
        return shlex.join(["python", b["script"], *args])
    cfg = p["config"]
    file = cfg.get("file")
    # a shipped config by its short name; a config file elsewhere by its path
    name = (file if not file else Path(file).stem if not Path(file).is_absolute()
            else file)
    return " ".join([f"ebm-jax run {name or 'CONFIG'}:{cfg['variant']}",
                     *(f"--config.{o}" for o in cfg.get("overrides", []))])


# ------------------------------------------------------------------------- blocks


def markdown_sections(markdown: str) -> list[tuple[str, int, int]]:
    """(heading text, start, end) of every `#` heading's section of a Markdown text (a
    results.md, a changelog); a `#` line inside a fenced code block is no heading."""
    lines = markdown.splitlines(keepends=True)
    heads, fenced = [], False
    for i, ln in enumerate(lines):
        if ln.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"(#{1,6}) (.*)", ln)):
            heads.append((i, len(m.group(1)), m.group(2).strip()))
    out = []
    for k, (i, level, text) in enumerate(heads):
        end = next((j for j, lv, _ in heads[k + 1:] if lv <= level), len(lines))
        out.append((text, sum(map(len, lines[:i])), sum(map(len, lines[:end]))))
    return out


def stored_block(root: Path, name: str, part: str | None, page: Path) -> str:
    """The text a page includes for stored run `name` (its results.md, or the section
    headed `part`, without its first heading), its headings moved below the page's H2 (its top ones H3),
    its figures linked from the page, and the command that reproduces it above."""
    folder = root / RESULTS / name
    data = read_results(folder)
    p = data["ebm_jax"]["provenance"]
    try:
        md = (folder / "results.md").read_text()
    except OSError as e:
        raise StoredError(f"{folder / 'results.md'}: cannot be read ({e})") from None
    footer = next((ln for ln in md.splitlines() if ln.startswith(
        provenance.FOOTER_PREFIX)), provenance.footer(p))
    if part is not None:
        found = [(s, e) for text, s, e in markdown_sections(md) if text == part]
        if not found:
            heads = [t for t, _, _ in markdown_sections(md)]
            raise StoredError(f"{page}: stored run {name} has no part {part!r} (its "
                              f"headings: {'; '.join(heads)})")
        md = md[found[0][0]:found[0][1]]
    md = "\n".join(ln for ln in md.splitlines() if not ln.startswith(
        provenance.FOOTER_PREFIX)).strip("\n")
    lines = md.splitlines()
    if lines and re.match(r"#{1,6} ", lines[0]):  # the run's (or part's) title: the
        lines = lines[1:]                         # page's own heading stands for it
    rel = Path("results") / name  # pages live in docs/, next to docs/results/
    if page.parent.resolve() != (root / "docs").resolve():
        import os

        rel = Path(os.path.relpath(folder, page.parent))
    out = []
    levels = [len(m.group(1)) for ln in lines if (m := re.match(r"(#{1,6}) ", ln))]
    shift = 3 - min(levels) if levels else 0  # its top headings become H3s
    for ln in lines:
        if m := re.match(r"(#{1,4}) (.*)", ln):
            ln = "#" * min(6, len(m.group(1)) + shift) + " " + m.group(2)
        ln = re.sub(r"\]\((?!https?:|/|#)([^)]+\.png)\)", lambda m: f"]({rel.as_posix()}/"
                    f"{m.group(1)})", ln)
        out.append(ln)
    wall = p["wall_seconds"]
    from ebm_jax.config_catalog import duration

    where = provenance.machine_text(p["machine"])
    reused = p.get("stages", {}).get("reused", 0)
    if p.get("measured_by"):
        took = f"{duration(wall)} on {where}; {p['measured_by']}"
    elif reused:
        took = (f"this run reused {reused} trained stage(s) and took {duration(wall)} on "
                f"{where}; a whole run was not timed")
    else:
        took = f"{duration(wall)} on {where}"
    head = f"`{run_command(p)}` ({took})"
    body = "\n".join(out).strip("\n")
    return f"{head}\n\n{body}\n\n{footer}\n"


def compare_block(root: Path, arg: str, page: Path) -> str:
    """`<!-- compare: STORED_A RUN_A STORED_B RUN_B -->`: `ebm-jax compare` of two
    stored runs (run names with spaces in double quotes), with the command."""
    import shlex

    from ebm_jax.report import contrastive, tracking

    try:
        name_a, run_a, name_b, run_b = shlex.split(arg)
    except ValueError:
        raise StoredError(f"{page}: <!-- compare: {arg} --> needs STORED_A RUN_A STORED_B "
                          "RUN_B") from None
    a = read_results(root / RESULTS / name_a)
    b = read_results(root / RESULTS / name_b)
    recipe = a["ebm_jax"].get("recipe")
    compare = (tracking.compare_results if recipe in ("tracking", "socl")
               else contrastive.compare_results)
    try:
        table = compare(a, run_a, b, run_b, names=(name_a, name_b))
    except ValueError as error:
        raise StoredError(f"{page}: <!-- compare: {arg} -->: {error}") from None
    cmd_a = run_command(a["ebm_jax"]["provenance"])
    cmd_b = run_command(b["ebm_jax"]["provenance"])
    runs = f"`{cmd_a}`" if cmd_a == cmd_b else f"`{cmd_a}` and `{cmd_b}`"
    return (f"{runs}, then `ebm-jax compare "
            f"results/{Path(cmd_a.split()[2]).name.replace(':', '/')} {shlex.quote(run_a)} "
            f"results/{Path(cmd_b.split()[2]).name.replace(':', '/')} {shlex.quote(run_b)}`:"
            f"\n\n{table.strip()}\n")
