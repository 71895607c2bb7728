"""Argument checks shared by the public functions of `ebm_jax.energy`, and the
installed extras (`require_extras`).

Each check raises `ValueError` naming the argument, the value it got and what is
allowed. They run on static (Python) hyperparameters and on concrete arrays at the
public boundary, never inside traced code.
"""

from __future__ import annotations

import math

import numpy as np


def positive(name: str, value) -> float:
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v


def non_negative(name: str, value) -> float:
    v = float(value)
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return v


def int_at_least(name: str, value, low: int) -> int:
    if isinstance(value, bool) or int(value) != value:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if int(value) < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def positive_steps(name: str, value) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(value, dtype=np.float64))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a number or a 1-D sequence of numbers, got {value!r}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be finite and > 0 in every dimension, got {value!r}")
    return arr


def finite_array(name: str, value) -> np.ndarray:
    arr = np.asarray(value)
    if not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{name} must be numeric, got dtype {arr.dtype}")
    bad = ~np.isfinite(arr)
    if bad.any():
        idx = np.argwhere(bad)[0].tolist()
        raise ValueError(
            f"{name} must be finite (no NaN or inf); found {arr[tuple(idx)]} at index {idx}"
        )
    return arr


def same_batch(x_name: str, x, y_name: str, y) -> int:
    nx, ny = np.shape(x)[0], np.shape(y)[0]
    if nx != ny:
        raise ValueError(
            f"{x_name} and {y_name} must have the same batch size (leading dimension), "
            f"got {nx} and {ny}"
        )
    return nx


# --------------------------------------------------------------------------- run inputs


def available_memory_bytes() -> int:
    """Physical memory of this machine (the bound a host-side array must fit in)."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def fits_in_memory(what: str, nbytes: float, *, fraction: float = 0.8,
                   hint: str = "") -> None:
    """Raises ValueError, before anything is computed, when `what` needs more than
    `fraction` of this machine's memory."""
    limit = available_memory_bytes() * fraction
    if not math.isfinite(nbytes) or nbytes > limit:
        raise ValueError(f"{what} needs about {nbytes / 2**30:.1f} GiB, more than the "
                         f"{limit / 2**30:.1f} GiB this machine can give it"
                         + (f"; {hint}" if hint else ""))


def existing_dir(name: str, path) -> None:
    """`path` (a data root) must be an existing directory."""
    from etils import epath

    p = epath.Path(path)
    if not p.exists():
        raise ValueError(f"{name} {p} does not exist")
    if not p.is_dir():
        raise ValueError(f"{name} must be a directory, got the file {p}")


def existing_file(name: str, path) -> None:
    """`path` (a file the user gives, e.g. weights) must be an existing regular file."""
    import os

    if not os.path.exists(path):
        raise ValueError(f"{name} {path} does not exist")
    if not os.path.isfile(path):
        raise ValueError(f"{name} must be a file, got the directory {path}")


def writable_dir(name: str, path) -> None:
    """`path` must be a directory this process can create and write into: checked
    before any training, by writing and removing a probe file."""
    import os
    import tempfile

    from etils import epath

    p = epath.Path(path)
    if "://" in os.fspath(p):
        return  # an object store: checked by its first write
    dangling_link(name, p)
    if p.exists() and not p.is_dir():
        raise ValueError(f"{name} must be a directory, got the file {p}")
    try:
        p.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=os.fspath(p), prefix=".write-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ValueError(f"{name} {p} is not writable ({e.strerror or e})") from None


def path_fits(name: str, path, *, below: int, beside: int = 0) -> None:
    """Raises ValueError, before anything is written, when `path` (a directory the run
    writes into) cannot hold what the run writes: its absolute length plus `below`
    characters of the files written under it passes the system's PC_PATH_MAX, or one
    of its folder names passes PC_NAME_MAX (its last one by `beside` more characters:
    the lock and staging folders named after it, beside it)."""
    import os

    text = os.fspath(path)
    if "://" in text:
        return  # an object store: its own limits, checked by its first write
    full = os.path.abspath(text)
    known = full
    while not os.path.exists(known) and os.path.dirname(known) != known:
        known = os.path.dirname(known)
    try:
        path_max = os.pathconf(known, "PC_PATH_MAX")
        name_max = os.pathconf(known, "PC_NAME_MAX")
    except (OSError, ValueError):
        return  # no limits known here: the first write finds them
    shown = full if len(full) <= 80 else f"{full[:40]}...{full[-30:]}"
    parts = [p for p in full.split(os.sep) if p]
    for i, part in enumerate(parts):
        extra = beside if i == len(parts) - 1 else 0
        size = len(os.fsencode(part))
        if size + extra > name_max:
            what = (f" (with the {extra} more of the lock and staging folders named "
                    "after it)" if extra and size <= name_max else "")
            raise ValueError(f"{name} {shown} has a folder name of {size} characters"
                             f"{what}, more than this file system's limit of "
                             f"{name_max} (PC_NAME_MAX): give a shorter {name}")
    size = len(os.fsencode(full))
    if size + below > path_max - 1:  # PC_PATH_MAX counts the terminating null byte
        raise ValueError(f"{name} {shown} is {size} characters long: with room for the "
                         f"files the run writes below it ({below} characters) it passes "
                         f"this system's limit of {path_max - 1} characters per path "
                         f"(PC_PATH_MAX); give a {name} of at most {path_max - 1 - below} "
                         "characters")


def dangling_link(name: str, path) -> None:
    """Raises ValueError when `path`, or a folder on the way to it, is a symbolic link
    to nothing (a directory cannot be made there)."""
    import os

    p = os.path.abspath(os.fspath(path))
    while True:
        if os.path.islink(p) and not os.path.exists(p):
            target = os.readlink(p)
            where = "" if p == os.path.abspath(os.fspath(path)) else f" (on the way to {path})"
            raise ValueError(f"{name} {p}{where} is a dangling symbolic link to {target}, "
                             "which does not exist: create that directory, or give "
                             f"another {name}")
        parent = os.path.dirname(p)
        if parent == p:
            return
        p = parent


def real_path(path) -> str | None:
    """The absolute path `path` names, symbolic links and `..` resolved (also where
    it does not exist yet); None for an object store (gs://...)."""
    import os

    text = os.fspath(path)
    return None if "://" in text else os.path.realpath(text)


def disjoint_dirs(name_a: str, a, name_b: str, b, why: str = "") -> None:
    """Raises ValueError when directories `a` and `b` are the same or one holds the
    other (compared as real paths: symbolic links and `..` resolved); `why` ends the
    message."""
    import os

    why = f" ({why})" if why else ""
    ra, rb = real_path(a), real_path(b)
    if ra is None or rb is None:
        if os.fspath(a).rstrip("/") == os.fspath(b).rstrip("/"):
            raise ValueError(f"{name_a} and {name_b} must be different directories, "
                             f"both are {a}{why}")
        return
    if ra == rb:
        raise ValueError(f"{name_a} {a} and {name_b} {b} are the same directory ({ra}); "
                         f"give them two separate directories{why}")
    for inner_name, inner, outer_name, outer, r_in, r_out in (
            (name_a, a, name_b, b, ra, rb), (name_b, b, name_a, a, rb, ra)):
        if os.path.commonpath([r_in, r_out]) == r_out:
            raise ValueError(f"{inner_name} {inner} lies inside {outer_name} {outer} "
                             f"({r_in} in {r_out}); give them two separate directories, "
                             f"neither inside the other{why}")


# The optional extras of pyproject.toml and the modules each provides: what a recipe or
# command needs beyond the core install (the library, the 1D experiments, the notebooks).
EXTRAS = {
    "data": ("tensorflow_datasets", "array_record", "grain"),
    "coco": ("pycocotools",),
}


def missing_modules(extras) -> dict[str, list[str]]:
    """{extra: [its modules that are not installed]} for each of `extras` (names of
    `EXTRAS`) that lacks any; checked without importing them."""
    import importlib.util

    missing = {}
    for extra in extras:
        if extra not in EXTRAS:
            raise ValueError(f"unknown extra {extra!r}; the extras are {sorted(EXTRAS)}")
        gone = []
        for module in EXTRAS[extra]:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):  # a broken install counts as missing
                found = False
            if not found:
                gone.append(module)
        if gone:
            missing[extra] = gone
    return missing


def require_extras(what: str, extras) -> None:
    """Raises ValueError, before any work, when `what` (e.g. "the tracking recipe")
    needs an extra of the package that is not installed, naming its missing modules and
    the install command."""
    missing = missing_modules(extras)
    if missing:
        names = ", ".join(f"[{extra}] ({', '.join(mods)} not installed)"
                          for extra, mods in missing.items())
        raise ValueError(f"{what} needs the extra {names}: pip install "
                         f"'ebm_jax[{','.join(missing)}]' (or 'ebm_jax[experiments]' for "
                         "every experiment)")
