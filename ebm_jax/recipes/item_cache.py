"""The one per-item resumable cache of the recipes: one file per item (a tracked
sequence, a sequence's TOP proposals) in a stage directory, written whole, so that a
stopped computation resumes at the first item without one.

    <stage dir>/identity.json       what the cached items are of
    <stage dir>[/<folder>]/<item>   one file per item

`--restart` clears the folder the first time a run meets it. A file that cannot be read
or is not what it should be is computed again, with one warning line; a stale file
(the item changed) is computed again silently.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from typing import Any

from ebm_jax.io import CorruptFileError, atomic_write

# what an item file holding numbers records about them: all of their digits (JSON's
# shortest round-trip form of a float64), so that an item read back equals the one
# computed, bit for bit, and a resumed run equals an uninterrupted one; a file without
# it (rounded to 4 decimals by an earlier version) is stale: computed again
FULL_PRECISION = "float64"


class ItemCache:
    """Items of one stage: `load(name, read)` the cached one (or None), `save(name,
    content)` a new one. `read(path)` returns the item, None when it is stale, or raises
    `CorruptFileError` (its message is the warning) or any other error (reported as an
    unreadable file)."""

    def __init__(self, ctx, stage_dir, identity: dict, *, folder: str | None = None,
                 what: str = "cached result"):
        self.ctx, self.what = ctx, what
        self.dir = stage_dir / folder if folder else stage_dir
        if ctx.should_restart(self.dir) and self.dir.exists():
            shutil.rmtree(self.dir)
        if ctx.writer:
            self.dir.mkdir(parents=True, exist_ok=True)
            atomic_write(stage_dir / "identity.json", json.dumps(identity, indent=1) + "\n")

    def path(self, name: str):
        """The file of item `name`, in this cache's folder: `name` is one file name
        (no separator, not absolute, not "." or ".."), so that no item is read from or
        written to another folder (a sequence named by a path)."""
        if (not name or name in (".", "..") or "/" in name or "\\" in name
                or os.path.isabs(name)):
            raise ValueError(f"{self.what} {name!r}: the item's name must be one file "
                             f"name inside {self.dir} (no path)")
        return self.dir / name

    def load(self, name: str, read: Callable[[Any], Any]):
        path = self.path(name)
        if not path.exists():
            return None
        try:
            return read(path)
        except CorruptFileError as error:
            self.ctx.log(f"warning: {error}")
        except Exception as error:  # noqa: BLE001 (any unreadable file is computed again)
            self.ctx.log(f"warning: {self.what} {path} is not readable ({error}); "
                         "computing it again")
        return None

    def save(self, name: str, content: str | bytes) -> None:
        if self.ctx.writer:
            atomic_write(self.path(name), content)
