"""DiMP's training samples (`ebm_jax.data.dimp_samples`): training frames before test
frames within the gap, crops around jittered boxes that hold their targets, batches a
function of (seed, step), and bad sizes refused before any batch."""

import numpy as np
import pytest

from ebm_jax.data.dimp_samples import dimp_sample_batches
from ebm_jax.data.sequences import read_got10k
from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split
from ebm_jax.ops.jitter import CropJitter

SPEC = TrackingSpec(split="train", num_sequences=3, num_frames=12, height=64, width=80,
                    seed=5)


@pytest.fixture(scope="module")
def sequences(tmp_path_factory):
    root = tmp_path_factory.mktemp("dimp")
    return read_got10k(generate_tracking_split(root / "seq", SPEC, progress=False))


def test_samples_have_their_shapes_and_boxes_and_repeat_by_step(sequences):
    batches = dimp_sample_batches(sequences, batch_size=4, max_gap=8, seed=0,
                                  jitter=CropJitter(), out_size=64)
    b = batches(3)
    assert b["train"].shape == (4, 3, 64, 64, 3) and b["train"].dtype == np.uint8
    assert b["test"].shape == (4, 3, 64, 64, 3)
    assert b["train_boxes"].shape == (4, 3, 4) and b["test_boxes"].dtype == np.float32
    for key in ("train_boxes", "test_boxes"):
        boxes = b[key]
        assert np.all(boxes[..., 2] > boxes[..., 0]) and np.all(boxes[..., 3] > boxes[..., 1])
        centre = 0.5 * (boxes[..., :2] + boxes[..., 2:])
        assert np.all((centre > -32) & (centre < 96))  # jittered, not lost
    again = batches(3)
    for k in b:
        np.testing.assert_array_equal(b[k], again[k])
    assert not np.array_equal(batches(4)["train"], b["train"])


def test_training_frames_come_before_test_frames_within_the_gap(sequences, monkeypatch):
    import ebm_jax.data.dimp_samples as ds

    picked = []
    real = ds.jittered_crop_np

    def spy(rng, frame, box, jitter, kind, out_size):
        picked.append((kind, tuple(np.asarray(box).round(3))))
        return real(rng, frame, box, jitter, kind, out_size)

    monkeypatch.setattr(ds, "jittered_crop_np", spy)
    batches = ds.dimp_sample_batches(sequences, batch_size=6, max_gap=7, seed=1,
                                     jitter=CropJitter(), out_size=32)
    batches(0)
    boxes = {tuple(np.asarray(s.boxes[t]).round(3)): t for s in sequences
             for t in range(len(s))}
    for k in range(6):
        kinds = [kind for kind, _ in picked[6 * k:6 * k + 6]]
        frames = [boxes[box] for _, box in picked[6 * k:6 * k + 6]]
        assert kinds == [0, 0, 0, 1, 1, 1]  # reference factors, then test factors
        assert frames == sorted(frames) and len(set(frames)) == 6
        assert frames[-1] - frames[0] < 7


@pytest.mark.parametrize("kwargs, says", [
    (dict(max_gap=5), "max_gap must be an integer >= num_train + num_test = 6"),
    (dict(num_train=0), "num_train must be an integer >= 1, got 0"),
    (dict(batch_size=0), "batch_size must be an integer >= 1, got 0"),
    (dict(num_test=20, max_gap=40), "no video of 3 (the longest 12 frames) has 23 usable "
                                    "frames within max_gap 40"),
])
def test_bad_sizes_are_one_line_before_any_batch(sequences, kwargs, says):
    args = dict(batch_size=2, max_gap=8, seed=0, jitter=CropJitter(), out_size=32)
    with pytest.raises(ValueError) as error:
        dimp_sample_batches(sequences, **{**args, **kwargs})
    assert says in str(error.value) and "\n" not in str(error.value)


def test_with_the_crop_context_every_test_target_lies_on_the_score_map(sequences):
    """The regression behind DiMP's first measurement: on SiamFC's AlexNet (conv5:
    stride 8, cell 0 centred at pixel 43) a 159 px crop of 5 target sizes gives a
    10-cell grid covering only its middle half, and a test frame's jittered target (up
    to 2.25 target sizes off centre) falls off the score map. Cutting the crop
    `crop_context` times larger than the search area keeps every target on it."""
    from ebm_jax.recipes.tracking.dimp_stages import DiMPTraining
    from ebm_jax.tracking import dimp

    stride, offset = 8.0, 43.0
    settings = DiMPTraining()
    factor = settings.crop_factor(stride, offset)
    n = dimp.grid_cells(settings.crop_size, stride, offset)
    assert n == 22 and factor == pytest.approx(5.0 * 255 / 176)
    batches = dimp_sample_batches(sequences, batch_size=16, max_gap=8, seed=2,
                                  jitter=CropJitter(search_area_factor=factor),
                                  out_size=settings.crop_size)
    for step in range(4):
        boxes = dimp.to_cells(batches(step)["test_boxes"], stride, offset)
        centres = dimp.score_center(0.5 * (boxes[..., :2] + boxes[..., 2:]),
                                    settings.filter_size)
        hw = dimp.score_size((n, n), settings.filter_size)
        assert np.all((centres >= 0) & (centres <= hw[0] - 1))
        side = np.asarray(boxes[..., 2:] - boxes[..., :2]).prod(-1) ** 0.5
        # the target spans the grid's cells over the search area, as DiMP's 3.6 of 18
        np.testing.assert_allclose(np.median(side), n / 5.0, rtol=0.25)
