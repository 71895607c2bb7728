"""Writing a run's results directory (see `ebm_jax.report`)."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable

from etils import epath

from ebm_jax.io import atomic_savefig, atomic_write, is_local, read_json

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


def _ours(out: epath.Path) -> dict | None:
    """The manifest of the results in `out`, None where it holds none of this
    project's."""
    path = out / MANIFEST
    if not path.is_file():
        return None
    try:
        data = read_json(path, what="results file")
    except ValueError:
        return None
    ok = isinstance(data, dict) and isinstance(data.get("ebm_jax"), dict)
    return data if ok else None


def _not_written(out: epath.Path, manifest: dict) -> list[str]:
    """What `out` holds that the run of `manifest` did not write: anything but the
    files its manifest lists (results written before it listed them: results.json,
    results.md and the PNG figures beside them) and their folders."""
    found = out_contents(out) if is_local(out) else {p.name: (0,) for p in out.iterdir()}
    listed = manifest["ebm_jax"].get("files")
    if isinstance(listed, list) and all(isinstance(f, str) for f in listed):
        files = set(listed)
    else:
        files = {MANIFEST, "results.md"} | {k for k, v in found.items()
                                             if v and "/" not in k and k.endswith(".png")}
    folders = {os.path.dirname(f) for f in files} - {""}
    folders |= {os.path.dirname(d) for d in folders} - {""}
    return sorted(k for k, v in found.items()
                  if (k not in files if v else k not in folders))


def check_out(out) -> epath.Path:
    """`--out` must be new, empty, or a results directory this project wrote (which
    the new results then replace whole) holding nothing else: a file no run wrote (a
    user's notes) is refused. Checked before training. Returns the directory to write:
    a symbolic link is resolved (the results replace what it points to, and the link
    stays); a dangling one is refused."""
    from ebm_jax.checks import dangling_link, real_path, writable_dir

    out = epath.Path(out)
    if is_local(out):
        dangling_link("--out", out)
        out = epath.Path(real_path(out))
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out must be a directory, got the file {out}")
    if out.exists() and any(out.iterdir()):
        manifest = _ours(out)
        if manifest is None:
            raise ValueError(f"--out {out} is not empty and holds no {MANIFEST} of an "
                             "earlier run: choose a new or empty directory (nothing "
                             "there is overwritten)")
        if foreign := _not_written(out, manifest):
            raise ValueError(f"--out {out} holds {_names(foreign)}, which no run wrote, "
                             "beside the earlier results that the new ones replace "
                             "whole: move it out of the directory, or choose another "
                             "--out (nothing there is overwritten)")
    writable_dir("--out", out.parent if not out.exists() else out)
    return out


def out_contents(out) -> dict[str, tuple]:
    """What `out` holds: {relative path: (size, mtime_ns)} of its files and
    {relative path: ()} of its folders; {} where it does not exist. Taken at the
    start of a run and compared before the results replace `out`."""
    root = os.fspath(out)
    found: dict[str, tuple] = {}
    if not is_local(out) or not os.path.isdir(root):
        return found
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            found[os.path.relpath(os.path.join(dirpath, name), root)] = ()
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            found[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
    return found


def _unknown(out, expected: dict) -> list[str]:
    """What `out` holds now that it did not hold (or held otherwise) in `expected`."""
    return sorted(k for k, v in out_contents(out).items() if expected.get(k) != v)


def _siblings(out: epath.Path, kind: str) -> list[tuple[epath.Path, int]]:
    """The staging folders `.<out>.<kind>-PID` beside `out`, with their pids."""
    prefix = f".{out.name}.{kind}-"
    found = []
    if out.parent.is_dir():
        for p in out.parent.iterdir():
            if p.name.startswith(prefix) and p.name[len(prefix):].isdigit():
                found.append((p, int(p.name[len(prefix):])))
    return found


def clean_stale(out, log=print) -> None:
    """Removes what an interrupted `write_results` left beside `out` (a kill while
    the results were written or swapped): the staged `.<out>.new-PID` folders of
    processes that no longer run on this host, and their `.<out>.old-PID` folders,
    which are the earlier results: put back where `out` is missing, else removed.
    Call it holding the lock on `out` (`RunLock.beside`)."""
    from ebm_jax.io import process_alive

    out = epath.Path(out)
    if not is_local(out):
        return
    for kind in ("old", "new"):
        for path, pid in _siblings(out, kind):
            if pid == os.getpid() or process_alive(pid):
                continue
            if kind == "old" and not out.exists():
                os.replace(os.fspath(path), os.fspath(out))
                log(f"put back the earlier results in {out} (their replacement by "
                    f"process {pid} was interrupted)")
            else:
                if os.path.isdir(path) and not os.path.islink(path):
                    path.rmtree()
                else:
                    path.unlink()
                log(f"removed {path}, left by the interrupted process {pid}")


class OutChangedError(RuntimeError):
    """`--out` received files during the run: they are kept, and so are the new
    results, under another name."""


def write_results(out, report: Report, meta: dict, log=print,
                  expected: dict | None = None) -> epath.Path:
    """Writes `report` as `<out>/results.{json,md}` and its PNG figures. An earlier
    run's results in `out` are replaced whole (and the log says so).

    `expected` is `out_contents(out)` at the start of the run: where `out` holds
    files since then (new or changed), nothing of it is deleted; the new results go
    to `<out>.new-<time>` instead and `OutChangedError` names both."""
    import matplotlib.pyplot as plt

    out = epath.Path(out)
    local = is_local(out)
    if local:
        out = epath.Path(os.path.realpath(os.fspath(out)))
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
        # what this run wrote: a later run replaces these, and refuses anything else
        files = sorted({MANIFEST, "results.md", *report.figures})
        payload = {"ebm_jax": {**meta, "files": files}, **report.payload}
        atomic_write(stage / "results.md", markdown)
        atomic_write(stage / MANIFEST, json.dumps(payload, indent=2, default=_json) + "\n")
        if local and stage != out:
            if expected is not None and (new := _unknown(out, expected)):
                kept = _keep_aside(stage, out)
                raise OutChangedError(
                    f"--out {out} received files during the run ({_names(new)}), so "
                    f"it is left as it is and the new results are in {kept}; move what "
                    "you need and delete the other, or rerun (finished stages are "
                    "reused)")
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            if out.exists():
                os.replace(os.fspath(out), os.fspath(old))
            os.replace(os.fspath(stage), os.fspath(out))
            if old.exists():
                if expected is not None and (new := _unknown(old, expected)):
                    kept = _keep_aside(old, out, "old")  # written in the last instant
                    log(f"--out {out} received files while the results were swapped "
                        f"in ({_names(new)}): the earlier contents are kept in {kept}")
                else:
                    old.rmtree()
    except BaseException:
        if local and stage.exists() and stage != out:
            stage.rmtree()
        raise
    if replacing:
        log(f"replaced the earlier results in {out}")
    return out


def _names(paths: list[str], most: int = 5) -> str:
    more = f" and {len(paths) - most} more" if len(paths) > most else ""
    return ", ".join(paths[:most]) + more


def _keep_aside(folder: epath.Path, out: epath.Path, kind: str = "new") -> epath.Path:
    """Renames `folder` to a visible, unused `<out>.<kind>-<time>` beside `out`."""
    import time

    base = f"{out.name}.{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
    target, n = out.parent / base, 1
    while target.exists():
        n += 1
        target = out.parent / f"{base}-{n}"
    os.replace(os.fspath(folder), os.fspath(target))
    return target


def _json(obj):
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)
