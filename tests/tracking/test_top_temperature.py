"""The TOP maps' softmax temperature set per feature grid without boxes
(`top_maps.calibrate_temperature`): re-tempering a map at 1 is the map drawn at T, a
Gaussian map's theta mass grows linearly with T (a known answer), and the calibrated
temperature leaves fewer target cells in the SNS pool than a peaked map does."""

from __future__ import annotations

import numpy as np
import pytest

from ebm_jax.eval.backbone_diagnostics import target_cells_in_sns_pool
from ebm_jax.ops.score_maps import grid_softmax, score_map
from ebm_jax.tracking import top_maps as tm

G = 21


def gaussian_logits(spread: float = 1.0) -> np.ndarray:
    """(G, G) logits -r^2 / (2 spread) around the centre cell."""
    k = np.arange(G) - G // 2
    return -(k[:, None] ** 2 + k[None, :] ** 2) / (2.0 * spread)


def softmax(logits) -> np.ndarray:
    e = np.exp(logits - logits.max())
    return e / e.sum()


def test_retemper_is_the_map_drawn_at_that_temperature():
    rng = np.random.default_rng(0)
    boxes = np.column_stack([rng.uniform(1, 40, (30, 2)), rng.uniform(5, 30, (30, 2))])
    pixels = score_map((64, 64), boxes, rng.uniform(0, 1, 30))
    at_1 = grid_softmax(pixels, (8, 8))
    for t in (0.5, 2.0, 7.0):
        np.testing.assert_allclose(tm.retemper(at_1, t),
                                   grid_softmax(pixels, (8, 8), temperature=t),
                                   rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(tm.retemper(at_1, 3.0).sum(), 1.0)
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        tm.retemper(at_1, 0.0)


def test_mass_cells_of_a_gaussian_map_grow_with_temperature():
    """At T the map is a Gaussian of variance T (cells): its theta mass fills a disc of
    area 2 pi T ln(1 / (1 - theta)), 10.1 T cells at theta 0.8."""
    at_1 = softmax(gaussian_logits())[None]
    counts = [int(tm.mass_cells(tm.retemper(at_1, t), 0.8)[0]) for t in (1, 2, 4, 8)]
    assert counts == sorted(counts)
    for t, n in zip((1, 2, 4, 8), counts):
        assert abs(n - 2 * np.pi * t * np.log(5)) <= 0.2 * n + 2, (t, n)


@pytest.mark.parametrize("target, expected", [(40, 4.0), (10, 1.0), (160, 16.0)])
def test_calibration_picks_the_temperature_whose_mass_covers_the_target(target, expected):
    maps = np.repeat(softmax(gaussian_logits())[None], 5, axis=0)
    temperature, record = tm.calibrate_temperature(maps, np.full(5, target), 0.8)
    assert temperature == pytest.approx(expected)
    ratios = np.asarray(record["median_ratio"])
    assert np.all(np.diff(ratios) >= 0)  # more cells as the map flattens
    best = np.argmin(np.abs(np.log(ratios)))
    assert record["candidates"][best] == temperature and record["frames"] == 5


def test_calibration_is_checked_by_the_target_cells_left_in_the_sns_pool():
    """A map peaked at 1 (4 cells hold 80% of its mass) around a target of 37 cells: at
    1 most target cells are left in the SNS pool; at the calibrated temperature few."""
    k = np.arange(G) - G // 2
    target = (k[:, None] ** 2 + k[None, :] ** 2) <= 12  # a disc of 37 cells
    at_1 = softmax(gaussian_logits(0.3))[None]
    assert tm.mass_cells(at_1, 0.8)[0] == 4
    temperature, _ = tm.calibrate_temperature(at_1, [target.sum()], 0.8)
    before = target_cells_in_sns_pool(at_1, target[None], 0.8)[0]
    after = target_cells_in_sns_pool(tm.retemper(at_1, temperature), target[None], 0.8)[0]
    assert before == pytest.approx(1 - 4 / 37) and after < 0.1, (before, after, temperature)


def test_ties_take_the_middle_candidate_and_bad_inputs_are_refused():
    two_level = np.full((G, G), -30.0)
    two_level[10, 10] = 0.0  # one cell holds all the mass until T is large
    temperature, record = tm.calibrate_temperature(softmax(two_level)[None], [1], 0.8,
                                                   candidates=(0.5, 1.0, 2.0))
    assert record["median_ratio"] == [1.0, 1.0, 1.0] and temperature == 1.0
    with pytest.raises(ValueError, match="target_cells must be >= 1"):
        tm.calibrate_temperature(softmax(two_level)[None], [0], 0.8)
    with pytest.raises(ValueError, match="maps must be"):
        tm.calibrate_temperature(np.ones((2, G)), [1, 1], 0.8)


def test_box_cells_and_the_proposals_extent():
    grid = (10, 8, 43.0)  # AlexNet on a 159 region: cell k centred on pixel 43 + 8 k
    # a box over input pixels 60..98 (1-indexed x 61, w 39) holds the centres 67..91;
    # one px wider, 99 too
    mask = tm.box_cells([61.0, 61.0, 39.0, 39.0], grid)
    assert mask.sum() == 16 and mask[3:7, 3:7].all()
    assert tm.box_cells([61.0, 61.0, 40.0, 40.0], grid).sum() == 25
    tiny = tm.box_cells([64.0, 64.0, 2.0, 2.0], grid)  # between centres: the nearest
    assert tiny.sum() == 1 and tiny[3, 3]
    boxes = np.array([[1, 1, 10, 20], [1, 1, 30, 40], [np.nan] * 4, [1, 1, 99, 99]])
    scores = np.array([3.0, 1.0, np.nan, 5.0])
    np.testing.assert_allclose(tm.proposal_extent(boxes, scores, top=2), [15.0, 25.0])
    np.testing.assert_allclose(tm.proposal_extent(boxes, np.zeros(4), top=2), [20, 30])
