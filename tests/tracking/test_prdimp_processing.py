"""pytracking's PrDiMP processing of the box head's training pairs: the jittered box's
statistics (log-normal size of sd scale_jitter, centre offset uniform in +-factor / 2
of sqrt(w' h')), the crop's side, the true box found where the target is drawn, the
batches a function of (seed, step), the appearance augmentation's ranges, the settings'
checks and identity, and the refinement probe on such pairs (its control reaches the
truth)."""

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from ebm_jax.data.box_head_pairs import jittered_pair_batches
from ebm_jax.data.sequences import read_got10k
from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split
from ebm_jax.models.alexnet import SiamFCAlexNet
from ebm_jax.ops.crops import box_to_center
from ebm_jax.ops.jitter import REFERENCE, TEST, CropJitter, jittered_box, jittered_crop_np
from ebm_jax.recipes.tracking.box_head_stages import build_box_head, probe_box_head
from ebm_jax.models.box_head import BoxHeadNet
from ebm_jax.tracking.box_head import PRDIMP_FIELDS, BoxHeadSettings
from ebm_jax.tracking.box_head_training import augment_appearance
from ebm_jax.tracking.siamfc import SiamFCSettings


def test_the_jittered_box_has_pytrackings_statistics():
    jitter = CropJitter()
    rng = np.random.default_rng(0)
    box = np.array([41.0, 31.0, 60.0, 30.0])  # xywh
    cy, cx, h, w = box_to_center(box)
    n = 20000
    for kind in (REFERENCE, TEST):
        draws = [jittered_box(rng, box, jitter, kind) for _ in range(n)]
        centres = np.array([c for c, _ in draws])
        root = np.array([s for _, s in draws]) / jitter.search_area_factor
        # log(sqrt(w' h') / sqrt(w h)) = (e_w + e_h) / 2 * scale: sd scale / sqrt(2)
        log_root = np.log(root / np.sqrt(w * h))
        sd = jitter.scale_jitter[kind] / np.sqrt(2)
        assert abs(log_root.std() - sd) < 4 * sd / np.sqrt(2 * n)
        assert abs(log_root.mean()) < 4 * sd / np.sqrt(n)
        # offset / (sqrt(w' h') factor) is U(-0.5, 0.5) per axis: mean 0, var 1/12
        u = (centres - [cy, cx]) / (root[:, None] * jitter.center_jitter[kind])
        assert np.abs(u).max() <= 0.5
        np.testing.assert_allclose(u.var(0), 1 / 12, atol=4 * np.sqrt(1 / 180 / n))
        np.testing.assert_allclose(u.mean(0), 0, atol=4 * np.sqrt(1 / 12 / n))


def test_the_crop_holds_the_target_where_its_box_says():
    frame = np.full((240, 320, 3), 100, np.uint8)
    frame[60:100, 150:230] = (250, 20, 20)  # rows 60-99, columns 150-229
    box = np.array([151.0, 61.0, 80.0, 40.0])  # 1-indexed xywh of those pixels
    rng = np.random.default_rng(1)
    checked = 0
    for kind in (REFERENCE, TEST):
        for _ in range(20):
            crop, xyxy = jittered_crop_np(rng, frame, box, CropJitter(), kind, 255)
            red = (crop[..., 0] > 175) & (crop[..., 1] < 60)
            ys, xs = np.nonzero(red)
            if xyxy.min() < 1 or xyxy.max() > 253:  # partly or wholly off the crop
                continue  # (offsets reach 2.25 sqrt(w' h'))
            checked += 1
            # the red pixels' centroid is the box's centre, to a fraction of a pixel
            # of the crop (bilinear edges; the crop pixel is frame px x out / side)
            np.testing.assert_allclose([xs.mean(), ys.mean()],
                                       [(xyxy[0] + xyxy[2]) / 2, (xyxy[1] + xyxy[3]) / 2],
                                       atol=1.0)
    assert checked > 10


@pytest.mark.parametrize("kw, field", [
    ({"search_area_factor": 0}, "search_area_factor"),
    ({"center_jitter": (3.0, 0.0)}, "center_jitter"),
    ({"scale_jitter": (-0.25, 0.5)}, "scale_jitter"),
    ({"scale_jitter": (0.25,)}, "scale_jitter")])
def test_jitter_factors_must_be_positive(kw, field):
    with pytest.raises(ValueError, match=field):
        CropJitter(**kw)


@pytest.mark.parametrize("kw, field", [
    ({"processing": "atom"}, "processing"), ({"search_area_factor": -1.0}, "search_area"),
    ({"center_jitter_factors": (0.0, 4.5)}, "center_jitter"),
    ({"brightness_jitter": 1.0}, "brightness_jitter"), ({"grayscale_prob": 2.0}, "grayscale"),
    ({"step_lengths": (-1.0,)}, "step_lengths")])
def test_bad_box_head_settings_name_the_field(kw, field):
    with pytest.raises(ValueError, match=f"BoxHeadSettings.{field}"):
        BoxHeadSettings(**kw)


def test_the_identity_records_the_prdimp_fields_only_where_used():
    siamfc, prdimp = BoxHeadSettings(), BoxHeadSettings(processing="prdimp")
    assert not set(PRDIMP_FIELDS) & set(siamfc.identity())
    assert set(PRDIMP_FIELDS) <= set(prdimp.identity())
    from ebm_jax.tracking.box_head import ATOM_FIELDS, TRACKER_OPTIONS
    # tracker options at their defaults and the ATOM head's fields of the simple head
    # are left out (the identity stages had before they existed)
    assert prdimp.identity() == {k: v for k, v in dataclasses.asdict(prdimp).items()
                                 if k not in TRACKER_OPTIONS + ATOM_FIELDS}
    # the crop side the head sees: PrDiMP's factor, or SiamFC's search side
    assert float(prdimp.head_side(SiamFCSettings(), 30.0, 60.0)) == pytest.approx(
        5 * np.sqrt(1800))
    assert float(siamfc.head_side(SiamFCSettings(), 30.0, 60.0)) == pytest.approx(
        float(SiamFCSettings().search_side(30.0, 60.0)))


def test_appearance_augmentation_stays_in_range_and_greys_both_crops():
    rng = np.random.default_rng(0)
    batch = {"ref": rng.integers(0, 256, (64, 16, 16, 3)).astype(np.uint8),
             "test": rng.integers(0, 256, (64, 16, 16, 3)).astype(np.uint8),
             "ref_boxes": np.zeros((64, 4), np.float32),
             "test_boxes": np.zeros((64, 4), np.float32)}
    s = BoxHeadSettings(processing="prdimp", grayscale_prob=0.5, blur_prob=0.5)
    ref, _, test, _ = (np.asarray(x) for x in augment_appearance(jax.random.key(0), batch, s))
    assert ref.min() >= 0 and ref.max() <= 255 and test.min() >= 0 and test.max() <= 255
    grey_ref = np.ptp(ref, axis=-1).max(axis=(1, 2)) < 1e-3
    grey_test = np.ptp(test, axis=-1).max(axis=(1, 2)) < 1e-3
    np.testing.assert_array_equal(grey_ref, grey_test)  # one decision per pair
    assert 10 < grey_ref.sum() < 54  # p = 0.5 of 64
    # without grey or blur: each crop scaled by one factor in [0.8, 1.2]
    plain = BoxHeadSettings(processing="prdimp", grayscale_prob=0.0)
    ref, _, _, _ = augment_appearance(jax.random.key(1), batch, plain)
    x = batch["ref"].astype(np.float64)
    keep = (x > 20) & (x < 200)  # not clipped by any factor
    ratio = np.where(keep, np.asarray(ref) / np.where(keep, x, 1), np.nan)
    per_crop = np.nanmean(ratio, axis=(1, 2, 3))
    assert np.all((per_crop >= 0.8 - 1e-4) & (per_crop <= 1.2 + 1e-4))
    np.testing.assert_allclose(np.nanstd(ratio, axis=(1, 2, 3)), 0, atol=1e-5)


@pytest.fixture(scope="module")
def sequences(tmp_path_factory):
    dest = tmp_path_factory.mktemp("data") / "train"
    generate_tracking_split(dest, TrackingSpec(split="train", num_sequences=2,
                                               num_frames=8, height=96, width=128),
                            progress=False)
    return read_got10k(dest)


def test_jittered_pairs_are_a_function_of_seed_and_step(sequences):
    batches = jittered_pair_batches(sequences, batch_size=3, max_gap=8, seed=5,
                                    jitter=CropJitter(), out_size=63)
    a, b = batches(2), batches(2)
    assert a["ref"].shape == (3, 63, 63, 3) and a["ref"].dtype == np.uint8
    assert a["test_boxes"].shape == (3, 4)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["test_boxes"], batches(3)["test_boxes"])
    with pytest.raises(TypeError, match="CropJitter"):
        jittered_pair_batches(sequences, batch_size=1, max_gap=8, seed=0, jitter=None)


@pytest.mark.heavy
def test_the_probe_runs_on_prdimp_pairs_and_its_control_reaches_the_truth(sequences):
    backbone = SiamFCAlexNet(width=0.125, rngs=nnx.Rngs(0))
    settings = BoxHeadSettings(processing="prdimp", width=8, hidden=16)
    net = BoxHeadNet(backbone, build_box_head(backbone, settings, jax.random.key(0)))
    out = probe_box_head(net, sequences, settings, seed=0, num_batches=1, batch_size=4)
    assert out["pairs"] == 4
    assert out["control"]["iou_refined"] > 0.95 and out["control"]["outranks"] == 1.0
    for k in ("iou_start", "iou_refined", "outranks", "rank_correlation"):
        assert np.isfinite(out["head"][k])
    assert out["head"]["iou_start"] == out["control"]["iou_start"]  # the same starts
    assert out["head_se"]["gain"] >= 0 and len(out["candidates_gain_se"]) == 1
    # the sharper probe: starts of set overlap, own against another pair's reference
    assert set(out["from_starts"]) == {"0.5", "0.7", "0.8"}
    for level, row in out["from_starts"].items():
        assert row["iou_start"] == pytest.approx(float(level), abs=1e-4)
        assert row["gain"] == pytest.approx(row["iou_refined"] - row["iou_start"], abs=1e-6)
        assert row["own_minus_other"] == pytest.approx(
            row["iou_refined"] - row["iou_refined_other_reference"], abs=1e-6)
        assert row["gain_se"] >= 0 and row["own_minus_other_se"] >= 0
        # the tracker's own procedure (jittered copies, the top-k mean) from the same starts
        assert row["procedure_gain"] == pytest.approx(row["iou_procedure"] - row["iou_start"],
                                                      abs=1e-6)
        assert 0 <= row["iou_procedure"] <= 1 and row["procedure_gain_se"] >= 0


@pytest.mark.heavy
def test_candidate_step_lengths_give_what_each_would_alone(sequences):
    backbone = SiamFCAlexNet(width=0.125, rngs=nnx.Rngs(0))
    settings = BoxHeadSettings(processing="prdimp", width=8, hidden=16)
    net = BoxHeadNet(backbone, build_box_head(backbone, settings, jax.random.key(0)))
    # two candidates (one per-coordinate): each `alone` below is a probe of its own
    cands = [[2.5e-3] * 4, [1e-2, 1e-2, 2.5e-3, 2.5e-3]]
    out = probe_box_head(net, sequences, settings, seed=0, num_batches=1, batch_size=4,
                         candidates=cands)
    for c, got in zip(cands, out["candidates"]):
        alone = probe_box_head(net, sequences, dataclasses.replace(settings, step_lengths=c),
                               seed=0, num_batches=1, batch_size=4)
        # the same arithmetic, traced or constant step lengths: float32 rounding only
        assert got == pytest.approx(alone["head"]["iou_refined"], abs=1e-5)
    with pytest.raises(ValueError, match="candidates"):
        probe_box_head(net, sequences, settings, seed=0, num_batches=1, candidates=[[0.0] * 4])
