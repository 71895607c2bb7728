"""Provenance: what a stored result says about how it was made.

Every `results.json` carries, under `ebm_jax.provenance`:

    package       the ebm_jax version, the git commit of the code and whether its
                  tracked files were modified (null outside a clone)
    config        the config file by its shipped name (`tracking/socl_table6.py`), the
                  variant, every `--config.FIELD=VALUE` override, and the identity of the
                  resolved config (`ebm_jax.config.config_identity`)
    machine       CPU model and cores, the JAX backend and the accelerators' names
    versions      Python, JAX, jaxlib, Flax, optax, orbax, NumPy
    started, finished, wall_seconds
    stages        the training stages the run entered, and how many of them were
                  finished before it (reused): wall_seconds is a whole run's time only
                  where none was

and `results.md` ends with the same in one line (`footer`). A benchmark's report
(`benchmarks/*.py`, `collect_benchmark`) has `benchmark` (the script and its arguments)
and `load_average` (at its start and end) where a run has `config`. The staleness test of the
stored runs (`tests/test_stored_results.py`) compares the identity with what the config
and variant resolve to today.
"""

from __future__ import annotations

import datetime
import os
import subprocess
from pathlib import Path


class StoredError(ValueError):
    """A stored run, page or claims file that cannot be used: one line naming it."""


def read_tables(path: Path, key: str, what: str) -> list[dict]:
    """The `[[key]]` tables of the TOML file `path` (one of the docs' data files:
    the claims, the README's experiments); one StoredError naming it otherwise."""
    import tomllib

    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise StoredError(f"{path}: no such file ({what})") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise StoredError(f"{path}: not {what} ({e})") from None
    tables = data.get(key)
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise StoredError(f"{path}: expected [[{key}]] tables")
    return tables


# the footer's first words, which the stored-results tooling looks for
FOOTER_PREFIX = "<sub>Provenance:"


def git_state(path: str | os.PathLike | None = None) -> dict | None:
    """{"commit": 40 hex digits, "dirty": tracked files modified} of the git clone that
    holds `path` (default: this package's source), None where it is not in one (an
    installed wheel) or git is missing."""
    where = Path(path) if path is not None else Path(__file__).resolve().parents[2]
    if not (where / ".git").exists() and path is None:
        return None
    try:
        commit = subprocess.run(["git", "-C", os.fspath(where), "rev-parse", "HEAD"],
                                capture_output=True, text=True, timeout=20)
        if commit.returncode != 0:
            return None
        status = subprocess.run(["git", "-C", os.fspath(where), "status", "--porcelain",
                                 "--untracked-files=no"],
                                capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit.stdout.strip(),
            "dirty": status.returncode != 0 or bool(status.stdout.strip())}


def machine(devices=None) -> dict:
    """CPU model, core count and vector extension (`cpu_vector_isa`), JAX's backend and
    the accelerators' names."""
    import jax

    from ebm_jax.train.records import cpu_name, cpu_vector_isa

    devices = list(devices) if devices is not None else jax.devices()
    accel = sorted({d.device_kind for d in devices if d.platform != "cpu"})
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count()
    return {"cpu": cpu_name(), "cpu_cores": cores, "cpu_isa": cpu_vector_isa(),
            "backend": jax.default_backend(), "accelerators": accel,
            "device_count": len(devices)}


def machine_text(m: dict) -> str:
    """"2 CPU cores, AMD EPYC 7B13" or "1 x NVIDIA H100 80GB HBM3"."""
    if m.get("accelerators"):
        return f"{m.get('device_count', 1)} x {', '.join(m['accelerators'])}"
    return f"{m.get('cpu_cores')} CPU cores, {m.get('cpu')}"


def config_source(path, variant: str | None, overrides=()) -> dict:
    """The config file (its shipped name where it is one), variant and overrides."""
    from ebm_jax.config import config_name, load_module

    if variant is None:
        variant = tuple(load_module(path).VARIANTS)[0]
    return {"file": config_name(path), "variant": variant,
            "overrides": plain_overrides(overrides)}


def plain_overrides(overrides) -> list[str]:
    """Overrides as `FIELD=VALUE`, however given (`--config.FIELD=VALUE` too)."""
    return [str(o).removeprefix("--config.") for o in overrides]


_UNSET = object()


def collect(cfg, *, source: dict | None, devices, started: float,
            finished: float, git=_UNSET) -> dict:
    """The provenance of a run of `cfg` (see the module's docstring); `git` is
    `git_state()` taken when the run started (taken now where not given)."""
    from ebm_jax import __version__
    from ebm_jax.config import config_identity
    from ebm_jax.train.records import versions

    git = git_state() if git is _UNSET else git
    return {
        "package": {"name": "ebm_jax", "version": __version__,
                    "commit": git["commit"] if git else None,
                    "dirty": git["dirty"] if git else None},
        "config": {**(source or {"file": None, "variant": None, "overrides": []}),
                   "class": f"{type(cfg).__module__}.{type(cfg).__name__}",
                   "identity": config_identity(cfg)},
        "machine": machine(devices),
        "versions": versions(),
        "started": _iso(started), "finished": _iso(finished),
        "wall_seconds": wall_seconds(started, finished),
    }


def wall_seconds(started: float, finished: float) -> float:
    """The seconds from `started` to `finished`, to 0.1 s, and to two significant
    digits under 1 s: a run of cached stages alone can take 40 ms, which rounded to 0.1 s
    would read as no time at all (wall_times.json takes only times > 0)."""
    seconds = finished - started
    return round(seconds, 1) if seconds >= 1 else float(f"{seconds:.2g}")


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="seconds")


def collect_benchmark(script, args, *, started: float, finished: float,
                      load_average: tuple, git=_UNSET) -> dict:
    """The provenance of a benchmark's report: as `collect`'s, with `benchmark` (the
    script, relative to the repository where it is in one, and its arguments) in place
    of `config`, and the load average (1, 5 and 15 min) at its start and end, since
    timings depend on what else the machine ran."""
    from ebm_jax import __version__
    from ebm_jax.train.records import versions

    script = Path(script).resolve()
    repo = Path(__file__).resolve().parents[2]
    shown = (script.relative_to(repo).as_posix() if script.is_relative_to(repo)
             else script.as_posix())
    git = git_state() if git is _UNSET else git
    return {
        "package": {"name": "ebm_jax", "version": __version__,
                    "commit": git["commit"] if git else None,
                    "dirty": git["dirty"] if git else None},
        "benchmark": {"script": shown, "args": [str(a) for a in args]},
        "load_average": {"start": [round(float(v), 2) for v in load_average],
                         "end": [round(float(v), 2) for v in os.getloadavg()]},
        "machine": machine(),
        "versions": versions(),
        "started": _iso(started), "finished": _iso(finished),
        "wall_seconds": wall_seconds(started, finished),
    }


def command(p: dict) -> str:
    """What made a result: `CONFIG:VARIANT --config.X=Y ...` for a run,
    `python SCRIPT ARGS` for a benchmark."""
    if "benchmark" in p:
        import shlex

        b = p["benchmark"]
        return shlex.join(["python", b["script"], *b["args"]])
    cfg = p["config"]
    spec = (f"{cfg['file']}:{cfg['variant']}" if cfg.get("file") else "a config from Python")
    return spec + "".join(f" --config.{o}" for o in cfg.get("overrides", []))


def footer(p: dict) -> str:
    """The one-line provenance under a results.md."""
    from ebm_jax.config_catalog import duration

    pkg = p["package"]
    commit = (f" @ {pkg['commit'][:12]}" + (" (modified)" if pkg["dirty"] else "")
              if pkg.get("commit") else " (no git commit)")
    v = p["versions"]
    if "benchmark" in p:
        load = p["load_average"]
        what = f"load average {load['start'][0]:.1f} at the start, {load['end'][0]:.1f} at the end"
    else:
        what = f"config {p['config']['identity']}"
    return (f"{FOOTER_PREFIX} ebm_jax {pkg['version']}{commit} · `{command(p)}` · "
            f"{what} · {machine_text(p['machine'])} · JAX {v.get('jax')}, "
            f"Flax {v.get('flax')} · {p['finished'][:10]} · "
            f"{duration(p['wall_seconds'])}</sub>")


def read(results: dict, where: str) -> dict:
    """The provenance of a results.json's contents; ValueError naming `where` when it
    has none (a run of before provenance was recorded)."""
    meta = results.get("ebm_jax") if isinstance(results, dict) else None
    p = meta.get("provenance") if isinstance(meta, dict) else None
    needed = ("package", "machine", "versions", "wall_seconds")
    source, fields = (("benchmark", ("script", "args")) if isinstance(p, dict)
                      and "benchmark" in p else
                      ("config", ("file", "variant", "overrides", "identity")))
    if not isinstance(p, dict) or not all(k in p for k in (*needed, source)) or not (
            isinstance(p[source], dict) and all(k in p[source] for k in fields)) or (
                source == "benchmark" and not isinstance(p.get("load_average"), dict)):
        raise ValueError(f"{where}: results.json without provenance (ebm_jax.provenance "
                         "with package, config or benchmark, machine, versions); rerun it "
                         "with this version of ebm_jax")
    return p
