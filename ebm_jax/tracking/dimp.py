"""DiMP's target model predictor as pure JAX functions (Bhat, Danelljan, Van Gool,
Timofte, "Learning Discriminative Model Prediction for Tracking", ICCV 2019, sec. 3).

The target model is a convolution filter f (fh x fw x C) on classification features x;
its scores s = x * f locate the target. The predictor D builds f from a few annotated
training frames in two steps, each differentiable, so that the whole predictor is
trained end to end on the test frames' classification loss (sec. 3.4):

1. the initializer (sec. 3.3): the target box's PrRoIPool of the training features,
   averaged over the frames (`initial_filter`);
2. the optimizer (sec. 3.2): `num_iter` steps of steepest descent on the
   discriminative loss (eq. 1-3)

       L(f) = 1/N sum_n || v_n . (r(x_n * f, c_n) ) ||^2 + lambda^2 ||f||^2,
       r(s, c) = m_c s + (1 - m_c) max(0, s) - y_c                          (eq. 3)

   with the step length of the Gauss-Newton approximation (eq. 5-6)

       alpha = ||g||^2 / (||J g||^2 + lambda^2 ||g||^2),   f <- f - beta alpha g,

   g the gradient of L/2 and J the Jacobian of the weighted residuals, beta a learned
   step-length factor (`steepest_descent`).

The label y_c, target mask m_c (through a sigmoid) and spatial weight v_c are learned
functions of the distance d from cell c to the target centre: linear combinations of
K triangular basis functions of d, spaced `bin_displacement` cells apart, the last one
saturating (sec. 3.2, "Learning the discriminative loss"; `distance_basis`). Their
initial values (`init_predictor_params`) are DiMP's: a Gaussian label, a mask that is
1 near the target and 0 far from it, a spatial weight of 1; lambda and beta are learned
too. Conventions as pytracking's DiMP (the `DiMPSteepestDescentGN` optimizer): a
filter of even size is applied with padding fh // 2, so the score map is one cell
larger than the features and cell (i, j) of it sits at feature position (i - 1/2,
j - 1/2); an image point c maps to score cell c / stride - (fh mod 2) / 2
(`score_center`).

Everything here is for one sequence (features (N, H, W, C), N training frames); vmap
over sequences. The test-frame loss (sec. 3.4) is `classification_loss`, DiMP's hinge
on a Gaussian label, and `iterate_weights` weighs the loss of each iterate as DiMP
trains (the initial filter, the intermediate ones together, the final one).

Coordinates are feature cells, as the project's levels place them: cell j of a level of
stride s and offset o is centred at crop pixel o + s j, so a crop-pixel point p is at
(p - o) / s cells (`to_cells`), and boxes are (x0, y0, x1, y1) in cells.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ebm_jax.ops.prroi_pool import prroi_pool


class PredictorSettings(NamedTuple):
    """The predictor's fixed sizes and initial values, as pytracking's DiMP-50 sets them
    (a 4 x 4 filter, 5 iterations, 10 basis functions 0.5 cells apart, a mask factor of
    3, lambda 0.1), with the initial label's std of 1 cell."""

    filter_size: int = 4
    num_iter: int = 5
    num_bins: int = 10  # K triangular basis functions of the distance
    bin_displacement: float = 0.5  # cells between the basis functions' peaks
    init_gauss_sigma: float = 1.0  # cells: the initial label's std
    mask_init_factor: float = 3.0  # the initial mask: sigmoid(factor * tanh(2 - d))
    init_step_length: float = 1.0  # beta
    init_filter_reg: float = 0.1  # lambda
    min_filter_reg: float = 1e-3  # lambda is kept >= this (stability)

    def check(self) -> None:
        """One ValueError naming the setting and its range."""
        if not (isinstance(self.filter_size, int) and self.filter_size >= 1):
            raise ValueError(f"filter_size must be an integer >= 1, got {self.filter_size!r}")
        if not (isinstance(self.num_iter, int) and self.num_iter >= 0):
            raise ValueError(f"num_iter must be an integer >= 0, got {self.num_iter!r}")
        if not (isinstance(self.num_bins, int) and self.num_bins >= 2):
            raise ValueError(f"num_bins must be an integer >= 2, got {self.num_bins!r}")
        for name in ("bin_displacement", "init_gauss_sigma", "init_step_length",
                     "init_filter_reg", "min_filter_reg"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")


def init_predictor_params(settings: PredictorSettings = PredictorSettings()) -> dict:
    """The learned parameters of the predictor at DiMP's initial values: the weights of
    the label, mask and spatial-weight functions over the basis, log beta and lambda."""
    settings.check()
    d = jnp.arange(settings.num_bins, dtype=jnp.float32) * settings.bin_displacement
    gauss = jnp.exp(-0.5 * (d / settings.init_gauss_sigma) ** 2)
    return {
        "label": gauss - gauss.min(),
        "mask": settings.mask_init_factor * jnp.tanh(2.0 - d),
        "spatial": jnp.ones_like(d),
        "log_step_length": jnp.asarray(math.log(settings.init_step_length), jnp.float32),
        "filter_reg": jnp.asarray(settings.init_filter_reg, jnp.float32),
    }


def score_size(feature_hw: tuple[int, int], filter_size: int) -> tuple[int, int]:
    """The score map's size: the features' plus one for an even filter."""
    pad = (filter_size + 1) % 2
    return feature_hw[0] + pad, feature_hw[1] + pad


def to_cells(points, stride: float, offset: float = 0.0):
    """Crop-pixel coordinates (points or xyxy boxes) -> feature cells of a level of
    `stride` whose cell 0 is centred at crop pixel `offset`."""
    return (jnp.asarray(points, jnp.float32) - offset) / stride


def grid_cells(crop_size: int, stride: float, offset: float) -> int:
    """Cells per side of a level of `stride` whose cell 0 is centred at crop pixel
    `offset` (and, symmetrically, its last cell at `crop_size - 1 - offset` or before):
    floor((crop_size - 1 - 2 offset) / stride) + 1. One ValueError when the crop is
    smaller than the level's first cell needs."""
    n = int((crop_size - 1 - 2 * offset) // stride) + 1
    if n < 1:
        raise ValueError(f"crop_size {crop_size} px gives no feature cell on a level of "
                         f"stride {stride:g} whose first cell is centred at {offset:g} px; "
                         f"crop_size must be >= {int(2 * offset + 1)}")
    return n


def crop_context(crop_size: int, stride: float, offset: float) -> float:
    """The crop's side over the side its feature grid covers (`grid_cells` x `stride`
    px). DiMP's search area (`search_area_factor` x sqrt(w h), DiMP sec. 3.5 and
    pytracking) is the region its score map covers: on a padded ResNet that is the whole
    crop (context 1); on a level of valid convolutions (SiamFC's AlexNet) the grid covers
    only the crop's middle, so the crop is cut `crop_context` times larger than the
    search area, or targets the test frames place near its border fall off the grid."""
    return crop_size / (grid_cells(crop_size, stride, offset) * stride)


def score_center(center_xy: jax.Array, filter_size: int) -> jax.Array:
    """(..., 2) points (x, y) in cells -> (..., 2) score-map coordinates (row, col): an
    even filter's score cell i sits at feature position i - 1/2 (pytracking's
    c / stride - (fh mod 2) / 2 with its cells centred at (j + 1/2) stride)."""
    c = jnp.asarray(center_xy)[..., ::-1]
    return c + ((filter_size + 1) % 2) / 2.0


def distance_basis(center_yx: jax.Array, out_hw: tuple[int, int], num_bins: int,
                   bin_displacement: float) -> jax.Array:
    """(H, W, K) triangular basis functions of each cell's distance d (in cells) to
    `center_yx`: phi_k(d) = max(0, 1 - |d / delta - k|) for k < K - 1, and the last
    clip(1 + d / delta - (K - 1), 0, 1), which stays 1 beyond its peak. They sum to 1
    at every d >= 0, so weights all equal to w give the constant w (DiMP sec. 3.2)."""
    i = jnp.arange(out_hw[0], dtype=jnp.float32)[:, None]
    j = jnp.arange(out_hw[1], dtype=jnp.float32)[None, :]
    d = jnp.sqrt((i - center_yx[0]) ** 2 + (j - center_yx[1]) ** 2)
    t = d[..., None] / bin_displacement - jnp.arange(num_bins, dtype=jnp.float32)
    inner = jnp.maximum(0.0, 1.0 - jnp.abs(t[..., :-1]))
    last = jnp.clip(1.0 + t[..., -1:], 0.0, 1.0)
    return jnp.concatenate([inner, last], axis=-1)


class ResidualMaps(NamedTuple):
    """The learned functions of the distance on a score map: the label y, the target
    mask m in (0, 1) and the spatial weight v (each (..., H, W))."""

    label: jax.Array
    mask: jax.Array
    weight: jax.Array


def residual_maps(params: dict, basis: jax.Array) -> ResidualMaps:
    """y, m, v of DiMP eq. 3 from the basis (..., H, W, K)."""
    return ResidualMaps(label=basis @ params["label"],
                        mask=jax.nn.sigmoid(basis @ params["mask"]),
                        weight=basis @ params["spatial"])


def apply_filter(features: jax.Array, filt: jax.Array) -> jax.Array:
    """Scores (N, H', W') of features (N, H, W, C) correlated with a filter (fh, fw, C),
    zero padding fh // 2 (fw // 2): DiMP's target model."""
    fh, fw = filt.shape[:2]
    out = jax.lax.conv_general_dilated(
        features, filt[..., None], window_strides=(1, 1),
        padding=((fh // 2, fh // 2), (fw // 2, fw // 2)),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
        precision=jax.lax.Precision.HIGHEST)
    return out[..., 0]


def masked_activation(scores: jax.Array, mask: jax.Array) -> jax.Array:
    """m s + (1 - m) max(0, s): DiMP eq. 3's score activation."""
    return mask * scores + (1.0 - mask) * jnp.maximum(scores, 0.0)


def _activation_slope(scores: jax.Array, mask: jax.Array) -> jax.Array:
    """The activation's derivative in s (taking max(0, s)' = 1 where s > 0)."""
    return mask + (1.0 - mask) * (scores > 0).astype(scores.dtype)


def filter_reg(params: dict, settings: PredictorSettings) -> jax.Array:
    """lambda^2, with lambda kept at least `min_filter_reg`."""
    return jnp.maximum(params["filter_reg"] ** 2, settings.min_filter_reg ** 2)


def discriminative_loss(filt: jax.Array, features: jax.Array, maps: ResidualMaps,
                        reg: jax.Array, sample_weight: jax.Array | None = None) -> jax.Array:
    """L(f) of DiMP eq. 1-3 for one sequence: sum over the N training frames of
    w_n ||v . r(x_n * f)||^2 plus lambda^2 ||f||^2; w_n = 1 / N unless given (the
    tracker's sample memory weights its samples)."""
    n = features.shape[0]
    w = jnp.full((n,), 1.0 / n) if sample_weight is None else sample_weight
    s = apply_filter(features, filt)
    r = maps.weight * (masked_activation(s, maps.mask) - maps.label)
    return jnp.sum(w[:, None, None] * r ** 2) + reg * jnp.sum(filt ** 2)


def steepest_descent(filt: jax.Array, features: jax.Array, maps: ResidualMaps,
                     reg: jax.Array, step_factor: jax.Array, num_iter: int,
                     sample_weight: jax.Array | None = None):
    """`num_iter` Gauss-Newton steepest-descent steps on `discriminative_loss` (DiMP
    sec. 3.2, eq. 5-6). Returns (the final filter, the iterates (num_iter + 1, ...)
    starting with `filt`, the loss before each step and after the last
    (num_iter + 1,)). Differentiable in everything (the step lengths included)."""
    n = features.shape[0]
    w = jnp.full((n,), 1.0 / n) if sample_weight is None else sample_weight
    sw = jnp.sqrt(w)[:, None, None] * maps.weight  # the residuals' weights

    def step(f, _):
        s, apply_t = jax.vjp(lambda g: apply_filter(features, g), f)
        act = masked_activation(s, maps.mask)
        slope = _activation_slope(s, maps.mask)
        r = sw * (act - maps.label)
        loss = jnp.sum(r ** 2) + reg * jnp.sum(f ** 2)
        (grad,) = apply_t(slope * sw * r)
        grad = grad + reg * f
        jg = sw * slope * apply_filter(features, grad)  # the Jacobian applied to g
        num = jnp.sum(grad ** 2)
        # den >= lambda^2 num > 0 wherever g != 0; only g = 0 needs the guard (a floor
        # such as pytracking's 1e-8 would shrink the steps near the minimum)
        den = jnp.maximum(jnp.sum(jg ** 2) + reg * num, jnp.finfo(num.dtype).tiny)
        f_new = f - step_factor * (num / den) * grad
        return f_new, (f_new, loss)

    final, (iterates, losses) = jax.lax.scan(step, filt, None, length=num_iter)
    last = discriminative_loss(final, features, maps, reg, sample_weight)
    return (final, jnp.concatenate([filt[None], iterates]),
            jnp.concatenate([losses, last[None]]))


def initial_filter(features: jax.Array, boxes: jax.Array, filter_size: int,
                   sample_weight: jax.Array | None = None) -> jax.Array:
    """DiMP's initializer (sec. 3.3): the PrRoIPool (`filter_size` bins) of each training
    frame's target box (N, 4) in cells on its features (N, H, W, C), averaged over the
    frames (weighted by `sample_weight` where given): (filter_size, filter_size, C)."""
    pooled = jax.vmap(lambda f, b: prroi_pool(f, b[None], output_size=filter_size,
                                              aligned=False)[0])(features, boxes)
    if sample_weight is None:
        return jnp.mean(pooled, axis=0)
    w = sample_weight / jnp.sum(sample_weight)
    return jnp.tensordot(w, pooled, axes=1)


def predict_filter(params: dict, settings: PredictorSettings, features: jax.Array,
                   boxes: jax.Array, num_iter: int | None = None,
                   sample_weight: jax.Array | None = None,
                   init_features: jax.Array | None = None):
    """The whole predictor for one sequence: the initial filter pooled from the
    training frames' boxes (N, 4) in cells on `init_features` (default `features`;
    DiMP pools the initializer's own conv of them), then the optimizer on `features`.
    Returns (filter, iterates, losses)."""
    fs = settings.filter_size
    if fs > min(features.shape[1:3]):
        raise ValueError(f"filter_size {fs} must be at most the feature grid's side "
                         f"{min(features.shape[1:3])}")
    n_iter = settings.num_iter if num_iter is None else num_iter
    if n_iter < 0:
        raise ValueError(f"num_iter must be >= 0, got {n_iter}")
    f0 = initial_filter(features if init_features is None else init_features, boxes, fs,
                        sample_weight)
    centers = score_center(0.5 * (boxes[:, :2] + boxes[:, 2:]), fs)
    out_hw = score_size(features.shape[1:3], fs)
    basis = jax.vmap(lambda c: distance_basis(c, out_hw, settings.num_bins,
                                              settings.bin_displacement))(centers)
    maps = residual_maps(params, basis)
    return steepest_descent(f0, features, maps, filter_reg(params, settings),
                            jnp.exp(params["log_step_length"]), n_iter, sample_weight)


def gaussian_label(center_yx: jax.Array, out_hw: tuple[int, int], sigma: float) -> jax.Array:
    """(H, W) Gaussian of std `sigma` cells at `center_yx`: the test frames' label (DiMP
    sec. 3.4; sigma = 1/4 of the target's extent in cells)."""
    i = jnp.arange(out_hw[0], dtype=jnp.float32)[:, None]
    j = jnp.arange(out_hw[1], dtype=jnp.float32)[None, :]
    return jnp.exp(-0.5 * ((i - center_yx[0]) ** 2 + (j - center_yx[1]) ** 2) / sigma ** 2)


def classification_loss(scores: jax.Array, label: jax.Array,
                        threshold: float = 0.05) -> jax.Array:
    """DiMP's test-frame loss (sec. 3.4): the mean of l(s, z)^2 with l = s - z where the
    label z > threshold (the target) and max(0, s) elsewhere (a hinge: the background
    need only score <= 0)."""
    target = label > threshold
    err = jnp.where(target, scores - label, jnp.maximum(scores, 0.0))
    return jnp.mean(err ** 2)


def iterate_weights(num_iter: int, initial: float = 1.0, intermediate: float = 4.0,
                    final: float = 1.0) -> jax.Array:
    """(num_iter + 1,) weights of the test loss of each iterate, as DiMP trains: the
    initial filter `initial`, the intermediate iterates `intermediate` in all (shared
    equally), the final one `final` (pytracking's 100 / 400 / 100, here relative)."""
    if num_iter < 0:
        raise ValueError(f"num_iter must be >= 0, got {num_iter}")
    if num_iter == 0:
        return jnp.asarray([initial + final], jnp.float32)
    mid = [intermediate / (num_iter - 1)] * (num_iter - 1) if num_iter > 1 else []
    return jnp.asarray([initial, *mid, final], jnp.float32)


__all__ = ["PredictorSettings", "ResidualMaps", "apply_filter", "classification_loss",
           "crop_context", "discriminative_loss", "distance_basis", "filter_reg", "gaussian_label",
           "grid_cells", "init_predictor_params", "initial_filter", "iterate_weights",
           "masked_activation", "predict_filter", "residual_maps", "score_center",
           "score_size", "steepest_descent", "to_cells"]
