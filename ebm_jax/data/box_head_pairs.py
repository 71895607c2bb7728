"""Training pairs of the tracker's box head cut as pytracking's PrDiMP processing cuts
them (`ebm_jax.ops.jitter`): two frames of one video less than `max_gap` apart (the
Siamese pairs' sampler, `tracking_pairs.pick_pair`), each cropped on the host around a
jittered copy of its box, the reference with the reference factors and the test frame
with the test ones.

    batches = jittered_pair_batches(sequences, batch_size=8, max_gap=100, seed=0,
                                    jitter=CropJitter(), out_size=255)
    batch = batches(step)   # {"ref", "ref_boxes", "test", "test_boxes"}

Crops are uint8 (B, out_size, out_size, 3); boxes xyxy in crop pixels (B, 4) float32.
A batch is a function of (seed, step) alone, so a resumed run sees the same batches.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from ebm_jax.data.tracking_pairs import pair_index, pick_pair
from ebm_jax.ops.jitter import REFERENCE, TEST, CropJitter, jittered_crop_np


def jittered_pair_batches(sequences: Sequence, *, batch_size: int, max_gap: int, seed: int,
                          jitter: CropJitter, out_size: int = 255, min_size: float = 8.0,
                          max_aspect: float = 4.0, min_visible: float = 0.5,
                          cache_frames: int = 512) -> Callable[[int], dict]:
    """`batches(step) -> dict` of the module docstring. Raises ValueError when no
    sequence has two usable frames (`usable_frames`) less than `max_gap` apart."""
    if not isinstance(jitter, CropJitter):
        raise TypeError(f"jitter must be a CropJitter, got {type(jitter).__name__}")
    if batch_size < 1 or max_gap < 1:
        raise ValueError(f"batch_size and max_gap must be >= 1, got {batch_size} and "
                         f"{max_gap}")
    index = pair_index(sequences, max_gap, min_size=min_size, max_aspect=max_aspect,
                       min_visible=min_visible)
    if not index:
        raise ValueError(f"no sequence of {len(sequences)} has two usable frames less "
                         f"than {max_gap} apart")

    @functools.lru_cache(maxsize=cache_frames)
    def frame(seq_index: int, t: int) -> np.ndarray:
        return sequences[seq_index].read_frame(t)

    def batches(step: int) -> dict:
        rng = np.random.default_rng([seed, step])
        out = {"ref": [], "ref_boxes": [], "test": [], "test_boxes": []}
        for p in rng.integers(len(index), size=batch_size):
            s, frames = index[p]
            a, b = (int(frames[i]) for i in pick_pair(rng, frames, max_gap))
            for tag, t, kind in (("ref", a, REFERENCE), ("test", b, TEST)):
                crop, box = jittered_crop_np(rng, frame(s, t), sequences[s].boxes[t],
                                             jitter, kind, out_size)
                out[tag].append(crop)
                out[f"{tag}_boxes"].append(box)
        return {k: np.stack(v) for k, v in out.items()}

    batches.num_sequences = len(index)
    batches.num_frames = int(sum(len(f) for _, f in index))
    return batches


__all__ = ["jittered_pair_batches"]
