"""Writing results so that a failed or interrupted run never leaves a half-written file:
every file is written to a temporary name in the same directory and renamed."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, text: str) -> None:
    """Writes a file so that it is either the old or the complete new version."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_savefig(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110, bbox_inches="tight")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_report(out_dir: Path, stem: str, payload: dict, markdown: str) -> None:
    """`<out_dir>/<stem>.json` and `<stem>.md`, each written atomically."""
    import json

    out_dir = Path(out_dir)
    atomic_write(out_dir / f"{stem}.json", json.dumps(payload, indent=2) + "\n")
    atomic_write(out_dir / f"{stem}.md", markdown)
