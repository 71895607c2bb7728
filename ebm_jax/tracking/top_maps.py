"""Target objectness prior (TOP) maps from a point annotation (Wu & Chan, "Learning
Tracking Representations from Single Point Annotations" (SoCL), sec. 3.1, Fig. 3).

Per frame: 5000 random boxes centred on the point (log-uniform scales and aspect ratios)
plus the EdgeBoxes proposals (Zitnick & Dollar 2014, 1000 per frame) whose centre lies
within 30 px of the point; the objectness of every box from three cues of Alexe et al.
2012 (multi-scale saliency, colour contrast, edge density; `ebm_jax.tracking.objectness`);
NMS at IoU 0.7 keeping the top 64; per pixel, the sum of the scores of the kept boxes
covering it (`score_map`); a softmax over the locations of a feature grid
(`grid_softmax`); both in `ebm_jax.ops.score_maps`, re-exported here.

    boxes, scores = top_boxes(frame, point)          # (<= 64, 4) xywh, sorted by score
    h = grid_softmax(top_map(frame, point), (17, 17))  # (17, 17), sums to 1

The softmax's temperature (the paper names none) can be set per feature grid from the
proposals alone (`calibrate_temperature`): the temperature at which the theta_b mass of
the maps covers about as many cells as the target's extent estimated from the kept
proposals (`proposal_extent`, `box_cells`), no box needed.

Conventions: frames are uint8 RGB (H, W, 3); boxes are (x, y, w, h) in the GOT-10k / OTB
convention (1-indexed pixels: a box covers [x - 1, x - 1 + w] between pixel edges,
0-indexed), and a point (x, y) is a box centre in that convention, x + (w - 1) / 2, as
the tracking sets write `points.txt`. A box covers pixel (i, j) (0-indexed) when the
pixel's centre lies inside it: x - 1.5 <= j < x + w - 1.5, likewise for rows.

The cues and EdgeBoxes run on a copy whose longer side is `cue_size` px (smaller frames
are not enlarged); boxes are scaled back. The cue fusion is a stand-in for the original's
learned likelihoods (see `objectness`). Every step is a pure function of the frame, the
point and a seed.
"""

from __future__ import annotations

import dataclasses
import math

import cv2
import numpy as np

from ebm_jax.ops.boxes import box_iou_np, check_xywh_boxes
from ebm_jax.ops.boxes import greedy_nms as nms
from ebm_jax.ops.score_maps import grid_softmax, score_map
from ebm_jax.tracking import objectness as cues

__all__ = ["TEMPERATURE_CANDIDATES", "TopMapSettings", "box_cells", "calibrate_temperature",
           "edgebox_proposals", "grid_softmax", "mass_cells", "nms", "objectness",
           "proposal_extent", "pseudo_box", "random_proposals", "recall_at", "retemper",
           "score_map", "top_boxes", "top_map"]


def _range_error(name: str, allowed: str, value) -> ValueError:
    return ValueError(f"{name} must be {allowed}, got {value!r}")


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class TopMapSettings:
    """Settings of the TOP map (SoCL sec. 3.1) and of its cues (Alexe et al. 2012)."""

    num_random: int = 5000  # random proposals centred on the point
    scale_range: tuple = (0.05, 0.9)  # sqrt(w h) / shorter frame side, log-uniform
    aspect_range: tuple = (1 / 3, 3.0)  # w / h, log-uniform
    edgeboxes: int = 1000  # EdgeBoxes proposals per frame (maxBoxes); 0: none
    edgebox_radius: float = 30.0  # px of the frame: EdgeBoxes centres kept near the point
    edgebox_min_area: float = 0.005  # minBoxArea / the cue image's area (~1000 / 500x375)
    nms_iou: float = 0.7
    keep: int = 64  # proposals kept after NMS
    cue_size: int = 200  # px: the longer side of the copy the cues and EdgeBoxes run on
    saliency_scales: tuple = (16, 24, 32, 48, 64)  # px: spectral residual image sides
    saliency_blur: float = 0.015  # Gaussian sigma over the scale (about 1 px at 64 px)
    saliency_threshold: float = 0.35  # theta_s on maps normalised to [0, 1]
    colour_bins: tuple = (4, 8, 8)  # LAB quantisation
    colour_surround: float = 1.33  # the surrounding window's side over the window's
    edge_inner: float = 0.75  # the inner window's side over the window's (ED's ring)
    canny: tuple = (50.0, 150.0)  # Canny hysteresis thresholds

    def __post_init__(self):
        ints = {"num_random": (1, 10**6), "edgeboxes": (0, 10**5), "keep": (1, 10**6),
                "cue_size": (16, 4096)}
        for name, (low, high) in ints.items():
            value = getattr(self, name)
            if not _is_int(value) or not low <= value <= high:
                raise _range_error(f"TopMapSettings.{name}", f"an integer in [{low}, {high}]",
                                   value)
        floats = {"edgebox_radius": (0.0, math.inf, "[0, inf)"),
                  "edgebox_min_area": (0.0, 1.0, "(0, 1)"), "nms_iou": (0.0, 1.0, "(0, 1]"),
                  "saliency_blur": (0.0, 1.0, "(0, 1]"),
                  "saliency_threshold": (0.0, 1.0, "[0, 1)"),
                  "colour_surround": (1.0, 4.0, "(1, 4]"), "edge_inner": (0.0, 1.0, "(0, 1)")}
        for name, (low, high, text) in floats.items():
            value = getattr(self, name)
            if (not isinstance(value, (int, float, np.number)) or isinstance(value, bool)
                    or not (value >= low if text[0] == "[" else value > low)
                    or not (value <= high if text[-1] == "]" else value < high)):
                raise _range_error(f"TopMapSettings.{name}", f"a number in {text}", value)
        for name, low, high in (("scale_range", 1e-3, 4.0), ("aspect_range", 0.01, 100.0),
                                ("canny", 0.0, 1e4)):
            value = getattr(self, name)
            if np.shape(value) != (2,) or not low <= value[0] <= value[1] <= high:
                raise _range_error(f"TopMapSettings.{name}",
                                   f"(low, high) with {low:g} <= low <= high <= {high:g}",
                                   value)
        for name, count, low, high in (("saliency_scales", None, 4, 1024),
                                       ("colour_bins", 3, 1, 64)):
            value = tuple(getattr(self, name))
            if (not value or (count and len(value) != count)
                    or not all(_is_int(v) and low <= v <= high for v in value)):
                size = f"{count} " if count else ""
                raise _range_error(f"TopMapSettings.{name}",
                                   f"a tuple of {size}integers in [{low}, {high}]", value)


def _check_image(image, name: str = "image") -> np.ndarray:
    if (not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3
            or image.shape[2] != 3 or min(image.shape[:2]) < 8):
        raise ValueError(f"{name} must be a uint8 RGB array of shape (H, W, 3) with H, W >= "
                         f"8, got shape {np.shape(image)} and dtype {np.asarray(image).dtype}")
    return image


def _check_point(point, shape_hw, name: str = "point") -> np.ndarray:
    height, width = shape_hw
    xy = np.asarray(point, np.float64) if np.size(point) == 2 else None
    if (xy is None or not np.all(np.isfinite(xy)) or not 0.5 <= xy.ravel()[0] <= width + 0.5
            or not 0.5 <= xy.ravel()[1] <= height + 0.5):
        raise ValueError(f"{name} must be (x, y) inside the {height}x{width} image, 0.5 <= x "
                         f"<= {width + 0.5} and 0.5 <= y <= {height + 0.5} (1-indexed "
                         f"pixels), got {point!r}")
    return xy.ravel()


def _check_settings(settings) -> TopMapSettings:
    if not isinstance(settings, TopMapSettings):
        raise ValueError(f"settings must be a TopMapSettings, got {type(settings).__name__}")
    return settings


def random_proposals(image_shape, point, settings, rng) -> np.ndarray:
    """(num_random, 4) xywh boxes centred on `point` (SoCL sec. 3.1: "5000 random
    proposals centered at P_i with various scales and aspect ratios"): sqrt(w h) =
    s x the shorter frame side with s log-uniform in `scale_range`, w / h log-uniform in
    `aspect_range`; x = px - (w - 1) / 2, so each box's centre is the point exactly."""
    settings = _check_settings(settings)
    if len(image_shape) < 2 or min(image_shape[:2]) < 1:
        raise ValueError(f"image_shape must be (H, W[, 3]) with H, W >= 1, got {image_shape}")
    px, py = _check_point(point, image_shape[:2])
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    n = settings.num_random
    scale = np.exp(rng.uniform(*np.log(settings.scale_range), n)) * min(image_shape[:2])
    root_aspect = np.exp(rng.uniform(*np.log(settings.aspect_range), n) / 2)
    w, h = scale * root_aspect, scale / root_aspect
    return np.stack([px - (w - 1) / 2, py - (h - 1) / 2, w, h], axis=1)


def _edgeboxes_on(small, scale_xy, point, settings) -> np.ndarray:
    if settings.edgeboxes == 0:
        return np.zeros((0, 4))
    min_area = max(16.0, settings.edgebox_min_area * small.shape[0] * small.shape[1])
    boxes = cues.edge_boxes(small, settings.edgeboxes, min_area)
    sx, sy = scale_xy
    boxes = np.stack([(boxes[:, 0] - 1) / sx + 1, (boxes[:, 1] - 1) / sy + 1,
                      boxes[:, 2] / sx, boxes[:, 3] / sy], axis=1)
    centres = boxes[:, :2] + (boxes[:, 2:] - 1) / 2
    return boxes[np.hypot(*(centres - point).T) <= settings.edgebox_radius]


def edgebox_proposals(image, point, settings) -> np.ndarray:
    """(K, 4) xywh EdgeBoxes proposals (Zitnick & Dollar 2014; `settings.edgeboxes` per
    frame) whose centre lies within `edgebox_radius` px of the point (SoCL sec. 3.1).
    Without the structured-edge model, the edge map is a Sobel magnitude thinned across
    the edge, with orientations from its smoothed second derivatives
    (`objectness.thinned_sobel_edges`, `objectness.edge_orientation`); computed on the
    cue-size copy, minBoxArea = edgebox_min_area x its area (at least 16 px)."""
    image = _check_image(image)
    settings = _check_settings(settings)
    point = _check_point(point, image.shape[:2])
    small, scale_xy = cues.downscaled(image, settings.cue_size)
    return _edgeboxes_on(small, scale_xy, point, settings)


def _objectness_on(small, scale_xy, boxes, settings) -> np.ndarray:
    shape = small.shape[:2]
    rects = cues.box_rects(boxes, scale_xy, shape)
    surround = cues.box_rects(boxes, scale_xy, shape, settings.colour_surround)
    inner = cues.box_rects(boxes, scale_xy, shape, settings.edge_inner)
    maps = cues.saliency_maps(small, settings.saliency_scales, settings.saliency_blur)
    histogram = cues.integral_histogram(cues.lab_bins(small, settings.colour_bins))
    edges = cues.canny_edges(small, *settings.canny)
    raw = (cues.saliency_scores(maps, rects, settings.saliency_threshold),
           cues.colour_contrast_scores(histogram, rects, surround),
           cues.edge_density_scores(edges, rects, inner))
    return np.mean([cues.rank_normalise(r) for r in raw], axis=0)


def objectness(image, boxes, settings) -> np.ndarray:
    """(K,) objectness in [0, 1] of xywh `boxes` (SoCL sec. 3.1: Alexe et al. 2012
    without the superpixel cue): multi-scale saliency, colour contrast and edge density
    (`ebm_jax.tracking.objectness`), on the cue-size copy, each rank-normalised over
    the K boxes (rank / (K - 1)) and averaged. The original combines the cues' learned
    likelihoods in a naive Bayes model (Alexe et al. 2012); without them, the
    rank average weighs the cues equally and depends only on each cue's ordering."""
    image = _check_image(image)
    boxes = check_xywh_boxes(boxes)
    settings = _check_settings(settings)
    if len(boxes) == 0:
        return np.zeros(0)
    small, scale_xy = cues.downscaled(image, settings.cue_size)
    return _objectness_on(small, scale_xy, boxes, settings)


def top_boxes(image, point, settings=TopMapSettings(),
              seed=0) -> tuple[np.ndarray, np.ndarray]:
    """The kept proposals (<= keep, 4) xywh and their objectness, by descending score
    (SoCL sec. 3.1): random proposals (from `np.random.default_rng(seed)`) and nearby
    EdgeBoxes, scored by `objectness`, thinned by `nms` (`ebm_jax.ops.boxes.greedy_nms`)."""
    image = _check_image(image)
    settings = _check_settings(settings)
    point = _check_point(point, image.shape[:2])
    if not _is_int(seed) or seed < 0:
        raise _range_error("seed", "an integer >= 0", seed)
    small, scale_xy = cues.downscaled(image, settings.cue_size)
    boxes = np.concatenate([
        random_proposals(image.shape, point, settings, np.random.default_rng(seed)),
        _edgeboxes_on(small, scale_xy, point, settings)])
    scores = _objectness_on(small, scale_xy, boxes, settings)
    kept = nms(boxes, scores, settings.nms_iou, settings.keep)
    return boxes[kept], scores[kept]


def top_map(image, point, settings=TopMapSettings(), seed=0) -> np.ndarray:
    """(H, W) float32 score map of the kept proposals, `score_map(top_boxes(...))`
    (SoCL sec. 3.1, before the softmax over locations: see `grid_softmax`)."""
    boxes, scores = top_boxes(image, point, settings, seed)
    return score_map(image.shape[:2], boxes, scores)


def pseudo_box(score_map, point, alpha) -> np.ndarray:
    """(4,) xywh pseudo ground truth from a score map (SoCL sec. 4.2, Fig. 8, BCE-Siam):
    the bounding box of the 8-connected region of pixels with score >= alpha x max that
    holds the point's pixel, or else the region of the such pixel nearest the point."""
    values = np.asarray(score_map, np.float64)
    if values.ndim != 2 or min(values.shape) < 1 or not np.all(np.isfinite(values)):
        raise ValueError(f"score_map must be a finite (H, W) array, got shape {values.shape}")
    xy = _check_point(point, values.shape)
    if not 0 < alpha <= 1:
        raise _range_error("alpha", "in (0, 1]", alpha)
    mask = values >= alpha * values.max()
    _, labels, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8),
                                                           connectivity=8)
    height, width = values.shape
    row = min(max(math.floor(xy[1] - 0.5), 0), height - 1)
    col = min(max(math.floor(xy[0] - 0.5), 0), width - 1)
    if not mask[row, col]:
        rows, cols = np.nonzero(mask)
        nearest = np.argmin(np.hypot(cols + 1 - xy[0], rows + 1 - xy[1]))
        row, col = rows[nearest], cols[nearest]
    x0, y0, w, h = stats[labels[row, col], :4]
    return np.array([x0 + 1, y0 + 1, w, h], np.float64)


def recall_at(kept_boxes_per_frame: list[np.ndarray], true_boxes: np.ndarray, ks,
              iou=0.5) -> np.ndarray:
    """(len(ks),) for each k, the fraction of frames whose first k kept boxes hold one
    with IoU >= iou with the true box (SoCL Fig. 4: target recall against the number of
    kept proposals, IoU 0.5). Frames whose true box is NaN (absent) are not counted;
    NaN where no frame counts."""
    true_boxes = np.asarray(true_boxes, np.float64)
    if true_boxes.ndim != 2 or true_boxes.shape[1] != 4:
        raise ValueError(f"true_boxes must be an (N, 4) array, got shape {true_boxes.shape}")
    if len(kept_boxes_per_frame) != len(true_boxes):
        raise ValueError(f"kept_boxes_per_frame has {len(kept_boxes_per_frame)} frames but "
                         f"true_boxes has {len(true_boxes)}; they must match")
    ks = np.asarray(ks)
    if ks.ndim != 1 or not np.issubdtype(ks.dtype, np.integer) or np.any(ks < 1):
        raise _range_error("ks", "a 1-D sequence of integers >= 1", ks.tolist())
    if not 0 < iou <= 1:
        raise _range_error("iou", "in (0, 1]", iou)
    firsts = []
    for frame, (kept, truth) in enumerate(zip(kept_boxes_per_frame, true_boxes)):
        if np.any(np.isnan(truth)):
            continue
        kept = check_xywh_boxes(np.asarray(kept).reshape(-1, 4), f"kept_boxes_per_frame[{frame}]")
        hits = np.flatnonzero(np.clip(box_iou_np(kept, truth), 0.0, 1.0) >= iou)
        firsts.append(hits[0] if hits.size else np.inf)
    if not firsts:
        return np.full(len(ks), np.nan)
    return (np.asarray(firsts)[None, :] < ks[:, None]).mean(axis=1)


# --------------------------------------------------------------------------- temperature

# The temperatures `calibrate_temperature` chooses from: 2^(k/2), 0.5 to 64
TEMPERATURE_CANDIDATES = tuple(2.0 ** (k / 2) for k in range(-2, 13))


def proposal_extent(boxes, scores, top: int = 8) -> np.ndarray:
    """(2,) (w, h) in frame px: the target's extent estimated without its box, the
    score-weighted mean width and height of the `top` best kept TOP proposals (rows of
    NaN, where a frame kept fewer, are skipped; equal weights when every score is 0).
    `top_boxes` sorts its proposals by score; at 8 they hold the target at IoU 0.5 in
    90% of the quick profile's training frames (SoCL Fig. 4's recall, docs/socl.md)."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    scores = np.asarray(scores, np.float64).reshape(-1)
    if len(scores) != len(boxes):
        raise ValueError(f"scores ({len(scores)}) must match boxes ({len(boxes)})")
    if not _is_int(top) or top < 1:
        raise _range_error("top", "an integer >= 1", top)
    ok = np.all(np.isfinite(boxes), axis=1) & np.isfinite(scores)
    boxes, scores = boxes[ok][:top], scores[ok][:top]
    if not len(boxes):
        raise ValueError("proposal_extent needs at least one finite proposal")
    w = np.clip(scores, 0.0, None)
    w = np.ones_like(w) if w.sum() <= 0 else w
    return (w[:, None] * boxes[:, 2:]).sum(0) / w.sum()


def box_cells(box, grid) -> np.ndarray:
    """(g, g) bool: the cells of a feature grid whose centre lies inside `box` (xywh in
    the grid's input pixels, 1-indexed as `top_maps`' boxes; the coverage rule of the
    module docstring), or, where none does, the one cell nearest the box's centre.
    grid = (g, stride, offset): cell k is centred on input pixel offset + stride k
    (0-indexed; a backbone's `embedding_grid(size)`)."""
    x, y, w, h = (float(v) for v in np.asarray(box, np.float64).reshape(4))
    g, stride, offset = grid
    if not (_is_int(g) and g >= 1 and stride > 0) or not np.all(np.isfinite([x, y, w, h])):
        raise ValueError(f"box must be finite xywh and grid (g >= 1, stride > 0, offset), "
                         f"got {box!r}, {grid!r}")
    centres = offset + stride * np.arange(g)
    cols = (centres >= x - 1.5) & (centres < x + w - 1.5)
    rows = (centres >= y - 1.5) & (centres < y + h - 1.5)
    mask = rows[:, None] & cols[None, :]
    if not mask.any():
        cx, cy = x - 1 + (w - 1) / 2, y - 1 + (h - 1) / 2  # 0-indexed centre
        mask[np.argmin(np.abs(centres - cy)), np.argmin(np.abs(centres - cx))] = True
    return mask


def retemper(h, temperature) -> np.ndarray:
    """(..., gh, gw) float64: TOP maps at temperature T from the same maps at 1
    (`grid_softmax`: softmax(m / T) is proportional to softmax(m)^(1 / T)), each summing
    to 1. Cells at 0 (float underflow at T = 1) are floored at the smallest float32."""
    if not (isinstance(temperature, (int, float, np.number)) and np.isfinite(temperature)
            and temperature > 0):
        raise _range_error("temperature", "a finite number > 0", temperature)
    h = np.asarray(h, np.float64)
    logits = np.log(np.maximum(h, np.finfo(np.float32).tiny)) / float(temperature)
    axes = (-2, -1)
    e = np.exp(logits - logits.max(axis=axes, keepdims=True))
    return e / e.sum(axis=axes, keepdims=True)


def mass_cells(h, theta) -> np.ndarray:
    """(N,) int: the number of cells of each TOP map (N, gh, gw) that hold `theta` of its
    mass (`ebm_jax.contrastive.socl.top_mass_mask`, SoCL eq. 5: the cells the SNS masks
    out at theta_b)."""
    from ebm_jax.contrastive.socl import top_mass_mask

    h = np.asarray(h, np.float32)
    return np.asarray(top_mass_mask(h.reshape(len(h), -1), theta)).sum(axis=1)


def calibrate_temperature(maps, target_cells, theta,
                          candidates=TEMPERATURE_CANDIDATES) -> tuple[float, dict]:
    """(T, record): the TOP maps' softmax temperature for one feature grid, from the
    maps at temperature 1 of F frames (F, g, g) and the target's estimated extent in
    cells on each (F,) (`box_cells` of the `proposal_extent` box at the point): the
    candidate whose maps' theta mass (`mass_cells`, the cells the SNS masks out at
    theta_b, SoCL eqs. 5-6) covers about the target, by the median over frames of
    mass cells / target cells closest to 1 in log; where candidates tie, the middle one.
    The count rises with T (a flatter map needs more cells for the same mass). record:
    {"candidates", "median_ratio", "frames"}."""
    maps = np.asarray(maps, np.float64)
    target = np.asarray(target_cells, np.float64).reshape(-1)
    if maps.ndim != 3 or len(maps) != len(target) or not len(maps):
        raise ValueError(f"maps must be (F, gh, gw) with F >= 1 and target_cells (F,), got "
                         f"{maps.shape} and {target.shape}")
    if not np.all(target >= 1):
        raise ValueError("target_cells must be >= 1 (box_cells gives at least one)")
    candidates = tuple(float(t) for t in candidates)
    if not candidates or not all(np.isfinite(t) and t > 0 for t in candidates):
        raise _range_error("candidates", "a non-empty tuple of finite numbers > 0",
                           candidates)
    ratios = [float(np.median(mass_cells(retemper(maps, t), theta) / target))
              for t in candidates]
    error = np.round(np.abs(np.log(ratios)), 12)
    best = np.flatnonzero(error == error.min())
    chosen = candidates[int(best[(len(best) - 1) // 2])]
    return chosen, {"candidates": list(candidates), "median_ratio": ratios,
                    "frames": int(len(maps))}
