"""Training pairs for Siamese trackers (SiamFC, Bertinetto et al. 2016, sec. 2.2): two
frames of one video less than `max_gap` frames apart, each cut on the host to a fixed-size
square region around its target so that a batch stacks whatever the frame sizes; the
jitted step then makes the exemplar and search crops (with their augmentation) from the
regions (`ebm_jax.tracking.siamfc_training.training_crops`).

    batches = pair_batches(sequences, batch_size=8, max_gap=100, seed=0)
    batch = batches(step)   # {"z_frames", "z_boxes", "x_frames", "x_boxes"}

A region is the square of side `margin` x the search side (the exemplar side x
search_size / exemplar_size, centred on the target; mean-colour padding outside the
frame), resampled to `region_size` pixels; its box is the target's box in region
pixels. Usable frames: a finite box, the target visible (at least `min_visible` of it
where the data says), each side in [`min_size`, `max_size`] pixels and in
`relative_size` of the frame's side along it, an aspect ratio within [1/max_aspect,
max_aspect] (the port's filter of degenerate boxes). The exemplar is the first frame of
a pair or either at random (`order`).

`PORT_PAIRS` holds the PyTorch port's choices (its `Pair._filter` and `_sample_pair`):
sides of 20-500 px and 0.01-0.5 of the frame, the exemplar the earlier frame.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from ebm_jax.ops.crops import (box_to_center, center_to_box, crop_square_np, exemplar_side,
                               rounded_uint8)


PORT_PAIRS = dict(min_size=20.0, max_size=500.0, relative_size=(0.01, 0.5),
                  order="forward")
ORDERS = ("random", "forward")


def usable_frames(seq, *, min_size: float = 8.0, max_aspect: float = 4.0,
                  min_visible: float = 0.5, max_size: float = np.inf,
                  relative_size: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
    """Indices of the frames of `seq` whose box can train a Siamese tracker."""
    boxes = np.asarray(seq.boxes, np.float64)
    w, h = boxes[:, 2], boxes[:, 3]
    height, width = seq.image_size
    lo, hi = relative_size
    ok = np.all(np.isfinite(boxes), axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        ok &= (w >= min_size) & (h >= min_size) & (w <= max_size) & (h <= max_size)
        ok &= (w >= lo * width) & (h >= lo * height) & (w <= hi * width) & (h <= hi * height)
        ok &= (w / h <= max_aspect) & (h / w <= max_aspect)
    ok &= np.asarray(seq.visible, bool)
    if seq.visible_ratio is not None:
        ok &= np.asarray(seq.visible_ratio) >= min_visible
    elif seq.cover is not None:
        ok &= np.asarray(seq.cover) >= np.ceil(8 * min_visible)
    # the whole target inside the frame (a box cut by the border is not its size)
    x0, y0 = boxes[:, 0] - 1, boxes[:, 1] - 1
    with np.errstate(invalid="ignore"):
        ok &= (x0 >= 0) & (y0 >= 0) & (x0 + w <= width) & (y0 + h <= height)
    return np.flatnonzero(ok)


def target_region(frame: np.ndarray, box, *, region_size: int, side_ratio: float,
                  context: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """The square region of side `side_ratio` x the exemplar side around the target of
    `box` (xywh), resampled to `region_size`; returns (region uint8, box in region)."""
    cy, cx, h, w = box_to_center(np.asarray(box, np.float64))
    side = side_ratio * exemplar_side(h, w, context)
    region = crop_square_np(frame, (cy, cx), side, region_size)
    scale = region_size / side
    mid = (region_size - 1) / 2
    return (rounded_uint8(region),
            np.asarray(center_to_box(mid, mid, h * scale, w * scale), np.float32))


def partnered(frames: np.ndarray, max_gap: int) -> np.ndarray:
    """The mask of `frames` (sorted, distinct frame numbers) that have another frame
    less than `max_gap` away: the frames a training pair can start from."""
    gaps = np.diff(frames)
    near = np.zeros(len(frames), bool)
    near[:-1] |= gaps < max_gap
    near[1:] |= gaps < max_gap
    return near


def pair_index(sequences: Sequence, max_gap: int, **usable) -> list[tuple[int, np.ndarray]]:
    """(sequence index, its frames a pair can use) of every sequence with two
    `usable_frames` (`usable`: that function's filters) less than `max_gap` apart."""
    index = []
    for i, seq in enumerate(sequences):
        frames = usable_frames(seq, **usable)
        frames = frames[partnered(frames, max_gap)]
        if len(frames) >= 2:
            index.append((i, frames))
    return index


def pick_pair(rng: np.random.Generator, frames: np.ndarray, max_gap: int) -> tuple[int, int]:
    """Indices (a, b) into `frames` (distinct frame numbers, each `partnered`): a random
    frame, then a random other frame less than `max_gap` from it. The one pair sampler
    of the Siamese (`pair_batches`) and SoCL (`socl_pairs.context_batches`) batches."""
    a = int(rng.integers(len(frames)))
    near = np.flatnonzero((np.abs(frames - frames[a]) < max_gap)
                          & (np.arange(len(frames)) != a))
    return a, int(near[rng.integers(len(near))])


def pair_batches(sequences: Sequence, *, batch_size: int, max_gap: int, seed: int,
                 exemplar_size: int = 127, search_size: int = 255, context: float = 0.5,
                 margin: float = 1.25, min_size: float = 8.0, max_aspect: float = 4.0,
                 min_visible: float = 0.5, max_size: float = np.inf,
                 relative_size: tuple[float, float] = (0.0, 1.0), order: str = "random",
                 cache_frames: int = 512) -> Callable[[int], dict]:
    """`batches(step) -> dict` of `batch_size` pairs, a function of (seed, step) alone (a
    resumed run sees the same batches). Raises ValueError when no sequence has two
    usable frames."""
    if max_gap < 1:
        raise ValueError(f"max_gap must be >= 1, got {max_gap}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    lo, hi = relative_size
    if not (0 <= lo < hi <= 1) or not (0 <= min_size <= max_size):
        raise ValueError(f"need 0 <= relative_size[0] < relative_size[1] <= 1 and 0 <= "
                         f"min_size <= max_size, got relative_size={relative_size}, "
                         f"min_size={min_size}, max_size={max_size}")
    index = pair_index(sequences, max_gap, min_size=min_size, max_aspect=max_aspect,
                       min_visible=min_visible, max_size=max_size,
                       relative_size=relative_size)
    if not index:
        raise ValueError(f"no training sequence has two usable frames less than {max_gap} "
                         f"apart (boxes of {min_size}-{max_size} px and {lo}-{hi} of the "
                         f"frame inside it, aspect <= {max_aspect}, visible >= "
                         f"{min_visible}) among {len(sequences)} sequences")
    side_ratio = margin * search_size / exemplar_size
    region_size = int(round(margin * search_size))

    @functools.lru_cache(maxsize=cache_frames)
    def frame(seq_index: int, t: int) -> np.ndarray:
        return sequences[seq_index].read_frame(t)

    def region(seq_index: int, t: int):
        return target_region(frame(seq_index, t), sequences[seq_index].boxes[t],
                             region_size=region_size, side_ratio=side_ratio,
                             context=context)

    def batches(step: int) -> dict:
        rng = np.random.default_rng([seed, step])
        picks = rng.integers(len(index), size=batch_size)
        out = {"z_frames": [], "z_boxes": [], "x_frames": [], "x_boxes": []}
        for p in picks:
            s, frames = index[p]
            a, b = (frames[i] for i in pick_pair(rng, frames, max_gap))
            if order == "forward":
                z, x = min(a, b), max(a, b)
            else:
                z, x = (a, b) if rng.random() < 0.5 else (b, a)
            for tag, t in (("z", z), ("x", x)):
                img, box = region(s, int(t))
                out[f"{tag}_frames"].append(img)
                out[f"{tag}_boxes"].append(box)
        return {k: np.stack(v) for k, v in out.items()}

    batches.num_sequences = len(index)
    batches.num_frames = int(sum(len(f) for _, f in index))
    return batches
