"""The rules a tracking sequence's files must satisfy, checked by the readers of
`ebm_jax.data.sequences` when a set is opened: numbered frames without gaps, readable
frames of one size and not cut short, annotation tables of one row per frame, label
ranges and their consistency, boxes and points against the frame. Each failure is one
`SequenceError` naming the root, sequence, frame (1-based) and rule.

Boxes are `(x, y, w, h)` in 1-indexed pixel coordinates (the GOT-10k / OTB convention):
a box covers [x, x + w) x [y, y + h), the frame [1, W + 1) x [1, H + 1).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
from PIL import Image

from ebm_jax.io import image_cut_short

FRAME_FILE = re.compile(r"^(\d+)\.(jpg|jpeg|png)$", re.IGNORECASE)
_SEPARATORS = re.compile(r"[,\s]+")


class SequenceError(ValueError):
    """A tracking set that cannot be used as it is; the message names the root, the
    sequence, the frame or file, and the rule that failed."""


def expand_root(root) -> Path:
    return Path(os.path.expanduser(os.fspath(root))).absolute()


def check_choice(name: str, value, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise SequenceError(f"{name} must be one of {allowed}, got {value!r}")


def list_frames(where: str, folder: Path, start: int | None) -> list[Path]:
    """Numbered image files of `folder`, sorted; the numbering must be contiguous (from
    `start` when given)."""
    numbered: dict[int, Path] = {}
    for entry in os.scandir(folder):
        match = FRAME_FILE.match(entry.name)
        if match and entry.is_file():
            k = int(match.group(1))
            if k in numbered:
                raise SequenceError(f"{where}, frame {k}: two files ({numbered[k].name}, "
                                    f"{entry.name}); rule: one image file per frame")
            numbered[k] = folder / entry.name
    if not numbered:
        raise SequenceError(f"{where}: no frames (numbered .jpg/.png files) in {folder}; "
                            "rule: a sequence has at least one frame")
    numbers = sorted(numbered)
    first = numbers[0] if start is None else start
    expected = np.arange(first, first + len(numbers))
    if not np.array_equal(numbers, expected):
        gap = int(expected[np.argmax(np.asarray(numbers) != expected)])
        raise SequenceError(f"{where}, frame {gap}: the frame file is missing in {folder} "
                            f"(files run {numbers[0]}..{numbers[-1]}); rule: frames are "
                            f"numbered {first}, {first + 1}, ... without gaps")
    return [numbered[k] for k in numbers]


def read_text(path: Path, where: str | None = None) -> str:
    """A dataset's text file (list.txt, an annotation), one SequenceError naming it
    where it cannot be read or is not UTF-8 text."""
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise SequenceError(f"{where or path}: cannot read {path} ({error})") from None


def read_table(where: str, path: Path, columns: int) -> np.ndarray:
    """Rows of `columns` numbers separated by commas, tabs or spaces; errors name the
    line."""
    lines = read_text(path, where).strip().splitlines()
    rows = np.empty((len(lines), columns), np.float64)
    for j, line in enumerate(lines):
        fields = [f for f in _SEPARATORS.split(line.strip()) if f]
        try:
            if len(fields) != columns:
                raise ValueError(f"{len(fields)} fields")
            rows[j] = [float(f) for f in fields]
        except ValueError as error:
            raise SequenceError(f"{where}: {path.name} line {j + 1} ({line.strip()!r}) "
                                f"does not parse ({error}); rule: {columns} numbers per "
                                "line separated by commas, tabs or spaces") from error
    return rows


def read_label(where: str, path: Path, n: int, *, columns: int = 1, low=None, high=None,
                integer: bool = False) -> np.ndarray | None:
    if not path.is_file():
        return None
    values = read_table(where, path, columns)
    if len(values) != n:
        raise SequenceError(f"{where}, frame {min(len(values), n) + 1}: {path.name} has "
                            f"{len(values)} lines but the sequence has {n} frames; rule: "
                            "one line per frame")
    if low is not None:
        bad = ~((values >= low) & (values <= high))
        if integer:
            bad |= values != np.round(values)
        if bad.any():
            j = int(np.argmax(bad.any(axis=1)))
            kind = "integers" if integer else "values"
            raise SequenceError(f"{where}, frame {j + 1}: {path.name} line {j + 1} is "
                                f"{values[j].tolist()}; rule: {kind} in [{low}, {high}]")
    values = values.astype(np.int64) if integer else values
    return values[:, 0] if columns == 1 else values


def check_frames(where: str, frames: list[Path], verify: str) -> tuple[int, int]:
    """Opens each frame's header and checks that the file ends as a complete JPEG or PNG
    does (or only the first frame's header with verify="exists"; decodes every frame
    with "full"); all must be readable and of one size. Returns (height, width)."""
    size = None
    for i, path in enumerate(frames if verify != "exists" else frames[:1]):
        try:
            with open(path, "rb") as f, Image.open(f) as image:
                if verify == "full":
                    image.load()
                this = image.size
                cut = verify == "header" and image_cut_short(f, image.format)
        except Exception as error:  # PIL raises many types on corrupt files
            stage = "decode" if verify == "full" else "header"
            raise SequenceError(f"{where}, frame {i + 1} ({path}): unreadable image "
                                f"{stage} ({error}); rule: every frame is a readable "
                                "image") from error
        if cut:
            raise SequenceError(f"{where}, frame {i + 1} ({path}): the image is cut short "
                                f"(its header is intact, its {image.format} end marker "
                                "is missing: a truncated copy or download); rule: every "
                                "frame is a complete image")
        if size is None:
            size = this
        elif this != size:
            raise SequenceError(f"{where}, frame {i + 1} ({path}): image is {this[1]}x"
                                f"{this[0]} (HxW) but frame 1 is {size[1]}x{size[0]}; "
                                "rule: all frames of a sequence have one size")
    return size[1], size[0]


def clean_boxes(where: str, frames: list[Path], boxes: np.ndarray, exempt: np.ndarray,
                 annotation: str) -> np.ndarray:
    """NaN for the rows that may lack a box (`exempt`); any other NaN or w/h <= 0 box is
    an error. The first frame must always have a valid box."""
    invalid = ~np.isfinite(boxes).all(axis=1) | ~(boxes[:, 2] > 0) | ~(boxes[:, 3] > 0)
    exempt = exempt.copy()
    exempt[0] = False
    bad = invalid & ~exempt
    if bad.any():
        i = int(np.argmax(bad))
        rule = ("the first frame needs a valid box" if i == 0 else "boxes are finite with "
                "w, h > 0 except in frames marked absent (absence.label 1 or cover 0)")
        raise SequenceError(f"{where}, frame {i + 1} ({frames[i].name}): {annotation} line "
                            f"{i + 1} is {boxes[i].tolist()}; rule: {rule}")
    return np.where(invalid[:, None], np.nan, boxes)


def check_inside(where: str, frames: list[Path], boxes: np.ndarray, size, annotation: str,
                  absent: np.ndarray | None = None) -> None:
    """A box must overlap the image: a box (x, y, w, h), 1-indexed, covers [x, x + w) x
    [y, y + h), the image [1, W + 1) x [1, H + 1). A box partly outside is kept (the
    target leaves the frame); one wholly outside is an error (in frames where the target
    is not marked absent), most likely annotations at another resolution than the
    frames'."""
    height, width = size
    x, y, w, h = boxes.T
    with np.errstate(invalid="ignore"):
        outside = (x + w <= 1) | (x >= width + 1) | (y + h <= 1) | (y >= height + 1)
    if absent is not None:
        outside &= ~absent
    if outside.any():
        i = int(np.argmax(outside))
        raise SequenceError(f"{where}, frame {i + 1} ({frames[i].name}): {annotation} line "
                            f"{i + 1} is {boxes[i].tolist()}, wholly outside the "
                            f"{width}x{height} (WxH) frame; rule: a box overlaps its frame "
                            "(1-indexed x, y, w, h; partly outside is allowed). Were the "
                            "frames resized after annotating? The boxes must be at the "
                            "frames' resolution")


def check_labels(where: str, absence: np.ndarray | None, cover: np.ndarray | None) -> None:
    """absence.label 1 (the target is not in the frame) with cover.label > 0 (a visible
    part of it) contradict each other. (absence 0 with cover 0 is a target in view but
    fully occluded, as GOT-10k labels it: allowed.)"""
    if absence is None or cover is None:
        return
    bad = (absence == 1) & (cover > 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise SequenceError(f"{where}, frame {i + 1}: absence.label line {i + 1} is 1 "
                            f"(target absent) but cover.label line {i + 1} is "
                            f"{int(cover[i])} (target {int(cover[i])}/8 visible); rule: an "
                            "absent target has cover 0")


def check_points(where: str, frames: list[Path], name: str, points: np.ndarray | None,
                  hidden: np.ndarray, boxes: np.ndarray, size, on_image: bool) -> None:
    """Points (x, y, 1-indexed) are finite in every frame where the target can be seen
    (NaN is allowed only where it is marked absent or fully covered); with `on_image`,
    a finite point lies on the image ([0, W + 1] x [0, H + 1]) or inside its frame's box
    (the centre of a target partly out of view)."""
    if points is None:
        return
    bad = ~np.isfinite(points).all(axis=1) & ~hidden
    rule = ("points are finite where the target is visible (NaN only where absence.label "
            "is 1 or cover.label 0)")
    if on_image and not bad.any():
        height, width = size
        px, py = points.T
        x, y, w, h = boxes.T
        with np.errstate(invalid="ignore"):
            off = (px < 0) | (px > width + 1) | (py < 0) | (py > height + 1)
            in_box = (px >= x) & (px <= x + w) & (py >= y) & (py <= y + h)
            bad = off & ~in_box
        rule = (f"a point lies on the {width}x{height} (WxH) frame, or inside the frame's "
                "box when the target is partly out of view (1-indexed x, y). Were the "
                "frames resized after annotating? The points must be at the frames' "
                "resolution")
    if bad.any():
        i = int(np.argmax(bad))
        raise SequenceError(f"{where}, frame {i + 1} ({frames[i].name}): {name} line "
                            f"{i + 1} is {points[i].tolist()}; rule: {rule}")
