"""Writing a run's results directory (see `ebm_jax.report`)."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable

from etils import epath

from ebm_jax.io import atomic_savefig, atomic_write, read_json

MANIFEST = "results.json"


@dataclasses.dataclass
class Report:
    """What a recipe returns: the tables as JSON-able records, their Markdown, and the
    figures as `{file name: make_figure}`, callables returning a matplotlib Figure."""

    payload: dict
    markdown: str
    figures: dict[str, Callable] = dataclasses.field(default_factory=dict)

    def tables(self) -> dict:
        return self.payload.get("tables", {})


def _ours(out: epath.Path) -> bool:
    path = out / MANIFEST
    if not path.is_file():
        return False
    try:
        data = read_json(path, what="results file")
    except ValueError:
        return False
    return isinstance(data, dict) and "ebm_jax" in data


def check_out(out) -> epath.Path:
    """`--out` must be new, empty, or a results directory this project wrote (which
    the new results then replace whole). Checked before training."""
    from ebm_jax.checks import writable_dir

    out = epath.Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out must be a directory, got the file {out}")
    if out.exists() and any(out.iterdir()) and not _ours(out):
        raise ValueError(f"--out {out} is not empty and holds no {MANIFEST} of an "
                         "earlier run: choose a new or empty directory (nothing there "
                         "is overwritten)")
    writable_dir("--out", out.parent if not out.exists() else out)
    return out


def write_results(out, report: Report, meta: dict, log=print) -> epath.Path:
    """Writes `report` as `<out>/results.{json,md}` and its PNG figures. An earlier
    run's results in `out` are replaced whole (and the log says so)."""
    import matplotlib.pyplot as plt

    out = epath.Path(out)
    local = "://" not in os.fspath(out)
    replacing = out.exists() and any(out.iterdir())
    stage = out.parent / f".{out.name}.new-{os.getpid()}" if local else out
    if stage.exists():
        stage.rmtree()
    stage.mkdir(parents=True, exist_ok=True)
    try:
        markdown = report.markdown
        for name, draw in report.figures.items():
            fig = draw()
            atomic_savefig(fig, stage / name)
            plt.close(fig)
        payload = {"ebm_jax": meta, **report.payload}
        atomic_write(stage / "results.md", markdown)
        atomic_write(stage / MANIFEST, json.dumps(payload, indent=2, default=_json) + "\n")
        if local and stage != out:
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            if out.exists():
                os.replace(os.fspath(out), os.fspath(old))
            os.replace(os.fspath(stage), os.fspath(out))
            if old.exists():
                old.rmtree()
    except BaseException:
        if local and stage.exists() and stage != out:
            stage.rmtree()
        raise
    if replacing:
        log(f"replaced the earlier results in {out}")
    return out


def _json(obj):
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)
