"""The one table of GPU runs, generated from `docs/gpu_runs.toml`.

Each `[[run]]` has

    what      what ran
    figures   what it gave, with a link to the page that shows it

and either

    stored    the name of a stored run made on a GPU (`docs/results/NAME`): its GPU,
              JAX version, date and command are read from its provenance

or, for a run made before results carried their provenance, recorded by hand:

    gpu       "one NVIDIA H100 80GB"
    jax       "0.11.2"
    date      "2026-11-27", or "by 2026-11-26" where only a bound is known
    command   the command that made it: `ebm-jax run NAME:VARIANT ...`,
              `python benchmarks/...`, `bash benchmarks/...` or `pytest PATH ...`

The page shows the table between `<!-- gpu: runs -->` and `<!-- /gpu -->`
(`python -m ebm_jax.report.stored sync` writes it); `problems` (which `stored check`
runs) names every bad entry, and every stored run made on a GPU that the file leaves
out, so that no GPU figure is left out of the one table.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from ebm_jax.report import provenance
from ebm_jax.report.provenance import StoredError, read_tables

RUNS = Path("docs") / "gpu_runs.toml"
BY_HAND = ("gpu", "jax", "date", "command")
_DATE = re.compile(r"(by )?\d{4}-\d\d-\d\d")


def load(root: Path) -> list[dict]:
    """The file's entries; one StoredError naming it where it cannot be read or an
    entry lacks a field."""
    path = root / RUNS
    entries = read_tables(path, "run", "a table of GPU runs")
    for i, r in enumerate(entries, 1):
        need = ["what", "figures"] + (["stored"] if "stored" in r else list(BY_HAND))
        missing = [f for f in need if not isinstance(r.get(f), str) or not r[f].strip()]
        if missing:
            raise StoredError(f"{path}: run {i} ({r.get('what', '?')!r}) lacks "
                              f"{', '.join(missing)} (a run names `stored = NAME`, or "
                              f"{', '.join(BY_HAND)} recorded by hand)")
        extra = [f for f in BY_HAND if "stored" in r and f in r]
        if extra:
            raise StoredError(f"{path}: run {i} ({r['what']!r}) is stored run "
                              f"{r['stored']!r}, whose provenance gives "
                              f"{', '.join(extra)}; drop them from the entry")
    return entries


def _on_gpu(p: dict) -> bool:
    return bool(p.get("machine", {}).get("accelerators"))


def _stored_row(root: Path, name: str) -> dict:
    from ebm_jax.report.stored_runs import RESULTS, read_results, run_command

    p = read_results(root / RESULTS / name)["ebm_jax"]["provenance"]
    if not _on_gpu(p):
        raise StoredError(f"stored run {name} was made on "
                          f"{provenance.machine_text(p['machine'])}, not a GPU")
    m = p["machine"]
    gpus = ", ".join(m["accelerators"])
    count = m.get("device_count", 1)
    return {"gpu": f"{'one' if count == 1 else count} {gpus}",
            "jax": p["versions"]["jax"], "date": p["started"][:10],
            "command": run_command(p), "record": f"stored run `docs/results/{name}`"}


def _command_problem(root: Path, command: str) -> str | None:
    """Why a hand-recorded command does not name something that exists today."""
    from ebm_jax.config import ConfigError, load_config

    try:
        words = shlex.split(command)
    except ValueError as e:
        return f"command {command!r} does not parse ({e})"
    if words[:2] == ["ebm-jax", "run"] and len(words) > 2:
        try:
            load_config(words[2], [w.removeprefix("--config.") for w in words[3:]
                                   if w.startswith("--config.")])
        except ConfigError as e:
            return f"command {command!r}: {e}"
        return None
    if words[:1] in (["python"], ["bash"]) and len(words) > 1:
        script = words[1]
        if not script.startswith("benchmarks/") or not (root / script).is_file():
            return f"command {command!r} names no script of benchmarks/"
        return None
    if words[:1] == ["pytest"] and len(words) > 1:
        gone = [w for w in words[1:] if not w.startswith("-")
                and not (root / w.split("::")[0]).exists()]
        return f"command {command!r}: no {', '.join(gone)} in the repository" if gone else None
    return (f"command {command!r} is none of `ebm-jax run NAME:VARIANT`, "
            "`python benchmarks/...`, `bash benchmarks/...`, `pytest PATH`")


def problems(root: Path) -> list[str]:
    """Every bad entry of the file, and every stored GPU run it leaves out, a line each."""
    from ebm_jax.report.stored_runs import RESULTS, read_results, stored_names

    path = root / RUNS
    if not path.is_file():
        entries = []
    else:
        try:
            entries = load(root)
        except StoredError as e:
            return [str(e)]
    out, listed = [], set()
    for i, r in enumerate(entries, 1):
        where = f"{path}: run {i} ({r['what'][:40]!r})"
        if "stored" in r:
            listed.add(r["stored"])
            try:
                _stored_row(root, r["stored"])
            except StoredError as e:
                out.append(f"{where}: {e}")
            continue
        if not _DATE.fullmatch(r["date"]):
            out.append(f"{where}: date must be YYYY-MM-DD or 'by YYYY-MM-DD', got "
                       f"{r['date']!r}")
        if why := _command_problem(root, r["command"]):
            out.append(f"{where}: {why}")
    for name in stored_names(root):
        try:
            p = read_results(root / RESULTS / name)["ebm_jax"]["provenance"]
        except StoredError:
            continue  # `stored check` names it
        if _on_gpu(p) and name not in listed:
            out.append(f"{path}: stored run {name} was made on "
                       f"{provenance.machine_text(p['machine'])} but the table of GPU runs "
                       f"does not list it; add `[[run]]` with `stored = \"{name}\"`")
    return out


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def table(root: Path, arg: str, page: Path) -> str:
    """The table of GPU runs (`<!-- gpu: runs -->`), a row per entry, in the file's
    order; a stored run's GPU, JAX, date and command from its provenance."""
    if arg != "runs":
        raise StoredError(f"{page}: <!-- gpu: {arg} --> (expected <!-- gpu: runs -->)")
    rows = ["| what ran | GPU | JAX | date | command | figures | record |",
            "|---|---|---|---|---|---|---|"]
    for r in load(root):
        try:
            got = (_stored_row(root, r["stored"]) if "stored" in r
                   else {**r, "record": "by hand, before provenance"})
        except StoredError as e:
            raise StoredError(f"{root / RUNS}: run {r['what'][:40]!r}: {e}") from None
        rows.append("| " + " | ".join([
            _cell(r["what"]), _cell(got["gpu"]), _cell(got["jax"]), _cell(got["date"]),
            f"`{_cell(got['command'])}`", _cell(r["figures"]), got["record"]]) + " |")
    return "\n".join(rows) + "\n"
