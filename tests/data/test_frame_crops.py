"""`frame_crops`: unlabelled square crops of frames and photos, drawn by seed."""

import numpy as np
import pytest

from ebm_jax.data.frame_crops import frame_crops
from ebm_jax.data.sequences import Sequence


def _sequence(tmp_path, name, value, frames=3, hw=(40, 60)):
    from PIL import Image

    paths = []
    for i in range(frames):
        path = tmp_path / f"{name}-{i}.png"
        Image.fromarray(np.full(hw + (3,), value + i, np.uint8)).save(path)
        paths.append(str(path))
    n = len(paths)
    return Sequence(name, tuple(paths), np.tile([1.0, 1.0, 5.0, 5.0], (n, 1)), hw,
                    np.zeros(n, bool))


def test_crops_come_from_frames_and_photos_by_seed(tmp_path):
    seqs = [_sequence(tmp_path, "a", 10), _sequence(tmp_path, "b", 100)]
    photo = np.full((50, 50, 3), 250 / 255, np.float32)
    crops = frame_crops(seqs, [photo], count=40, size=16, photo_fraction=0.25, seed=3)
    assert crops.shape == (40, 16, 16, 3) and crops.dtype == np.uint8
    # every crop is flat (each source image is one grey level), from a frame or the photo
    values = crops[:, 0, 0, 0]
    assert np.all(crops == values[:, None, None, None])
    assert set(values) <= {10, 11, 12, 100, 101, 102, 250}
    assert np.sum(values == 250) == 10
    assert np.array_equal(crops, frame_crops(seqs, [photo], count=40, size=16, seed=3))
    assert not np.array_equal(crops, frame_crops(seqs, [photo], count=40, size=16, seed=4))


@pytest.mark.parametrize("kwargs, message", [
    (dict(count=0, size=16), "count must be an integer >= 1"),
    (dict(count=4, size=4), "size must be an integer >= 8"),
    (dict(count=4, size=16, side_range=(0.0, 1.0)), "side_range"),
    (dict(count=4, size=16, photo_fraction=1.5), r"photo_fraction must be in \[0, 1\]"),
])
def test_bad_arguments_name_themselves(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        frame_crops([_sequence(tmp_path, "a", 10)], **kwargs)
