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
from pathlib import Path

from etils import epath


class CorruptFileError(ValueError):
    """A file the run needs exists but cannot be read."""


def process_alive(pid) -> bool:
    """Whether process `pid` runs on this host (False for a pid that is not one)."""
    try:
        if int(pid) <= 0:  # 0 and -n name process groups, not a process
            return False
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError, TypeError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def partial_dir(dest) -> Path:
    """A fresh sibling directory of `dest` to write it into before renaming it into
    place: `.<name>.<host>.<pid>.<random>.partial`. Those of earlier attempts on this
    host whose process is gone (a run killed mid-write) are removed first, so a
    resumed run leaves no leftovers; another live process's is left alone."""
    import shutil
    import socket

    dest = Path(dest)
    host = socket.gethostname().replace(".", "_")
    for old in dest.parent.glob(f".{dest.name}.*.partial"):
        parts = old.name[len(dest.name) + 2:].split(".")
        if len(parts) >= 3 and parts[0] == host and not process_alive(parts[1]):
            shutil.rmtree(old, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.{host}.{os.getpid()}.",
                                 suffix=".partial"))


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


def json_normalised(obj):
    """`obj` as JSON gives it back (tuples become lists, keys strings, values JSON
    cannot hold their `str`; keys sorted)."""
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def content_hash(obj, digits: int = 16) -> str:
    """`digits` hex digits of the SHA-256 of a JSON-able object, the one hash of
    settings and identities (a stage's directory is `<name>-<content_hash(identity,
    8)>`): of its JSON text with keys sorted, after `json_normalised`, so that a tuple
    and a list, or the key 2 and "2", hash alike, and the keys of a mapping sort as
    the strings JSON writes them."""
    import hashlib

    text = json.dumps(json_normalised(obj), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:digits]


def file_digests(paths, *, cache=None) -> list[str]:
    """The SHA-256 (hex) of each local file's bytes, what a stage's identity records of
    files it reads (with their names, never their paths). With `cache` (a JSON file), a
    file whose size and modification time are those it had when hashed is not read
    again; the cache is updated atomically, and one that cannot be read counts as
    empty. A file modified in the last 2 s is hashed but not cached (a second change
    within the clock's tick would keep its size and time). A file that cannot be read
    raises OSError."""
    import hashlib
    import time

    entries: dict = {}
    if cache is not None and os.path.isfile(cache):
        try:
            with open(cache) as f:
                loaded = json.load(f)
            entries = loaded["files"] if isinstance(loaded.get("files"), dict) else {}
        except (OSError, ValueError, AttributeError, KeyError):
            entries = {}
    out, changed = [], False
    for p in paths:
        key = os.path.abspath(os.fspath(p))
        st = os.stat(key)
        stamp = [st.st_size, st.st_mtime_ns]
        known = entries.get(key)
        if isinstance(known, list) and len(known) == 3 and known[:2] == stamp:
            out.append(str(known[2]))
            continue
        with open(key, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        if time.time_ns() - st.st_mtime_ns > 2_000_000_000:
            entries[key] = [*stamp, digest]
            changed = True
        out.append(digest)
    if cache is not None and changed:
        atomic_write(cache, json.dumps({"files": entries}, separators=(",", ":")))
    return out


# the end of a complete file: JPEG's end-of-image marker, PNG's IEND chunk; looked for
# in the file's last bytes (a few encoders pad after it), without decoding
_END_MARKERS = {"JPEG": b"\xff\xd9", "PNG": b"IEND\xaeB`\x82"}
_END_TAIL = 1024


def image_cut_short(f, image_format: str | None) -> bool:
    """True when the open binary file `f` is a JPEG or PNG (`image_format` as PIL names
    it) whose end marker is missing from its last bytes: a file cut short, its header
    intact and its data truncated, which opening the header alone does not notice."""
    marker = _END_MARKERS.get(image_format or "")
    if marker is None:
        return False
    size = f.seek(0, os.SEEK_END)
    f.seek(max(0, size - _END_TAIL))
    return marker not in f.read()
