"""The score map of boxes and the grid softmax of TOP maps (SoCL sec. 3.1,
`ebm_jax.ops.score_maps`): hand cases and direct loops."""

from __future__ import annotations

import numpy as np

from ebm_jax.ops import score_maps as tm
from tests.tolerances import float32_sum_atol


def covers(box, i, j) -> bool:
    """The coverage rule, transcribed: pixel (i, j) (0-indexed) has its centre at (j + 1,
    i + 1) in 1-indexed coordinates; the box covers [x - 0.5, x + w - 0.5)."""
    x, y, w, h = box
    return x - 0.5 <= j + 1 < x + w - 0.5 and y - 0.5 <= i + 1 < y + h - 0.5


def test_score_map_hand_case():
    boxes = np.array([[1, 1, 2, 2],          # rows 0-1, columns 0-1
                      [2.4, 0.2, 1.2, 10],   # columns j + 1 in [1.9, 3.1): 1, 2; every row
                      [4.6, 3.5, 5, 5]])     # columns 4..: 4; rows i + 1 >= 3: 2, 3
    scores = np.array([1.0, 10.0, 100.0])
    expected = np.array([[1, 11, 10, 0, 0],
                         [1, 11, 10, 0, 0],
                         [0, 10, 10, 0, 100],
                         [0, 10, 10, 0, 100]], np.float32)
    got = tm.score_map((4, 5), boxes, scores)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected)


def test_score_map_matches_direct_loop():
    rng = np.random.default_rng(1)
    shape = (23, 31)
    xy = rng.uniform(-10, 35, (40, 2))
    boxes = np.column_stack([xy, rng.uniform(0, 25, (40, 2))])
    boxes[:3] = [[1, 1, 31, 23], [0.5, 0.5, 0.9, 0.9], [30.7, 22.2, 4, 4]]  # borders
    scores = rng.uniform(0, 1, 40)
    direct = np.zeros(shape)
    for box, score in zip(boxes, scores):
        for i in range(shape[0]):
            for j in range(shape[1]):
                direct[i, j] += score * covers(box, i, j)
    np.testing.assert_allclose(tm.score_map(shape, boxes, scores), direct, rtol=1e-6,
                               atol=1e-5)


def direct_grid_softmax(values, grid, temperature):
    """Each cell's mean with explicit pixel-overlap weights, then a softmax."""
    height, width = values.shape
    means = np.zeros(grid)
    for a in range(grid[0]):
        y0, y1 = a * height / grid[0], (a + 1) * height / grid[0]
        for b in range(grid[1]):
            x0, x1 = b * width / grid[1], (b + 1) * width / grid[1]
            total = 0.0
            for i in range(height):
                for j in range(width):
                    overlap = (max(0, min(i + 1, y1) - max(i, y0))
                               * max(0, min(j + 1, x1) - max(j, x0)))
                    total += overlap * values[i, j]
            means[a, b] = total / ((y1 - y0) * (x1 - x0))
    weights = np.exp(means / temperature - (means / temperature).max())
    return weights / weights.sum()


def test_grid_softmax_matches_direct_transcription():
    rng = np.random.default_rng(2)
    values = rng.uniform(0, 3, (13, 10))
    for grid, temperature in (((4, 3), 1.0), ((13, 5), 0.5), ((3, 7), 2.0)):
        got = tm.grid_softmax(values, grid, temperature=temperature)
        assert got.shape == grid and got.dtype == np.float32
        # a float32 sum of gh * gw float32 cells (tests/tolerances.py)
        np.testing.assert_allclose(got.sum(), 1.0, rtol=float32_sum_atol(got.size, 1.0))
        np.testing.assert_allclose(got, direct_grid_softmax(values, grid, temperature),
                                   rtol=1e-5)
    divisible = rng.uniform(0, 3, (12, 8))
    means = divisible.reshape(3, 4, 2, 4).mean(axis=(1, 3))
    expected = np.exp(means - means.max()) / np.exp(means - means.max()).sum()
    np.testing.assert_allclose(tm.grid_softmax(divisible, (3, 2)), expected, rtol=1e-6)


def test_grid_softmax_of_whole_pixel_cells_takes_no_matrix_product(monkeypatch):
    """Cells of whole pixels (the training regions' windows) are averaged by a reshape,
    not by the area weights' matrix products (BLAS calls that wait on each other across
    reader threads), and agree with the direct transcription; cells that split pixels
    still take the weights."""
    rng = np.random.default_rng(4)
    values = rng.uniform(0, 3, (24, 18))
    expected = direct_grid_softmax(values, (6, 3), 0.7)

    def no_weights(*args):
        raise AssertionError("the area weights were built for cells of whole pixels")

    monkeypatch.setattr(tm, "_cell_weights", no_weights)
    got = tm.grid_softmax(values, (6, 3), temperature=0.7)
    # means of 12 float64 values, then one float32 rounding of each probability
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    with np.testing.assert_raises(AssertionError):
        tm.grid_softmax(values, (5, 3))


def test_grid_softmax_peaks_at_the_cell_of_the_peak():
    values = np.zeros((40, 60))
    values[27:30, 44:47] = 50.0  # cell (2, 4) of a 4 x 6 grid of 10 px cells
    grid = tm.grid_softmax(values, (4, 6))
    assert np.unravel_index(np.argmax(grid), grid.shape) == (2, 4)
    np.testing.assert_allclose(grid.sum(), 1.0, rtol=float32_sum_atol(grid.size, 1.0))
