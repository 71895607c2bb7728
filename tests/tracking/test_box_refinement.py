"""The refinement probe of a box energy on held-out targets: the analytic Gaussian
energy (the control) refines every start to the truth, ranks it first and is monotone
in IoU; an energy that ignores the boxes ranks at chance and refines nothing; a
negated control walks away; the rank correlation and the perturbations have their
stated statistics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ebm_jax.ops.boxes import encode_relative, paired_box_iou
from ebm_jax.tracking.box_refinement import (
    RefinementProbe,
    gaussian_box_energy,
    perturb_boxes,
    refinement_measures,
    spearman,
)


def _truths(n=64, seed=0):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(60, 180, (n, 2))
    wh = rng.uniform(20, 90, (n, 2))
    return jnp.asarray(np.concatenate([xy, xy + wh], 1), jnp.float32)


def _measure(energy, truths, inputs, probe=RefinementProbe()):
    return {k: np.asarray(v) for k, v in jax.jit(
        lambda i, t: refinement_measures(energy, i, t, jax.random.key(0), probe))(
            inputs, truths).items()}


def test_the_gaussian_control_reaches_the_truth_and_ranks_it_first():
    truths = _truths()
    m = _measure(gaussian_box_energy(0.05), truths, truths)
    assert 0.5 < m["iou_start"].mean() < 0.9  # the starts are a real test
    # the ascent runs in the start's relative space, where the control's curvature is
    # (start size / true size)^2 / sigma^2: near one Newton step, converging in a few
    assert m["iou_refined"].mean() > 0.995 and m["iou_refined"].min() > 0.95
    assert m["outranks"].mean() == 1.0
    # IoU weighs the four coordinates unlike the energy: monotone, not the same order
    assert m["rank_correlation"].mean() > 0.7


def test_an_energy_blind_to_the_boxes_ranks_at_chance_and_refines_nothing():
    truths = _truths(256)

    def blind(_, boxes):
        return jnp.zeros(boxes.shape[0])

    m = _measure(blind, truths, truths)
    np.testing.assert_allclose(m["iou_refined"], m["iou_start"], rtol=0, atol=1e-5)
    assert m["outranks"].mean() == 0.0  # ties never outrank
    np.testing.assert_array_equal(m["rank_correlation"], 0.0)
    np.testing.assert_allclose(m["chance_outranks"], 0.1)


def test_the_negated_control_walks_away_from_the_truth():
    truths = _truths()
    control = gaussian_box_energy(0.05)

    def away(t, boxes):
        return -control(t, boxes)

    m = _measure(away, truths, truths, RefinementProbe(reject_decreasing=False))
    assert m["iou_refined"].mean() < m["iou_start"].mean() - 0.1
    assert m["outranks"].mean() == 0.0
    assert m["rank_correlation"].mean() < -0.7


def test_perturbations_have_their_sigma_in_the_relative_space():
    truths = _truths(8)
    boxes = perturb_boxes(jax.random.key(1), truths, 0.2, 4000)
    rel = np.asarray(encode_relative(boxes, truths[:, None])
                     - encode_relative(truths, truths)[:, None])
    # the sd of 32000 normal draws is within 4 standard errors (sd / sqrt(2n)) of 0.2
    sd = rel.reshape(-1, 4).std(0)
    np.testing.assert_allclose(sd, 0.2, atol=4 * 0.2 / np.sqrt(2 * 32000))


def test_spearman_matches_scipy():
    import scipy.stats

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(5, 40)), rng.normal(size=(5, 40))
    y[0] = x[0] ** 3
    x[1, :10] = 0.5  # ties
    got = np.asarray(spearman(jnp.asarray(x), jnp.asarray(y)))
    want = [scipy.stats.spearmanr(a, b).statistic for a, b in zip(x, y)]
    np.testing.assert_allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("field, value", [("start_sigma", 0.0), ("rank_sigma", -1.0),
                                          ("num_jittered", 0), ("num_ranked", 2),
                                          ("step_lengths", (-1.0,)),
                                          ("step_lengths", (1.0, 2.0))])
def test_bad_probe_settings_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"RefinementProbe.{field}"):
        RefinementProbe(**{field: value})


def test_the_truth_must_outrank_every_jittered_box_strictly():
    """The outranks rule as the docs state it: f(truth) above the *largest* jittered
    energy, strictly (chance 1 / (n + 1)). Hand-built energies tell it from "above
    their mean" and from "at least their largest"."""
    truths = _truths(4)
    probe = RefinementProbe(num_jittered=9, num_ranked=3)

    def energy_with(jittered_values, truth_value):
        def energy(_, boxes):
            n = boxes.shape[0]  # the three calls differ in size: 1, 9 and 3 boxes
            if n == 1:
                return jnp.full((1,), truth_value) + 0.0 * boxes[:, 0]
            if n == probe.num_jittered:
                return jnp.asarray(jittered_values) + 0.0 * boxes[:, 0]
            return -boxes[:, 0]  # the ranked boxes: any order
        return energy

    above_mean_below_max = energy_with([2.0] + [0.0] * 8, 1.0)  # mean 0.22 < 1 < max 2
    m = _measure(above_mean_below_max, truths, truths, probe)
    assert m["outranks"].tolist() == [0.0] * 4
    tied_with_max = energy_with([1.0] + [0.0] * 8, 1.0)
    assert _measure(tied_with_max, truths, truths, probe)["outranks"].tolist() == [0.0] * 4
    above_all = energy_with([0.5] + [0.0] * 8, 1.0)
    assert _measure(above_all, truths, truths, probe)["outranks"].tolist() == [1.0] * 4


@pytest.mark.parametrize("iou", [0.5, 0.7, 0.8])
def test_starts_of_set_overlap_have_it(iou):
    from ebm_jax.tracking.box_refinement import boxes_at_iou

    boxes = jnp.asarray([[10., 20., 50., 80.], [0., 0., 30., 30.], [5., 5., 100., 40.]])
    starts = boxes_at_iou(jax.random.key(0), boxes, iou)
    # bisection to float32: the IoU of the returned box is the target to ~1e-6
    np.testing.assert_allclose(paired_box_iou(starts, boxes), iou, atol=1e-5)
    assert not np.allclose(starts, boxes)
    with pytest.raises(ValueError, match=r"iou must be in \(0, 1\), got 1.0"):
        boxes_at_iou(jax.random.key(0), boxes, 1.0)


def test_the_wrong_reference_control_separates_an_energy_that_uses_its_reference():
    """The Gaussian control centred on the pair's truth refines every start to IoU 1;
    given another pair's truth as its reference it walks to that box instead. A head
    that reaches the same IoU with either reference does not use it."""
    from ebm_jax.tracking.box_refinement import refinement_from_starts

    boxes = jnp.asarray([[10., 20., 50., 80.], [0., 0., 30., 30.], [5., 5., 100., 40.]])
    probe = RefinementProbe(step_lengths=(0.05 ** 2,), num_steps=10)
    energy = gaussian_box_energy(0.05)
    own = refinement_from_starts(energy, boxes, boxes, jax.random.key(1), probe)
    other = refinement_from_starts(energy, jnp.roll(boxes, 1, axis=0), boxes,
                                   jax.random.key(1), probe)
    for level in (0.5, 0.7, 0.8):
        np.testing.assert_allclose(own[level]["iou_start"], level, atol=1e-5)
        np.testing.assert_allclose(own[level]["iou_refined"], 1.0, atol=1e-4)
        assert float(jnp.max(other[level]["iou_refined"])) < 0.5


def test_the_trackers_procedure_reaches_the_truth_on_the_control_and_is_one_ascent_alone():
    """The tracker's own refinement in the probe: on the Gaussian control every jittered
    copy takes its Newton step to the truth, so the top-k mean is the truth; with one
    candidate (no copies, top 1) it is the single ascent again."""
    from ebm_jax.tracking.box_refinement import TrackerProcedure, refinement_from_starts

    boxes = jnp.asarray([[10., 20., 50., 80.], [0., 0., 30., 30.], [5., 5., 100., 40.]])
    probe = RefinementProbe(step_lengths=(0.05 ** 2,), num_steps=10)
    energy = gaussian_box_energy(0.05)
    full = refinement_from_starts(energy, boxes, boxes, jax.random.key(1), probe,
                                  procedure=TrackerProcedure())
    single = refinement_from_starts(energy, boxes, boxes, jax.random.key(1), probe,
                                    procedure=TrackerProcedure(num_candidates=1, top_k=1))
    for level in (0.5, 0.7, 0.8):
        np.testing.assert_allclose(full[level]["iou_procedure"], 1.0, atol=1e-4)
        # the same ascent through another encode / decode: float32 rounding of boxes of
        # ~100 px, a few eps relative
        np.testing.assert_allclose(single[level]["iou_procedure"],
                                   single[level]["iou_refined"], atol=1e-5)
    with pytest.raises(ValueError, match=r"top_k must be in \[1, num_candidates = 2\]"):
        TrackerProcedure(num_candidates=2, top_k=3)


def test_ascend_top_k_averages_the_k_starts_of_highest_energy():
    """With no ascent steps the refined boxes are the starts: the result is the mean, in
    the box's relative space, of the k offsets whose boxes f ranks highest."""
    from ebm_jax.energy.boxes import ascend_top_k
    from ebm_jax.ops.boxes import decode_relative, encode_relative

    box = jnp.asarray([10., 10., 50., 30.])
    offsets = jnp.asarray([[0.2, 0., 0., 0.], [-0.1, 0., 0., 0.], [0., 0.3, 0., 0.],
                           [0., 0., 0.1, 0.]])
    # f prefers boxes to the right: the start (cx 0), +0.2 and the two at cx 0 ...
    def energy(inputs, b, c):
        return encode_relative(b, jnp.broadcast_to(box, b.shape))[:, 0] * 10.0 - \
            jnp.abs(encode_relative(b, jnp.broadcast_to(box, b.shape))[:, 1])

    out = ascend_top_k(energy, None, box, offsets, top_k=2, num_steps=0, step_length=1.0)
    # ranked: +0.2 in cx (f 2), then the start and the log-w one (f 0): ties broken by
    # order, the start first; the mean of (0.2, 0, 0, 0) and (0, 0, 0, 0)
    expected = decode_relative(encode_relative(box[None], box[None])[0]
                               + jnp.asarray([0.1, 0., 0., 0.]), box)
    np.testing.assert_allclose(out, expected, atol=1e-5)
