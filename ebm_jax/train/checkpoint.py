"""Orbax checkpoints, one directory per training stage.

    runs/<experiment>/<stage>/checkpoints/<step>/{state,meta}

`StageCheckpoints` keeps the last `keep` checkpoints, saves every `save_every` steps (and
whenever forced, e.g. at the end), writes asynchronously, and is finished before the
process exits (`close`, also on Ctrl-C through the context manager). A step directory
appears under its final name only once it is completely written, so a run killed in
the middle of a save leaves the previous checkpoints as they were.

Each checkpoint holds the `TrainState` and a JSON `meta` (the run's config and the data
position). Restores go into an abstract target with concrete shardings, and are checked
against it first: a checkpoint of another model, or one that cannot be read, raises a
`CheckpointError` that names the directory, the step and the problem.

A later stage loads an earlier stage's final parameters by name with
`load_stage_params(run_dir, stage, target)`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

CHECKPOINTS = "checkpoints"


def _absolute(path) -> epath.Path:
    """An absolute epath (local paths made absolute; gs:// and the like as given)."""
    text = os.fspath(path)
    return epath.Path(text if "://" in text else os.path.abspath(text))


def latest_step(stage_dir) -> int | None:
    """The newest complete checkpoint step of a stage, without opening a manager."""
    d = epath.Path(stage_dir) / CHECKPOINTS
    if not d.is_dir():  # none (or not a directory: `fit` says so in one line)
        return None
    steps = [int(p.name) for p in d.iterdir() if p.name.isdigit()]
    return max(steps) if steps else None


class CheckpointError(RuntimeError):
    """A checkpoint exists but cannot be used (another model, corrupted, truncated)."""


def abstract_like(tree, sharding=None):
    """ShapeDtypeStructs of `tree` with concrete shardings (each array's own, or
    `sharding` for all) -- the target of a restore."""

    def leaf(x):
        s = sharding if sharding is not None else getattr(x, "sharding", None)
        return jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=s)

    return jax.tree.map(leaf, tree)


def _keystr(path) -> str:
    return jax.tree_util.keystr(path, simple=True, separator=".")


def _check_against_metadata(directory: Path, step: int, target, stored) -> None:
    """Raises CheckpointError if the stored arrays do not match the target's leaves."""
    want = {_keystr(p): x for p, x in jax.tree_util.tree_leaves_with_path(target)}
    have = {}
    for p, m in jax.tree_util.tree_leaves_with_path(stored):
        if hasattr(m, "shape"):
            have[_keystr(p)] = m
    where = f"checkpoint {directory}/{step}"
    missing = sorted(set(want) - set(have))
    extra = sorted(set(have) - set(want))
    if missing or extra:
        raise CheckpointError(
            f"{where} holds a different state structure: missing {missing[:5]}, "
            f"unexpected {extra[:5]} (is it from another model or experiment?)"
        )
    for name, x in want.items():
        m = have[name]
        if tuple(m.shape) != tuple(x.shape) or np.dtype(m.dtype) != np.dtype(x.dtype):
            raise CheckpointError(
                f"{where}: '{name}' has shape {tuple(m.shape)} {np.dtype(m.dtype)} in the "
                f"checkpoint but {tuple(x.shape)} {np.dtype(x.dtype)} in this model "
                "(is it from a model of another shape?)"
            )


class StageCheckpoints:
    """Checkpoints of one stage under `<stage_dir>/checkpoints`."""

    def __init__(self, stage_dir: str | os.PathLike, *, save_every: int, keep: int = 3,
                 asynchronous: bool = True):
        if int(save_every) < 1:
            raise ValueError(f"save_every must be >= 1, got {save_every}")
        if int(keep) < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.directory = _absolute(stage_dir) / CHECKPOINTS
        if self.directory.exists() and not self.directory.is_dir():
            raise CheckpointError(f"{self.directory} must be a directory of checkpoints, "
                                  "but it is a file; move it away or rerun with --restart")
        options = ocp.CheckpointManagerOptions(
            max_to_keep=int(keep),
            save_interval_steps=int(save_every),
            enable_async_checkpointing=asynchronous,
            cleanup_tmp_directories=True,  # leftovers of a save that was killed
        )
        self._manager = ocp.CheckpointManager(
            self.directory,
            options=options,
            item_handlers={
                "state": ocp.StandardCheckpointHandler(),
                "meta": ocp.JsonCheckpointHandler(),
            },
        )

    # -- queries
    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    # -- writing
    def save(self, step: int, state, meta: dict, *, force: bool = False) -> bool:
        """Saves when `step` is a multiple of save_every (or `force`); returns whether a
        save was started. Asynchronous: call `wait()` or `close()` to finish it. A save
        that fails (disk full, a path too long) raises a one-line CheckpointError."""
        self.wait()  # the previous save (orbax waits for it anyway): its failure
        self._saving = int(step)  # names its own step
        try:
            return self._manager.save(
                int(step),
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)
                ),
                force=force,
            )
        except Exception as e:  # noqa: BLE001 - re-raised as one line naming the step
            raise self._unwritable(e) from None

    def wait(self) -> None:
        try:
            self._manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001
            raise self._unwritable(e) from None

    def close(self) -> None:
        """Finishes a save under way and closes; a failed save is a CheckpointError
        (and closing then raises it once, not twice)."""
        try:
            self.wait()
        except CheckpointError:
            try:
                self._manager.close()
            except Exception:  # noqa: BLE001 - the same failure, already reported
                pass
            raise
        try:
            self._manager.close()
        except Exception as e:  # noqa: BLE001
            raise self._unwritable(e) from None

    def _unwritable(self, error: BaseException) -> CheckpointError:
        """One line: the operating system's reason and what to do first (where it is
        a full disk or a path too long), then the checkpoint being written."""
        step = getattr(self, "_saving", None)
        where = f"{self.directory}/{step}" if step is not None else str(self.directory)
        return CheckpointError(_cause(error, self.directory, where))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- reading
    def read_meta(self, step: int | None = None) -> dict:
        step = self._resolve(step)
        try:
            out = self._manager.restore(
                step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())
            )
        except Exception as e:  # noqa: BLE001 - re-raised with the directory named
            raise self._unreadable(step, e) from e
        return dict(out.meta)

    def restore(self, target, step: int | None = None) -> tuple[Any, dict]:
        """(state, meta) of `step` (default: the latest), restored into `target`: a
        state of the right structure, or its `abstract_like`, whose shardings are used."""
        step = self._resolve(step)
        abstract = abstract_like(target)  # also keeps ShapeDtypeStructs as they are
        try:
            stored = self._manager.item_metadata(step)["state"]
        except Exception as e:  # noqa: BLE001
            raise self._unreadable(step, e) from e
        if stored is None:
            raise self._unreadable(step, FileNotFoundError("no state metadata"))
        _check_against_metadata(self.directory, step, abstract, stored)
        try:
            out = self._manager.restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()
                ),
            )
        except Exception as e:  # noqa: BLE001
            raise self._unreadable(step, e) from e
        return out.state, dict(out.meta)

    def _resolve(self, step):
        if step is None:
            step = self.latest_step()
            if step is None:
                raise FileNotFoundError(f"no checkpoint in {self.directory}")
        if int(step) not in self._manager.all_steps():
            raise FileNotFoundError(
                f"no checkpoint of step {step} in {self.directory}; have {self.all_steps()}"
            )
        return int(step)

    def _unreadable(self, step, error) -> CheckpointError:
        detail = " ".join(str(error).split())[:300]  # one line, however long the spec
        return CheckpointError(
            f"checkpoint {self.directory}/{step} cannot be read (corrupted or truncated?): "
            f"{type(error).__name__}: {detail}. Remove that directory to resume "
            "from an earlier checkpoint, or start over with --restart."
        )


def _os_error(error: BaseException) -> tuple[int, str, str | None] | None:
    """(errno, strerror, file name) of the operating-system error inside `error`: an
    OSError in its chain (orbax wraps it), or the code TensorStore writes at the end of
    its message (`[os_error_code='28']`); None where there is none."""
    import errno
    import re

    seen, e = set(), error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno is not None:
            name = e.filename if isinstance(e.filename, str) else None
            return e.errno, e.strerror or os.strerror(e.errno), name
        found = re.search(r"os_error_code='?(\d+)", str(e))
        if found:
            code = int(found.group(1))
            return code, os.strerror(code), None
        for code in (errno.ENOSPC, errno.EDQUOT, errno.ENAMETOOLONG):
            if os.strerror(code) in str(e):
                return code, os.strerror(code), None
        e = e.__cause__ or e.__context__
    return None


def _cause(error: BaseException, directory, where: str) -> str:
    """The message of a failed checkpoint write at `where` (under `directory`): a full
    disk or a path too long says so first, with the fix; another operating-system
    error is named with its code; else the error's first line."""
    import errno

    found = _os_error(error)
    if found is None:
        first = (str(error).strip().splitlines() or [""])[0][:300]
        return f"could not write checkpoint {where}: {type(error).__name__}: {first}"
    code, text, name = found
    tag = f"[{errno.errorcode.get(code, code)}]"
    if code in (errno.ENOSPC, errno.EDQUOT):
        return (f"{text[0].lower()}{text[1:]} at {directory}: free some space, or use a "
                f"--workdir on another disk (while writing checkpoint {where}) {tag}")
    if code == errno.ENAMETOOLONG:
        length = f" ({len(name)} characters)" if name else ""
        return (f"path too long at {directory}{length}: use a shorter --workdir (while "
                f"writing checkpoint {where}) {tag}")
    return f"could not write checkpoint {where}: {text} {tag}" + (
        f" ({name})" if name else "")


def load_stage_params(run_dir: str | os.PathLike, stage: str, target, *,
                      field: str = "params"):
    """The final `params` of an earlier stage of the same run, restored into `target`
    (the params of a freshly built model, or their `abstract_like`). `field="rest"`
    loads the non-trainable state instead (batch statistics, queues). A target of
    another architecture raises `CheckpointError` naming the first differing leaf."""
    if field not in ("params", "rest"):
        raise ValueError(f"field must be 'params' or 'rest', got {field!r}")
    stage_dir = epath.Path(run_dir) / stage
    ckpt = StageCheckpoints(stage_dir, save_every=1, asynchronous=False)
    try:
        step = ckpt.latest_step()
        if step is None:
            raise FileNotFoundError(f"stage {stage!r} has no checkpoints in {stage_dir}")
        abstract = target if _is_abstract(target) else abstract_like(target)
        item_dir = ckpt.directory / str(step) / "state"
        with ocp.PyTreeCheckpointer() as reader:
            try:
                stored = reader.metadata(item_dir).item_metadata.tree[field]
            except Exception as e:  # noqa: BLE001
                raise ckpt._unreadable(step, e) from e
            _check_against_metadata(ckpt.directory, step, abstract, stored)
            try:
                out = reader.restore(item_dir, args=ocp.args.PyTreeRestore(
                    item={field: abstract},
                    restore_args={field: jax.tree.map(
                        lambda x: ocp.ArrayRestoreArgs(sharding=x.sharding), abstract)},
                    partial_restore=True,
                ))
            except Exception as e:  # noqa: BLE001
                raise ckpt._unreadable(step, e) from e
        return out[field]
    finally:
        ckpt.close()


def _is_abstract(tree) -> bool:
    return all(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(tree))
