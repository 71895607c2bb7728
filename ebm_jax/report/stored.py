"""Stored runs: the docs' tables are runs' own results, not copies.

    docs/results/<name>/results.json   a run's results, with its provenance
    docs/results/<name>/results.md     its tables, included into a page
    docs/results/<name>/*.png          its figures

A page includes a stored run (or one `#`-headed part of its results.md) between two
markers, which `sync` fills in (`<!-- include: FILE -->` takes a repository file whole,
as the site's changelog takes CHANGELOG.md, and `<!-- include: FILE part="HEADING" -->`
one section of it):

    <!-- stored: socl_table6_noisy_points-quick -->
    <!-- /stored -->
    <!-- stored: table1_toy1d-quick part="Table 1: 1D regression" -->

the claim tables are generated from `docs/claims.toml` (`ebm_jax.report.claims`)
between `<!-- claims: PAGE -->` and `<!-- /claims -->`, and the one table of GPU runs
from `docs/gpu_runs.toml` (`ebm_jax.report.gpu_runs`) between `<!-- gpu: runs -->` and
`<!-- /gpu -->`.

Every other table of a page says what it is, above it (after the previous heading or
table): `<!-- reference table -->` for one that holds no result (options, formats,
the papers), or a block naming the commands that rerun a hand copy, whose label `sync`
writes (a table copied from a run made before results carried their provenance):

    <!-- copy: socl_lst_validation:moco_screen -->
    <!-- /copy -->
    <!-- copy: python benchmarks/losses.py -->

`check` fails on a table with neither, and on a copy naming a config or variant that no
longer loads; `copies` counts the copies left to rerun and store, and `todo` lists
them with the runs that replace them and those runs' measured wall times.

    python -m ebm_jax.report.stored store results/socl_table6_noisy_points/quick
    python -m ebm_jax.report.stored sync      # rewrite the included blocks
    python -m ebm_jax.report.stored check     # in sync and fresh? (the tests run it)
    python -m ebm_jax.report.stored todo      # the hand copies left, and their runs

`store` copies a finished run in (refusing one without provenance) and records its wall
time, with its machine, in `experiments/wall_times.json` (`ebm-jax list` prints it); a
run that reused finished stages gives a lower bound ("over ..."), kept only where the
variant has no whole run's time.
`check` fails when a page's block differs from what `sync` writes, or when a stored
run's config identity differs from what its config file and variant resolve to today,
naming the fields that changed: a changed default then means a rerun, or a named variant
that pins the old value.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

from ebm_jax.report import claims, gpu_runs, provenance
from ebm_jax.report.table_labels import (BLOCK_KINDS, REFERENCE, copy_block,  # noqa: F401
                                         unlabelled_tables)
from ebm_jax.report.provenance import StoredError
from ebm_jax.report.stored_runs import (RESULTS, compare_block, read_benchmark,
                                        read_results, run_command, stored_block,
                                        markdown_sections, stored_names)

# a marker is a line of its own (one quoted inside a line, as a page that explains them
# shows it, is text)
_BLOCK = re.compile(
    rf"^(?P<open><!-- (?P<kind>{BLOCK_KINDS}): "
    r"(?P<arg>[^>]*?) -->\n)"
    r"(?P<body>.*?)"
    r"(?P<close><!-- /(?P=kind) -->)", re.S | re.M)
_PART = re.compile(r'^(?P<name>[\w.-]+)(?: part="(?P<part>[^"]+)")?$')


# ------------------------------------------------------------------------- staleness


def staleness(root: Path, name: str) -> str | None:
    """None where stored run `name` is what its config and variant give today, else
    why not, in one line naming its results.json and the fields that changed."""
    folder = root / RESULTS / name
    data = read_results(folder)
    where = folder / "results.json"
    p = data["ebm_jax"]["provenance"]
    if "benchmark" in p:  # timings are of their commit; the script must still exist
        script = p["benchmark"]["script"]
        if not (root / script).is_file():
            return (f"{where}: its benchmark {script} no longer exists; rerun what "
                    "replaced it and store that")
        return None
    return config_staleness(data, where)


def config_staleness(data: dict, where) -> str | None:
    """None where the run of results `data` (read from `where`) is what its config file,
    variant and overrides resolve to today, else why not, in one line."""
    import dataclasses

    from ebm_jax.config import ConfigError, config_changes, config_identity, load_config

    p = data["ebm_jax"]["provenance"]
    cfg_src = p["config"]
    if not cfg_src.get("file"):
        return f"{where}: its run names no config file (it was run from Python)"
    spec = f"{cfg_src['file']}:{cfg_src['variant']}"
    try:
        cfg = load_config(spec, cfg_src.get("overrides", []))
    except ConfigError as e:
        return f"{where}: its config no longer loads ({e})"
    now = config_identity(cfg)
    if now == cfg_src["identity"]:
        return None
    old = data["ebm_jax"].get("config")
    changed = (config_changes(old, dataclasses.asdict(cfg)) if isinstance(old, dict)
               else ["(the stored run keeps no fields to compare)"])
    return (f"{where} is stale: {spec} now resolves to config {now}, not "
            f"{cfg_src['identity']} (changed: {', '.join(changed[:12])}"
            f"{' ...' if len(changed) > 12 else ''}); rerun `{run_command(p)}` and store "
            "it, or pin the old values in a named variant")


# ------------------------------------------------------------------------- pages


def _copy_labels(root: Path):
    """(page under root, the label's argument) of every hand copy's label."""
    for page in pages(root):
        for arg in re.findall(r"^<!-- copy: (.*?) -->", page.read_text(), flags=re.M):
            yield str(page.relative_to(root)), " ".join(arg.split())


def copies(root: Path) -> dict[str, int]:
    """How many hand-copied tables each page has (its copy blocks)."""
    counts: dict[str, int] = {}
    for page, _ in _copy_labels(root):
        counts[page] = counts.get(page, 0) + 1
    return counts


def todo(root: Path) -> list[str]:
    """The hand copies left, a line per set of runs that replaces them: the commands,
    how many tables on which pages, and each run's measured wall times (from
    `experiments/wall_times.json`, as `ebm-jax list` prints them), most tables first."""
    from ebm_jax.config import CONFIG_ROOT, config_name, split_spec
    from ebm_jax.config_catalog import wall_time_text, wall_times

    times = wall_times(root / CONFIG_ROOT)
    blocks: dict[str, dict[str, int]] = {}
    for page, arg in _copy_labels(root):
        where = blocks.setdefault(arg, {})
        where[page] = where.get(page, 0) + 1
    lines = []
    for arg, where in sorted(blocks.items(), key=lambda kv: (-sum(kv[1].values()), kv[0])):
        n = sum(where.values())
        head = (f"{n} table{'s' if n > 1 else ''} ("
                + ", ".join(f"{k} {v}" for k, v in where.items()) + ")")
        if arg.startswith(("python ", "bash ")):
            lines.append(f"{head}: `{arg}`")
            continue
        runs = []
        for spec in arg.split():
            path, variant = split_spec(spec)
            entries = times.get(config_name(path), {}).get(variant, [])
            runs.append(f"`ebm-jax run {spec}`, "
                        + (wall_time_text(entries) if entries else "not measured"))
        lines.append(f"{head}: " + "; ".join(runs))
    return lines


_INCLUDE = re.compile(r'^(?P<file>[^\s"]+)(?: part="(?P<part>[^"]+)")?$')


def include_block(root: Path, arg: str, page: Path) -> str:
    """A file of the repository, whole, or the section under its heading `part` (the
    heading kept, with what lies below it up to the next heading of its level or
    higher): `<!-- include: CHANGELOG-0.2.md part="SoCL" -->`."""
    m = _INCLUDE.match(arg)
    source = root / m.group("file") if m else None
    if source is None or ".." in Path(m.group("file")).parts or not source.is_file():
        raise StoredError(f"{page}: <!-- include: {arg} --> names no file of the "
                          'repository (expected FILE or FILE part="HEADING")')
    text = source.read_text()
    if m.group("part") is not None:
        found = [(s, e) for head, s, e in markdown_sections(text) if head == m.group("part")]
        if not found:
            heads = "; ".join(head for head, _, _ in markdown_sections(text))
            raise StoredError(f"{page}: {m.group('file')} has no part "
                              f"{m.group('part')!r} (its headings: {heads})")
        text = text[found[0][0]:found[0][1]]
    return text.rstrip("\n") + "\n"


def render_page(root: Path, page: Path, text: str) -> str:
    """`text` with every stored and claims block filled in."""
    def fill(m):
        arg = m.group("arg").strip()
        if m.group("kind") == "claims":
            body = claims.table(root, arg, page)
        elif m.group("kind") == "experiments":  # the README's table of experiments
            from ebm_jax.report import experiments_table

            body = experiments_table.table(root, arg, page)
        elif m.group("kind") == "gpu":  # the one table of GPU runs
            body = gpu_runs.table(root, arg, page)
        elif m.group("kind") == "copy":  # a hand copy's label
            body = copy_block(root, arg, page)
        elif m.group("kind") == "compare":  # two stored runs paired by seed
            body = compare_block(root, arg, page)
        elif m.group("kind") == "api":  # a module's public API, from its code
            from ebm_jax.report.api_docs import api_block

            body = api_block(arg, page)
        elif m.group("kind") == "include":  # a file of the repository, or one part
            body = include_block(root, arg, page)
        else:
            pm = _PART.match(arg)
            if pm is None:
                raise StoredError(f"{page}: bad marker <!-- stored: {arg} --> (expected "
                                  '<!-- stored: NAME --> or <!-- stored: NAME part="HEADING" -->)')
            body = stored_block(root, pm.group("name"), pm.group("part"), page)
        return m.group("open") + body + m.group("close")

    return _BLOCK.sub(fill, text)


def pages(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def sync(root: Path, check: bool = False) -> list[str]:
    """Fills every page's blocks (or, with `check`, only says which differ)."""
    out = []
    for page in pages(root):
        text = page.read_text()
        new = render_page(root, page, text)
        if new != text:
            out.append(str(page.relative_to(root)))
            if not check:
                page.write_text(new)
    return out


def check(root: Path) -> list[str]:
    """Every problem of the stored runs, the pages and the claims file, a line each."""
    problems = []
    for name in stored_names(root):
        try:
            if why := staleness(root, name):
                problems.append(why)
        except StoredError as e:
            problems.append(str(e))
    for page in pages(root):
        for line in unlabelled_tables(page.read_text()):
            problems.append(
                f"{page.relative_to(root)}:{line}: a table that is neither a stored run "
                f"nor labelled; put `<!-- copy: NAME:VARIANT -->` and `<!-- /copy -->` "
                f"above a hand copy, `{REFERENCE}` above a table that holds no result")
    try:
        problems += claims.problems(root)
        problems += gpu_runs.problems(root)
        problems += [f"{p}: its generated blocks are out of date; run `python -m "
                     "ebm_jax.report.stored sync`" for p in sync(root, check=True)]
    except StoredError as e:
        problems.append(str(e))
    return problems


# ------------------------------------------------------------------------- storing


def store(root: Path, run: Path, name: str | None = None,
          measured: tuple[float, str] | None = None, log=print,
          without: tuple[tuple[str, ...], str] | None = None) -> Path:
    """Copies the finished run in `run` to `docs/results/<name>` (default
    `<config>-<variant>`) and records its wall time in experiments/wall_times.json:
    its own where it trained every stage, else `measured` = (seconds, where they come
    from), the wall time of the run that trained them, if given. `run` may also be a
    benchmark's report, `<out>/<stem>.json` beside its `<stem>.md` (stored as
    results.json and results.md, default name `bench-<stem>`). `without` = (figures,
    why): figures the run lists but that did not come back from where it ran (another
    machine), stored without them; results.json says which and why
    (`stored_without`)."""
    sources = {"results.json": "results.json", "results.md": "results.md"}
    if run.suffix == ".json":  # a benchmark's <stem>.json and <stem>.md
        sources = {"results.json": run.name, "results.md": run.with_suffix(".md").name}
        run = run.parent
        data = read_benchmark(run / sources["results.json"])
    else:
        data = read_results(run)
    p = data["ebm_jax"]["provenance"]
    reused = p.get("stages", {}).get("reused", 0)
    if measured is not None:
        seconds, source = measured
        if not (seconds > 0 and source.strip()):
            raise StoredError("--measured-seconds must be > 0 and --measured-by must say "
                              "where the time comes from")
        p = {**p, "wall_seconds": float(seconds), "measured_by": source}
        data["ebm_jax"]["provenance"] = p
    if "benchmark" in p:
        if measured is not None:
            raise StoredError("--measured-seconds is for runs that reused stages, not "
                              "for a benchmark's report")
        name = name or f"bench-{Path(sources['results.json']).stem}"
    else:
        cfg = p["config"]
        if not cfg.get("file"):
            raise StoredError(f"{run / 'results.json'}: its run names no config file; run "
                              "it with `ebm-jax run NAME:VARIANT` to store it")
        name = name or f"{Path(cfg['file']).stem}-{cfg['variant']}"
    if not re.fullmatch(r"[\w.-]+", name):
        raise StoredError(f"--as must be letters, digits, '_', '-' or '.', got {name!r}")
    files = data["ebm_jax"].get("files") or ["results.json", "results.md"]
    if without is not None:
        lost, why = without
        bad = [f for f in lost if f not in files or f in ("results.json", "results.md")]
        if bad or not lost or not why.strip():
            raise StoredError(f"--without must name figures the run lists ({files}, not "
                              f"results.json or results.md), with --without-why; got "
                              f"{list(lost)}")
        files = [f for f in files if f not in lost]
        data["ebm_jax"]["files"] = files
        data["ebm_jax"]["stored_without"] = {"files": list(lost), "why": why}
    target = root / RESULTS / name
    staging = target.with_name(f".{name}.new")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    for f in files:
        src = run / sources.get(f, f)
        if not src.is_file():
            shutil.rmtree(staging)
            raise StoredError(f"{run}: lists {f} among its files, but it is missing")
        (staging / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, staging / f)
    if measured is not None or without is not None:  # what the store adds to the record
        (staging / "results.json").write_text(json.dumps(data, indent=2) + "\n")
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    if "benchmark" in p:  # not a config's variant: no entry in wall_times.json
        pass
    elif reused and measured is None:
        whole = _has_whole_time(root, p["config"])
        log(f"{name}: its run reused {reused} finished stage(s), so its "
            f"{p['wall_seconds']:.0f} s are not a whole run's time; "
            + ("wall_times.json left as it is, which has one" if whole else
               "recorded in wall_times.json as a lower bound")
            + " (give --measured-seconds and --measured-by from the run that trained them)")
        if not whole:
            record_wall_time(root, p, f"docs/results/{name}")
    else:
        record_wall_time(root, p, f"docs/results/{name}")
    return target


def _has_whole_time(root: Path, cfg: dict) -> bool:
    """Whether experiments/wall_times.json has a whole run's time of `cfg`'s variant."""
    from ebm_jax.config_catalog import wall_times

    entries = wall_times(root / "experiments").get(cfg["file"], {}).get(cfg["variant"], [])
    return any(not e.get("reused_stages") for e in entries)


def record_wall_time(root: Path, p: dict, how: str) -> None:
    """The stored run's wall time, machine and date as an entry of
    experiments/wall_times.json (replacing an entry of the same `how`). A run that
    reused finished stages, with no measured whole time (`measured_by`), gives a lower
    bound: the entry carries `reused_stages` (`ebm-jax list` prints "over ...", the
    README's time column leaves it out)."""
    from ebm_jax.config_catalog import WALL_TIMES

    path = root / "experiments" / WALL_TIMES
    data = json.loads(path.read_text()) if path.is_file() else {}
    cfg = p["config"]
    overrides = cfg.get("overrides", [])
    reused = 0 if p.get("measured_by") else p.get("stages", {}).get("reused", 0)
    entry = {"seconds": p["wall_seconds"],
             "machine": provenance.machine_text(p["machine"]),
             "date": p["finished"][:10], "how": how,
             "note": "stored run" + (f" with {' '.join(overrides)}" if overrides else "")
             + (f"; {p['measured_by']}" if p.get("measured_by") else "")
             + (f"; it reused {reused} finished stage(s), whose training is not in this "
                "time" if reused else "")}
    if reused:
        entry["reused_stages"] = reused
    runs = data.setdefault(cfg["file"], {}).setdefault(cfg["variant"], [])
    runs[:] = [e for e in runs if e.get("how") != how] + [entry]
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ebm_jax.report.stored",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=".", help="the repository's root")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("store", help="copy a finished run into docs/results")
    s.add_argument("run", help="a results directory of `ebm-jax run`")
    s.add_argument("--as", dest="name", default=None,
                   help="its name under docs/results (default CONFIG-VARIANT)")
    s.add_argument("--measured-seconds", type=float, default=None,
                   help="where the run reused finished stages: the wall time of the run "
                   "that trained them")
    s.add_argument("--measured-by", default=None,
                   help="with --measured-seconds: where that time comes from")
    s.add_argument("--without", action="append", default=None, metavar="FIGURE",
                   help="a figure the run lists that did not come back from where it "
                   "ran (repeatable); stored without it, with --without-why")
    s.add_argument("--without-why", default=None, help="with --without: why it is missing")
    sub.add_parser("sync", help="fill the pages' stored and claims blocks")
    sub.add_parser("check", help="stored runs fresh, pages in sync, claims valid")
    sub.add_parser("todo", help="the hand copies left, with the runs that replace them")
    args = parser.parse_args(argv)
    root = Path(args.root)
    try:
        if args.command == "store":
            measured = None
            if (args.measured_seconds is None) != (args.measured_by is None):
                raise StoredError("--measured-seconds and --measured-by go together")
            if args.measured_seconds is not None:
                measured = (args.measured_seconds, args.measured_by)
            if (args.without is None) != (args.without_why is None):
                raise StoredError("--without and --without-why go together")
            without = None if args.without is None else (tuple(args.without),
                                                         args.without_why)
            target = store(root, Path(args.run), args.name, measured, without=without)
            print(f"stored {target}")
        elif args.command == "sync":
            changed = sync(root)
            print(f"rewrote {', '.join(changed)}" if changed else "every page in sync")
        elif args.command == "todo":
            print("\n".join(todo(root)) or "no hand copies left")
        else:
            problems = check(root)
            print("\n".join(problems) if problems else "stored runs fresh, pages in sync")
            if counts := copies(root):
                print(f"{sum(counts.values())} hand-copied table(s) left to rerun and store: "
                      + ", ".join(f"{k} {v}" for k, v in counts.items()))
            return 1 if problems else 0
    except StoredError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
