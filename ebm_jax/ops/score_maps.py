"""Score maps of boxes on a pixel grid, and their softmax over the cells of a feature
grid: the array arithmetic of the target objectness prior (TOP) maps of SoCL (Wu & Chan,
"Learning Tracking Representations from Single Point Annotations", sec. 3.1), shared by
the TOP maps of whole frames (`ebm_jax.tracking.top_maps`) and those of training
regions (`ebm_jax.data.socl_pairs`).

    pixels = score_map((H, W), boxes, scores)   # (H, W): per pixel, sum of covering scores
    h = grid_softmax(pixels, (17, 17))          # (17, 17), sums to 1

Boxes are (x, y, w, h) in the GOT-10k / OTB convention (1-indexed pixels). A box covers
pixel (i, j) (0-indexed) when the pixel's centre lies inside it:
x - 1.5 <= j < x + w - 1.5, likewise for rows.
"""

from __future__ import annotations

import numpy as np

from ebm_jax.ops.boxes import check_box_scores, check_xywh_boxes

__all__ = ["grid_softmax", "score_map"]


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _range_error(name: str, allowed: str, value) -> ValueError:
    return ValueError(f"{name} must be {allowed}, got {value!r}")


def _pixel_ranges(start, size, limit):
    """Pixel index ranges [lo, hi) whose centres lie in a 1-indexed [start, start + size)."""
    lo = np.clip(np.ceil(start - 1.5), 0, limit).astype(np.intp)
    hi = np.clip(np.ceil(start + size - 1.5), 0, limit).astype(np.intp)
    return lo, np.maximum(hi, lo)


def score_map(shape_hw, boxes, scores) -> np.ndarray:
    """(H, W) float32: at each pixel, the sum of the scores of the boxes covering it
    (SoCL sec. 3.1: "we sum over the scores of all the bounding boxes that cover that
    location"); a box covers the pixels whose centre lies inside it (module docstring).
    One 2-D difference array and two cumulative sums, no loop over boxes."""
    if len(shape_hw) != 2 or not all(_is_int(v) for v in shape_hw) or min(shape_hw) < 1:
        raise _range_error("shape_hw", "(H, W) with integers H, W >= 1", shape_hw)
    height, width = shape_hw
    boxes = check_xywh_boxes(boxes)
    scores = check_box_scores(scores, len(boxes))
    r0, r1 = _pixel_ranges(boxes[:, 1], boxes[:, 3], height)
    c0, c1 = _pixel_ranges(boxes[:, 0], boxes[:, 2], width)
    diff = np.zeros((height + 1, width + 1))
    for rows, cols, sign in ((r0, c0, 1), (r0, c1, -1), (r1, c0, -1), (r1, c1, 1)):
        np.add.at(diff, (rows, cols), sign * scores)
    return np.cumsum(np.cumsum(diff, axis=0), axis=1)[:height, :width].astype(np.float32)


def _cell_weights(size: int, cells: int) -> np.ndarray:
    """(cells, size): the fraction of each cell [k size / cells, (k + 1) size / cells]
    that pixel [i, i + 1] covers, so that weights @ values is each cell's mean."""
    edges = np.arange(cells + 1) * (size / cells)
    pixel = np.arange(size)
    overlap = (np.minimum(pixel[None, :] + 1, edges[1:, None])
               - np.maximum(pixel[None, :], edges[:-1, None]))
    return np.maximum(overlap, 0) / (size / cells)


def _cell_means(values: np.ndarray, grid_hw) -> np.ndarray:
    """(gh, gw): the mean of `values` (H, W) over each of gh x gw equal cells. Where the
    cells hold whole pixels (H, W multiples of gh, gw: the training regions, whose
    window the feature cells tile) a reshape and a sum; else the area weights as two
    matrix products. The sum keeps the pair samplers off BLAS: they run on reader
    threads, and OpenBLAS calls from many threads at once wait on each other (on a
    456 x 456 map, side by side beside another job: the products 27 ms, the reshape
    0.4 ms)."""
    (height, width), (gh, gw) = values.shape, grid_hw
    if height % gh == 0 and width % gw == 0:
        return values.reshape(gh, height // gh, gw, width // gw).mean(axis=(1, 3))
    means = _cell_weights(height, gh) @ values
    return means @ _cell_weights(width, gw).T


def grid_softmax(score_map, grid_hw, *, temperature=1.0) -> np.ndarray:
    """(gh, gw) float32 summing to 1: the score map averaged over each of gh x gw equal
    cells of the frame (exact area weights where the cells split pixels), then
    softmax(mean / temperature) over the cells: the TOP map h on a feature grid (SoCL
    sec. 3.1: "the softmax function (over locations) is then applied to the score map")."""
    values = np.asarray(score_map, np.float64)
    if values.ndim != 2 or min(values.shape) < 1 or not np.all(np.isfinite(values)):
        raise ValueError(f"score_map must be a finite (H, W) array, got shape {values.shape}")
    if len(grid_hw) != 2 or not all(_is_int(v) for v in grid_hw) or min(grid_hw) < 1:
        raise _range_error("grid_hw", "(gh, gw) with integers gh, gw >= 1", grid_hw)
    if not temperature > 0:
        raise _range_error("temperature", "> 0", temperature)
    means = _cell_means(values, grid_hw)
    logits = means / temperature
    weights = np.exp(logits - logits.max())
    return (weights / weights.sum()).astype(np.float32)


