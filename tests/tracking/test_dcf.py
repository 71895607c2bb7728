"""The correlation filter tracker: the filter's closed form against a direct least-
squares solve, the Fourier interpolation and shift, a one-frame displacement measured to
the grid step, a textured target tracked (pixel features and a random AlexNet), the
target leaving the frame, relocation, one trace per frame shape, and bad settings."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ebm_jax.models.alexnet import SiamFCAlexNet
from ebm_jax.ops.crops import box_to_center
from ebm_jax.tracking.dcf import (
    DCFSettings,
    filter_terms,
    fourier_grid,
    gaussian_label,
    level_layout,
    make_dcf_tracker,
    normalise_features,
    response_hat,
    shift_hat,
)
from ebm_jax.tracking.siamfc import track_sequence
from tests.tracking.drawn_targets import PixelPyramid, drawn_frame, drawn_sequence


@pytest.fixture(scope="module")
def pixel_tracker():
    return make_dcf_tracker(PixelPyramid(), DCFSettings())


# ---------------------------------------------------------------- the filter's math


def test_filter_is_the_ridge_regression_solution_of_one_sample():
    # per frequency, min_w |sum_c conj(w_c) x_c - y|^2 + lam sum_c |w_c|^2 has the
    # solution conj(w) = y conj(x) / (|x|^2 + lam); the response to x is then
    # y |x|^2 / (|x|^2 + lam). Check the closed form against a direct solve of the
    # normal equations for a few frequencies of a random 3-channel sample.
    rng = np.random.default_rng(1)
    x = rng.normal(size=(6, 6, 3)) + 1j * rng.normal(size=(6, 6, 3))
    y = rng.normal(size=(6, 6)) + 1j * rng.normal(size=(6, 6))
    a, b = filter_terms(jnp.asarray(x, jnp.complex64), jnp.asarray(y, jnp.complex64))
    reg = 0.3
    lam = reg * float(np.mean(np.asarray(b)))
    r = np.asarray(response_hat(a, b, jnp.asarray(x, jnp.complex64), reg))
    for k in [(0, 0), (1, 2), (5, 3)]:
        xk = x[k]
        # conj(w) solves (x x^H + lam I)^T ... written out: w = (x x^H + lam)^-1 x conj(y)
        w = np.linalg.solve(np.outer(xk, xk.conj()) + lam * np.eye(3), xk * np.conj(y[k]))
        direct = np.sum(np.conj(w) * xk)
        # float32 products of O(1) numbers over 3 channels: ~1e-6 relative
        np.testing.assert_allclose(r[k], direct, rtol=1e-5, atol=1e-5)


def test_fourier_grid_interpolates_the_dft():
    rng = np.random.default_rng(2)
    for n in (7, 8):
        signal = rng.normal(size=n)
        spectrum = np.fft.fft(signal)
        stride = 4.0
        # integer cells: the signal itself at displacement i * stride (i wrapped)
        cells = np.arange(-(n // 2), (n + 1) // 2)
        values = fourier_grid(n, n * stride, cells * stride) @ spectrum
        np.testing.assert_allclose(values.real, signal[cells % n], atol=1e-12)
        np.testing.assert_allclose(values.imag, 0.0, atol=1e-12)
    # between cells a band-limited cosine is interpolated exactly
    n, period = 9, 36.0
    u = np.linspace(-15, 15, 31)
    samples = np.cos(2 * np.pi * 2 * np.arange(n) / n + 0.4)
    values = fourier_grid(n, period, u) @ np.fft.fft(samples)
    np.testing.assert_allclose(values.real, np.cos(2 * np.pi * 2 * u / period + 0.4),
                               atol=1e-12)


def test_shift_hat_moves_a_sample_as_a_roll_does():
    x = np.random.default_rng(3).normal(size=(8, 10, 2)).astype(np.float32)
    x_hat = jnp.fft.fft2(jnp.asarray(x), axes=(0, 1))
    moved = jnp.real(jnp.fft.ifft2(shift_hat(x_hat, jnp.asarray([2.0, -3.0])), axes=(0, 1)))
    # what sat at (2, -3) now sits at (0, 0): a roll by (-2, 3); float32 FFTs of
    # O(1) values over 80 cells: ~1e-6
    np.testing.assert_allclose(np.asarray(moved), np.roll(x, (-2, 3), axis=(0, 1)),
                               atol=1e-5)


def test_label_peaks_at_displacement_zero_and_wraps():
    g = gaussian_label(8, 1.0)
    assert g[0] == 1.0 and g[1] == g[7] and g[2] == g[6] and np.argmin(g) == 4
    f = normalise_features(jnp.asarray(np.random.default_rng(4).normal(
        size=(2, 5, 5, 3)) * 7, jnp.float32))
    # mean over cells of the squared norm over channels: 1 for each sample
    np.testing.assert_allclose(np.mean(np.sum(np.asarray(f) ** 2, -1), (1, 2)), 1.0,
                               rtol=1e-5)


# ---------------------------------------------------------------- the tracker


def test_one_update_moves_the_centre_by_the_target_displacement(pixel_tracker):
    tracker, params = pixel_tracker
    frame = drawn_frame(80, 60)
    box = np.array([80, 60, 30, 24], np.float64)
    state = tracker.init(params, frame, box)
    np.testing.assert_allclose(np.asarray(state.center), box_to_center(box)[:2], atol=1e-4)
    grid_px = DCFSettings().grid_step * 4.5 * np.sqrt(30 * 24) / 255  # a grid step, frame px
    for dy, dx in ((5, -7), (-3, 4), (0, 0)):
        new, out = tracker.update(params, state, drawn_frame(80 + dx, 60 + dy))
        np.testing.assert_allclose(np.asarray(new.center) - np.asarray(state.center),
                                   (dy, dx), atol=grid_px)
        assert np.all(np.isfinite(np.asarray(out)))


def test_tracks_a_textured_target_with_pixel_features_and_a_random_alexnet(pixel_tracker):
    frames, gt = drawn_sequence()
    trackers = [pixel_tracker,
                make_dcf_tracker(SiamFCAlexNet(width=0.125, rngs=nnx.Rngs(0)))]
    for tracker, params in trackers:
        boxes, seconds = track_sequence(tracker, params, iter(frames), gt[0])
        assert boxes.shape == gt.shape and np.all(seconds > 0)
        np.testing.assert_array_equal(boxes[0], gt[0])
        centres = boxes[:, :2] + boxes[:, 2:] / 2
        error = np.linalg.norm(centres - (gt[:, :2] + gt[:, 2:] / 2), axis=1)
        assert error.max() < 3.0, error
        # the size stays within a few scale steps of the truth
        assert np.all(np.abs(np.log(boxes[:, 2:] / gt[:, 2:])) < 0.15)


def test_the_model_is_a_running_average_at_the_learning_rate():
    # the detection does not depend on the learning rate, so lr = 1 gives the new
    # sample's terms alone and lr = 0.3 must give 0.7 old + 0.3 new, level by level
    frame, moved = drawn_frame(80, 60), drawn_frame(86, 57)
    box = [80, 60, 30, 24]
    results = {}
    for lr in (0.3, 1.0):
        tracker, params = make_dcf_tracker(PixelPyramid(), DCFSettings(learning_rate=lr))
        state = tracker.init(params, frame, box)
        results[lr] = (state, *tracker.update(params, state, moved))
    old, (new_part, box_part), (new_one, box_one) = (results[0.3][0], results[0.3][1:],
                                                     results[1.0][1:])
    np.testing.assert_array_equal(np.asarray(box_part), np.asarray(box_one))
    for level in range(2):
        for field in ("numerators", "denominators"):
            b0 = np.asarray(getattr(old, field)[level])
            b1 = np.asarray(getattr(new_one, field)[level])
            got = np.asarray(getattr(new_part, field)[level])
            # one float32 multiply-add per entry: a few ulps of the largest term
            scale = np.abs(b0).max() + np.abs(b1).max()
            np.testing.assert_allclose(got, 0.7 * b0 + 0.3 * b1, rtol=0,
                                       atol=4 * np.finfo(np.float32).eps * scale)


def test_target_leaving_the_frame_keeps_a_finite_box_on_it(pixel_tracker):
    tracker, params = pixel_tracker
    state = tracker.init(params, drawn_frame(150, 60), [150, 60, 30, 24])
    for x in (165, 180, 195, 210, 230, 260):
        state, box = tracker.update(params, state, drawn_frame(x, 60))
        box = np.asarray(box)
        assert np.all(np.isfinite(box)) and np.all(box[2:] >= DCFSettings().min_size)
        cy, cx = np.asarray(state.center)
        assert 0 <= cx <= 199 and 0 <= cy <= 149


def test_relocate_moves_the_estimate_and_keeps_the_model(pixel_tracker):
    tracker, params = pixel_tracker
    state = tracker.init(params, drawn_frame(80, 60), [80, 60, 30, 24])
    moved = tracker.relocate(state, jnp.asarray([100.0, 40.0]))
    np.testing.assert_array_equal(np.asarray(moved.center), [100.0, 40.0])
    assert moved.numerators is state.numerators
    with pytest.raises(ValueError, match="center must have shape"):
        tracker.relocate(state, jnp.zeros(3))
    # tracking from there finds the target it was moved onto
    new, _ = tracker.update(params, tracker.relocate(state, jnp.asarray([74.0, 108.0])),
                            drawn_frame(95, 63))
    np.testing.assert_allclose(np.asarray(new.center),
                               box_to_center(np.array([95, 63, 30, 24.0]))[:2], atol=2.0)


def test_one_trace_per_frame_shape():
    settings = DCFSettings(scale_num=3)
    raw, params = make_dcf_tracker(PixelPyramid(), settings, jit=False)
    jitted, _ = make_dcf_tracker(PixelPyramid(), settings)
    update = jax.jit(chex.assert_max_traces(raw.update, n=1))
    frames, gt = drawn_sequence(5)
    state = raw.init(params, frames[0], gt[0])
    jstate = jitted.init(params, frames[0], gt[0])
    for frame in frames[1:]:
        state, box = update(params, state, frame)
        jstate, jbox = jitted.update(params, jstate, frame)
    assert jitted.update.traced._cache_size() == 1
    # the same program jitted in two places: bit for bit
    assert np.array_equal(np.asarray(box), np.asarray(jbox))


def test_bad_settings_and_inputs_name_the_argument(pixel_tracker):
    cases = [(dict(learning_rate=0.0), "learning_rate"), (dict(learning_rate=1.5),
             "learning_rate"), (dict(scale_num=4), "scale_num"), (dict(reg=0.0), "reg"),
             (dict(label_sigma=-1.0), "label_sigma"), (dict(levels=(4, 0)), "levels"),
             (dict(level_weights=(1.0,)), "level_weights"), (dict(grid_step=0), "grid_step"),
             (dict(search_area=0.5), "search_area"), (dict(scale_step=0.9), "scale_step")]
    for change, name in cases:
        with pytest.raises(ValueError, match=name):
            DCFSettings(**change)
    with pytest.raises(ValueError, match="crop_size"):
        level_layout(PixelPyramid(), DCFSettings(crop_size=12))
    tracker, params = pixel_tracker
    frame = drawn_frame(80, 60)
    for box in ([80, 60, 0, 24], [np.nan, 60, 30, 24], [400, 60, 30, 24]):
        with pytest.raises(ValueError, match="box"):
            tracker.init(params, frame, box)
    state = tracker.init(params, frame, [80, 60, 30, 24])
    with pytest.raises(ValueError, match="frame must have shape"):
        tracker.update(params, state, frame[..., 0])


def test_default_levels_are_the_backbones():
    from ebm_jax.models.siam_resnet import SiamResNet18

    s = DCFSettings()
    assert s.levels is None
    assert s.for_backbone(SiamFCAlexNet).levels == (0, 4)
    assert s.for_backbone(SiamResNet18).levels == (0, 3)
    given = DCFSettings(levels=(0, 2), level_weights=(1.0, 2.0))
    assert given.for_backbone(SiamResNet18) is given
    with pytest.raises(ValueError, match="level_weights.*per level \\(2\\)"):
        DCFSettings(level_weights=(1.0,))


def test_levels_alone_weigh_each_level_once():
    """`--config.dcf.levels=9` was refused as `DCFSettings.level_weights`, a field the
    user never set: unset weights are 1 per level, whatever the levels."""
    from ebm_jax.models.siam_resnet import SiamResNet18

    assert DCFSettings(levels=(9,)).levels == (9,)  # the backbone's range: the recipe's
    three = DCFSettings(levels=(0, 2, 4)).for_backbone(SiamFCAlexNet)
    assert three.levels == (0, 2, 4) and three.level_weights == (1.0, 1.0, 1.0)
    # the defaults as before (stage identities record them): two levels of weight 1
    assert DCFSettings().for_backbone(SiamFCAlexNet).level_weights == (1.0, 1.0)
    assert DCFSettings().for_backbone(SiamResNet18).level_weights == (1.0, 1.0)
    with pytest.raises(ValueError, match=r"level_weights.*per level \(3\)"):
        DCFSettings(levels=(0, 2, 4), level_weights=(1.0, 1.0))
