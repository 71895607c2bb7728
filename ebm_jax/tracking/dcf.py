"""A discriminative correlation filter tracker on deep features, as pure JAX functions:
the tracker of SoCL-CF and Res18-CF (Wu & Chan, "Learning Tracking Representations from
Single Point Annotations", sec. 3.4 "Correlation Filter Tracking" and Table 3), whose
base is ECO (Danelljan et al. 2017, "ECO: Efficient Convolution Operators for
Tracking"), here with the closed-form multi-channel filter of MOSSE / DCFNet.

    settings = DCFSettings()                 # two levels of the backbone, ECO's sizes
    tracker, params = make_dcf_tracker(backbone, settings)
    state = tracker.init(params, frame, box_xywh)
    state, box = tracker.update(params, state, frame)      # jitted
    state = tracker.relocate(state, center_yx)             # move the tracker (pseudo boxes)

The model, per feature level l with n_l x n_l cells of stride s_l crop pixels, is a
filter w_l of C_l channels; with hats for 2-D DFTs, the response of a sample z to it is
r_l = IDFT(sum_c A_lc * Z_lc / (B_l + lambda N_l)) (correlation, eq. 1-3 of Bolme et al.
2010 "MOSSE" with channels; DCFNet, Wang et al. 2017, eq. 1-2). A sample x with label y
gives A_c = Y conj(X_c) and B = sum_c |X_c|^2, the exact ridge-regression solution for one
sample (rank one, by Sherman-Morrison); the model is a running average of A and B with
the learning rate (DSST / DCFNet's model interpolation). The label is a Gaussian of std
label_sigma * sqrt(w h) (the target's size in crop pixels) at displacement 0, wrapped.

Levels are fused as ECO does, in the continuous domain: each level's response is a
trigonometric polynomial of the displacement in crop pixels (period n_l s_l), evaluated
on one grid of `grid_step` crop pixels, and the levels' responses are summed with
`level_weights`. The new sample for the model update is the detection sample at the
chosen scale, shifted in the Fourier domain so that the estimate sits at displacement 0
(ECO's `shift_sample`): no second backbone pass per frame.

Scale: `scale_num` crops at scale_step^(-n//2 .. n//2) of the search side, one batch
through the backbone, the best (scale, displacement) by the penalised peak (ECO's
scale search over its samples; DCFNet's penalty on the non-central scales).

Left out of ECO, by choice: the factorised convolution (a learned projection of the
channels), the Gauss-Newton / conjugate-gradient solve with a spatial regularisation
window, the Gaussian-mixture sample space, training every 5 frames, Newton refinement
of the peak, and the colour-names / HOG features (SoCL-CF uses none either). What it
costs on the benchmark is measured by the Table 3 experiment against nothing finer
here (there is no ECO solver in this project to compare with); `DCFSettings` names
the knobs that stand in.

Boxes are xywh, 1-indexed (GOT-10k / OTB); crops follow `ebm_jax.ops.crops`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ebm_jax.ops.crops import (
    box_to_center,
    center_to_box,
    check_first_box,
    crop_square,
    keep_on_frame,
)


@dataclasses.dataclass(frozen=True)
class DCFSettings:
    """The correlation filter tracker's settings (defaults: ECO's where it has them,
    ECO, Danelljan et al. 2017; DCFNet's lambda and scale penalty).

    levels: backbone levels whose features the filter uses, shallow to deep; None: the
    backbone's two `dcf_levels` (AlexNet conv1 and conv5; ResNet-18 conv1 and layer3, the
    paper's), fixed by `for_backbone`. level_weights: the weight of each level's
    response in the sum; None: 1 for each level (fixed by `for_backbone`). crop_size:
    the sample's side in pixels
    fed to the backbone; search_area: the sample's side in frame pixels is search_area
    x sqrt(w h) of the target (ECO's search_area_scale 4.5). label_sigma: the label's
    std as a fraction of sqrt(w h) (ECO's output_sigma_factor 1/8). reg: lambda, as a
    fraction of the sample's mean power per frequency (features are normalised to mean
    squared value 1 per cell). learning_rate: the model's running-average rate, in
    (0, 1] (ECO 0.010; DCFNet 0.01). scale_num scales of scale_step (ECO: 5 of 1.02),
    scale_penalty on the non-central ones (DCFNet 0.9925), scale_lr the fraction of
    the chosen scale change taken. grid_step: crop pixels between the displacements
    evaluated. min_size: the smallest box side kept (frame pixels).
    """

    levels: tuple[int, ...] | None = None
    level_weights: tuple[float, ...] | None = None
    crop_size: int = 255
    search_area: float = 4.5
    label_sigma: float = 0.125
    reg: float = 1e-4
    learning_rate: float = 0.01
    scale_num: int = 5
    scale_step: float = 1.02
    scale_penalty: float = 0.9925
    scale_lr: float = 1.0
    grid_step: float = 2.0
    min_size: float = 4.0

    def __post_init__(self):
        if self.levels is not None:
            object.__setattr__(self, "levels", tuple(self.levels))
        if self.level_weights is not None:
            object.__setattr__(self, "level_weights",
                               tuple(float(w) for w in self.level_weights))
        if self.levels is not None and (not self.levels or any(
                isinstance(v, bool) or int(v) != v or v < 0 for v in self.levels)):
            raise ValueError(f"DCFSettings.levels must be backbone level indices >= 0, "
                             f"got {self.levels!r}")
        if self.levels is not None and list(self.levels) != sorted(set(self.levels)):
            raise ValueError(f"DCFSettings.levels must be increasing, got {self.levels!r}")
        count = 2 if self.levels is None else len(self.levels)
        weights = self.level_weights
        if weights is not None and (len(weights) != count or not all(
                math.isfinite(w) and w >= 0 for w in weights) or not any(
                w > 0 for w in weights)):
            raise ValueError(f"DCFSettings.level_weights must be one finite weight >= 0 "
                             f"per level ({count}), not all 0, got "
                             f"{self.level_weights!r}")
        for name in ("crop_size", "scale_num"):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or int(v) < 1:
                raise ValueError(f"DCFSettings.{name} must be an integer >= 1, got {v!r}")
        if self.scale_num % 2 == 0:
            raise ValueError(f"DCFSettings.scale_num must be odd (a central scale), "
                             f"got {self.scale_num}")
        # (low, high, whether low is excluded)
        ranges = {"search_area": (1.0, math.inf, False), "label_sigma": (0.0, math.inf, True),
                  "reg": (0.0, math.inf, True), "learning_rate": (0.0, 1.0, True),
                  "scale_step": (1.0, math.inf, False), "scale_penalty": (0.0, 1.0, True),
                  "scale_lr": (0.0, 1.0, False), "grid_step": (0.0, math.inf, True),
                  "min_size": (0.0, math.inf, True)}
        for name, (lo, hi, open_lo) in ranges.items():
            v = getattr(self, name)
            ok = (not isinstance(v, bool) and isinstance(v, (int, float))
                  and math.isfinite(v) and (v > lo if open_lo else v >= lo) and v <= hi)
            if not ok:
                raise ValueError(f"DCFSettings.{name} must be in {'(' if open_lo else '['}"
                                 f"{lo}, {hi}], got {v!r}")

    @property
    def scale_factors(self) -> np.ndarray:
        half = self.scale_num // 2
        return self.scale_step ** np.linspace(-half, half, self.scale_num)

    def for_backbone(self, backbone) -> "DCFSettings":
        """These settings with `levels` fixed: the backbone's `dcf_levels` (a module or
        its class) where None, as given otherwise; and `level_weights` 1 per level
        where None."""
        if self.levels is not None and self.level_weights is not None:
            return self
        levels = tuple(backbone.dcf_levels) if self.levels is None else self.levels
        weights = ((1.0,) * len(levels) if self.level_weights is None
                   else self.level_weights)
        return dataclasses.replace(self, levels=levels, level_weights=weights)

    def target_pixels(self) -> float:
        """sqrt(w h) of the target in crop pixels: crop_size / search_area."""
        return self.crop_size / self.search_area


# ---------------------------------------------------------------- the filter's math


def gaussian_label(n: int, sigma_cells: float) -> np.ndarray:
    """A 1-D Gaussian of std `sigma_cells` over n cells centred at displacement 0 and
    wrapped (cell i holds displacement i for i < n/2, i - n after), for the separable
    2-D label outer(g_y, g_x) (MOSSE's desired output, sec. 3)."""
    d = np.arange(n)
    d = np.where(d < (n + 1) // 2, d, d - n).astype(np.float64)
    return np.exp(-0.5 * (d / sigma_cells) ** 2)


def normalise_features(x: jax.Array) -> jax.Array:
    """Features (..., h, w, C) scaled to mean squared value 1 per cell (sum over
    channels averaged over cells), so that `reg` is relative (ECO normalises its
    features' power the same way: normalize_power 2, normalize_size)."""
    power = jnp.mean(jnp.sum(x * x, axis=-1), axis=(-2, -1), keepdims=True)[..., None]
    return x * jax.lax.rsqrt(power + 1e-12)


def filter_terms(sample_hat: jax.Array, label_hat: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One sample's terms of the closed-form multi-channel filter (MOSSE eq. 10-11 with
    channels; DCFNet eq. 2): numerator A_c = Y conj(X_c) (h, w, C) and denominator
    B = sum_c |X_c|^2 (h, w), for the sample's DFT X (h, w, C) and the label's Y (h, w)."""
    a = label_hat[..., None] * jnp.conj(sample_hat)
    b = jnp.sum(jnp.real(sample_hat * jnp.conj(sample_hat)), axis=-1)
    return a, b


def response_hat(a: jax.Array, b: jax.Array, z_hat: jax.Array, reg: float) -> jax.Array:
    """The DFT of the filter's response to a sample z (MOSSE / DCFNet):
    sum_c A_c Z_c / (B + reg * mean(B)); z_hat (..., h, w, C), A (h, w, C), B (h, w).
    reg is relative to the model's mean power per frequency."""
    denominator = b + reg * jnp.mean(b)
    return jnp.sum(a * z_hat, axis=-1) / denominator


def fourier_grid(n: int, period: float, displacements: np.ndarray) -> np.ndarray:
    """(len(displacements), n) complex matrix E with E @ R the trigonometric
    interpolation of an n-point DFT R at continuous displacements (crop pixels) of a
    signal of period `period` (ECO's continuous interpolation, eq. 3, with the ideal
    kernel): E[u, k] = exp(2 pi i f_k u / period) / n, f_k the signed frequency of bin k.
    For even n the Nyquist bin is split between +-n/2, so the result is real for a
    real signal."""
    freqs = np.fft.fftfreq(n) * n
    e = np.exp(2j * np.pi * np.outer(displacements, freqs) / period) / n
    if n % 2 == 0:
        # the Nyquist bin is half +n/2 and half -n/2: cos instead of one exponential
        e[:, n // 2] = np.cos(np.pi * n * displacements / period) / n
    return e


def shift_hat(x_hat: jax.Array, shift_cells: jax.Array) -> jax.Array:
    """The DFT (h, w, C) of a sample moved by -shift_cells (dy, dx) (continuous, band-
    limited; ECO's `shift_sample`): what sat at displacement d then sits at 0."""
    h, w = x_hat.shape[:2]
    fy = jnp.asarray(np.fft.fftfreq(h), jnp.float32)[:, None]
    fx = jnp.asarray(np.fft.fftfreq(w), jnp.float32)[None, :]
    phase = jnp.exp(2j * jnp.pi * (fy * shift_cells[0] + fx * shift_cells[1]))
    return x_hat * phase[..., None]


# ---------------------------------------------------------------- the tracker


class DCFState(NamedTuple):
    """center (2,) (cy, cx) 0-indexed; size (2,) (h, w); side () the sample's side in
    frame pixels at the central scale; pad (3,) the padding colour; numerators and
    denominators: the model per level, A (h_l, w_l, C_l) complex and B (h_l, w_l)."""

    center: jax.Array
    size: jax.Array
    side: jax.Array
    pad: jax.Array
    numerators: tuple
    denominators: tuple


class DCFTracker(NamedTuple):
    """init(params, frame, box) -> DCFState; update(params, state, frame) -> (state,
    box); relocate(state, center) -> state (the estimate moved, the model kept)."""

    init: Callable[[Any, jax.Array, jax.Array], DCFState]
    update: Callable[[Any, DCFState, jax.Array], tuple[DCFState, jax.Array]]
    relocate: Callable[[DCFState, jax.Array], DCFState]


def level_layout(backbone: nnx.Module, settings: DCFSettings) -> tuple[tuple[int, int], ...]:
    """((n_l, stride_l), ...): each level's grid side on a crop_size crop and its stride
    in crop pixels, from one abstract pass (no FLOPs)."""
    settings = settings.for_backbone(backbone)
    crop = jax.ShapeDtypeStruct((1, settings.crop_size, settings.crop_size, 3), jnp.float32)
    graph, state = nnx.split(backbone)
    shapes = jax.eval_shape(
        lambda st, x: nnx.merge(graph, st).features(x, settings.levels), state, crop)
    geometry = backbone.level_geometry(settings.levels)
    layout = []
    for level, shape, (stride, _) in zip(settings.levels, shapes, geometry):
        if shape.shape[1] != shape.shape[2] or shape.shape[1] < 2:
            raise ValueError(f"DCFSettings.crop_size {settings.crop_size} gives level "
                             f"{level} a {shape.shape[1]} x {shape.shape[2]} grid: it needs "
                             f"a square one of at least 2 x 2 cells")
        layout.append((int(shape.shape[1]), int(stride)))
    return tuple(layout)


def make_dcf_tracker(backbone: nnx.Module, settings: DCFSettings = DCFSettings(), *,
                     jit: bool = True) -> tuple[DCFTracker, Any]:
    """(tracker, params): the correlation filter tracker (module docstring) on a copy of
    `backbone` in eval mode, which needs `features(images, levels)` and
    `level_geometry(levels)` (e.g. `SiamFCAlexNet`); params = its state. init and
    update are jitted unless `jit=False`; update traces once per frame shape. Boxes are
    xywh (1-indexed). Levels: `settings.for_backbone(backbone)`."""
    s = settings.for_backbone(backbone)
    model = nnx.clone(backbone)
    model.eval()
    graph, params = nnx.split(model)
    layout = level_layout(model, s)
    # the displacement grid (crop pixels) every level covers
    half = min(n * stride for n, stride in layout) / 2
    count = int(math.floor(half / s.grid_step))
    grid = np.arange(-count, count + 1) * s.grid_step
    expanders = [jnp.asarray(fourier_grid(n, n * stride, grid), jnp.complex64)
                 for n, stride in layout]
    windows = [jnp.asarray(np.outer(np.hanning(n + 2)[1:-1], np.hanning(n + 2)[1:-1]),
                           jnp.float32) for n, _ in layout]
    sigma_px = s.label_sigma * s.target_pixels()
    labels_hat = [jnp.fft.fft2(jnp.asarray(np.outer(gaussian_label(n, sigma_px / stride),
                                                    gaussian_label(n, sigma_px / stride)),
                                           jnp.float32)) for n, stride in layout]
    factors = jnp.asarray(s.scale_factors, jnp.float32)
    penalties = jnp.asarray(np.where(np.arange(s.scale_num) == s.scale_num // 2, 1.0,
                                     s.scale_penalty), jnp.float32)
    weights = [float(w) for w in s.level_weights]

    def samples_hat(params, crops):
        """DFTs (N, n_l, n_l, C_l) of the windowed, normalised features per level."""
        levels = nnx.merge(graph, params).features(crops, s.levels)
        return [jnp.fft.fft2(normalise_features(f) * win[..., None], axes=(1, 2))
                for f, win in zip(levels, windows)]

    def init(params, frame, box) -> DCFState:
        frame = jnp.asarray(frame)
        cy, cx, h, w = box_to_center(jnp.asarray(box, jnp.float32))
        center, size = jnp.stack([cy, cx]), jnp.stack([h, w])
        side = s.search_area * jnp.sqrt(h * w)
        pad = jnp.mean(frame.astype(jnp.float32), axis=(0, 1))
        crop = crop_square(frame, center, side, s.crop_size, pad)
        terms = [filter_terms(x[0], y) for x, y in zip(samples_hat(params, crop[None]),
                                                        labels_hat)]
        return DCFState(center, size, side, pad, tuple(a for a, _ in terms),
                        tuple(b for _, b in terms))

    def update(params, state: DCFState, frame) -> tuple[DCFState, jax.Array]:
        frame = jnp.asarray(frame)
        sides = state.side * factors
        crops = jax.vmap(crop_square, in_axes=(None, None, 0, None, None))(
            frame, state.center, sides, s.crop_size, state.pad)
        z_hats = samples_hat(params, crops)
        response = 0.0
        for z_hat, a, b, e, weight in zip(z_hats, state.numerators, state.denominators,
                                          expanders, weights):
            r_hat = response_hat(a, b, z_hat, s.reg)                 # (S, n, n)
            response = response + weight * jnp.real(
                jnp.einsum("uk,skl,vl->suv", e, r_hat, e))
        peaks = jnp.max(response, axis=(1, 2)) * penalties
        scale_id = jnp.argmax(peaks)
        loc = jnp.unravel_index(jnp.argmax(response[scale_id]), response.shape[1:])
        disp_crop = jnp.asarray(grid, jnp.float32)[jnp.stack(loc)]      # (dy, dx)
        disp_frame = disp_crop * sides[scale_id] / s.crop_size
        step = (1 - s.scale_lr) + s.scale_lr * factors[scale_id]
        center, size = keep_on_frame(state.center + disp_frame, state.size * step,
                                     frame.shape, s.min_size)
        # the model update: the chosen sample moved so that the estimate sits at 0
        lr = s.learning_rate
        numerators, denominators = [], []
        for z_hat, y_hat, a, b, (_, stride) in zip(z_hats, labels_hat, state.numerators,
                                                   state.denominators, layout):
            x_hat = shift_hat(z_hat[scale_id], disp_crop / stride)
            a_new, b_new = filter_terms(x_hat, y_hat)
            numerators.append((1 - lr) * a + lr * a_new)
            denominators.append((1 - lr) * b + lr * b_new)
        side = s.search_area * jnp.sqrt(size[0] * size[1])
        new = DCFState(center, size, side, state.pad, tuple(numerators),
                       tuple(denominators))
        return new, center_to_box(center[0], center[1], size[0], size[1])

    def relocate(state: DCFState, center) -> DCFState:
        center = jnp.asarray(center, jnp.float32)
        if center.shape != (2,):
            raise ValueError(f"center must have shape (2,) as (cy, cx), got {center.shape}")
        return state._replace(center=center)

    if jit:
        init, update = jax.jit(init), jax.jit(update)

    def checked_init(params, frame, box) -> DCFState:
        check_first_box(frame, box)  # concrete, before tracing
        return init(params, frame, jnp.asarray(box, jnp.float32))

    def checked_update(params, state, frame):
        if np.ndim(frame) != 3 or np.shape(frame)[-1] != 3:
            raise ValueError(f"frame must have shape (H, W, 3), got {np.shape(frame)}")
        return update(params, state, frame)

    checked_init.traced, checked_update.traced = init, update
    return DCFTracker(checked_init, checked_update, relocate), params


__all__ = ["DCFSettings", "DCFState", "DCFTracker", "filter_terms", "fourier_grid",
           "gaussian_label", "level_layout", "make_dcf_tracker", "normalise_features",
           "response_hat", "shift_hat"]
