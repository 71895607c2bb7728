"""Objectness of image windows: the multi-scale saliency, colour contrast and edge
density cues of Alexe et al. 2012 ("Measuring the objectness of image windows", TPAMI,
sec. 3.1-3.3; the superpixel straddling cue left out, as SoCL does: Wu & Chan,
sec. 3.1), and the edge maps fed to EdgeBoxes (Zitnick & Dollar 2014).

Every cue is a per-pixel map of the (downscaled) cue image plus a window score read from
integral images, so that thousands of windows cost a few gathers each and no loop runs
over windows. Windows are integer pixel ranges `rects` (K, 4) int: rows r0:r1 and
columns c0:c1 (half-open) of the cue image, made by `box_rects` from xywh boxes.
"""

from __future__ import annotations

import cv2
import numpy as np
import scipy.stats


def integral_image(values, dtype=np.float64) -> np.ndarray:
    """(H, W, ...) -> (H + 1, W + 1, ...): entry (r, c) is the sum of values[:r, :c]
    (Viola & Jones's summed-area table, a zero first row and column). An unsigned
    integer dtype may wrap: `window_sums` still returns exact counts below its range,
    since the four-corner sum is exact modulo 2^bits."""
    values = np.asarray(values)
    out = np.zeros((values.shape[0] + 1, values.shape[1] + 1) + values.shape[2:], dtype)
    out[1:, 1:] = values
    np.cumsum(out, axis=0, out=out)
    np.cumsum(out, axis=1, out=out)
    return out


def window_sums(integral: np.ndarray, rects: np.ndarray) -> np.ndarray:
    """(K, ...) sums of the values inside each rect (r0, r1, c0, c1), half-open, from
    an `integral_image`: four gathers per window. Unsigned integrals stay unsigned."""
    r0, r1, c0, c1 = (rects[:, i] for i in range(4))
    return integral[r1, c1] - integral[r0, c1] - integral[r1, c0] + integral[r0, c0]


def box_rects(boxes, scale_xy, shape_hw, factor: float = 1.0) -> np.ndarray:
    """xywh boxes (K, 4) of the full frame (1-indexed GOT-10k convention: the box covers
    [x - 1, x - 1 + w] between pixel edges, 0-indexed) -> rects (K, 4) int of an image
    resized by `scale_xy` = (sx, sy) to `shape_hw`, after scaling each box about its
    centre by `factor` (the rings of the colour contrast and edge density cues). A pixel
    belongs to a window when its centre lies inside, [left, right); each rect is
    clipped to the image and holds at least one pixel."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    height, width = shape_hw
    out = []
    for origin, size, scale, limit in ((1, 3, scale_xy[1], height),
                                       (0, 2, scale_xy[0], width)):
        centre = (boxes[:, origin] - 1 + boxes[:, size] / 2) * scale
        half = boxes[:, size] * scale * factor / 2
        lo = np.clip(np.ceil(centre - half - 0.5), 0, limit - 1)
        hi = np.clip(np.ceil(centre + half - 0.5), lo + 1, limit)
        out += [lo, hi]
    return np.stack(out, axis=1).astype(np.intp)


def downscaled(image: np.ndarray, longer_side: int) -> tuple[np.ndarray, tuple]:
    """The image resized (area interpolation) so that its longer side is at most
    `longer_side` (a smaller image is kept as it is), and the scale (sx, sy) to it."""
    height, width = image.shape[:2]
    factor = min(1.0, longer_side / max(height, width))
    if factor == 1.0:
        return image, (1.0, 1.0)
    size = (max(8, round(width * factor)), max(8, round(height * factor)))
    small = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
    return small, (size[0] / width, size[1] / height)


def rect_areas(rects: np.ndarray) -> np.ndarray:
    return ((rects[:, 1] - rects[:, 0]) * (rects[:, 3] - rects[:, 2])).astype(np.float64)


# -- multi-scale saliency (Alexe et al. 2012, sec. 3.1; Hou & Zhang 2007) -------------


def spectral_residual_saliency(image, size: int, blur: float) -> np.ndarray:
    """(size, size) spectral residual saliency (Hou & Zhang 2007, "Saliency detection: a
    spectral residual approach", CVPR, sec. 2) of `image` (H, W, C) float resized to
    size x size: per channel, R = log|F| - (3x3 mean of log|F|); S = |F^-1[exp(R + iP)]|^2
    smoothed by a Gaussian of sigma blur * size; channels processed independently and
    summed (Alexe et al. 2012, sec. 3.1)."""
    small = cv2.resize(np.asarray(image, np.float32), (size, size),
                       interpolation=cv2.INTER_AREA).reshape(size, size, -1)
    spectrum = np.fft.fft2(small.astype(np.float64), axes=(0, 1))
    log_amplitude = np.log(np.abs(spectrum) + 1e-12)
    mean = cv2.blur(log_amplitude, (3, 3), borderType=cv2.BORDER_REFLECT)
    residual = log_amplitude - mean.reshape(log_amplitude.shape)
    back = np.fft.ifft2(np.exp(residual + 1j * np.angle(spectrum)), axes=(0, 1))
    saliency = (np.abs(back) ** 2).sum(axis=2)
    return cv2.GaussianBlur(saliency, (0, 0), blur * size)


def saliency_maps(image, scales, blur: float) -> np.ndarray:
    """(S, H, W) float32: `spectral_residual_saliency` at each scale, resized back to
    the image (bilinear) and divided by its maximum, so every scale spans [0, 1]."""
    height, width = image.shape[:2]
    img = np.asarray(image, np.float32) / 255.0
    maps = []
    for size in scales:
        up = cv2.resize(spectral_residual_saliency(img, int(size), blur).astype(np.float32),
                        (width, height), interpolation=cv2.INTER_LINEAR)
        maps.append(up / max(float(up.max()), 1e-12))
    return np.stack(maps)


def saliency_scores(maps: np.ndarray, rects: np.ndarray, threshold: float) -> np.ndarray:
    """(K,) multi-scale saliency MS (Alexe et al. 2012, sec. 3.1): per scale,
    sum_{p in w, I(p) >= t} I(p) x |{p in w : I(p) >= t}| / |w|; combined over scales by
    the mean (the original scores a window on the one scale it was sampled at; windows
    here are not tied to a scale, and every map is normalised to [0, 1])."""
    above = maps >= threshold
    stacked = np.concatenate([np.where(above, maps, 0), above], axis=0).transpose(1, 2, 0)
    sums = window_sums(integral_image(stacked), rects)
    n = maps.shape[0]
    per_scale = sums[:, :n] * sums[:, n:] / rect_areas(rects)[:, None]
    return per_scale.mean(axis=1)


# -- colour contrast (Alexe et al. 2012, sec. 3.2) -------------------------------------


def lab_bins(image, bins=(4, 8, 8)) -> np.ndarray:
    """(H, W) int: each pixel's bin of the LAB colour space (OpenCV's 8-bit LAB, every
    channel over 0..255) quantised uniformly into bins[0] x bins[1] x bins[2]."""
    lab = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2LAB).astype(np.intp)
    index = np.zeros(lab.shape[:2], np.intp)
    for channel, count in enumerate(bins):
        index = index * count + lab[..., channel] * count // 256
    return index


def integral_histogram(bin_map: np.ndarray) -> np.ndarray:
    """(H + 1, W + 1, B) integral histogram (Porikli 2005) over the B bins that occur
    (empty bins add nothing to a chi-square distance); unsigned 16-bit counts where the
    image has fewer than 2^16 pixels, which `window_sums` reads back exactly."""
    _, dense = np.unique(bin_map, return_inverse=True)
    dense = dense.reshape(bin_map.shape)
    height, width = bin_map.shape
    dtype = np.uint16 if height * width < 2**16 else np.uint32
    one_hot = np.zeros((height, width, int(dense.max()) + 1), dtype)
    one_hot[np.arange(height)[:, None], np.arange(width)[None, :], dense] = 1
    return integral_image(one_hot, dtype)


def colour_contrast_scores(histogram: np.ndarray, rects: np.ndarray,
                           surround_rects: np.ndarray) -> np.ndarray:
    """(K,) colour contrast CC (Alexe et al. 2012, sec. 3.2): the chi-square distance
    0.5 sum (p - q)^2 / (p + q) in [0, 1] between the normalised colour histograms of the
    window (p) and of its surrounding ring (q: the enlarged window, clipped to the image,
    minus the window); 0 where the ring is empty (a window covering the image)."""
    outer = np.concatenate([np.minimum(surround_rects, rects)[:, 0::2, None],
                            np.maximum(surround_rects, rects)[:, 1::2, None]], axis=2)
    inner = window_sums(histogram, rects)
    ring = window_sums(histogram, outer.reshape(-1, 4)) - inner  # exact modulo 2^bits
    inner, ring = inner.astype(np.float32), ring.astype(np.float32)
    inner_count = inner.sum(axis=1, keepdims=True)
    ring_count = ring.sum(axis=1, keepdims=True)
    p = inner / np.maximum(inner_count, 1)
    q = ring / np.maximum(ring_count, 1)
    total = p + q
    chi2 = 0.5 * np.sum(np.where(total > 0, (p - q) ** 2 / np.maximum(total, 1e-12), 0),
                        axis=1)
    return np.where(ring_count[:, 0] > 0, chi2, 0.0).astype(np.float64)


# -- edge density (Alexe et al. 2012, sec. 3.3) ----------------------------------------


def canny_edges(image, low: float, high: float) -> np.ndarray:
    """(H, W) float32 in {0, 1}: Canny edges (thresholds low, high) of the grey image."""
    grey = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2GRAY)
    return (cv2.Canny(grey, low, high) > 0).astype(np.float32)


def edge_density_scores(edges: np.ndarray, rects: np.ndarray,
                        inner_rects: np.ndarray) -> np.ndarray:
    """(K,) edge density ED (Alexe et al. 2012, sec. 3.3): the fraction of edge pixels in
    the inner ring (the window minus the window shrunk about its centre); 0 where the
    ring is empty. The original divides by the ring's perimeter, which grows the score
    with the window (the ring's thickness scales with it) and is balanced there by the
    learned likelihood; with rank fusion, the density over the ring's area is the cue."""
    integral = integral_image(edges)
    inside = np.all((inner_rects[:, 0::2] >= rects[:, 0::2])
                    & (inner_rects[:, 1::2] <= rects[:, 1::2]), axis=1)
    inner = np.where(inside, window_sums(integral, inner_rects), 0)
    ring = window_sums(integral, rects) - inner
    ring_area = rect_areas(rects) - np.where(inside, rect_areas(inner_rects), 0)
    return np.where(ring_area > 0, ring / np.maximum(ring_area, 1), 0.0)


def rank_normalise(values) -> np.ndarray:
    """(K,) the rank of each value among the K, over K - 1, in [0, 1] (ties share their
    mean rank; a single value gets 1). Stands in for the learned cue likelihoods of
    Alexe et al. 2012 (their naive Bayes cue integration), which are not available:
    cues on different scales become comparable, and their mean is the fused objectness."""
    values = np.asarray(values, np.float64)
    if values.size <= 1:
        return np.ones_like(values)
    return (scipy.stats.rankdata(values) - 1.0) / (values.size - 1.0)


# -- edge maps for EdgeBoxes without a structured-edge model --------------------------


def _triangle_smooth(values: np.ndarray, radius: int) -> np.ndarray:
    """Separable triangle filter of the given radius (Dollar & Zitnick's convTri)."""
    kernel = np.concatenate([np.arange(1, radius + 2), np.arange(radius, 0, -1)])
    kernel = (kernel / kernel.sum()).astype(np.float32)
    return cv2.sepFilter2D(values, -1, kernel, kernel, borderType=cv2.BORDER_REFLECT)


def thinned_sobel_edges(image) -> np.ndarray:
    """(H, W) float32 in [0, 1]: the Sobel gradient magnitude of the grey image
    (lightly triangle-smoothed, divided by its maximum), kept only where it is a local
    maximum across the edge: not below either neighbour along the gradient direction,
    quantised to 0, 45, 90 or 135 degrees (Canny's non-maximum suppression). Thinning
    is what keeps EdgeBoxes fast (Zitnick & Dollar 2014 run it on thinned edges)."""
    grey = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2GRAY)
    grey = _triangle_smooth(grey.astype(np.float32) / 255.0, 1)
    gx = cv2.Sobel(grey, cv2.CV_32F, 1, 0, ksize=3)
    gy = cv2.Sobel(grey, cv2.CV_32F, 0, 1, ksize=3)
    magnitude = np.hypot(gx, gy)
    magnitude /= max(float(magnitude.max()), 1e-12)
    direction = np.round(np.mod(np.arctan2(gy, gx), np.pi) / (np.pi / 4)).astype(np.intp) % 4
    height, width = magnitude.shape
    padded = np.pad(magnitude, 1)
    steps = ((0, 1), (1, 1), (1, 0), (1, -1))  # (dy, dx) along 0, 45, 90, 135 degrees

    def shifted(dy, dx):
        return padded[1 + dy:1 + dy + height, 1 + dx:1 + dx + width]

    ahead = np.choose(direction, [shifted(dy, dx) for dy, dx in steps])
    behind = np.choose(direction, [shifted(-dy, -dx) for dy, dx in steps])
    keep = (magnitude >= ahead) & (magnitude >= behind)
    return np.where(keep, magnitude, 0.0).astype(np.float32)


def edge_orientation(edges: np.ndarray, radius: int = 4) -> np.ndarray:
    """(H, W) float32 in [0, pi): edge orientation from second derivatives of the
    triangle-smoothed edge map, O = mod(atan(Oyy sign(-Oxy) / (Oxx + 1e-5)), pi) (the
    orientation that Zitnick & Dollar's EdgeBoxes expects alongside its edge map)."""
    smooth = _triangle_smooth(np.asarray(edges, np.float32), radius)
    ox = cv2.Sobel(smooth, cv2.CV_32F, 1, 0, ksize=3)
    oy = cv2.Sobel(smooth, cv2.CV_32F, 0, 1, ksize=3)
    oxx = cv2.Sobel(ox, cv2.CV_32F, 1, 0, ksize=3)
    oxy = cv2.Sobel(ox, cv2.CV_32F, 0, 1, ksize=3)
    oyy = cv2.Sobel(oy, cv2.CV_32F, 0, 1, ksize=3)
    return np.mod(np.arctan(oyy * np.sign(-oxy) / (oxx + 1e-5)), np.pi).astype(np.float32)


def edge_boxes(image, max_boxes: int, min_area: float) -> np.ndarray:
    """(K, 4) xywh EdgeBoxes proposals (Zitnick & Dollar 2014, OpenCV's implementation
    with its default alpha 0.65, beta 0.75) on `thinned_sobel_edges` and their
    `edge_orientation`, in pixels of `image`: x, y 1-indexed (OpenCV adds 1 to its
    0-indexed corner), best first."""
    edges = thinned_sobel_edges(image)
    finder = cv2.ximgproc.createEdgeBoxes(maxBoxes=max_boxes, minBoxArea=min_area)
    found = finder.getBoundingBoxes(edges, edge_orientation(edges))
    found = found[0] if isinstance(found, tuple) else found  # OpenCV 5: (boxes, scores)
    return np.asarray(found, np.float64).reshape(-1, 4)
