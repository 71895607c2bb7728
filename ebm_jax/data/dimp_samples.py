"""Training samples of DiMP's classifier (Bhat et al. 2019, sec. 3.4 "Training"): per
sample, `num_train` training and `num_test` test frames of one video within `max_gap`
frames, each cropped on the host around a jittered copy of its box as pytracking's
processing cuts them (`ebm_jax.ops.jitter`: the training frames with the reference
factors, the test frames with the test ones).

    batches = dimp_sample_batches(sequences, batch_size=8, num_train=3, num_test=3,
                                  max_gap=50, seed=0, jitter=CropJitter(), out_size=255)
    batch = batches(step)  # {"train", "train_boxes", "test", "test_boxes"}

"train" is (B, num_train, S, S, 3) uint8 and "train_boxes" (B, num_train, 4) xyxy in
crop pixels (float32), likewise "test". The frames of a sample are drawn from a window
of `max_gap` consecutive frames of the video's usable ones (`usable_frames`), distinct,
sorted, the earliest `num_train` the training frames: the model is always predicted from
frames before the ones it is scored on, as in tracking. A batch is a function of (seed,
step) alone, so a resumed run sees the same batches.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from ebm_jax.data.tracking_pairs import usable_frames
from ebm_jax.ops.jitter import REFERENCE, TEST, CropJitter, jittered_crop_np


def _windows(frames: np.ndarray, size: int, max_gap: int) -> np.ndarray:
    """Indices i into `frames` such that frames[i : i + size] spans fewer than `max_gap`
    frames: the windows a sample can start at."""
    if len(frames) < size:
        return np.zeros(0, int)
    span = frames[size - 1:] - frames[:len(frames) - size + 1]
    return np.flatnonzero(span < max_gap)


def dimp_sample_batches(sequences: Sequence, *, batch_size: int, num_train: int = 3,
                        num_test: int = 3, max_gap: int = 50, seed: int, jitter: CropJitter,
                        out_size: int = 255, min_size: float = 8.0, max_aspect: float = 4.0,
                        min_visible: float = 0.5, cache_frames: int = 512
                        ) -> Callable[[int], dict]:
    """`batches(step) -> dict` of the module docstring. Bad sizes, and data in which no
    video has `num_train + num_test` usable frames within `max_gap`, are one ValueError
    naming the setting, before any batch is cut."""
    if not isinstance(jitter, CropJitter):
        raise TypeError(f"jitter must be a CropJitter, got {type(jitter).__name__}")
    for name, v, low in (("batch_size", batch_size, 1), ("num_train", num_train, 1),
                         ("num_test", num_test, 1), ("out_size", out_size, 16)):
        if isinstance(v, bool) or int(v) != v or v < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
    need = num_train + num_test
    if isinstance(max_gap, bool) or int(max_gap) != max_gap or max_gap < need:
        raise ValueError(f"max_gap must be an integer >= num_train + num_test = {need} "
                         f"(the frames of a sample lie within it), got {max_gap!r}")
    index = []
    for i, seq in enumerate(sequences):
        frames = usable_frames(seq, min_size=min_size, max_aspect=max_aspect,
                               min_visible=min_visible)
        starts = _windows(frames, need, max_gap)
        if len(starts):
            index.append((i, frames, starts))
    if not index:
        longest = max((len(s) for s in sequences), default=0)
        raise ValueError(f"no video of {len(sequences)} (the longest {longest} frames) has "
                         f"{need} usable frames within max_gap {max_gap}: DiMP's samples "
                         f"need num_train + num_test = {need}")

    @functools.lru_cache(maxsize=cache_frames)
    def frame(seq_index: int, t: int) -> np.ndarray:
        return sequences[seq_index].read_frame(t)

    def batches(step: int) -> dict:
        rng = np.random.default_rng([seed, step])
        out = {"train": [], "train_boxes": [], "test": [], "test_boxes": []}
        for p in rng.integers(len(index), size=batch_size):
            s, frames, starts = index[p]
            start = int(starts[rng.integers(len(starts))])
            # the window: every usable frame fewer than max_gap after the start
            window = np.flatnonzero((frames >= frames[start])
                                    & (frames < frames[start] + max_gap))
            chosen = np.sort(rng.choice(window, size=need, replace=False))
            picks = [int(frames[c]) for c in chosen]
            for tag, ts, kind in (("train", picks[:num_train], REFERENCE),
                                  ("test", picks[num_train:], TEST)):
                crops, boxes = [], []
                for t in ts:
                    crop, box = jittered_crop_np(rng, frame(s, t), sequences[s].boxes[t],
                                                 jitter, kind, out_size)
                    crops.append(crop)
                    boxes.append(box)
                out[tag].append(np.stack(crops))
                out[f"{tag}_boxes"].append(np.stack(boxes))
        return {k: np.stack(v) for k, v in out.items()}

    batches.num_sequences = len(index)
    return batches


__all__ = ["dimp_sample_batches"]
