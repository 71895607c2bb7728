"""TOP maps (SoCL sec. 3.1) and the objectness cues (Alexe et al. 2012): each vectorised
piece against a direct loop, and the whole on a synthetic frame with a known target."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from ebm_jax.eval.tracking import box_iou
from ebm_jax.tracking import objectness as cues
from ebm_jax.tracking import top_maps as tm

ROOT = Path(__file__).parents[2]
TARGET = np.array([71.0, 41.0, 48.0, 40.0])  # xywh, 1-indexed: columns 70..117, rows 40..79


def synthetic_frame(seed: int = 0) -> np.ndarray:
    """A dark, faintly noisy background and a bright textured square target (TARGET)."""
    rng = np.random.default_rng(seed)
    image = (70 + rng.integers(0, 6, (160, 200, 3))).astype(np.uint8)
    texture = rng.integers(150, 256, (11, 13, 3)).astype(np.uint8)
    texture = np.kron(texture, np.ones((4, 4, 1), np.uint8))[:40, :48]
    image[40:80, 70:118] = texture
    return image


def target_point() -> np.ndarray:
    return TARGET[:2] + (TARGET[2:] - 1) / 2


@pytest.fixture(scope="module")
def kept():
    return tm.top_boxes(synthetic_frame(), target_point())


def covers(box, i, j) -> bool:
    """The coverage rule, transcribed: pixel (i, j) (0-indexed) has its centre at (j + 1,
    i + 1) in 1-indexed coordinates; the box covers [x - 0.5, x + w - 0.5)."""
    x, y, w, h = box
    return x - 0.5 <= j + 1 < x + w - 0.5 and y - 0.5 <= i + 1 < y + h - 0.5


def random_rects(rng, shape, n=200):
    r = np.sort(rng.integers(0, shape[0] + 1, (n, 2)), axis=1)
    c = np.sort(rng.integers(0, shape[1] + 1, (n, 2)), axis=1)
    r[:, 1] = np.maximum(r[:, 1], r[:, 0] + 1).clip(max=shape[0])
    r[:, 0] = np.minimum(r[:, 0], r[:, 1] - 1)
    c[:, 1] = np.maximum(c[:, 1], c[:, 0] + 1).clip(max=shape[1])
    c[:, 0] = np.minimum(c[:, 0], c[:, 1] - 1)
    return np.column_stack([r, c])


# -- pseudo box (score map and grid softmax: tests/ops/test_score_maps.py) ----------------------------------------------


def test_pseudo_box_hand_case():
    score = np.zeros((6, 8))
    score[1:3, 1:4] = 5.0  # region A, columns 1-3, rows 1-2
    score[2, 2] = 10.0
    score[4:6, 6:8] = 6.0  # region B, columns 6-7, rows 4-5
    score[3, 4] = 5.5  # touches A diagonally (8-connected)
    # the point on A (pixel row 1, column 2 -> 1-indexed (3, 2)): A with its diagonal pixel
    np.testing.assert_array_equal(tm.pseudo_box(score, (3, 2), 0.5), [2, 2, 4, 3])
    # alpha 0.55 keeps >= 5.5: pixel (2, 2) of A, the lone pixel (3, 4) and B
    np.testing.assert_array_equal(tm.pseudo_box(score, (3, 3), 0.55), [3, 3, 1, 1])
    # a point off every region: the nearest kept pixel's region (B, 1.4 px away)
    np.testing.assert_array_equal(tm.pseudo_box(score, (8, 3.6), 0.5), [7, 5, 2, 2])
    np.testing.assert_array_equal(tm.pseudo_box(score, (4, 2), 1.0), [3, 3, 1, 1])


# -- cue helpers: integral images against direct sums -----------------------------------


def test_window_sums_and_box_rects_match_direct():
    rng = np.random.default_rng(3)
    values = rng.uniform(size=(17, 23, 2))
    rects = random_rects(rng, values.shape[:2])
    direct = np.array([values[r0:r1, c0:c1].sum(axis=(0, 1)) for r0, r1, c0, c1 in rects])
    np.testing.assert_allclose(cues.window_sums(cues.integral_image(values), rects), direct)
    boxes = np.column_stack([rng.uniform(-5, 40, (50, 2)), rng.uniform(1, 30, (50, 2))])
    scale = (0.5, 0.25)  # (sx, sy): a 68 x 46 frame (rows x columns) seen as 17 x 23
    rects = cues.box_rects(boxes, scale, (17, 23))
    for box, (r0, r1, c0, c1) in zip(boxes, rects):
        small = np.array([(box[0] - 1) * scale[0] + 1, (box[1] - 1) * scale[1] + 1,
                          box[2] * scale[0], box[3] * scale[1]])
        inside = np.array([[covers(small, i, j) for j in range(23)] for i in range(17)])
        if inside.any():  # empty windows are widened to one pixel
            rows, cols = np.nonzero(inside)
            assert (r0, r1, c0, c1) == (rows.min(), rows.max() + 1, cols.min(), cols.max() + 1)
        assert 0 <= r0 < r1 <= 17 and 0 <= c0 < c1 <= 23


def test_saliency_scores_match_direct():
    rng = np.random.default_rng(4)
    maps = rng.uniform(size=(3, 15, 20))
    rects = random_rects(rng, (15, 20))
    got = cues.saliency_scores(maps, rects, 0.4)
    direct = []
    for r0, r1, c0, c1 in rects:
        per_scale = []
        for m in maps:
            window = m[r0:r1, c0:c1]
            above = window >= 0.4
            per_scale.append(window[above].sum() * above.sum() / window.size)
        direct.append(np.mean(per_scale))
    np.testing.assert_allclose(got, direct, rtol=1e-9)


def test_colour_contrast_scores_match_direct():
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, (18, 21, 3)).astype(np.uint8)
    bins = cues.lab_bins(image)
    assert bins.min() >= 0 and bins.max() < 256
    rects = random_rects(rng, bins.shape)
    surround = random_rects(rng, bins.shape)
    got = cues.colour_contrast_scores(cues.integral_histogram(bins), rects, surround)
    for k, ((r0, r1, c0, c1), (s0, s1, t0, t1)) in enumerate(zip(rects, surround)):
        s0, s1, t0, t1 = min(s0, r0), max(s1, r1), min(t0, c0), max(t1, c1)
        p = np.bincount(bins[r0:r1, c0:c1].ravel(), minlength=256).astype(float)
        q = np.bincount(bins[s0:s1, t0:t1].ravel(), minlength=256) - p
        if q.sum() == 0:
            assert got[k] == 0
            continue
        p, q = p / p.sum(), q / q.sum()
        m = p + q > 0
        np.testing.assert_allclose(got[k], 0.5 * np.sum((p[m] - q[m]) ** 2 / (p[m] + q[m])),
                                   rtol=1e-5)


def test_edge_density_scores_match_direct():
    rng = np.random.default_rng(6)
    edges = (rng.uniform(size=(16, 19)) < 0.3).astype(np.float32)
    boxes = np.column_stack([rng.uniform(-3, 18, (60, 2)), rng.uniform(1, 15, (60, 2))])
    rects = cues.box_rects(boxes, (1.0, 1.0), edges.shape)
    inner = cues.box_rects(boxes, (1.0, 1.0), edges.shape, 0.6)
    got = cues.edge_density_scores(edges, rects, inner)
    for k, ((r0, r1, c0, c1), (i0, i1, j0, j1)) in enumerate(zip(rects, inner)):
        ring = np.zeros(edges.shape, bool)
        ring[r0:r1, c0:c1] = True
        if r0 <= i0 and i1 <= r1 and c0 <= j0 and j1 <= c1:
            ring[i0:i1, j0:j1] = False
        expected = edges[ring].sum() / ring.sum() if ring.any() else 0.0
        np.testing.assert_allclose(got[k], expected, rtol=1e-9)


def test_rank_normalise():
    np.testing.assert_allclose(cues.rank_normalise([3.0, 1.0, 2.0, 2.0, 9.0]),
                               [0.75, 0.0, 0.375, 0.375, 1.0])
    np.testing.assert_allclose(cues.rank_normalise([4.0]), [1.0])


# -- proposals (NMS: tests/ops/test_nms.py) -------------------------------------------------------------------


def test_random_proposals_centred_within_ranges():
    settings = tm.TopMapSettings(num_random=3000, scale_range=(0.1, 0.5),
                                 aspect_range=(0.5, 2.0))
    point = np.array([30.5, 77.0])
    boxes = tm.random_proposals((100, 60, 3), point, settings, np.random.default_rng(0))
    assert boxes.shape == (3000, 4)
    np.testing.assert_allclose(boxes[:, :2] + (boxes[:, 2:] - 1) / 2,
                               np.broadcast_to(point, (3000, 2)), atol=1e-9)
    scale = np.sqrt(boxes[:, 2] * boxes[:, 3]) / 60
    aspect = boxes[:, 2] / boxes[:, 3]
    assert 0.1 - 1e-9 <= scale.min() and scale.max() <= 0.5 + 1e-9
    assert 0.5 - 1e-9 <= aspect.min() and aspect.max() <= 2.0 + 1e-9
    # log-uniform: half the draws below the geometric mean of the range
    assert abs(np.mean(scale < np.sqrt(0.05)) - 0.5) < 0.05


def test_edgebox_proposals_near_the_point_and_on_the_target():
    image, point = synthetic_frame(), target_point()
    settings = tm.TopMapSettings(edgebox_radius=12.0)
    boxes = tm.edgebox_proposals(image, point, settings)
    assert len(boxes) > 0
    centres = boxes[:, :2] + (boxes[:, 2:] - 1) / 2
    assert np.all(np.hypot(*(centres - point).T) <= 12.0)
    assert box_iou(boxes, np.broadcast_to(TARGET, boxes.shape)).max() > 0.7
    assert len(tm.edgebox_proposals(image, point, dataclasses.replace(settings,
                                                                      edgeboxes=0))) == 0


# -- the whole TOP map ----------------------------------------------------------------------


def test_top_map_concentrates_on_the_target(kept):
    boxes, scores = kept
    assert 1 <= len(boxes) <= 64 and np.all(np.diff(scores) <= 0)
    assert np.all((scores >= 0) & (scores <= 1))
    assert box_iou(boxes[:1], TARGET[None])[0] > 0.5
    score = tm.score_map((160, 200), boxes, scores)
    np.testing.assert_allclose(score, tm.top_map(synthetic_frame(), target_point()))
    grid = tm.grid_softmax(score, (16, 20))  # 10 px cells
    centres_y, centres_x = (np.arange(16) + 0.5) * 10, (np.arange(20) + 0.5) * 10
    inside = (((centres_y >= 40) & (centres_y < 80))[:, None]
              & ((centres_x >= 70) & (centres_x < 118))[None, :])
    assert grid[inside].sum() > 0.6
    assert score[40:80, 70:118].sum() / score.sum() > 0.6


def test_objectness_prefers_the_target_window():
    image = synthetic_frame()
    boxes = np.array([TARGET, [21, 11, 48, 40], [131, 101, 48, 40], [61, 31, 68, 60]])
    scores = tm.objectness(image, boxes, tm.TopMapSettings())
    assert scores.shape == (4,) and np.argmax(scores) == 0
    assert np.all((scores >= 0) & (scores <= 1))


def test_objectness_is_the_mean_of_rank_normalised_cues():
    image, settings = synthetic_frame(), tm.TopMapSettings()
    rng = np.random.default_rng(8)
    boxes = np.column_stack([rng.uniform(1, 150, (300, 2)), rng.uniform(4, 90, (300, 2))])
    rects = cues.box_rects(boxes, (1.0, 1.0), image.shape[:2])
    raw = [cues.saliency_scores(cues.saliency_maps(image, settings.saliency_scales,
                                                   settings.saliency_blur),
                                rects, settings.saliency_threshold),
           cues.colour_contrast_scores(
               cues.integral_histogram(cues.lab_bins(image, settings.colour_bins)), rects,
               cues.box_rects(boxes, (1.0, 1.0), image.shape[:2], settings.colour_surround)),
           cues.edge_density_scores(
               cues.canny_edges(image, *settings.canny), rects,
               cues.box_rects(boxes, (1.0, 1.0), image.shape[:2], settings.edge_inner))]
    expected = np.mean([cues.rank_normalise(r) for r in raw], axis=0)
    np.testing.assert_allclose(tm.objectness(image, boxes, settings), expected)
    # a frame twice the size is scored on its downscaled copy: the same frame again
    large = np.repeat(np.repeat(image, 2, axis=0), 2, axis=1)
    large_boxes = np.column_stack([2 * boxes[:, :2] - 1, 2 * boxes[:, 2:]])
    np.testing.assert_allclose(tm.objectness(large, large_boxes, settings), expected)


def test_top_map_is_deterministic_in_the_seed():
    image, point = synthetic_frame(), target_point()
    settings = tm.TopMapSettings(num_random=500, edgeboxes=0)
    first = tm.top_map(image, point, settings, seed=3)
    np.testing.assert_array_equal(first, tm.top_map(image, point, settings, seed=3))
    assert not np.array_equal(first, tm.top_map(image, point, settings, seed=4))


def test_recall_at_hand_case():
    truth = np.array([[0, 0, 10, 10], [0, 0, 10, 10], [np.nan] * 4, [5, 5, 4, 4.0]])
    kept = [np.array([[50, 50, 5, 5], [0, 0, 10, 10]]),   # hit at rank 2
            np.array([[0, 0, 10, 10], [9, 9, 1, 1], [0, 0, 10, 9]]),  # hits at ranks 1, 3
            np.zeros((0, 4)),                             # absent: not counted
            np.array([[5, 5, 8, 8], [0, 0, 3, 3.0]])]     # IoU 0.25: never
    np.testing.assert_allclose(tm.recall_at(kept, truth, [1, 2, 64]), [1 / 3, 2 / 3, 2 / 3])
    np.testing.assert_allclose(tm.recall_at(kept, truth, [2], iou=0.2), [1.0])


# -- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize("field, value", [
    ("num_random", 0), ("scale_range", (0.5, 0.1)), ("aspect_range", (0, 2)),
    ("edgeboxes", -1), ("edgebox_radius", -1.0), ("nms_iou", 0.0), ("keep", 0),
    ("cue_size", 8), ("saliency_scales", ()), ("saliency_threshold", 1.0),
    ("colour_bins", (4, 8)), ("colour_surround", 1.0), ("edge_inner", 1.0),
    ("canny", (150, 50)), ("keep", 2.5)])
def test_settings_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"TopMapSettings.{field} must be"):
        tm.TopMapSettings(**{field: value})


def test_bad_inputs_name_the_argument():
    image, point = synthetic_frame(), target_point()
    for bad in ((0.2, 5), (200.6, 10), (np.nan, 10), (10, -1), (1, 2, 3)):
        with pytest.raises(ValueError, match="point must be"):
            tm.top_map(image, bad)
    for bad in (image.astype(np.float32), image[..., :2], image[0]):
        with pytest.raises(ValueError, match="image must be"):
            tm.top_boxes(bad, point)
    with pytest.raises(ValueError, match="alpha must be"):
        tm.pseudo_box(np.ones((4, 4)), (2, 2), 0.0)
    with pytest.raises(ValueError, match="keep must be"):
        tm.nms(np.ones((2, 4)), np.ones(2), 0.5, 0)
    with pytest.raises(ValueError, match="iou must be"):
        tm.nms(np.ones((2, 4)), np.ones(2), 1.5, 3)
    with pytest.raises(ValueError, match="scores must be"):
        tm.score_map((4, 4), np.ones((2, 4)), np.ones(3))
    with pytest.raises(ValueError, match="grid_hw must be"):
        tm.grid_softmax(np.ones((4, 4)), (0, 2))
    with pytest.raises(ValueError, match="temperature must be"):
        tm.grid_softmax(np.ones((4, 4)), (2, 2), temperature=0)
    with pytest.raises(ValueError, match="seed must be"):
        tm.top_boxes(image, point, seed=-1)
    with pytest.raises(ValueError, match="rng must be"):
        tm.random_proposals(image.shape, point, tm.TopMapSettings(), 0)
    with pytest.raises(ValueError, match="ks must be"):
        tm.recall_at([np.ones((1, 4))], np.ones((1, 4)), [0])


# -- the benchmark's report ----------------------------------------------------------------


def test_benchmark_report_matches_a_recomputation(tmp_path):
    from ebm_jax.data.sequences import read_got10k
    from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split

    spec = importlib.util.spec_from_file_location("bench_top_maps",
                                                  ROOT / "benchmarks" / "top_maps.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    data = tmp_path / "data"
    generate_tracking_split(data, TrackingSpec(split="test", num_sequences=1, num_frames=4,
                                               height=96, width=128))
    out = tmp_path / "out"
    assert bench.main(["--out", str(out), "--repeats", "1", "--train-size", "64",
                       "--data", str(data)]) == 0
    report = json.loads((out / "top_maps.json").read_text())
    assert [r["size"] for r in report["speed"]] == [512, 64]
    for run in report["speed"]:
        assert set(run["seconds"]) == {"top_map", *bench.COMPONENTS}
        assert all(v["min"] > 0 for v in run["seconds"].values())  # every part timed
        assert run["seconds"]["top_map"]["median"] >= run["seconds"]["nms"]["median"]
    rec = report["recall"]
    assert rec["frames"] + rec["skipped"] == 4 and rec["ks"][-1] == 64
    seq = read_got10k(data)[0]
    inside = [0.5 <= x <= 128.5 and 0.5 <= y <= 96.5 for x, y in seq.points]
    frames = [i for i in range(4) if not seq.absent[i] and inside[i]]
    kept = [tm.top_boxes(seq.read_frame(i), seq.points[i])[0] for i in frames]
    np.testing.assert_allclose(rec["recall"], tm.recall_at(kept, seq.boxes[frames], rec["ks"]))
    table = (out / "top_maps.md").read_text()
    assert "| **top_map (whole)** |" in table and "| recall |" in table
    with pytest.raises(SystemExit):  # bad arguments stop before anything is written
        bench.main(["--out", str(tmp_path / "bad"), "--repeats", "0"])
    assert not (tmp_path / "bad").exists()
