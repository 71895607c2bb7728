from __future__ import annotations

import cv2
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ebm_jax.ops.crops import (
    box_to_center,
    center_to_box,
    crop_square,
    crop_square_np,
    exemplar_side,
    rounded_uint8,
)


def _frame_with_square(box, shape=(90, 120)):
    """Grey frame with a white rectangle filling exactly the pixels of the 1-indexed xywh
    box (integer box): columns x .. x + w - 1 (1-indexed)."""
    frame = np.full(shape + (3,), 60, np.uint8)
    x, y, w, h = box
    frame[y - 1:y - 1 + h, x - 1:x - 1 + w] = 255
    return frame


def _bright_centroid(crop):
    weight = np.clip(np.asarray(crop)[..., 0] - 60.0, 0, None)
    ys, xs = np.indices(weight.shape)
    return (weight * ys).sum() / weight.sum(), (weight * xs).sum() / weight.sum()


def test_box_center_conventions_hand_case_and_round_trip():
    # a 1-indexed box at x = 11, w = 4 covers pixels 10..13 (0-indexed): centre 11.5
    cy, cx, h, w = box_to_center(np.array([11.0, 21.0, 4.0, 7.0]))
    assert (cy, cx, h, w) == (23.0, 11.5, 7.0, 4.0)
    boxes = np.random.default_rng(0).uniform(1, 50, size=(5, 4))
    np.testing.assert_allclose(center_to_box(*box_to_center(boxes)), boxes, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(center_to_box(*box_to_center(jnp.asarray(boxes)))),
                               boxes, rtol=1e-5)
    # sqrt((w + c)(h + c)), c = (w + h) / 2
    assert exemplar_side(7.0, 4.0) == pytest.approx(np.sqrt((4 + 5.5) * (7 + 5.5)))


@pytest.mark.parametrize("box, out_size", [((31, 22, 9, 13), 127), ((70, 40, 20, 10), 255),
                                           ((5, 60, 16, 16), 63)])
def test_crop_of_a_box_is_centred_to_a_pixel(box, out_size):
    frame = _frame_with_square(box)
    cy, cx, h, w = box_to_center(np.asarray(box, np.float64))
    side = exemplar_side(h, w)
    for crop in (crop_square(frame, (cy, cx), side, out_size),
                 crop_square_np(frame, (cy, cx), side, out_size)):
        assert crop.shape == (out_size, out_size, 3)
        y, x = _bright_centroid(crop)
        centre = (out_size - 1) / 2
        assert abs(y - centre) <= 0.5 and abs(x - centre) <= 0.5


def test_output_centre_maps_to_the_given_point_exactly():
    # a linear ramp is reproduced exactly by bilinear sampling: pixel (i, j) of the crop
    # samples the frame at c + ((i, j) - (out - 1) / 2) * side / out
    ramp = np.zeros((50, 60, 3), np.float32)
    ramp[..., 0] = np.arange(50)[:, None]
    ramp[..., 1] = np.arange(60)[None, :]
    crop = np.asarray(crop_square(ramp, (20.3, 30.6), 11.0, 8))
    offsets = (np.arange(8) - 3.5) * 11.0 / 8
    np.testing.assert_allclose(crop[:, 0, 0], 20.3 + offsets, atol=1e-4)
    np.testing.assert_allclose(crop[0, :, 1], 30.6 + offsets, atol=1e-4)


def test_jax_and_opencv_crops_agree():
    rng = np.random.default_rng(0)
    frame = cv2.GaussianBlur(rng.integers(0, 256, (70, 90, 3)).astype(np.uint8), (0, 0), 2)
    for center, side, out in (((30.3, 40.7), 25.3, 31), ((35.0, 45.0), 60.0, 127),
                              ((3.2, 80.5), 50.0, 40)):  # the last one crosses borders
        a = np.asarray(crop_square(frame, center, side, out))
        b = crop_square_np(frame, center, side, out)
        assert np.abs(a - b).max() < 0.05


def test_padding_is_the_mean_colour_or_the_given_one():
    frame = np.zeros((20, 30, 3), np.uint8)
    frame[:, :15] = (200, 100, 0)
    mean = frame.reshape(-1, 3).mean(0)  # (100, 50, 0)
    far = (500.0, 500.0)  # wholly outside the frame
    np.testing.assert_allclose(np.asarray(crop_square(frame, far, 10.0, 5)),
                               np.broadcast_to(mean, (5, 5, 3)), atol=1e-4)
    np.testing.assert_allclose(crop_square_np(frame, far, 10.0, 5),
                               np.broadcast_to(mean, (5, 5, 3)), atol=1e-3)
    np.testing.assert_allclose(np.asarray(crop_square(frame, far, 10.0, 5, pad=(1, 2, 3))),
                               np.broadcast_to([1, 2, 3], (5, 5, 3)), atol=1e-5)
    # a sample half a pixel beyond the edge blends edge and padding (BORDER_CONSTANT)
    edge = np.asarray(crop_square(frame, (5.0, -0.5), 1.0, 1, pad=(0, 0, 0)))
    np.testing.assert_allclose(edge[0, 0], [100, 50, 0], atol=1e-4)


def test_crop_works_under_jit_and_vmap():
    rng = np.random.default_rng(2)
    frames = rng.integers(0, 256, (3, 40, 50, 3)).astype(np.uint8)
    centers = np.array([[10.0, 12.5], [20.2, 30.1], [39.0, 0.0]], np.float32)
    sides = np.array([9.0, 15.5, 30.0], np.float32)
    batched = jax.jit(jax.vmap(crop_square, in_axes=(0, 0, 0, None)), static_argnums=3)
    out = np.asarray(batched(frames, centers, sides, 17))
    for i in range(3):
        np.testing.assert_allclose(out[i], np.asarray(crop_square(frames[i], centers[i],
                                                                  sides[i], 17)), atol=1e-4)


def test_crop_rejects_bad_arguments():
    frame = np.zeros((10, 10, 3), np.uint8)
    with pytest.raises(ValueError, match="image"):
        crop_square(np.zeros((10, 10)), (1.0, 1.0), 3.0, 5)
    with pytest.raises(ValueError, match="out_size"):
        crop_square(frame, (1.0, 1.0), 3.0, 0)
    with pytest.raises(ValueError, match="center_yx"):
        crop_square(frame, (1.0, 1.0, 2.0), 3.0, 5)
    with pytest.raises(ValueError, match="side"):
        crop_square_np(frame, (1.0, 1.0), -3.0, 5)
    with pytest.raises(ValueError, match="box"):
        box_to_center(np.zeros(3))


def _port_crop(image, center, side, out_size, pad):
    """The port's crop restated with OpenCV on a float image: side and corners rounded
    half to even, the frame padded with `pad` where the patch leaves it, the patch
    resized with INTER_LINEAR."""
    s = round(side)
    first = np.round(np.asarray(center, np.float64) - (s - 1) / 2).astype(int)
    last = first + s
    h, w = image.shape[:2]
    margin = max(0, int(max(-first.min(), last[0] - h, last[1] - w)))
    padded = cv2.copyMakeBorder(image, margin, margin, margin, margin,
                                cv2.BORDER_CONSTANT, value=tuple(float(v) for v in pad))
    patch = padded[first[0] + margin:last[0] + margin, first[1] + margin:last[1] + margin]
    return cv2.resize(patch, (out_size, out_size), interpolation=cv2.INTER_LINEAR)


@pytest.mark.parametrize("center, side, out_size", [
    ((40.3, 61.7), 57.4, 127),    # upsampled, inside the frame
    ((40.5, 60.5), 200.6, 255),   # past every edge, padded
    ((5.2, 110.9), 90.0, 45),     # downsampled (no anti-aliasing, as OpenCV)
    ((50.0, 50.0), 510.0, 255),   # exactly x2 (OpenCV's INTER_AREA path: the same)
    ((30.5, 30.5), 64.5, 127),    # half-pixel corner and side: rounded to even
])
def test_rounded_crop_is_the_ports_crop_on_float_frames(center, side, out_size):
    from ebm_jax.ops.crops import crop_square_rounded

    rng = np.random.default_rng(0)
    image = (rng.random((90, 130, 3)) * 255).astype(np.float32)
    pad = image.mean(axis=(0, 1))
    ours = np.asarray(jax.jit(crop_square_rounded, static_argnums=3)(
        image, jnp.asarray(center), jnp.asarray(side), out_size, pad))
    port = _port_crop(image, center, side, out_size, pad)
    # OpenCV computes the sample positions (up to the side s) and weights in float32:
    # a few ulps of s in a position, times a step of up to 255 between neighbours
    eps = np.finfo(np.float32).eps
    np.testing.assert_allclose(ours, port, rtol=0, atol=255 * 4 * (round(side) + 1) * eps)
    # the continuous crop is another crop wherever the corners were rounded
    assert np.abs(np.asarray(crop_square(image, center, side, out_size, pad)) - port).max() > 1


def test_the_tracker_takes_the_rounded_crop_and_records_it():
    from ebm_jax.ops.crops import crop_square_rounded
    from ebm_jax.tracking.siamfc import SiamFCSettings, make_tracker

    with pytest.raises(ValueError, match="SiamFCSettings.crop must be one of"):
        SiamFCSettings(crop="nearest")
    assert "crop" not in SiamFCSettings().identity()
    assert SiamFCSettings(crop="rounded").identity()["crop"] == "rounded"
    rng = np.random.default_rng(1)
    frame = (rng.random((120, 160, 3)) * 255).astype(np.float32)
    box = np.array([50.0, 40.0, 31.0, 23.0])  # xywh, 1-indexed

    def embed(params, images):  # the crop itself, pooled to stride 8
        n, s = images.shape[0], images.shape[1] // 8
        return images[:, :s * 8, :s * 8].reshape(n, s, 8, s, 8, 3).mean((2, 4))

    state = make_tracker(embed, SiamFCSettings(crop="rounded")).init(None, frame, box)
    cy, cx = box[1] - 1 + (box[3] - 1) / 2, box[0] - 1 + (box[2] - 1) / 2
    ctx = 0.5 * (box[2] + box[3])
    side = np.sqrt((box[2] + ctx) * (box[3] + ctx))
    z = crop_square_rounded(frame, jnp.asarray([cy, cx]), side, 127, frame.mean((0, 1)))
    np.testing.assert_allclose(np.asarray(state.template), np.asarray(embed(None, z[None])[0]),
                               rtol=0, atol=255 * 64 * np.finfo(np.float32).eps)
    _, moved = make_tracker(embed, SiamFCSettings(crop="rounded")).update(None, state, frame)
    assert np.all(np.isfinite(np.asarray(moved)))


def test_rounded_uint8_is_rint_then_clip_and_rounds_a_float32_crop_in_place():
    """The in-place path (a fresh float32 crop) and the copying path give what
    np.clip(np.rint(x), 0, 255) gives, halves to even and out-of-range values included;
    a float64 or read-only input is left as it was."""
    values = np.array([-3.0, -0.5, 0.49, 0.5, 1.5, 2.5, 127.5, 254.5, 254.51, 255.49,
                       255.5, 300.0], np.float64)
    expected = np.clip(np.rint(values), 0, 255).astype(np.uint8)
    crop = values.astype(np.float32).reshape(3, 4)
    np.testing.assert_array_equal(rounded_uint8(crop).ravel(),
                                  np.clip(np.rint(values.astype(np.float32)), 0, 255)
                                  .astype(np.uint8))
    assert crop.max() == 255 and crop.min() == 0  # rounded and clipped in place
    kept = values.copy()
    np.testing.assert_array_equal(rounded_uint8(kept), expected)
    np.testing.assert_array_equal(kept, values)
    frozen = values.astype(np.float32)
    frozen.flags.writeable = False
    assert rounded_uint8(frozen).dtype == np.uint8
    np.testing.assert_array_equal(frozen, values.astype(np.float32))


def test_the_default_padding_is_the_frames_mean_colour():
    """crop_square_np pads with the frame's mean colour (OpenCV's float64 mean); a crop
    wholly outside the frame is that colour everywhere, to float32 rounding."""
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)
    crop = crop_square_np(frame, (-500.0, -500.0), 20.0, 8)
    mean = frame.reshape(-1, 3).astype(np.float64).mean(axis=0)
    # one float32 rounding of a value below 256: |error| <= 256 * 2^-24
    np.testing.assert_allclose(crop.reshape(-1, 3), np.broadcast_to(mean, (64, 3)),
                               rtol=0, atol=256 * 2.0 ** -24)
