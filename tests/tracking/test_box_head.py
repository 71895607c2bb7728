"""SiamFC with the energy-based box head: settings checks, the training crops' boxes on
a drawn target, refinement that raises the energy, a target that leaves the frame, one
trace per frame shape, and the bad first boxes."""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ebm_jax.models.alexnet import SiamFCAlexNet
from ebm_jax.models.box_head import BoxEnergyHead
from ebm_jax.ops.crops import box_to_center, crop_square, exemplar_side
from ebm_jax.ops.crops import crop_box, frame_box
from ebm_jax.tracking.box_head import BoxHeadSettings
from ebm_jax.tracking.box_head_tracker import make_box_head_tracker
from ebm_jax.tracking.box_head_training import box_head_crops, make_box_head_loss
from ebm_jax.tracking.siamfc import track_sequence

BACKGROUND = 110
COLOUR = np.array([220, 40, 60], np.uint8)
SHAPE = (96, 128)


@pytest.fixture(scope="module")
def parts():
    backbone = SiamFCAlexNet(width=0.125, rngs=nnx.Rngs(0))
    head = BoxEnergyHead(backbone.level_channels(), width=8, hidden=16, rngs=nnx.Rngs(1))
    return backbone, head


@pytest.fixture(scope="module")
def trackers(parts):
    """(refining tracker, coarse tracker, params) with the default settings, compiled
    once for the module."""
    backbone, head = parts
    refined, params = make_box_head_tracker(backbone, head)
    coarse, _ = make_box_head_tracker(backbone, head, refine=False)
    return refined, coarse, params


def _frame(box, shape=SHAPE):
    """A grey frame with a rectangle of COLOUR at the xywh (1-indexed) box, clipped."""
    frame = np.full(shape + (3,), BACKGROUND, np.uint8)
    x, y, w, h = (int(round(v)) for v in box)
    frame[max(y - 1, 0):max(y - 1 + h, 0), max(x - 1, 0):max(x - 1 + w, 0)] = COLOUR
    return frame


# ------------------------------------------------------------------------ settings


@pytest.mark.parametrize("change, message", [
    ({"num_samples": 0}, r"num_samples must be an integer >= 1"),
    ({"sigmas": (0.05, 0.0)}, r"sigmas must be one or more numbers > 0"),
    ({"sigmas": (-0.5,)}, r"sigmas must be one or more numbers > 0"),
    ({"beta": 0.0}, r"beta must be a number > 0"),
    ({"beta": True}, r"beta must be a number > 0"),
    ({"sigmas": ("wide",)}, r"sigmas must be one or more numbers > 0"),
    ({"label_sigma": -1.0}, r"label_sigma must be a number > 0"),
    ({"step_lengths": (2.5e-3, 0.0, 1e-3, 1e-3)}, r"step_lengths must be 1 or 4 numbers > 0"),
    ({"step_lengths": (1e-3, 1e-3)}, r"step_lengths must be 1 or 4 numbers > 0"),
    ({"top_k": 11}, r"top_k must be in \[1, num_candidates = 10\]"),
    ({"method": "sm"}, r"method must be one of"),
    ({"lr": float("nan")}, r"lr must be a number > 0"),
    ({"center_jitter": -0.1}, r"center_jitter must be a number >= 0"),
    ({"refine_steps": -1}, r"refine_steps must be an integer >= 0"),
])
def test_settings_name_the_bad_field(change, message):
    with pytest.raises(ValueError, match=r"BoxHeadSettings\." + message):
        BoxHeadSettings(**change)


def test_settings_defaults_and_loss_hyperparameters():
    s = BoxHeadSettings()
    assert (s.num_samples, s.sigmas, s.beta, s.num_candidates, s.refine_steps, s.top_k) == (
        128, (0.05, 0.5), 0.1, 10, 10, 3)
    assert s.loss_hyperparameters == {"sigmas": (0.05, 0.5), "beta": 0.1}
    assert BoxHeadSettings(method="kld-is").loss_hyperparameters == {
        "sigmas": (0.05, 0.5), "label_sigma": 0.05}
    assert BoxHeadSettings(method="nce").loss_hyperparameters == {"sigmas": (0.05, 0.5)}
    assert BoxHeadSettings(step_lengths=1e-3).step_lengths == (1e-3,)


# ------------------------------------------------------------------------ training crops


def test_crop_box_and_frame_box_are_inverse():
    center, size = jnp.asarray([40.5, 61.0]), jnp.asarray([22.0, 30.0])
    crop_center, side = jnp.asarray([44.0, 55.0]), jnp.asarray(96.0)
    box = crop_box(center, size, crop_center, side, 255)
    back_c, back_s = frame_box(box, crop_center, side, 255)
    # a few float32 operations on numbers below 300: within 16 eps32 x 300
    np.testing.assert_allclose(back_c, center, atol=16 * 2**-23 * 300)
    np.testing.assert_allclose(back_s, size, atol=16 * 2**-23 * 300)


def test_training_crops_put_the_boxes_on_the_drawn_target():
    """Both crops are cut from regions holding a drawn rectangle; inside each returned
    box (2 px in from its edges) the crop shows the rectangle's colour, and 4 px out
    from the middle of each edge the background; the reference box is centred."""
    box = np.array([60.0, 50.0, 30.0, 22.0])
    region = _frame(box, (160, 160))
    batch = {"z_frames": region[None], "z_boxes": box[None].astype(np.float32),
             "x_frames": region[None], "x_boxes": box[None].astype(np.float32)}
    settings = BoxHeadSettings(center_jitter=0.4, scale_jitter=0.3)
    for seed in range(3):
        ref, ref_boxes, test, test_boxes = box_head_crops(jax.random.key(seed), batch,
                                                          settings)
        assert ref.shape == test.shape == (1, 255, 255, 3)
        np.testing.assert_allclose((ref_boxes[0, :2] + ref_boxes[0, 2:]) / 2, [127, 127],
                                   atol=1e-3)
        for crop, b in ((ref[0], ref_boxes[0]), (test[0], test_boxes[0])):
            x0, y0, x1, y1 = np.asarray(b)
            inner = np.asarray(crop)[int(np.ceil(y0 + 2)):int(y1 - 2),
                                     int(np.ceil(x0 + 2)):int(x1 - 2)]
            assert inner.size and np.abs(inner - COLOUR).max() < 1.0
            cx, cy = int((x0 + x1) / 2), int((y0 + y1) / 2)
            for px, py in ((x0 - 4, cy), (x1 + 4, cy), (cx, y0 - 4), (cx, y1 + 4)):
                assert np.abs(np.asarray(crop)[int(py), int(px)] - BACKGROUND).max() < 1.0
    # the jitter moves and scales the test crop: its box is not the reference's
    assert not np.allclose(np.asarray(test_boxes), np.asarray(ref_boxes), atol=1.0)


@pytest.mark.slow
def test_the_loss_trains_the_head_on_a_pair(parts):
    """A few Adam steps of NCE+ on one pair lower the loss (frozen backbone)."""
    import optax

    from ebm_jax.models.box_head import BoxHeadNet
    from ebm_jax.train import create_train_state, make_mesh, make_train_step

    backbone, head = parts
    net = BoxHeadNet(backbone, head)  # copies both: the donated steps leave them alone
    box = np.array([50.0, 40.0, 30.0, 22.0], np.float32)
    region = _frame(box, (140, 140))
    batch = {"z_frames": region[None], "z_boxes": box[None], "x_frames": region[None],
             "x_boxes": box[None]}
    settings = BoxHeadSettings(num_samples=16, center_jitter=0.1, scale_jitter=0.05)
    opt = optax.adam(3e-3)
    graphdef, state = create_train_state(net, opt, jax.random.key(0),
                                         trainable=net.trainable_filter)
    step = make_train_step(graphdef, make_box_head_loss(settings), opt, make_mesh(1),
                           trainable=net.trainable_filter)
    losses = []
    for _ in range(12):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-3:]) < np.mean(losses[:3])


# ------------------------------------------------------------------------ tracker


@pytest.mark.heavy
def test_refinement_raises_the_energy_of_the_box(parts, trackers):
    """With the best candidate kept (top_k = 1) and steps that lower f undone, the
    refined box's energy is at least the coarse box's, and here above it (a head whose
    outputs are scaled up so that the steps move the boxes)."""
    backbone, head = parts
    strong = nnx.clone(head)
    strong.out.kernel[...] = strong.out.kernel[...] * 3000
    settings = BoxHeadSettings(top_k=1, reject_decreasing=True,
                               step_lengths=(2e-2, 2e-2, 2e-2, 2e-2))
    _, coarse_t, (params_b, _) = trackers  # the coarse step does not use the head
    refined_t, params = make_box_head_tracker(backbone, strong, settings)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(params_b),
                                                    jax.tree.leaves(params[0])))
    box0 = np.array([50.0, 38.0, 26.0, 20.0])
    state0 = refined_t.init(params, _frame(box0), box0)
    frame1 = _frame(box0 + [3, 2, 0, 0])
    st_c, _ = coarse_t.update(params, state0, frame1)
    st_r, _ = refined_t.update(params, state0, frame1)

    # both boxes scored in the crop the refinement used (centred on the coarse centre)
    eval_bb = nnx.clone(backbone)
    eval_bb.eval()
    center, size = st_c.siamfc.center, st_c.siamfc.size
    side = exemplar_side(size[0], size[1]) * 255 / 127
    crop = crop_square(jnp.asarray(frame1), center, side, 255, state0.siamfc.pad)
    test = strong.test_features([lv[0] for lv in eval_bb.features(crop[None])])
    boxes = jnp.stack([crop_box(center, size, center, side, 255),
                       crop_box(st_r.siamfc.center, st_r.siamfc.size, center, side, 255)])
    f_coarse, f_refined = np.asarray(strong.score(state0.modulation, test, boxes))
    assert np.all(np.asarray(st_r.siamfc.size) != np.asarray(size))  # it moved
    assert f_refined > f_coarse


def test_target_leaving_the_frame_keeps_finite_boxes_on_the_frame(trackers):
    tracker, _, params = trackers
    boxes_gt = [np.array([80.0 + 9 * t, 40.0 + 2 * t, 24.0, 20.0]) for t in range(10)]
    frames = [_frame(b) for b in boxes_gt]  # the rectangle leaves through the right
    boxes, seconds = track_sequence(tracker, params, iter(frames), boxes_gt[0])
    assert boxes.shape == (10, 4) and np.all(np.isfinite(boxes))
    cy, cx, h, w = box_to_center(boxes)
    height, width = SHAPE
    assert np.all((cx >= 0) & (cx <= width - 1) & (cy >= 0) & (cy <= height - 1))
    assert np.all((w >= 4.0) & (w <= width) & (h >= 4.0) & (h <= height))
    assert tracker.update._cache_size() == 1  # one trace for this frame shape
    # a frame wholly without the target: still a finite box on the frame
    state = tracker.init(params, frames[0], boxes_gt[0])
    for _ in range(3):
        state, box = tracker.update(params, state, np.zeros(SHAPE + (3,), np.uint8))
    assert np.all(np.isfinite(np.asarray(box)))


@pytest.mark.heavy
def test_one_trace_per_frame_shape_and_the_coarse_switch(parts, trackers):
    backbone, head = parts
    jitted, coarse, _ = trackers
    raw, params = make_box_head_tracker(backbone, head, jit=False)
    update = jax.jit(chex.assert_max_traces(raw.update, n=1))
    box0 = np.array([50.0, 38.0, 26.0, 20.0])
    state = raw.init(params, _frame(box0), box0)
    jstate = jitted.init(params, _frame(box0), box0)
    for t in range(1, 4):
        frame = _frame(box0 + [2 * t, t, 0, 0])
        state, box = update(params, state, frame)
        jstate, jbox = jitted.update(params, jstate, frame)
    assert jitted.update._cache_size() == 1
    # the same program jitted in two places: bit for bit
    assert np.array_equal(np.asarray(box), np.asarray(jbox))
    # refine=False: SiamFC's coarse centre with the first size kept
    cstate = coarse.init(params, _frame(box0), box0)
    for t in range(1, 4):
        cstate, cbox = coarse.update(params, cstate, _frame(box0 + [2 * t, t, 0, 0]))
        np.testing.assert_allclose(np.asarray(cbox)[2:], box0[2:], rtol=1e-6)


def test_bad_first_box_and_mismatched_backbone_name_the_argument(parts, trackers):
    backbone, head = parts
    tracker, _, params = trackers
    frame = _frame([50, 38, 26, 20])
    for bad, message in (([50, 38, 0, 20], "w, h > 0"), ([np.nan, 38, 26, 20], "finite"),
                         ([400, 38, 26, 20], "outside the 128 x 96 frame")):
        with pytest.raises(ValueError, match=rf"box .*{message}"):
            tracker.init(params, frame, np.asarray(bad, np.float64))
    other = BoxEnergyHead(backbone.level_channels(), strides=(16, 8), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"^strides: the backbone's feature strides"):
        make_box_head_tracker(backbone, other)
    with pytest.raises(ValueError, match=r"^in_channels"):
        make_box_head_tracker(backbone, BoxEnergyHead((5, 7), rngs=nnx.Rngs(0)))
    with pytest.raises(ValueError, match=r"^offsets"):
        make_box_head_tracker(backbone, head, levels=(1, 4))


def test_settings_reach_the_refinement(parts, trackers):
    """No refinement steps and one candidate: the refined box is the coarse one."""
    backbone, head = parts
    _, b, _ = trackers
    settings = dataclasses.replace(BoxHeadSettings(), refine_steps=0, num_candidates=1,
                                   top_k=1)
    a, params = make_box_head_tracker(backbone, head, settings)
    box0 = np.array([50.0, 38.0, 26.0, 20.0])
    frame = _frame(box0 + [3, 1, 0, 0])
    _, box_a = a.update(params, a.init(params, _frame(box0), box0), frame)
    _, box_b = b.update(params, b.init(params, _frame(box0), box0), frame)
    # encode then decode in the relative space, and crop <-> frame: a few float32
    # operations on numbers below 300
    np.testing.assert_allclose(np.asarray(box_a), np.asarray(box_b), atol=64 * 2**-23 * 300)


@pytest.mark.heavy
def test_tracker_options_size_only_margin_and_damped_size(parts, trackers):
    """The same strong head and frame as above: with refine_center=False the centre is
    SiamFC's and only the size moves; an accept margin no refinement can pass keeps
    the coarse box; size_update d puts the size at coarse^(1 - d) refined^d."""
    backbone, head = parts
    strong = nnx.clone(head)
    strong.out.kernel[...] = strong.out.kernel[...] * 3000
    base = dict(top_k=1, reject_decreasing=True, step_lengths=(2e-2, 2e-2, 2e-2, 2e-2))
    _, coarse_t, _ = trackers
    box0 = np.array([50.0, 38.0, 26.0, 20.0])
    frame1 = _frame(box0 + [3, 2, 0, 0])

    def step(**options):
        tracker, params = make_box_head_tracker(backbone, strong,
                                                BoxHeadSettings(**base, **options))
        state0 = tracker.init(params, _frame(box0), box0)
        st, _ = tracker.update(params, state0, frame1)
        return np.asarray(st.siamfc.center), np.asarray(st.siamfc.size), params, state0

    c_full, s_full, params, state0 = step()
    st_c, _ = coarse_t.update(params, state0, frame1)
    c_coarse, s_coarse = np.asarray(st_c.siamfc.center), np.asarray(st_c.siamfc.size)
    assert not np.allclose(c_full, c_coarse)  # the full refinement moves the centre
    c_size, s_size, _, _ = step(refine_center=False)
    np.testing.assert_array_equal(c_size, c_coarse)
    np.testing.assert_allclose(s_size, s_full, rtol=1e-5)  # the same refined size
    c_m, s_m, _, _ = step(accept_margin=1e9)
    np.testing.assert_array_equal(c_m, c_coarse)
    np.testing.assert_array_equal(s_m, s_coarse)
    _, s_half, _, _ = step(size_update=0.5)
    np.testing.assert_allclose(s_half, np.sqrt(s_coarse * s_full), rtol=1e-5)


@pytest.mark.heavy
def test_skip_if_lost_keeps_the_coarse_box_below_the_peak_ratio(parts, trackers):
    """lost_ratio r: a frame whose SiamFC peak is below r x the best peak so far keeps
    the coarse box (no refinement); above it, or before any positive peak, the head
    refines as without the option; the best peak is the running maximum."""
    import jax.numpy as jnp

    backbone, head = parts
    strong = nnx.clone(head)
    strong.out.kernel[...] = strong.out.kernel[...] * 3000
    settings = BoxHeadSettings(top_k=1, step_lengths=(2e-2, 2e-2, 2e-2, 2e-2))
    box0 = np.array([50.0, 38.0, 26.0, 20.0])
    frame1 = _frame(box0 + [3, 2, 0, 0])
    full_t, params = make_box_head_tracker(backbone, strong, settings)
    lost_t, _ = make_box_head_tracker(backbone, strong,
                                      dataclasses.replace(settings, lost_ratio=0.5))
    coarse_t, _ = make_box_head_tracker(backbone, strong, settings, refine=False)
    state0 = full_t.init(params, _frame(box0), box0)
    full, box_full = full_t.update(params, state0, frame1)
    _, box_coarse = coarse_t.update(params, state0, frame1)
    assert not np.allclose(np.asarray(box_full), np.asarray(box_coarse))
    peak = float(full.siamfc.peak)
    assert np.isfinite(peak) and float(full.best_peak) == max(0.0, peak)
    # no earlier peak: refined as without the option
    _, box = lost_t.update(params, state0, frame1)
    np.testing.assert_array_equal(np.asarray(box), np.asarray(box_full))
    # an earlier peak far above this frame's: lost, the coarse box
    high = state0._replace(best_peak=jnp.float32(4 * abs(peak) + 1.0))
    st, box = lost_t.update(params, high, frame1)
    np.testing.assert_array_equal(np.asarray(box), np.asarray(box_coarse))
    assert float(st.best_peak) == float(high.best_peak)
    # an earlier peak just below this frame's / r: not lost
    if peak > 0:
        near = state0._replace(best_peak=jnp.float32(1.9 * peak))
        _, box = lost_t.update(params, near, frame1)
        np.testing.assert_array_equal(np.asarray(box), np.asarray(box_full))


@pytest.mark.parametrize("kw, field", [({"lost_ratio": 0.0}, "lost_ratio"),
                                       ({"lost_ratio": 1.0}, "lost_ratio"),
                                       ({"size_update": 0.0}, "size_update"),
                                       ({"size_update": 1.5}, "size_update"),
                                       ({"accept_margin": float("nan")}, "accept_margin"),
                                       ({"refine_center": 1}, "refine_center")])
def test_bad_tracker_options_name_the_field(kw, field):
    with pytest.raises(ValueError, match=f"BoxHeadSettings.{field}"):
        BoxHeadSettings(**kw)


def test_tracker_options_never_change_the_training_identity():
    """A head trained once is tracked with every option (the evaluations' identities,
    `dataclasses.asdict` of the settings, tell the trackers apart)."""
    plain = BoxHeadSettings()
    options = BoxHeadSettings(refine_center=False, accept_margin=0.5, size_update=0.5)
    assert plain.training_identity() == options.training_identity()
    # the trackers' identities: the options where set, nothing new at their defaults
    assert "size_update" not in plain.identity()
    assert options.identity()["size_update"] == 0.5
    assert options.identity()["refine_center"] is False
