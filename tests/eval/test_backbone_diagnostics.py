"""The backbone diagnostics (`ebm_jax.eval.backbone_diagnostics`) on hand-made feature
maps with known answers: orthogonal cells, a target of one direction on a background
of another, TOP maps whose mass sits on or off the target, and two videos whose pairs
are (or are not) told apart by SoCL's negatives."""

from __future__ import annotations

import numpy as np
import pytest

from ebm_jax.contrastive.socl import SoCLSettings
from ebm_jax.eval import backbone_diagnostics as bd

E = np.eye(4)


def target_on_background(target, background, grid=4, rows=slice(1, 3), cols=slice(1, 3)):
    """One (1, grid, grid, 4) map: `background` everywhere, `target` on rows x cols; and
    its (1, grid, grid) target mask."""
    f = np.tile(np.asarray(background, float), (1, grid, grid, 1))
    mask = np.zeros((1, grid, grid), bool)
    f[0, rows, cols] = target
    mask[0, rows, cols] = True
    return f, mask


def test_cell_uniformity_known_answers():
    alike = np.tile(np.array([1.0, 2.0, 0.0, 0.0]), (1, 3, 3, 1))
    orthogonal = E.reshape(1, 2, 2, 4)  # four one-hot cells: cos to the mean 1 / 2
    opposite = np.array([1.0, 0, 0, 0, -1.0, 0, 0, 0]).reshape(1, 1, 2, 4)  # mean 0
    np.testing.assert_allclose(bd.cell_uniformity(np.concatenate([alike[:, :2, :2],
                                                                  orthogonal])), [1.0, 0.5])
    np.testing.assert_allclose(bd.cell_uniformity(opposite), [0.0])


def test_response_contrast_and_identification_of_a_clean_target():
    f, mask = target_on_background(E[0], E[1])
    z = bd.template(f, mask)
    np.testing.assert_allclose(z, [E[0]])
    r = bd.response_map(f, z)
    np.testing.assert_allclose(r[0], mask[0].astype(float))  # cosine 1 on, 0 off
    p = 4 / 16  # (1 - 0) / sd of a 0/1 map with a fraction p of ones
    np.testing.assert_allclose(bd.response_contrast(r, mask), [1 / np.sqrt(p * (1 - p))])
    assert bd.identification_hits(r, mask).tolist() == [True]


def test_a_background_cell_that_beats_the_target_is_a_miss():
    f, mask = target_on_background((E[0] + E[1]) / np.sqrt(2), E[1])
    f[0, 0, 0] = E[0]  # a distractor identical to the template
    r = bd.response_map(f, E[:1])
    assert bd.identification_hits(r, mask).tolist() == [False]
    # target mean 0.707, background mean (1 + 11 x 0) / 12
    expected = (1 / np.sqrt(2) - 1 / 12) / r[0].std()
    np.testing.assert_allclose(bd.response_contrast(r, mask), [expected])


def test_flat_and_degenerate_responses():
    mask = np.zeros((2, 3, 3), bool)
    mask[0, 1, 1] = True
    mask[1] = True  # no background cell
    contrast = bd.response_contrast(np.full((2, 3, 3), 0.3), mask)
    assert contrast[0] == 0.0 and np.isnan(contrast[1])
    with pytest.raises(ValueError, match="target_mask must be"):
        bd.response_contrast(np.zeros((1, 3, 3)), np.zeros((1, 2, 2), bool))


def test_target_cells_in_the_sns_pool():
    mask = np.zeros((1, 4, 4), bool)
    mask[0, 3] = True  # the last row: cells 12..15
    on_target = mask / mask.sum()
    assert bd.target_cells_in_sns_pool(on_target, mask, 0.8).tolist() == [0.0]
    # a flat map: 0.8 of its mass is its first 13 cells (ties by index), so cells 13,
    # 14 and 15 of the target are left to the SNS
    flat = np.full((1, 4, 4), 1 / 16)
    np.testing.assert_allclose(bd.target_cells_in_sns_pool(flat, mask, 0.8), [0.75])
    off_target = np.zeros((1, 4, 4))
    off_target[0, 0, :2] = 0.5
    np.testing.assert_allclose(bd.target_cells_in_sns_pool(off_target, mask, 0.8), [1.0])


def two_videos(uniform: bool):
    """Pairs of video 0 (every cell e0) and video 1 (e1); with `uniform` False, their
    backgrounds are e2 and the targets (one cell) e0 / e1."""
    f = np.zeros((2, 3, 3, 4))
    h = np.zeros((2, 3, 3))
    h[:, 1, 1] = 1.0
    for v in (0, 1):
        f[v] = E[v] if uniform else E[2]
        f[v, 1, 1] = E[v]
    return f, h


def test_pair_similarities_known_answers():
    """Without SNS the negatives are the other video's GST: positive 1, hardest 0. A
    map whose cells are all alike gives an SNS equal to its GST: hardest negative 1,
    the positive never beats it. Backgrounds unlike the target give SNS e2: cosine 0."""
    f, h = two_videos(uniform=True)
    no_sns = bd.pair_similarities(f, f, h, h, [0, 1], SoCLSettings(use_sns=False))
    assert no_sns == {"positive": 1.0, "hardest_negative": 0.0, "accuracy": 1.0,
                      "queries": 2}
    collapsed = bd.pair_similarities(f, f, h, h, [0, 1], SoCLSettings(symmetric=True))
    assert collapsed["hardest_negative"] == pytest.approx(1.0)
    assert collapsed["accuracy"] == 0.0 and collapsed["queries"] == 4
    f, h = two_videos(uniform=False)
    apart = bd.pair_similarities(f, f, h, h, [0, 1], SoCLSettings(use_mix=False))
    assert apart["positive"] == pytest.approx(1.0)
    assert apart["hardest_negative"] == pytest.approx(0.0, abs=1e-6)
    assert apart["accuracy"] == 1.0


def test_pairs_are_grouped_into_batches_of_distinct_videos():
    f, h = two_videos(uniform=True)
    f4, h4 = np.concatenate([f, f]), np.concatenate([h, h])
    out = bd.pair_similarities(f4, f4, h4, h4, [0, 1, 0, 1], SoCLSettings(use_sns=False))
    assert out["queries"] == 4 and out["accuracy"] == 1.0
    assert bd.pair_similarities(f, f, h, h, [0, 0], SoCLSettings()) is None


def test_diagnose_gathers_every_measure():
    f, h = two_videos(uniform=False)
    mask = h > 0
    out = bd.diagnose(f, f, mask, mask, h, h, [0, 1], SoCLSettings(use_mix=False))
    assert out["pairs"] == 2 and out["identification"] == 1.0
    # 8 background cells e2 and one target cell e_v: the mean is (8 e2 + e_v) / 9
    np.testing.assert_allclose(out["uniformity"], (8 * 8 / np.sqrt(65) + 1 / np.sqrt(65)) / 9)
    np.testing.assert_allclose(out["contrast"], 1 / np.sqrt((1 / 9) * (8 / 9)))
    assert out["positive"] == pytest.approx(1.0) and out["pair_accuracy"] == 1.0
    lone = bd.diagnose(f[:1], f[:1], mask[:1], mask[:1], h[:1], h[:1], [0])
    assert lone["positive"] is None and lone["identification"] == 1.0


def three_videos(code_on: str):
    """Frames i and j of three videos, (3, 4, 4, 6) maps with a 2 x 2 target: the
    video's own code on one part ("target" or "background"), the same in both frames;
    on the other part a code that moves to the next video's in frame j (it does not
    follow the video: another video's frame matches it exactly). TOP maps uniform on
    the target."""
    e = np.eye(6)
    frames = {"i": [], "j": []}
    for v in range(3):
        for tag, other in (("i", e[3 + v]), ("j", e[3 + (v + 1) % 3])):
            own = e[v]
            frames[tag].append(target_on_background(*((own, other) if code_on == "target"
                                                      else (other, own))))
    f_i, mask = (np.concatenate(x) for x in zip(*frames["i"]))
    f_j = np.concatenate([f for f, _ in frames["j"]])
    return f_i, f_j, mask, mask / mask.sum(axis=(1, 2), keepdims=True)


def test_background_maps_are_uniform_off_the_target():
    _, _, mask, _ = three_videos("target")
    h = bd.background_maps(mask)
    np.testing.assert_allclose(h.sum(axis=(1, 2)), 1.0, rtol=1e-6)
    assert np.all(h[mask] == 0) and np.allclose(h[~mask], 1 / 12)
    with pytest.raises(ValueError, match="at least one cell outside"):
        bd.background_maps(np.ones((1, 2, 2), bool))
    with pytest.raises(ValueError, match="3-D"):
        bd.background_maps(np.ones((2, 2), bool))


def test_scene_shortcut_tells_which_part_identifies_the_video():
    """The video's code on its target: the TOP map's GSTs of a pair agree (cosine 1)
    and differ from every other video's (0): accuracy 1; the backgrounds' positive
    (0) loses to another video's frame (1): accuracy 0. The code on the background:
    the reverse. A pair whose target fills its region has no background and is left
    out of both."""
    f_i, f_j, mask, h = three_videos("target")
    unscened = {"target_within_scene": None, "background_within_scene": None}
    out = bd.scene_shortcut(f_i, f_j, mask, mask, h, h, [0, 1, 2])
    assert out == {"target": 1.0, "background": 0.0, "pairs": 3, **unscened}
    f_i, f_j, mask, h = three_videos("background")
    out = bd.scene_shortcut(f_i, f_j, mask, mask, h, h, [0, 1, 2])
    assert out == {"target": 0.0, "background": 1.0, "pairs": 3, **unscened}
    full = mask.copy()
    full[2] = True
    out = bd.scene_shortcut(f_i, f_j, full, full, h, h, [0, 1, 2])
    assert out["pairs"] == 2 and out["background"] == 1.0
    assert bd.scene_shortcut(f_i, f_j, full, full, h, h, [0, 0, 1]) is None  # one video
    diag = bd.diagnose(f_i, f_j, mask, mask, h, h, [0, 1, 2])
    assert diag["target_accuracy"] == 0.0 and diag["background_accuracy"] == 1.0


def test_scene_shortcut_within_a_scene():
    """Scenes [0, 0, 1, 1, 2]: each video's own code on its target in both frames
    (the TOP map's positive 1, every other video 0: accuracy 1). Backgrounds of one
    code per video and frame; in scene 0 frame j shows the mate's frame-i code, so the
    mate's frame beats the positive (0 against 1): a miss; in scenes 1 and 2 frame j
    repeats frame i's code: a hit. Within its scene, scene 2's lone video has no
    negative and is left out: background 2 hits of 4 queries. Against every video, 3
    of 5."""
    e = np.eye(10)
    background_j = {0: 1, 1: 0, 2: 2, 3: 3, 4: 4}
    frames = {"i": [], "j": []}
    for v in range(5):
        frames["i"].append(target_on_background(e[v], e[5 + v]))
        frames["j"].append(target_on_background(e[v], e[5 + background_j[v]]))
    f_i, mask = (np.concatenate(x) for x in zip(*frames["i"]))
    f_j = np.concatenate([f for f, _ in frames["j"]])
    h = mask / mask.sum(axis=(1, 2), keepdims=True)
    video, scene = [0, 1, 2, 3, 4], [0, 0, 1, 1, 2]
    out = bd.scene_shortcut(f_i, f_j, mask, mask, h, h, video, scene=scene)
    # 3 / 5 as a float32 mean: within float32's rounding of 0.6
    assert out == {"target": 1.0, "background": pytest.approx(0.6, rel=1e-7), "pairs": 5,
                   "target_within_scene": 1.0, "background_within_scene": 0.5}
    diag = bd.diagnose(f_i, f_j, mask, mask, h, h, video, scene=scene)
    assert diag["background_within_scene_accuracy"] == 0.5
    assert diag["target_within_scene_accuracy"] == 1.0
    alone = bd.scene_shortcut(f_i, f_j, mask, mask, h, h, video, scene=[0, 1, 2, 3, 4])
    assert alone["background_within_scene"] is None
    assert alone["background"] == pytest.approx(0.6, rel=1e-7)
    with pytest.raises(ValueError, match="one id per pair"):
        bd.scene_shortcut(f_i, f_j, mask, mask, h, h, video, scene=[0, 0])


def test_a_tie_for_the_highest_response_goes_to_the_first_cell_in_row_major_order():
    """The documented tie rule: the first highest cell decides, so a background cell
    before the target (row-major) that ties with it is a miss, and a target cell
    before a tying background cell is a hit."""
    mask = np.zeros((1, 3, 3), bool)
    mask[0, 1, 1] = True
    r = np.zeros((1, 3, 3))
    r[0, 1, 1] = r[0, 0, 2] = 1.0  # background (0, 2) comes first
    assert bd.identification_hits(r, mask).tolist() == [False]
    r = np.zeros((1, 3, 3))
    r[0, 1, 1] = r[0, 2, 0] = 1.0  # the target comes first
    assert bd.identification_hits(r, mask).tolist() == [True]
