"""Training batches for soft contrastive learning (SoCL, Wu & Chan, "Learning Tracking
Representations from Single Point Annotations", sec. 3.2.4): two frames (fewer than
`max_gap` apart) of each of `videos` distinct videos, each cut to a square context region
around its annotated point, with the TOP map of that region on the backbone's feature
grid.

    batches = context_batches(sequences, tops, videos=12, max_gap=100, seed=0,
                              input_size=159, context_side=144.0)
    batch = batches(step)  # {"i_images", "j_images": (N, S, S, 3) uint8,
                           #  "h_i", "h_j": (N, g, g) float32, each map summing to 1}

Only the point is used (no box): the region of side `context_side` frame pixels is
centred on the point moved by up to `shift_jitter` x the side in each axis and scaled by
a factor in [1 / scale_jitter, scale_jitter] (log-uniform), so that the target is not
always at the centre nor of one size; it is resampled to `input_size` pixels with
`ebm_jax.ops.crops.crop_square_np` (mean-colour padding outside the frame).

`tops` holds each sequence's TOP proposals (`ebm_jax.tracking.top_maps.top_boxes` of
whole frames, computed once): {"frames": (F,), "boxes": (F, K, 4) xywh, "scores": (F, K)},
NaN rows where a frame kept fewer than K. The map of a region is the per-pixel sum of the
scores of the proposals covering it, drawn in region pixels (`score_map`), averaged over
the cells of the feature grid, and turned into a distribution by a softmax over the
cells (`grid_softmax`; both `ebm_jax.ops.score_maps`; sec. 3.1). The cells are the
backbone's (`feature_grid`): feature cell k of SiamFC's AlexNet (valid convolutions,
total stride 8) is centred on input pixel 43 + 8 k, of the padded ResNet-18 on pixel
8 k; its cell is the 8 x 8 pixels around that centre.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ebm_jax.data.tracking_pairs import partnered, pick_pair
from ebm_jax.models.alexnet import SiamFCAlexNet
from ebm_jax.ops.crops import crop_square_np, rounded_uint8
from ebm_jax.ops.score_maps import grid_softmax, score_map

EmbeddingGrid = Callable[[int], tuple[int, int, float]]


def feature_grid(input_size: int, embedding_grid: EmbeddingGrid = SiamFCAlexNet.embedding_grid
                 ) -> tuple[int, int, int]:
    """(g, lo, stride): the g x g feature grid of an input of `input_size` pixels and the
    first input pixel of the square its cells tile, cells of `stride` pixels from lo
    (lo < 0 or lo + stride g > input_size where a padded backbone's cells reach past the
    input). `embedding_grid(size) -> (g, stride, offset)` is the backbone's
    (`SiamFCAlexNet.embedding_grid`, `SiamResNet18.embedding_grid`): cell k is centred on
    input pixel offset + stride k, and covers the stride x stride pixels around it."""
    g, stride, offset = embedding_grid(int(input_size))
    if g < 1:
        raise ValueError(f"input_size {input_size} is too small for the backbone: it "
                         f"gives no feature cell")
    return int(g), int(np.floor(offset)) - stride // 2, int(stride)


def region_boxes(boxes: np.ndarray, center_yx, side: float, out_size: int) -> np.ndarray:
    """Boxes (..., 4) xywh (1-indexed) of a frame -> the same boxes in the pixels of the
    square crop of `side` centred on `center_yx` (0-indexed) resampled to `out_size`
    (`crop_square_np`'s mapping: frame position u -> (u - c) out / side + (out - 1) / 2)."""
    boxes = np.asarray(boxes, np.float64)
    k = out_size / side
    mid = (out_size - 1) / 2
    cy, cx = center_yx
    x0 = (boxes[..., 0] - 1.5 - cx) * k + mid  # left pixel edge, 0-indexed
    y0 = (boxes[..., 1] - 1.5 - cy) * k + mid
    return np.stack([x0 + 1.5, y0 + 1.5, boxes[..., 2] * k, boxes[..., 3] * k], axis=-1)


def region_top_map(boxes: np.ndarray, scores: np.ndarray, center_yx, side: float,
                   input_size: int, temperature: float = 1.0,
                   embedding_grid: EmbeddingGrid = SiamFCAlexNet.embedding_grid
                   ) -> np.ndarray:
    """The TOP map (g, g) of the region: proposals drawn in region pixels over the
    square the feature cells tile (`feature_grid`; past the region's edges where the
    cells reach there), averaged over each cell, softmax over cells (SoCL sec. 3.1)."""
    ok = np.all(np.isfinite(boxes), axis=-1) & np.isfinite(scores)
    rb = region_boxes(boxes[ok], center_yx, side, input_size)
    g, lo, stride = feature_grid(input_size, embedding_grid)
    rb[:, :2] -= lo  # region pixel lo is the window's pixel 0
    window = score_map((stride * g, stride * g), rb, np.asarray(scores[ok], np.float64))
    return np.asarray(grid_softmax(window, (g, g), temperature=temperature), np.float32)


def point_frames(seq, points: np.ndarray) -> np.ndarray:
    """Frames of `seq` whose point can be used: finite, inside the frame, the target
    visible (an annotator clicks only on a target that can be seen)."""
    height, width = seq.image_size
    p = np.asarray(points, np.float64) - 1.0  # 1-indexed -> 0-indexed pixel centres
    with np.errstate(invalid="ignore"):
        ok = np.all(np.isfinite(p), axis=1)
        ok &= (p[:, 0] >= 0) & (p[:, 0] <= width - 1) & (p[:, 1] >= 0) & (p[:, 1] <= height - 1)
    return np.flatnonzero(ok & np.asarray(seq.visible, bool))


def context_batches(sequences: Sequence, tops: Mapping[int, Mapping[str, np.ndarray]], *,
                    points: Sequence[np.ndarray], videos: int, max_gap: int, seed: int,
                    input_size: int = 159, context_side: float = 144.0,
                    shift_jitter: float = 0.125, scale_jitter: float = 1.25,
                    temperature: float = 1.0, cache_frames: int = 512,
                    embedding_grid: EmbeddingGrid = SiamFCAlexNet.embedding_grid,
                    groups: Sequence[int] | None = None) -> Callable[[int], dict]:
    """`batches(step) -> dict`, a function of (seed, step) alone (a resumed run sees the
    same batches). `tops[i]` are the TOP proposals of sequences[i]'s frames, `points[i]`
    its (N, 2) points (1-indexed x, y) used as region centres; `embedding_grid` the
    backbone's (`feature_grid`), on whose cells the TOP maps lie. With `groups` (a scene
    id per sequence, `ebm_jax.data.tracking.scene_of`) a batch takes whole scenes, in a
    random order, until it holds `videos` videos (the last scene in part), so that the
    negatives of a video include the videos of its own scene. Raises ValueError when
    fewer than `videos` sequences have two frames with maps less than `max_gap` apart."""
    if max_gap < 1:
        raise ValueError(f"max_gap must be >= 1, got {max_gap}")
    if videos < 2:
        raise ValueError(f"videos must be >= 2 (the other videos are the negatives), "
                         f"got {videos}")
    index = []
    for i in sorted(tops):
        frames = np.asarray(tops[i]["frames"])
        near = partnered(frames, max_gap)
        if near.sum() >= 2:
            index.append((i, np.flatnonzero(near)))
    if len(index) < videos:
        raise ValueError(f"a batch takes {videos} distinct videos, but only {len(index)} "
                         f"of {len(sequences)} sequences have two frames with TOP maps less "
                         f"than {max_gap} apart: lower --config.videos or use more sequences")

    scenes = None
    if groups is not None:
        if len(groups) != len(sequences):
            raise ValueError(f"groups must hold one scene id per sequence "
                             f"({len(sequences)}), got {len(groups)}")
        scenes = {}
        for p, (i, _) in enumerate(index):
            scenes.setdefault(int(groups[i]), []).append(p)
        scenes = list(scenes.values())

    def pick(rng) -> list[int]:
        if scenes is None:
            return list(rng.choice(len(index), size=videos, replace=False))
        picked = []
        for g in rng.permutation(len(scenes)):
            picked += [scenes[g][k] for k in rng.permutation(len(scenes[g]))]
            if len(picked) >= videos:
                return picked[:videos]
        return picked

    @functools.lru_cache(maxsize=cache_frames)
    def frame(seq_index: int, t: int) -> np.ndarray:
        return sequences[seq_index].read_frame(t)

    def view(rng, seq_index: int, row: int):
        top = tops[seq_index]
        t = int(top["frames"][row])
        px, py = np.asarray(points[seq_index][t], np.float64) - 1.0
        side = context_side * np.exp(rng.uniform(-1, 1) * np.log(scale_jitter))
        cy = py + rng.uniform(-1, 1) * shift_jitter * side
        cx = px + rng.uniform(-1, 1) * shift_jitter * side
        image = crop_square_np(frame(seq_index, t), (cy, cx), side, input_size)
        h = region_top_map(top["boxes"][row], top["scores"][row], (cy, cx), side,
                           input_size, temperature, embedding_grid)
        return rounded_uint8(image), h

    def batches(step: int) -> dict:
        rng = np.random.default_rng([seed, step])
        picks = pick(rng)
        out = {"i_images": [], "j_images": [], "h_i": [], "h_j": []}
        for p in picks:
            s, rows = index[p]
            frames = np.asarray(tops[s]["frames"])
            a, b = (rows[i] for i in pick_pair(rng, frames[rows], max_gap))
            for tag, row in (("i", a), ("j", b)):
                image, h = view(rng, s, int(row))
                out[f"{tag}_images"].append(image)
                out[f"h_{tag}"].append(h)
        return {k: np.stack(v) for k, v in out.items()}

    batches.videos = lambda step: [index[p][0] for p in pick(
        np.random.default_rng([seed, step]))]  # the sequences of a step's batch, in order
    batches.num_sequences = len(index)
    batches.num_frames = int(sum(len(r) for _, r in index))
    return batches
