"""Files written so that a failed or interrupted run never leaves a half-written one,
and files read so that a corrupt one gives one line naming it.

Paths go through `etils.epath`, so `gs://bucket/run` works where its backend is
installed; a local file is written to a temporary name in the same directory and
renamed (atomic), with the permissions of the user's umask; an object store's writes
are atomic per object.
"""

from __future__ import annotations

import json
import os
import tempfile

from etils import epath


class CorruptFileError(ValueError):
    """A file the run needs exists but cannot be read."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def is_local(path) -> bool:
    return "://" not in os.fspath(path)


def _atomic_local(path: epath.Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.fspath(path.parent), prefix=f".{path.name}.",
                               suffix=".tmp")
    try:
        os.close(fd)
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600
        os.replace(tmp, os.fspath(path))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write(path, text: str | bytes) -> None:
    """Writes a file (text, or bytes) so that it is either the old or the complete new
    version."""
    path = epath.Path(path)
    binary = isinstance(text, bytes)
    if not is_local(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text) if binary else path.write_text(text)
        return

    def write(tmp):
        with open(tmp, "wb" if binary else "w") as f:
            f.write(text)

    _atomic_local(path, write)


def atomic_savefig(fig, path) -> None:
    """A matplotlib figure as PNG, written atomically."""
    path = epath.Path(path)
    if not is_local(path):
        import io

        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(buf.getvalue())
        return
    _atomic_local(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110,
                                                bbox_inches="tight"))


def read_json(path, *, what: str = "file", fix: str = "delete it or rerun with --restart"):
    """The JSON content of `path`; a file that is not valid JSON raises
    CorruptFileError naming it, what it is and what to do."""
    path = epath.Path(path)
    try:
        text = path.read_text()
    except UnicodeDecodeError as e:
        raise CorruptFileError(f"{what} {path} is not text ({e}); {fix}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CorruptFileError(f"{what} {path} is not valid JSON (line {e.lineno}: "
                               f"{e.msg}); {fix}") from None


def write_report(out_dir, stem: str, payload: dict, markdown: str) -> None:
    """`<out_dir>/<stem>.json` and `<stem>.md`, each written atomically."""
    out_dir = epath.Path(out_dir)
    atomic_write(out_dir / f"{stem}.json", json.dumps(payload, indent=2) + "\n")
    atomic_write(out_dir / f"{stem}.md", markdown)
