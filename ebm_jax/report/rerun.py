"""Rerun a run from its results.json and compare the figures: does a stored table
reproduce here, with today's code?

    ebm-jax rerun docs/results/table1_toy1d-quick          # rerun it, then compare
    ebm-jax rerun docs/results/table1_toy1d-quick --against results/table1_toy1d/quick

The rerun is the one command of the run's provenance (`ebm-jax run CONFIG:VARIANT`
with its overrides) in a fresh work directory, so that no finished stage is reused
(`--workdir DIR` names one to keep, and resumes there); a run whose config now
resolves otherwise is refused, naming the fields that changed. The comparison walks
both results.json files leaf by leaf, outside their provenance: every number bit for
bit, every label and count exactly. Measured times (seconds, frames per second,
machine-hours and what is computed from them) differ between any two runs and are
counted apart. Runs on CPUs with and without AVX-512 sum floats in another order, so
there the last digits may differ; the report gives the largest relative difference.
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
    value of a, value of b) and the paths only one side has."""

    same: int = 0
    measured: int = 0
    differ: list = dataclasses.field(default_factory=list)
    only_a: list = dataclasses.field(default_factory=list)
    only_b: list = dataclasses.field(default_factory=list)

    @property
    def reproduced(self) -> bool:
        return not (self.differ or self.only_a or self.only_b)

    def largest_relative(self) -> tuple[float, str] | None:
        """(the largest relative difference of two numbers, its path)."""
        pairs = [(abs(a - b) / max(abs(a), abs(b)), path) for path, a, b in self.differ
                 if _number(a) and _number(b) and math.isfinite(a) and math.isfinite(b)]
        return max(pairs) if pairs else None


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


def compare(a: dict, b: dict) -> Comparison:
    """Two results.json contents, leaf by leaf, outside their provenance (`ebm_jax`)."""
    la = {p: (v, m) for p, v, m in _leaves({k: v for k, v in a.items() if k != "ebm_jax"})}
    lb = {p: (v, m) for p, v, m in _leaves({k: v for k, v in b.items() if k != "ebm_jax"})}
    out = Comparison(only_a=[p for p in la if p not in lb],
                     only_b=[p for p in lb if p not in la])
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
        lines.append(f"{label}: {where} (ebm_jax {p['package']['version']} @ {commit}, "
                     f"{machine_text(p['machine'])}, JAX {p['versions'].get('jax')})")
    if cmp.reproduced:
        lines.append(f"reproduced: {cmp.same} figures the same to the last bit "
                     f"({cmp.measured} measured times left out)")
        return lines
    lines.append(f"not reproduced: {len(cmp.differ)} figure(s) differ, {cmp.same} the same "
                 f"to the last bit ({cmp.measured} measured times left out)")
    if (largest := cmp.largest_relative()) is not None:
        lines.append(f"largest relative difference {largest[0]:.3g}, at {largest[1]}")
    for path, va, vb in cmp.differ[:limit]:
        lines.append(f"  {path}: {va!r} stored, {vb!r} rerun")
    if len(cmp.differ) > limit:
        lines.append(f"  ... and {len(cmp.differ) - limit} more")
    for label, paths in (("only in the stored run", cmp.only_a),
                         ("only in the rerun", cmp.only_b)):
        if paths:
            lines.append(f"{label}: {', '.join(paths[:limit])}"
                         + (" ..." if len(paths) > limit else ""))
    return lines


def _results_folder(path: Path) -> Path:
    return path.parent if path.name == "results.json" else path


def rerun(results: Path, *, out: Path | None, workdir: Path | None, progress: bool,
          against: Path | None = None, log=print) -> int:
    """Reruns the run of `results` (a results.json or its folder), or takes `against`,
    and compares: 0 reproduced, 1 not, 2 when it cannot run (StoredError)."""
    folder = _results_folder(Path(results))
    a = read_results(folder)
    p = a["ebm_jax"]["provenance"]
    if "benchmark" in p:
        raise StoredError(f"{folder / 'results.json'}: a benchmark's report: its figures "
                          f"are timings; rerun `python {p['benchmark']['script']}`")
    if against is None:
        if (why := config_staleness(a, folder / "results.json")) is not None:
            raise StoredError(f"cannot rerun it as it was made: {why}")
        from ebm_jax import cli

        cfg = p["config"]
        name = f"{Path(cfg['file']).stem}-{cfg['variant']}"
        against = Path(out) if out is not None else Path("results") / "rerun" / name
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
            rc = cli.main(argv)
        finally:
            if temp is not None:
                temp.cleanup()
        if rc != 0:
            raise StoredError(f"the rerun failed (exit status {rc}): ebm-jax "
                              + " ".join(argv))
    b_folder = _results_folder(Path(against))
    b = read_results(b_folder)
    cmp = compare(a, b)
    for line in report(cmp, str(folder), a, str(b_folder), b):
        log(line)
    return 0 if cmp.reproduced else 1
