"""The shipped experiment configs as a catalogue: the config files under a root, each
one's description and variants (`describe`), and their measured wall times
(`experiments/wall_times.json`: `wall_times`, `wall_time_text`), as `ebm-jax list`
prints them; `duration` writes seconds as a person reads them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ebm_jax.config import CONFIG_ROOT, ConfigError, load_module

def find_configs(root: str | Path = CONFIG_ROOT) -> list[Path]:
    root = Path(root)
    return sorted(p for p in root.rglob("*.py") if p.name != "__init__.py")


# the measured wall times of the configs' variants, a JSON file beside them:
# {config path under the root: {variant: [entry, ...]}}, an entry {"seconds": s or
# [low, high], "machine": ..., "date": ..., "how": the command or page it comes from}
# (`benchmarks/wall_times.py` measures and writes the tiny ones)
WALL_TIMES = "wall_times.json"


def duration(seconds: float) -> str:
    """A duration as a person reads it: 45 s, 12 min, 2.3 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def wall_times(root: str | Path = CONFIG_ROOT) -> dict:
    """The measured wall times under `root` ({} where the file is missing); a file
    that is not of the form above is one ConfigError naming it."""
    import json

    path = Path(root) / WALL_TIMES
    if not path.exists():
        return {}
    if not path.is_file():
        raise ConfigError(f"{path}: not a file (the measured wall times are a JSON file)")
    try:
        data = json.loads(path.read_text())
        for variants in data.values():
            for entries in variants.values():
                for e in entries:
                    seconds = e["seconds"]
                    seconds = seconds if isinstance(seconds, list) else [seconds]
                    if not (1 <= len(seconds) <= 2 and all(
                            _is_wall_time(v) for v in seconds)
                            and seconds == sorted(set(seconds))
                            and isinstance(e["machine"], str)
                            and _is_count(e.get("reused_stages", 1))):
                        raise ValueError(
                            f"bad entry {e!r}: seconds must be a number in (0, "
                            f"{MAX_WALL_SECONDS:g}] or an increasing [low, high] of two, "
                            "reused_stages (where given) an integer >= 1")
    except (ValueError, KeyError, TypeError, AttributeError, OSError,
            RecursionError) as e:
        text = " ".join(str(e).split())
        raise ConfigError(f"{path}: not a file of measured wall times ({text[:300]})") from None
    return data


MAX_WALL_SECONDS = 1e7  # about 4 months: a larger figure is no run's wall time


def _is_wall_time(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) and 0 < v <= MAX_WALL_SECONDS)


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def wall_time_text(entries: list) -> str:
    """The entries of one variant: "35-40 min (2 CPU cores); 3 min (one H100)"; a run
    that reused finished stages is a lower bound: "over 5 min (2 CPU cores; reused 3
    finished stages)"."""
    out = []
    for e in entries:
        s = e["seconds"] if isinstance(e["seconds"], list) else [e["seconds"]]
        if e.get("reused_stages"):
            out.append(f"over {duration_range(s[0], s[-1])} ({e['machine']}; reused "
                       f"{e['reused_stages']} finished stage(s))")
        else:
            out.append(f"{duration_range(s[0], s[-1])} ({e['machine']})")
    return "; ".join(out)


def duration_range(low: float, high: float) -> str:
    """Two durations as one range: "35-40 min", "5 min - 2.0 h", or one "12 min"."""
    lo, hi = duration(low).split(" "), duration(high).split(" ")
    if lo == hi:
        return " ".join(lo)
    return f"{lo[0]}-{' '.join(hi)}" if lo[1] == hi[1] else f"{' '.join(lo)} - {' '.join(hi)}"


def describe(path: Path) -> tuple[str, tuple[str, ...]]:
    """(one-line purpose, variants) of a config file, without running its recipe."""
    module = load_module(path)
    doc = (module.__doc__ or "").strip().splitlines()
    lines = [ln.strip() for ln in doc if not ln.strip().startswith("ebm-jax ")]
    while lines and not lines[0]:
        lines.pop(0)
    paragraph = lines[:lines.index("")] if "" in lines else lines
    return " ".join(paragraph), tuple(module.VARIANTS)


