"""Training pairs of the Siamese trackers: frames fewer than max_gap apart, degenerate
boxes filtered, regions centred on the target, batches a function of (seed, step)."""

import dataclasses

import numpy as np
import pytest

from ebm_jax.data.tracking_pairs import (
    PORT_PAIRS,
    pair_batches,
    target_region,
    usable_frames,
)


@dataclasses.dataclass
class FakeSequence:
    """Frames whose every pixel holds the frame index (to read back which was drawn)."""

    boxes: np.ndarray
    image_size: tuple = (120, 160)
    visible_ratio: np.ndarray | None = None
    cover: np.ndarray | None = None

    def __len__(self):
        return len(self.boxes)

    @property
    def visible(self):
        return np.ones(len(self), bool) if self.visible_ratio is None else self.visible_ratio > 0

    def read_frame(self, t):
        return np.full((*self.image_size, 3), t, np.uint8)


def boxes(n, w=20.0, h=16.0):
    return np.tile([60.0, 50.0, w, h], (n, 1))


def test_usable_frames_filter():
    b = boxes(8)
    b[1, 2] = 4.0  # too narrow
    b[2, 2:] = [80.0, 10.0]  # aspect 8
    b[3, 0] = 150.0  # crosses the right border
    b[4] = np.nan
    ratio = np.ones(8)
    ratio[5] = 0.3  # mostly occluded
    seq = FakeSequence(b, visible_ratio=ratio)
    assert usable_frames(seq).tolist() == [0, 6, 7]
    cover = np.full(8, 8)
    cover[6] = 3  # cover bins: 3/8 < 0.5
    seq = FakeSequence(b, cover=cover)
    assert usable_frames(seq).tolist() == [0, 5, 7]


def test_usable_frames_port_size_filter():
    b = boxes(6, w=24.0, h=22.0)  # in a 160 x 120 frame
    b[1, 2:] = [19.0, 19.0]  # a side under 20 px
    b[2, 2:] = [85.0, 40.0]  # 85 > 0.5 x 160
    b[3, 2:] = [60.0, 61.0]  # 61 > 0.5 x 120
    b[4, :] = [1.0, 1.0, 40.0, 40.0]
    seq = FakeSequence(b)
    assert usable_frames(seq).tolist() == [0, 1, 2, 3, 4, 5]
    port = {k: v for k, v in PORT_PAIRS.items() if k != "order"}
    assert usable_frames(seq, **port).tolist() == [0, 4, 5]
    big = FakeSequence(np.tile([1.0, 1.0, 600.0, 300.0], (2, 1)), image_size=(1000, 2000))
    assert usable_frames(big, **port).tolist() == []  # 600 > 500 px
    small = FakeSequence(np.tile([1.0, 1.0, 30.0, 30.0], (2, 1)), image_size=(4000, 4000))
    assert usable_frames(small, **port).tolist() == []  # 30 < 0.01 x 4000


def test_forward_order_puts_the_exemplar_first():
    seqs = [FakeSequence(boxes(200))]
    for order, check in (("forward", np.less), ("random", None)):
        batches = pair_batches(seqs, batch_size=16, max_gap=50, seed=1, exemplar_size=31,
                               search_size=63, order=order)
        size = round(1.25 * 63)
        z = np.concatenate([batches(s)["z_frames"][:, size // 2, size // 2, 0]
                            for s in range(3)]).astype(int)
        x = np.concatenate([batches(s)["x_frames"][:, size // 2, size // 2, 0]
                            for s in range(3)]).astype(int)
        if check is not None:
            assert np.all(check(z, x))
        else:  # both orders occur
            assert np.any(z < x) and np.any(z > x)
    with pytest.raises(ValueError, match="order must be one of"):
        pair_batches(seqs, batch_size=2, max_gap=5, seed=0, order="backward")
    with pytest.raises(ValueError, match="relative_size"):
        pair_batches(seqs, batch_size=2, max_gap=5, seed=0, relative_size=(0.5, 0.1))


def test_region_is_centred_on_the_target():
    frame = np.zeros((120, 160, 3), np.uint8)
    frame[40:56, 50:70] = 255  # rows 40..55, cols 50..69: centre (47.5, 59.5)
    box = [51.0, 41.0, 20.0, 16.0]  # the same box, 1-indexed
    region, rbox = target_region(frame, box, region_size=64, side_ratio=2.5)
    ys, xs = np.nonzero(region[..., 0] > 127)
    assert ys.mean() == pytest.approx(31.5, abs=0.6)
    assert xs.mean() == pytest.approx(31.5, abs=0.6)
    cx = rbox[0] - 1 + (rbox[2] - 1) / 2
    cy = rbox[1] - 1 + (rbox[3] - 1) / 2
    assert (cy, cx) == pytest.approx((31.5, 31.5))
    side = 2.5 * np.sqrt((20 + 18) * (16 + 18))
    assert rbox[2] == pytest.approx(20 * 64 / side, rel=1e-5)


def test_pairs_are_close_deterministic_and_shaped():
    seqs = [FakeSequence(boxes(200)), FakeSequence(boxes(30))]
    batches = pair_batches(seqs, batch_size=6, max_gap=5, seed=3, exemplar_size=31,
                           search_size=63)
    b = batches(0)
    size = round(1.25 * 63)
    assert b["z_frames"].shape == (6, size, size, 3) and b["z_frames"].dtype == np.uint8
    assert b["x_boxes"].shape == (6, 4)
    z = b["z_frames"][:, size // 2, size // 2, 0].astype(int)
    x = b["x_frames"][:, size // 2, size // 2, 0].astype(int)
    assert np.all(np.abs(z - x) < 5) and np.all(z != x)
    for step in (0, 7):
        again = pair_batches(seqs, batch_size=6, max_gap=5, seed=3, exemplar_size=31,
                             search_size=63)(step)
        np.testing.assert_array_equal(again["z_frames"], batches(step)["z_frames"])
    assert not np.array_equal(batches(1)["z_frames"], b["z_frames"])


def test_no_usable_pair_is_an_error():
    b = boxes(10)
    b[:, 2] = 3.0
    with pytest.raises(ValueError, match="no training sequence has two usable frames"):
        pair_batches([FakeSequence(b)], batch_size=2, max_gap=10, seed=0)
    far = boxes(10)
    far[1:9] = np.nan  # usable frames 0 and 9 only, 9 apart
    with pytest.raises(ValueError, match="less than 5 apart"):
        pair_batches([FakeSequence(far)], batch_size=2, max_gap=5, seed=0)
