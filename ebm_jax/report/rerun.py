"""Rerun a run from its results.json and compare the figures: does a stored table
reproduce here, with today's code?

    ebm-jax rerun docs/results/table1_toy1d-quick          # rerun it, then compare
    ebm-jax rerun docs/results/table1_toy1d-quick --against results/table1_toy1d/quick

The rerun is the one command of the run's provenance (`ebm-jax run CONFIG:VARIANT`
with its overrides) in a fresh work directory, so that no finished stage is reused
(`--workdir DIR` names one to keep, and resumes there); a run whose config now
resolves otherwise is refused, naming the fields that changed. Two comparisons:

- results.md's table rows as printed, the timing columns masked: what a reader of the
  page sees. The verdict (exit status 0 or 1) is theirs.
- results.json leaf by leaf, outside its provenance: every number bit for bit, every
  label and count exactly, measured times (seconds, frames per second, machine-hours
  and what is computed from them) counted apart. On the same machine a rerun is the
  same to the last bit; another CPU (with or without AVX-512, or another host) may
  sum floats in another order, and training carries a last-bit difference on, so the
  report lists the figures that differ past the printed digits, with the largest
  relative difference.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tempfile
from pathlib import Path

from ebm_jax.report.provenance import StoredError, machine_text
from ebm_jax.report.stored import config_staleness
from ebm_jax.report.stored_runs import read_results

# results.json keys that measure the machine or name the command line, not the results
# (and the provenance: dates, wall time, the commit)
VOLATILE_KEY = re.compile(r"(seconds|per_second|seconds_per_\w+|fps)$"
                          r"|^(command|workdir|provenance)$"
                          # SoCL Table 4: the measured TOP-map and training times, and
                          # the training fee from them
                          r"|^(top_map_hours_measured|training_machine_hours"
                          r"|training_fee_at_gpu_rate)$")


def without_timings(x):
    """`x` (parsed results.json) without its volatile keys, recursively."""
    if isinstance(x, dict):
        return {k: without_timings(v) for k, v in x.items() if not VOLATILE_KEY.search(k)}
    if isinstance(x, list):
        return [without_timings(v) for v in x]
    return x


@dataclasses.dataclass
class Comparison:
    """Leaf by leaf: how many are the same, the measured times, what differs (path,
    value of a, value of b) and the paths only one side has; and the two results.md's
    table rows as printed, timings masked."""

    same: int = 0
    measured: int = 0
    differ: list = dataclasses.field(default_factory=list)
    only_a: list = dataclasses.field(default_factory=list)
    only_b: list = dataclasses.field(default_factory=list)
    rows_a: list = dataclasses.field(default_factory=list)
    rows_b: list = dataclasses.field(default_factory=list)

    @property
    def bit_for_bit(self) -> bool:
        return not (self.differ or self.only_a or self.only_b)

    @property
    def as_printed(self) -> bool:
        """Every table row reads the same (the figures to the digits printed)."""
        return self.rows_a == self.rows_b

    def rows_differing(self) -> list[tuple[str | None, str | None]]:
        """(row of a, row of b) for each row that differs; None where one side has no
        such row."""
        if len(self.rows_a) == len(self.rows_b):
            return [(x, y) for x, y in zip(self.rows_a, self.rows_b) if x != y]
        return ([(x, None) for x in self.rows_a if x not in self.rows_b]
                + [(None, y) for y in self.rows_b if y not in self.rows_a])

    def largest_relative(self) -> tuple[float, str] | None:
        """(the largest relative difference of two numbers, its path)."""
        pairs = [(abs(a - b) / max(abs(a), abs(b)), path) for path, a, b in self.differ
                 if _number(a) and _number(b) and math.isfinite(a) and math.isfinite(b)]
        return max(pairs) if pairs else None


# results.md table columns that hold timings ("pretrain img/s", "pretrain s", "s / iter",
# "s/epoch/model", "FPS")
TIMING_COLUMN = re.compile(r"(^|\s)(s|h|min)$|img/s|it/s|fps|s ?/ ?(iter|it|step|epoch)"
                           r"|seconds|time|machine-h|at GPU rate", re.IGNORECASE)
# a duration in the text ("0.119 s per frame", "Wall time 12 s on 1 device")
TIMING_TEXT = re.compile(r"\d+(?:\.\d+)? s\b")


def masked_lines(text: str) -> list[tuple[bool, str]]:
    """(whether it is a table row, the line) for results.md's lines, with the cells of
    timing columns and the durations in its text replaced by '*', its provenance
    footer left out."""
    out, timing, in_table = [], set(), False
    for line in text.splitlines():
        if line.startswith("<sub>Provenance:"):  # dates, wall time, commit
            continue
        if not line.startswith("|"):
            in_table = False
            out.append((False, TIMING_TEXT.sub("* s", line)))
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not in_table:  # the header row
            in_table = True
            timing = {i for i, c in enumerate(cells) if TIMING_COLUMN.search(c)}
        out.append((True, "|".join("*" if i in timing else c for i, c in enumerate(cells))))
    return out


def masked_tables(text: str) -> list[str]:
    """results.md's lines, timings masked (`masked_lines`)."""
    return [line for _, line in masked_lines(text)]


def table_rows(text: str) -> list[str]:
    """results.md's table rows as printed, timings masked: what a reader compares."""
    return [line for row, line in masked_lines(text) if row]


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _leaves(tree, path: str = "", measured: bool = False):
    """(path, value, measured) of every scalar of a JSON tree."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _leaves(v, f"{path}.{k}" if path else str(k),
                               measured or bool(VOLATILE_KEY.search(str(k))))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from _leaves(v, f"{path}[{i}]", measured)
    else:
        yield path, tree, measured


def _same(a, b) -> bool:
    if _number(a) and _number(b):
        return a == b or (isinstance(a, float) and isinstance(b, float)
                          and math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and a == b


def compare(a: dict, b: dict, md_a: str = "", md_b: str = "") -> Comparison:
    """Two results.json contents, leaf by leaf, outside their provenance (`ebm_jax`),
    and their results.md texts' table rows."""
    la = {p: (v, m) for p, v, m in _leaves({k: v for k, v in a.items() if k != "ebm_jax"})}
    lb = {p: (v, m) for p, v, m in _leaves({k: v for k, v in b.items() if k != "ebm_jax"})}
    # a measured time on one side only (a report that times one more step) is no
    # difference of results
    out = Comparison(only_a=[p for p in la if p not in lb and not la[p][1]],
                     only_b=[p for p in lb if p not in la and not lb[p][1]],
                     rows_a=table_rows(md_a), rows_b=table_rows(md_b))
    for path, (va, m) in la.items():
        if path not in lb:
            continue
        vb = lb[path][0]
        if m:
            out.measured += 1
        elif _same(va, vb):
            out.same += 1
        else:
            out.differ.append((path, va, vb))
    return out


def report(cmp: Comparison, a_where: str, a: dict, b_where: str, b: dict,
           limit: int = 12) -> list[str]:
    """What a user reads: where each side ran, then the verdict and what differs."""
    lines = []
    for label, where, data in (("stored", a_where, a), ("rerun", b_where, b)):
        p = data["ebm_jax"]["provenance"]
        commit = (p["package"].get("commit") or "no git commit")[:12]
        isa = p["machine"].get("cpu_isa")
        isa = f" ({isa})" if isa else " (vector extension not recorded)" if (
            "cpu_isa" not in p["machine"] and not p["machine"].get("accelerators")) else ""
        lines.append(f"{label}: {where} (ebm_jax {p['package']['version']} @ {commit}, "
                     f"{machine_text(p['machine'])}{isa}, JAX {p['versions'].get('jax')})")
    counts = (f"{cmp.same} figures the same to the last bit ({cmp.measured} measured "
              "times left out)")
    rows = f"{len(cmp.rows_b)} table lines"
    if cmp.bit_for_bit and cmp.as_printed:
        lines.append(f"reproduced to the last bit: {counts}; the {rows} as printed too")
        return lines
    if cmp.as_printed:
        lines.append(f"reproduced as printed: the {rows} read the same (timings masked); "
                     f"{len(cmp.differ)} figure(s) differ past the printed digits, {counts}")
    else:
        rd = cmp.rows_differing()
        lines.append(f"not reproduced: {len(rd)} table line(s) read otherwise (timings "
                     f"masked); {len(cmp.differ)} figure(s) differ, {counts}")
        for x, y in rd[:limit]:
            lines.append(f"  stored | {x}" if x is not None else "  stored   (no such row)")
            lines.append(f"  rerun  | {y}" if y is not None else "  rerun    (no such row)")
        if len(rd) > limit:
            lines.append(f"  ... and {len(rd) - limit} more lines")
    if (largest := cmp.largest_relative()) is not None:
        lines.append(f"largest relative difference {largest[0]:.3g}, at {largest[1]}")
    for path, va, vb in cmp.differ[:limit]:
        lines.append(f"  {path}: {va!r} stored, {vb!r} rerun")
    if len(cmp.differ) > limit:
        lines.append(f"  ... and {len(cmp.differ) - limit} more")
    for label, paths in (("only in the stored run", cmp.only_a),
                         ("only in the rerun (the report gained them)", cmp.only_b)):
        if paths:
            lines.append(f"{label}: {', '.join(paths[:limit])}"
                         + (" ..." if len(paths) > limit else ""))
    return lines


def _results_folder(path: Path) -> Path:
    return path.parent if path.name == "results.json" else path


def rerun(results: Path, *, out: Path | None, workdir: Path | None, progress: bool,
          against: Path | None = None, run=None, log=print) -> int:
    """Reruns the run of `results` (a results.json or its folder), or takes `against`,
    and compares: 0 when every table row reads the same as printed (bit for bit or
    not, the report says), 1 when one reads otherwise; StoredError when it cannot
    run. `run(argv)` is the command line's own entry point (`ebm_jax.cli.main`, given
    by the CLI: this layer does not import it), called with the `run` arguments."""
    folder = _results_folder(Path(results))
    a = read_results(folder)
    p = a["ebm_jax"]["provenance"]
    if "benchmark" in p:
        raise StoredError(f"{folder / 'results.json'}: a benchmark's report: its figures "
                          f"are timings; rerun `python {p['benchmark']['script']}`")
    if against is None:
        if (why := config_staleness(a, folder / "results.json")) is not None:
            raise StoredError(f"cannot rerun it as it was made: {why}")
        if run is None:
            raise StoredError("rerun needs the command line's entry point as `run` (or "
                              "`against`, to compare without rerunning)")

        cfg = p["config"]
        name = f"{Path(cfg['file']).stem}-{cfg['variant']}"
        against = Path(out) if out is not None else Path("results") / "rerun" / name
        from ebm_jax.config_catalog import duration

        log(f"the stored run took {duration(p['wall_seconds'])} on "
            f"{machine_text(p['machine'])}"
            + (f" (it reused {p['stages']['reused']} finished stage(s))"
               if p.get("stages", {}).get("reused") else ""))
        temp = None
        if workdir is None:
            temp = tempfile.TemporaryDirectory(prefix="ebm-jax-rerun-")
            workdir = Path(temp.name)
            log(f"rerunning in a fresh work directory, {workdir} (removed at the end; "
                "--workdir DIR keeps one to resume)")
        argv = ["run", f"{cfg['file']}:{cfg['variant']}",
                *(f"--config.{o}" for o in cfg.get("overrides", [])),
                "--workdir", str(workdir), "--out", str(against),
                *([] if progress else ["--no-progress"])]
        try:
            rc = run(argv)
        finally:
            if temp is not None:
                temp.cleanup()
        if rc != 0:
            raise StoredError(f"the rerun failed (exit status {rc}): ebm-jax "
                              + " ".join(argv))
    b_folder = _results_folder(Path(against))
    b = read_results(b_folder)
    cmp = compare(a, b, _markdown(folder), _markdown(b_folder))
    for line in report(cmp, str(folder), a, str(b_folder), b):
        log(line)
    return 0 if cmp.as_printed else 1


def _markdown(folder: Path) -> str:
    try:
        return (folder / "results.md").read_text()
    except OSError as e:
        raise StoredError(f"{folder / 'results.md'}: cannot be read ({e})") from None
