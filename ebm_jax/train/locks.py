"""The lock on a work directory (or a results directory): one run at a time, and a
second run stopped at once with a message naming the holder (host, process, command,
start time); a lock left by a dead process on this host is taken over.

    with RunLock(workdir):   # RunLockedError while another live run holds it
        ...
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from etils import epath

from ebm_jax.io import process_alive

class RunLockedError(RuntimeError):
    """Another live run holds the work directory."""


LOCK = ".lock"


class RunLock:
    """An exclusive lock file, `<workdir>/.lock` by default. It appears under its name
    complete (written to a temporary file, then hard-linked; O_EXCL where the file
    system has no hard links), so an empty or garbled lock file is never a live run's.
    A lock left by a process of this host that no longer runs is taken over.

    `RunLock.beside(out, "--out")` locks a directory that is replaced whole (the
    results): its lock is `<parent>/.<name>.lock`, beside it, where the swap leaves it.
    """

    def __init__(self, workdir: epath.Path, *, path=None, what: str = "work directory",
                 option: str = "--workdir"):
        self.directory = epath.Path(workdir)
        self.path = epath.Path(path) if path is not None else self.directory / LOCK
        self.what, self.option = what, option
        self.held = False

    @classmethod
    def beside(cls, directory, option: str = "--out") -> RunLock:
        d = epath.Path(os.path.abspath(os.fspath(directory)))
        return cls(d, path=d.parent / f".{d.name}.lock", what="results directory",
                   option=option)

    def _describe(self, info: dict) -> str:
        return (f"process {info.get('pid')} on {info.get('host')} since "
                f"{info.get('started')} ({info.get('command', '?')})")

    def _create(self, text: str) -> bool:
        """Creates the lock file holding `text`; False if it exists."""
        import tempfile

        target = os.fspath(self.path)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target),
                                   prefix=f"{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            try:
                os.link(tmp, target)
                return True
            except FileExistsError:
                return False
            except OSError:  # no hard links here: exclusive create
                try:
                    fd = os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
                except FileExistsError:
                    return False
                with os.fdopen(fd, "w") as f:
                    f.write(text)
                return True
        finally:
            os.unlink(tmp)

    def _held_by(self) -> dict | None:
        """The holder's record; None when the lock vanished meanwhile. A lock file
        that is not one (a directory, empty, not a record) is a RunLockedError."""
        p = os.fspath(self.path)
        fix = (f"if no other run uses {self.option} {self.directory}, delete it and "
               "rerun")
        if os.path.isdir(p) and not os.path.islink(p):
            raise RunLockedError(f"{self.path} is a directory, not the lock file of "
                                 f"the {self.what} {self.directory}: {fix}")
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            text = f"unreadable ({getattr(e, 'strerror', None) or e})"
        try:
            held = json.loads(text)
        except ValueError:
            held = None
        if not (isinstance(held, dict) and held.get("pid") is not None
                and held.get("host")):
            what = "empty" if not text.strip() else "not a lock record of this project"
            raise RunLockedError(f"lock file {self.path} of the {self.what} "
                                 f"{self.directory} is {what}, so no live run is known "
                                 f"to hold it: {fix}")
        return held

    def acquire(self) -> None:
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                "command": " ".join(sys.argv)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            if self._create(json.dumps(info)):
                self.held = True
                return
            held = self._held_by()
            if held is None:
                continue  # released meanwhile
            if held.get("host") == info["host"] and not process_alive(held.get("pid")):
                self.path.unlink(missing_ok=True)  # its process is gone: stale
                continue
            if self.what == "work directory":
                raise RunLockedError(
                    f"work directory {self.directory} is in use by "
                    f"{self._describe(held)}; wait for that run to end, or use another "
                    f"--workdir (if that run is dead, delete {self.path})")
            raise RunLockedError(
                f"{self.what} {self.directory} is being written by "
                f"{self._describe(held)}; wait for that run to end, or use another "
                f"{self.option} (if that run is dead, delete {self.path})")
        raise RunLockedError(f"could not take the lock {self.path}")

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> bool:
        self.release()
        return False


__all__ = ["LOCK", "RunLock", "RunLockedError", "process_alive"]
