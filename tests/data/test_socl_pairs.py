"""SoCL's training batches: the feature grid, region coordinates, TOP maps of regions,
usable points, and batch determinism."""

import numpy as np
import pytest

from ebm_jax.data.socl_pairs import (context_batches, feature_grid, point_frames,
                                     region_boxes, region_top_map)
from ebm_jax.ops.crops import crop_square_np


@pytest.mark.heavy
@pytest.mark.parametrize("backbone", ["alexnet", "resnet18"])
@pytest.mark.parametrize("size", [95, 127, 159, 160, 255])
def test_feature_grid_matches_the_backbone(size, backbone):
    from flax import nnx

    from ebm_jax.models.tracking_backbones import tracking_backbone

    model = tracking_backbone(backbone, width=0.125, rngs=nnx.Rngs(0))
    model.eval()
    g, lo, stride = feature_grid(size, model.embedding_grid)
    assert model(np.zeros((1, size, size, 3), np.float32)).shape[1:3] == (g, g)
    assert stride == 8
    if backbone == "alexnet":
        # valid convolutions: the cells tile a window centred on the input centre
        assert lo + 8 * g / 2 == pytest.approx((size - 1) / 2, abs=0.5)
        assert (g, lo, stride) == feature_grid(size)  # AlexNet's grid is the default
    else:
        # padded: cell k is centred on pixel 8 k, so the window starts half a cell early
        assert lo == -4 and g == -(-size // 8)
    with pytest.raises(ValueError, match="input_size"):
        feature_grid(80)


def test_region_top_map_of_a_padded_backbone_draws_past_the_region():
    """ResNet-18's cells reach past the region's edges: the map is drawn there too (a
    box covering the whole window gives a uniform map), and a box at the region's top
    left corner weighs on cell (0, 0), centred on pixel 0."""
    from ebm_jax.models.siam_resnet import SiamResNet18

    grid = SiamResNet18.embedding_grid
    g, lo, _ = feature_grid(159, grid)
    side, size = 159.0, 159
    centre = ((size - 1) / 2, (size - 1) / 2)  # region pixels = frame pixels
    whole = np.array([[lo - 10.0, lo - 10.0, 8 * g + 20.0, 8 * g + 20.0]])
    h = region_top_map(whole, np.ones(1), centre, side, size, 1.0, grid)
    assert h.shape == (g, g)
    np.testing.assert_allclose(h, 1.0 / g**2, rtol=1e-6)
    corner = np.array([[-3.0, -3.0, 8.0, 8.0]])  # 1-indexed: pixels -4..3, cell (0, 0)
    h = region_top_map(corner, np.ones(1), centre, side, size, 0.01, grid)
    assert np.unravel_index(np.argmax(h), h.shape) == (0, 0)
    assert h[0, 0] > 0.99


def test_region_boxes_follow_the_crop():
    """A box painted into a frame lands where region_boxes says after the crop."""
    frame = np.zeros((120, 160, 3), np.uint8)
    box = np.array([41.0, 31.0, 30.0, 20.0])  # x, y 1-indexed: pixels 40..69, 30..49
    frame[30:50, 40:70] = 255
    center, side, out = (45.0, 60.0), 80.0, 160
    crop = crop_square_np(frame, center, side, out)[..., 0]
    rb = region_boxes(box, center, side, out)
    ys, xs = np.nonzero(crop > 127)
    assert xs.min() + 1 == pytest.approx(rb[0], abs=1.0)
    assert ys.min() + 1 == pytest.approx(rb[1], abs=1.0)
    assert xs.max() - xs.min() + 1 == pytest.approx(rb[2], abs=1.5)
    assert ys.max() - ys.min() + 1 == pytest.approx(rb[3], abs=1.5)


def test_region_top_map_is_a_distribution_peaked_on_the_boxes():
    boxes = np.array([[60.0, 40.0, 40.0, 40.0], [65.0, 45.0, 30.0, 30.0],
                      [np.nan] * 4])
    scores = np.array([1.0, 0.5, np.nan])
    h = region_top_map(boxes, scores, (59.5, 79.5), 120.0, 159, temperature=0.1)
    g, _, _ = feature_grid(159)
    assert h.shape == (g, g) and h.sum() == pytest.approx(1.0, abs=1e-5)
    yy, xx = np.mgrid[:g, :g]
    centre = ((h * yy).sum(), (h * xx).sum())  # the boxes' common centre is the region's
    rb = region_boxes(boxes[0], (59.5, 79.5), 120.0, 159)  # both boxes share a centre
    cell = (rb[0] - 1 + (rb[2] - 1) / 2 - 43) / 8  # cell k is centred on pixel 43 + 8 k
    assert centre == pytest.approx((cell, cell), abs=0.3)
    assert h[0, 0] < 1e-4 * h.max()


def _sequence(tmp_path, n=6, frames=10):
    from ebm_jax.data.sequences import read_got10k
    from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split

    spec = TrackingSpec(split="train", num_sequences=n, num_frames=frames, height=96,
                        width=128, seed=3)
    return read_got10k(generate_tracking_split(tmp_path / "d", spec, progress=False))


def test_point_frames_drop_points_outside_the_frame_and_absent_targets(tmp_path):
    seq = _sequence(tmp_path, n=1, frames=6)[0]
    pts = np.asarray(seq.points, np.float64).copy()
    pts[1] = [-5.0, 10.0]  # outside
    pts[2] = [np.nan, np.nan]
    frames = point_frames(seq, pts)
    assert 1 not in frames and 2 not in frames
    assert set(frames) <= set(np.flatnonzero(seq.visible))


def test_context_batches_are_deterministic_and_shaped(tmp_path):
    seqs = _sequence(tmp_path)
    rng = np.random.default_rng(0)
    tops = {}
    for i, s in enumerate(seqs):
        frames = point_frames(s, s.points)[::2]
        c = np.asarray(s.points)[frames]
        boxes = np.concatenate([c[:, None] - 10 + rng.uniform(-2, 2, (len(c), 3, 2)),
                                np.full((len(c), 3, 2), 20.0)], axis=-1)
        tops[i] = {"frames": frames, "boxes": boxes, "scores": rng.uniform(size=(len(c), 3))}
    points = [np.asarray(s.points) for s in seqs]
    make = lambda seed: context_batches(seqs, tops, points=points, videos=3, max_gap=100,
                                        seed=seed, input_size=95, context_side=48.0)
    a, b = make(1)(5), make(1)(5)
    assert a["i_images"].shape == (3, 95, 95, 3) and a["i_images"].dtype == np.uint8
    assert a["h_i"].shape == (3, 2, 2)
    np.testing.assert_allclose(a["h_j"].sum((1, 2)), 1.0, atol=1e-5)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(make(2)(5)["i_images"], a["i_images"])
    with pytest.raises(ValueError, match="videos"):
        context_batches(seqs, tops, points=points, videos=len(seqs) + 1, max_gap=100,
                        seed=0)
    assert len(set(make(1).videos(5))) == 3
    # scenes of two: a batch of 3 takes one whole scene and one video of another
    grouped = context_batches(seqs, tops, points=points, videos=3, max_gap=100, seed=1,
                              input_size=95, context_side=48.0, groups=[0, 0, 1, 1, 2, 2])
    for step in range(8):
        picked = grouped.videos(step)
        assert len(set(picked)) == 3 and picked[0] // 2 == picked[1] // 2
        np.testing.assert_array_equal(grouped(step)["i_images"], grouped(step)["i_images"])
    with pytest.raises(ValueError, match="one scene id per sequence"):
        context_batches(seqs, tops, points=points, videos=3, max_gap=100, seed=0,
                        groups=[0, 1])
