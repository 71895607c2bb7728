"""Readers of tracking sequences in the GOT-10k and OTB folder layouts (real data from a
local path, and the generated benchmark of `ebm_jax.data.tracking`), validated when the
set is opened, so that a bad annotation or frame is one error naming the root, sequence,
frame and rule before any training starts, never a traceback mid-training.

    train = read_got10k("~/data/GOT-10k", split="train")          # list[Sequence]
    test = read_got10k("~/data/GOT-10k", split="test", boxes="first")
    otb = read_otb("~/data/OTB100", sequences=["David", "Jogging"])  # Jogging.1, .2
    frame = train[0].read_frame(0)                # uint8 (H, W, 3) RGB

Boxes are `(x, y, w, h)` floats in 1-indexed pixel coordinates (the GOT-10k / OTB
convention, Wu et al. 2015, "Object Tracking Benchmark", TPAMI). Rows of frames without a
usable box (absent target, or beyond the first frame of a GOT-10k test sequence) are NaN.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
from PIL import Image

from ebm_jax.data.sequence_rules import (
    FRAME_FILE,
    SequenceError,
    check_choice,
    check_frames,
    check_inside,
    check_labels,
    check_points,
    clean_boxes,
    expand_root,
    list_frames,
    read_label,
    read_table,
    read_text,
)
from ebm_jax.io import file_digests

VERIFY_LEVELS = ("exists", "header", "full")
BOX_MODES = ("all", "first")

# OTB sequences whose annotation covers only part of the frames in `img/` (first and last
# frame number, inclusive), as published on the benchmark's site and applied by the
# GOT-10k toolkit's OTB loader (`got10k.datasets.OTB`).
OTB_FRAME_RANGES: dict[str, tuple[int, int]] = {
    "David": (300, 770), "Football1": (1, 74), "Freeman3": (1, 460),
    "Freeman4": (1, 283), "Diving": (1, 215)}

_OTB_ANNOTATION = re.compile(r"^groundtruth_rect(?:\.(\d+))?\.txt$")


@dataclasses.dataclass(frozen=True, eq=False)
class Sequence:
    """One annotated video: frame paths in order and per-frame annotations."""

    name: str
    frames: tuple[str, ...]
    boxes: np.ndarray  # (N, 4) float64 x, y, w, h; NaN rows where no box
    image_size: tuple[int, int]  # (height, width)
    absent: np.ndarray  # (N,) bool
    cover: np.ndarray | None = None  # (N,) int 0..8
    visible_ratio: np.ndarray | None = None  # (N,) float in [0, 1]
    points: np.ndarray | None = None  # (N, 2) x, y
    noisy_points: np.ndarray | None = None  # (N, 2) x, y

    def __post_init__(self):
        n = len(self.frames)
        shapes = {"boxes": (n, 4), "absent": (n,), "cover": (n,), "visible_ratio": (n,),
                  "points": (n, 2), "noisy_points": (n, 2)}
        for field, shape in shapes.items():
            value = getattr(self, field)
            if value is not None and np.shape(value) != shape:
                raise SequenceError(f"sequence {self.name!r}: {field} must have shape "
                                    f"{shape} ({n} frames), got {np.shape(value)}")
        if n == 0:
            raise SequenceError(f"sequence {self.name!r} has no frames")

    def __len__(self) -> int:
        return len(self.frames)

    @property
    def visible(self) -> np.ndarray:
        """(N,) bool: cover > 0 where cover labels exist (GOT-10k), else not absent."""
        return self.cover > 0 if self.cover is not None else ~self.absent

    def sparse_box_frames(self, every: int) -> np.ndarray:
        """Indices 0, T, 2T, ... < N of the frames that keep their box when only a box
        every T frames is annotated (SoCL, sec. 3.3, "Scale Regression-based Tracking")."""
        if isinstance(every, bool) or int(every) != every or every < 1:
            raise SequenceError(f"every must be an integer >= 1, got {every!r}")
        return np.arange(0, len(self), int(every))

    def _checked_index(self, i) -> int:
        if isinstance(i, bool) or int(i) != i or not 0 <= i < len(self):
            raise SequenceError(f"sequence {self.name!r}: frame index must be an integer "
                                f"in [0, {len(self) - 1}], got {i!r}")
        return int(i)

    def frame_bytes(self, i: int) -> bytes:
        """Frame `i`'s file as it is stored (its JPEG or PNG bytes)."""
        path = self.frames[self._checked_index(i)]
        try:
            return Path(path).read_bytes()
        except OSError as error:
            raise SequenceError(f"sequence {self.name!r}, frame {int(i) + 1} ({path}): "
                                f"cannot read the file ({error.strerror or error})"
                                ) from None

    def read_frame(self, i: int) -> np.ndarray:
        """Frame `i` (0-based) as uint8 (H, W, 3) RGB; greyscale frames get 3 channels."""
        path = self.frames[self._checked_index(i)]
        return self._decode(path, i, path)

    def _decode(self, file, i: int, where: str) -> np.ndarray:
        """The image `file` (a path or a binary file object) of frame `i` as RGB, its
        size checked against the sequence's; `where` names it in errors."""
        try:
            with Image.open(file) as image:
                pixels = np.asarray(image.convert("RGB"))
        except Exception as error:  # PIL raises many types on corrupt files
            raise SequenceError(f"sequence {self.name!r}, frame {int(i) + 1} ({where}): "
                                f"cannot decode the image ({error})") from error
        if pixels.shape[:2] != tuple(self.image_size):
            raise SequenceError(f"sequence {self.name!r}, frame {int(i) + 1} ({where}): "
                                f"image is {pixels.shape[0]}x{pixels.shape[1]} (HxW), the "
                                f"sequence's frames are {self.image_size[0]}x"
                                f"{self.image_size[1]}")
        return pixels


def _got10k_names(root: Path, sequences) -> list[str]:
    list_file = root / "list.txt"
    if list_file.is_file():
        lines = read_text(list_file).splitlines()
        names = [line.strip() for line in lines if line.strip()]
        source = f"{list_file}"
        for i, line in enumerate(lines, 1):
            _check_folder_name(line.strip(), root, f"{list_file} line {i}")
    else:
        names = sorted(e.name for e in os.scandir(root)
                       if e.is_dir() and (Path(e.path) / "groundtruth.txt").is_file())
        source = f"{root} (no list.txt; sub-directories holding a groundtruth.txt)"
    if not names:
        raise SequenceError(f"{root}: no sequences found in {source}; rule: a set has at "
                            "least one sequence")
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise SequenceError(f"{root}: {source} names sequences {twice} more than once")
    for name in names:
        if not (root / name).is_dir():
            raise SequenceError(f"{root}: {source} names sequence {name!r}, but the "
                                f"directory {root / name} does not exist")
    return _select(root, names, sequences)


def _check_folder_name(name: str, root: Path, where: str) -> None:
    """`name` (a list.txt entry) is one folder of `root`: not a path (absolute, with a
    separator, "." or ".."), so a sequence, and what is written under its name (an
    evaluation cache), never lies outside the root."""
    if name and (name in (".", "..") or "/" in name or "\\" in name
                 or os.path.isabs(name)):
        raise SequenceError(f"{where} names {name!r}, which is not a folder name inside "
                            f"{root}; rule: list.txt holds the names of the root's "
                            "sequence folders, one a line, no paths")


def _select(root: Path, names: list[str], sequences, groups: Mapping | None = None):
    if sequences is None:
        return names
    wanted = [sequences] if isinstance(sequences, str) else list(sequences)
    if not wanted:
        raise SequenceError(f"{root}: sequences is empty; rule: select at least one "
                            "sequence (or pass None for all)")
    groups = groups or {}
    unknown = [s for s in wanted if s not in names and s not in groups]
    if unknown:
        raise SequenceError(f"{root}: unknown sequences {unknown}; available: "
                            f"{names[:20]}{' ...' if len(names) > 20 else ''}")
    chosen: list[str] = []
    for s in wanted:
        for name in groups.get(s, [s]):
            if name not in chosen:
                chosen.append(name)
    return chosen


def read_got10k(root, *, split: str | None = None, sequences: Iterable[str] | None = None,
                boxes: str = "all", verify: str = "header") -> list[Sequence]:
    """GOT-10k layout (Huang et al. 2019, "GOT-10k", TPAMI; the toolkit's folder format):
    `root[/split]/list.txt` (else the sorted sub-directories holding a groundtruth.txt);
    per sequence `%08d.jpg` frames numbered from 1, `groundtruth.txt` (x,y,w,h per line),
    optional `absence.label`, `cover.label`, and the generated benchmark's
    `visible_ratio.txt`, `points.txt`, `noisy_points.txt`.

    boxes="all" needs one box per frame; boxes="first" (the GOT-10k test split) needs at
    least the first, the other rows become NaN. `sequences` keeps only these names, in
    this order. verify: "exists" (the frame files exist; the first one's header gives
    the size), "header" (also open every frame's header: readable, one size per
    sequence, and a JPEG's or PNG's end marker among its last bytes, so a file cut
    short is found; no decoding), "full" (decode every frame).

    Also refused: `absence.label` 1 with `cover.label` > 0; a box wholly outside its
    frame where the target is not marked absent; a NaN point (points.txt,
    noisy_points.txt) where the target is visible; a points.txt point off the frame
    and outside its box."""
    check_choice("boxes", boxes, BOX_MODES)
    check_choice("verify", verify, VERIFY_LEVELS)
    root = expand_root(root)
    if split is not None:
        root = root / split
    if not root.is_dir():
        raise SequenceError(f"{root}: the GOT-10k root directory does not exist")
    out = []
    for name in _got10k_names(root, sequences):
        folder, where = root / name, f"{root}: sequence {name!r}"
        frames = list_frames(where, folder, start=1)
        n = len(frames)
        if not (folder / "groundtruth.txt").is_file():
            raise SequenceError(f"{where}: {folder / 'groundtruth.txt'} does not exist")
        table = read_table(where, folder / "groundtruth.txt", 4)
        if len(table) > n:
            raise SequenceError(f"{where}, frame {n + 1} ({n + 1:08d}.jpg): the frame file "
                                f"is missing: groundtruth.txt has {len(table)} rows but "
                                f"there are {n} frames; rule: one frame per annotation")
        if boxes == "all" and len(table) != n:
            raise SequenceError(f"{where}, frame {len(table) + 1}: groundtruth.txt has "
                                f"{len(table)} rows but there are {n} frames; rule: one "
                                "box per frame (boxes='all')")
        if len(table) == 0:
            raise SequenceError(f"{where}, frame 1: groundtruth.txt is empty; rule: the "
                                "first frame needs a box")
        box_rows = np.full((n, 4), np.nan)
        box_rows[:len(table)] = table
        absence = read_label(where, folder / "absence.label", n, low=0, high=1,
                              integer=True)
        cover = read_label(where, folder / "cover.label", n, low=0, high=8, integer=True)
        ratio = read_label(where, folder / "visible_ratio.txt", n, low=0.0, high=1.0)
        points = read_label(where, folder / "points.txt", n, columns=2)
        noisy = read_label(where, folder / "noisy_points.txt", n, columns=2)
        check_labels(where, absence, cover)
        absent = absence.astype(bool) if absence is not None else np.zeros(n, bool)
        hidden = absent | (cover == 0 if cover is not None else False)
        exempt = hidden | (np.arange(n) > 0) if boxes == "first" else hidden
        box_rows = clean_boxes(where, frames, box_rows, exempt, "groundtruth.txt")
        size = check_frames(where, frames, verify)
        check_inside(where, frames, box_rows, size, "groundtruth.txt", hidden)
        check_points(where, frames, "points.txt", points, hidden, box_rows, size, True)
        # the noisy point is the point moved by a fixed distance: it may leave the image
        check_points(where, frames, "noisy_points.txt", noisy, hidden, box_rows, size,
                      False)
        out.append(Sequence(name, tuple(map(str, frames)), box_rows, size, absent, cover,
                            ratio, points, noisy))
    return out


def _otb_targets(root: Path) -> tuple[dict[str, tuple[Path, Path]], dict[str, list[str]],
                                      dict[str, str]]:
    """Sequence name -> (folder, annotation file); folder -> its sequence names; folder
    -> why it is not a sequence, for a folder that holds half of one (frames in img/
    without an annotation, or an annotation file without img/). Empty annotation files
    are skipped (OTB's Human4 has an empty groundtruth_rect.1.txt); a folder with
    several annotated targets (Jogging, Skating2) gives `<Seq>.<k>`, k from
    `groundtruth_rect.<k>.txt`, as the GOT-10k toolkit names them."""
    targets: dict[str, tuple[Path, Path]] = {}
    groups: dict[str, list[str]] = {}
    broken: dict[str, str] = {}
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if not entry.is_dir():
            continue
        found, named = [], []
        for f in sorted(os.listdir(entry.path)):
            match = _OTB_ANNOTATION.match(f)
            path = Path(entry.path) / f
            if match and path.is_file():
                named.append(f)
                if read_text(path).strip():
                    found.append((int(match.group(1) or 0), path))
        img = Path(entry.path) / "img"
        if not img.is_dir():
            if named:
                broken[entry.name] = (f"it holds {named[0]} but {img} does not exist; "
                                      "rule: an OTB sequence's frames are in its img/ "
                                      "folder")
            continue
        if not found:
            broken[entry.name] = (f"its frames are in {img} but it holds no non-empty "
                                  "groundtruth_rect*.txt; rule: an OTB sequence has "
                                  "its boxes in groundtruth_rect.txt")
            continue
        found.sort()
        for k, path in found:
            name = entry.name if len(found) == 1 else f"{entry.name}.{k}"
            targets[name] = (Path(entry.path), path)
            groups.setdefault(entry.name, []).append(name)
    return targets, groups, broken


def read_otb(root, *, sequences: Iterable[str] | None = None, verify: str = "header",
             frame_ranges: Mapping[str, tuple[int, int]] = OTB_FRAME_RANGES
             ) -> list[Sequence]:
    """OTB layout (Wu et al. 2015, "Object Tracking Benchmark", TPAMI): `root/<Seq>/img/`
    numbered frames (`%04d.jpg`) and `groundtruth_rect.txt` (x,y,w,h separated by commas,
    tabs or spaces), one row per frame. Known quirks: `frame_ranges` (first, last frame
    number, matched case-insensitively; default OTB_FRAME_RANGES, e.g. David 300-770)
    restricts a sequence to the frames its annotation covers; folders with two targets
    (Jogging, Skating2: groundtruth_rect.1.txt / .2.txt) give Jogging.1 and Jogging.2.
    `sequences` may name a folder to select all its targets. OTB has no absence labels,
    so every box must be valid. A folder with an annotation file but no img/, or frames
    in img/ but no non-empty annotation, is refused when read (with all sequences, or
    selected), never skipped. verify as in `read_got10k`."""
    check_choice("verify", verify, VERIFY_LEVELS)
    root = expand_root(root)
    if not root.is_dir():
        raise SequenceError(f"{root}: the OTB root directory does not exist")
    targets, groups, broken = _otb_targets(root)
    if sequences is not None and not isinstance(sequences, str):
        sequences = list(sequences)
    wanted = (list(broken) if sequences is None else
              [sequences] if isinstance(sequences, str) else sequences)
    for name in wanted:
        if name in broken:
            raise SequenceError(f"{root}: sequence {name!r}: {broken[name]} (or move the "
                                "folder out of the root, or select the other sequences)")
    if not targets:
        raise SequenceError(f"{root}: no sequences found (sub-directories with img/ and "
                            "a non-empty groundtruth_rect*.txt); rule: a set has at least "
                            "one sequence")
    ranges = {k.lower(): v for k, v in frame_ranges.items()}
    out = []
    for name in _select(root, list(targets), sequences, groups):
        folder, annotation = targets[name]
        where = f"{root}: sequence {name!r}"
        frame_range = ranges.get(folder.name.lower())
        frames = list_frames(where, folder / "img", None)
        if frame_range is not None:
            first, last = frame_range
            numbers = [int(FRAME_FILE.match(p.name).group(1)) for p in frames]
            if numbers[0] > first or numbers[-1] < last:
                k = first if numbers[0] > first else numbers[-1] + 1
                raise SequenceError(f"{where}, frame {k}: the frame file is missing in "
                                    f"{folder / 'img'} (files run {numbers[0]}.."
                                    f"{numbers[-1]}); rule: the annotated range is frames "
                                    f"{first}..{last}")
            frames = frames[first - numbers[0]:last - numbers[0] + 1]
        table = read_table(where, annotation, 4)
        if len(table) != len(frames):
            span = (f"frames {frame_range[0]}..{frame_range[1]}" if frame_range else
                    f"{len(frames)} frames in img/")
            raise SequenceError(f"{where}, frame {min(len(table), len(frames)) + 1}: "
                                f"{annotation.name} has {len(table)} rows but the "
                                f"sequence has {span}; rule: one box per frame (a sequence "
                                "annotated on part of its frames needs an entry in "
                                "frame_ranges)")
        n = len(frames)
        box_rows = clean_boxes(where, frames, table, np.zeros(n, bool), annotation.name)
        size = check_frames(where, frames, verify)
        check_inside(where, frames, box_rows, size, annotation.name)
        out.append(Sequence(name, tuple(map(str, frames)), box_rows, size,
                            np.zeros(n, bool)))
    return out


def fingerprint(sequences: Iterable[Sequence], *, digest_cache=None) -> dict:
    """The content identity of a set of sequences, what a stage that reads them records
    (never a path, so a set copied or moved elsewhere keeps its stages, and an edited
    one gets new ones): every sequence's name, frame size and annotations as read
    (boxes, absence, cover, visible ratio, points, noisy points) and its frames' file
    names and SHA-256 of their bytes (`ebm_jax.io.file_digests`; with `digest_cache`, a
    frame is read again only when its size or modification time changed)."""
    import hashlib

    sequences = list(sequences)
    digests = iter(file_digests([f for s in sequences for f in s.frames],
                                cache=digest_cache))
    h = hashlib.sha256()
    for s in sequences:
        h.update(f"{s.name}\0{len(s)}\0{tuple(s.image_size)}\0".encode())
        for field in ("boxes", "absent", "cover", "visible_ratio", "points",
                      "noisy_points"):
            value = getattr(s, field)
            h.update(f"{field}:{'-' if value is None else np.shape(value)}\0".encode())
            if value is not None:
                a = np.asarray(value, np.float64)
                h.update(np.ascontiguousarray(np.where(np.isnan(a), np.nan, a)).tobytes())
        for frame in s.frames:
            h.update(f"{os.path.basename(frame)}\0{next(digests)}\0".encode())
    return {"sequences": len(sequences), "content": h.hexdigest()[:16]}
