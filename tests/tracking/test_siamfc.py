from __future__ import annotations

import cv2
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ebm_jax.ops.crops import box_to_center, crop_square, exemplar_side
from ebm_jax.tracking.siamfc import (
    SiamFCSettings,
    cubic_upsample_matrix,
    hann_window,
    make_tracker,
    model_embed,
    track_sequence,
)
from ebm_jax.tracking.siamfc_training import (
    PORT_TRAINING,
    balanced_bce,
    make_labels,
    make_siamfc_loss,
    training_crops,
)
from tests.tolerances import assert_within, float32_sum_atol

BACKGROUND = 128
TARGET_COLOUR = np.array([200.0, 60.0, 40.0], np.float32)


# ------------------------------------------------------------------ labels and loss


def test_labels_and_weights_hand_case():
    labels, weights = make_labels(5, 1.0)
    expected = np.zeros((5, 5))
    expected[2, 1:4] = 1
    expected[1:4, 2] = 1  # the centre and its 4 neighbours
    np.testing.assert_array_equal(np.asarray(labels), expected)
    # 5 positives at 1/5, 20 negatives at 1/20, normalised by their float32 total 2
    # (a sum of 25 terms: relative error within 25 eps32, see tests/tolerances.py)
    np.testing.assert_allclose(np.asarray(weights), np.where(expected == 1, 0.1, 0.025),
                               rtol=float32_sum_atol(25, 1.0))
    # SiamFC's default: 17 x 17, r_pos 16 px / stride 8 = 2 cells -> 13 positives
    labels, weights = make_labels(17, 16.0 / 8)
    assert int(labels.sum()) == 13
    # float32 sums of 17 x 17 = 289 weights, themselves normalised by a 289-term float32
    # sum: each within 289 u of exact, together 289 eps32 (u = eps32 / 2) of the total
    assert float(weights.sum()) == pytest.approx(1.0, abs=float32_sum_atol(289, 1.0))
    assert float((weights * labels).sum()) == pytest.approx(
        0.5, abs=float32_sum_atol(289, 0.5))


def test_labels_follow_the_offset():
    labels, _ = make_labels(5, 1.0, offset=(1.0, -2.0))  # centre moves to (3, 0)
    assert {tuple(p) for p in np.argwhere(np.asarray(labels))} == {(3, 0), (2, 0), (4, 0),
                                                                   (3, 1)}
    labels, weights = make_labels(5, 1.0, offset=(0.5, 0.0))  # between rows 2 and 3
    assert {tuple(p) for p in np.argwhere(np.asarray(labels))} == {(2, 2), (3, 2)}
    # normalised by a float32 sum of 25 weights (relative error within 25 eps32)
    np.testing.assert_allclose(np.asarray(weights)[2, 2], 0.25,
                               rtol=float32_sum_atol(25, 1.0))
    np.testing.assert_allclose(np.asarray(weights)[0, 0], 1 / 46,
                               rtol=float32_sum_atol(25, 1.0))
    batched = jax.vmap(lambda o: make_labels(5, 1.0, o))(jnp.array([[0.0, 0], [1, -2]]))
    np.testing.assert_array_equal(np.asarray(batched[0][1]),
                                  np.asarray(make_labels(5, 1.0, (1.0, -2.0))[0]))


def test_balanced_bce_matches_the_port_formula():
    # the port: one weight map over the whole batch (pos and neg counted over the batch,
    # normalised to sum 1), BCE-with-logits summed
    rng = np.random.default_rng(0)
    logits = rng.normal(scale=3.0, size=(4, 7, 7))
    labels, weights = (np.asarray(a, np.float64) for a in make_labels(7, 2.0))
    target = np.broadcast_to(labels, logits.shape)
    w = np.where(target == 1, 1 / target.sum(), 1 / (1 - target).sum())
    w /= w.sum()
    p = 1 / (1 + np.exp(-logits))
    reference = np.sum(-w * (target * np.log(p) + (1 - target) * np.log(1 - p)))
    got = balanced_bce(jnp.asarray(logits, jnp.float32), labels, weights)
    # float32 against float64: the weights' 49-term normalisation and the 49-term sum
    # of positive terms, each within 49 eps32 relative (tests/tolerances.py); each
    # term's own few roundings are far below that
    rel = float32_sum_atol(2 * 49, 1.0)
    assert float(got) == pytest.approx(reference, rel=rel)
    # stable at large logits (no inf/nan where the naive log(sigmoid) underflows)
    big = balanced_bce(jnp.full((7, 7), 200.0), labels, weights)
    assert float(big) == pytest.approx(0.5 * 200.0, rel=rel)


def _pair_batch(rng, n=2, shape=(100, 130)):
    """n pairs of frames with a textured rectangle on a noisy background, and its boxes."""
    frames, boxes = [], []
    for _ in range(2 * n):
        frame = rng.integers(90, 160, shape + (3,)).astype(np.uint8)
        w, h = rng.integers(18, 30, size=2)
        x, y = rng.integers(20, shape[1] - 50), rng.integers(20, shape[0] - 50)
        frame[y - 1:y - 1 + h, x - 1:x - 1 + w] = rng.integers(0, 255, 3)
        frame[y - 1 + h // 2, x - 1:x - 1 + w] = 255
        frames.append(frame)
        boxes.append([x, y, w, h])
    frames, boxes = np.stack(frames), np.asarray(boxes, np.float32)
    return {"z_frames": frames[:n], "z_boxes": boxes[:n],
            "x_frames": frames[n:], "x_boxes": boxes[n:]}


def test_training_crops_centre_the_target_and_report_its_offset():
    settings = SiamFCSettings(stretch=0.0, shift=8.0)
    frame = np.full((120, 160, 3), BACKGROUND, np.uint8)
    box = np.array([61.0, 41.0, 21.0, 15.0])  # odd sizes: the centre is a pixel
    frame[40:55, 60:81] = 250
    frames = np.stack([frame, frame, frame])
    boxes = np.stack([box] * 3).astype(np.float32)
    key = jax.random.key(3)
    crops = jax.jit(training_crops, static_argnums=5)
    z, x, offsets = crops(key, frames, boxes, frames, boxes, settings)
    assert z.shape == (3, 127, 127, 3) and x.shape == (3, 255, 255, 3)
    cy, cx, h, w = box_to_center(box)
    expected_z = crop_square(frame, (cy, cx), exemplar_side(h, w), 127)
    np.testing.assert_allclose(np.asarray(z[0]), np.asarray(expected_z), atol=1e-3)
    offsets = np.asarray(offsets)
    assert np.all(np.abs(offsets) <= 1.0) and np.abs(offsets).max() > 0.1
    assert len({tuple(o) for o in offsets.round(4)}) == 3  # each pair its own shift
    for i in range(3):  # the bright centroid sits at the response centre + offset
        weight = np.clip(np.asarray(x[i])[..., 0] - BACKGROUND, 0, None)
        ys, xs = np.indices(weight.shape)
        centroid = np.array([(weight * ys).sum(), (weight * xs).sum()]) / weight.sum()
        np.testing.assert_allclose(centroid, 127 + offsets[i] * settings.stride, atol=0.5)
    # the same key gives the same crops: the same jitted program on the same inputs in
    # this process, so bit for bit
    _, _, again = crops(key, frames, boxes, frames, boxes, settings)
    np.testing.assert_array_equal(np.asarray(again), offsets)


def _bright_centroid(crop):
    weight = np.clip(np.asarray(crop)[..., 0] - BACKGROUND, 0, None)
    ys, xs = np.indices(weight.shape)
    return np.array([(weight * ys).sum(), (weight * xs).sum()]) / weight.sum()


@pytest.mark.parametrize("labels", ["follow", "centred"])
def test_port_training_crops_shift_both_crops(labels):
    """The port's crops: a 239 search crop, the exemplar moved too; with labels that
    follow, the offset is where the exemplar's content matches in the search crop."""
    settings = SiamFCSettings(**{**PORT_TRAINING, "labels": labels, "stretch": 0.0})
    assert settings.training_search_size == 239 and settings.response_size == 17
    frame = np.full((120, 160, 3), BACKGROUND, np.uint8)
    box = np.array([61.0, 41.0, 21.0, 15.0])
    frame[40:55, 60:81] = 250
    frames = np.stack([frame] * 4)
    boxes = np.stack([box] * 4).astype(np.float32)
    z, x, offsets = jax.jit(training_crops, static_argnums=5)(
        jax.random.key(5), frames, boxes, frames, boxes, settings)
    assert z.shape == (4, 127, 127, 3) and x.shape == (4, 239, 239, 3)
    offsets = np.asarray(offsets)
    z_move = np.stack([_bright_centroid(c) for c in z]) - 63  # target from crop centre
    x_move = np.stack([_bright_centroid(c) for c in x]) - 119
    # each crop moved by up to 4 px (+ half a pixel of centroid error), independently
    assert np.all(np.abs(z_move) <= 4.5) and np.all(np.abs(x_move) <= 4.5)
    assert np.abs(z_move - x_move).max() > 0.5
    if labels == "centred":
        np.testing.assert_array_equal(offsets, 0.0)
    else:  # the response peaks where the search target sits relative to the exemplar's
        np.testing.assert_allclose(offsets * settings.stride, x_move - z_move, atol=0.5)


@pytest.fixture(scope="module")
def tiny_backbone():
    """`make()` -> a fresh SiamFCAlexNet of width 0.125, initialised in one compiled call
    (eager initialisation compiles every random op separately, which is slow)."""
    from flax import nnx

    from ebm_jax.models.alexnet import SiamFCAlexNet

    def build():
        return SiamFCAlexNet(width=0.125, rngs=nnx.Rngs(0))

    graphdef = nnx.split(nnx.eval_shape(build))[0]
    state = jax.jit(lambda: nnx.state(build()))()
    return lambda: nnx.merge(graphdef, state)


@pytest.mark.heavy
def test_siamfc_loss_is_finite_and_sgd_lowers_it(tiny_backbone):
    import optax
    from flax import nnx

    batch = _pair_batch(np.random.default_rng(0))
    model = tiny_backbone()
    model.train()
    loss_fn = make_siamfc_loss(SiamFCSettings())
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    @jax.jit  # the batch as an argument: as a closure constant it doubles compile time
    def loss_and_grad(params, rest, batch, key):
        def objective(p):  # as make_train_step calls it: a merged train-mode module
            m = nnx.merge(graphdef, p, rest, copy=True)
            loss, metrics = loss_fn(m, batch, key)
            return loss, (metrics, nnx.state(m, nnx.BatchStat))
        return jax.value_and_grad(objective, has_aux=True)(params)

    opt = optax.sgd(1e-2, momentum=0.9)
    opt_state = opt.init(params)
    losses = []
    for i in range(8):
        (loss, (metrics, rest)), grads = loss_and_grad(params, rest, batch, jax.random.key(i))
        if i == 0:
            assert set(metrics) == {"response_pos", "response_neg", "peak_in_positive"}
            # with responses scaled by 1e-3 the initial loss is close to log 2
            assert float(loss) == pytest.approx(np.log(2), abs=0.1)
            assert all(np.all(np.isfinite(np.asarray(g))) for g in jax.tree.leaves(grads))
            assert any(np.abs(np.asarray(g)).max() > 0 for g in jax.tree.leaves(grads))
        losses.append(float(loss))
        updates, opt_state = opt.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-3:]) < losses[0] - 0.05


# ------------------------------------------------------------------ tracker pieces


def test_cubic_upsampling_matches_opencv_and_hann_window():
    r = np.random.default_rng(0).normal(size=(17, 17)).astype(np.float32)
    up = cubic_upsample_matrix(17, 16)
    reference = cv2.resize(r, (272, 272), interpolation=cv2.INTER_CUBIC)
    # float64 here; OpenCV sums 4 x 4 float32 taps (separably, float32 coefficients):
    # within 16 eps32 of the sum of the taps' absolute values (tests/tolerances.py)
    scale = np.abs(up) @ np.abs(r) @ np.abs(up).T
    assert_within(up @ r @ up.T, reference, float32_sum_atol(16, scale))
    window = hann_window(272, 272)
    assert window.sum() == pytest.approx(1.0) and window[0, 0] == 0
    assert np.unravel_index(window.argmax(), window.shape) in {(135, 135), (136, 136),
                                                               (135, 136), (136, 135)}


def test_settings_are_validated():
    assert SiamFCSettings().response_size == 17
    np.testing.assert_allclose(SiamFCSettings().scale_factors,
                               [1 / 1.0375, 1.0, 1.0375])
    with pytest.raises(ValueError, match="scale_num"):
        SiamFCSettings(scale_num=2)
    with pytest.raises(ValueError, match="window_influence"):
        SiamFCSettings(window_influence=1.5)
    with pytest.raises(ValueError, match="search_size"):
        SiamFCSettings(search_size=100)
    with pytest.raises(ValueError, match="train_search_size"):
        SiamFCSettings(train_search_size=100)
    with pytest.raises(ValueError, match="labels"):
        SiamFCSettings(labels="shifted")
    with pytest.raises(ValueError, match="shift_exemplar"):
        SiamFCSettings(shift_exemplar=1)
    # identities keep the fields added later out at their defaults
    assert set(SiamFCSettings().identity()) == set(SiamFCSettings.__dataclass_fields__) - {
        "crop", "shift_exemplar", "train_search_size", "labels"}
    port = SiamFCSettings(**PORT_TRAINING).identity()
    assert (port["train_search_size"], port["labels"], port["shift"]) == (239, "centred", 4.0)


# ------------------------------------------------------------------ tracker with an oracle


def _colour_layout_embed(counter):
    """A fixed, non-learned embedding with SiamFC's geometry (stride 8, receptive field
    87, 127 -> 6x6, 255 -> 22x22): the similarity to the target colour as +-1, averaged
    over a 3 x 3 grid of 29 x 29 sub-windows of each cell's 87 x 87 field (9 channels), so
    that a template encodes the target and its surroundings. `params` is the colour."""

    def embed(colour, images):
        counter[images.shape] = counter.get(images.shape, 0) + 1  # counts traces
        dist2 = jnp.sum(jnp.square(images - colour), axis=-1)
        sign = 2.0 * jnp.exp(-dist2 / (2 * 40.0**2)) - 1.0
        pooled = jax.lax.reduce_window(sign, 0.0, jax.lax.add, (1, 29, 29), (1, 1, 1),
                                       "VALID") / 29**2
        n = (images.shape[1] - 87) // 8 + 1
        idx = 8 * np.arange(n)
        channels = [pooled[:, idx[:, None] + 29 * a, idx[None, :] + 29 * b]
                    for a in range(3) for b in range(3)]
        return jnp.stack(channels, axis=-1)

    return embed


def _synthetic_sequence(num_frames=24, shape=(120, 160)):
    """A constant-colour rectangle on a plain grey frame, moving a few px per frame and
    growing slowly; boxes are the drawn pixels' xywh (1-indexed)."""
    frames, boxes = [], []
    for t in range(num_frames):
        w = int(round(26 * 1.012**t))
        h = int(round(18 * 1.012**t))
        x = int(round(30 + 3.0 * t))
        y = int(round(35 + 1.5 * t + 4 * np.sin(t / 3)))
        frame = np.full(shape + (3,), BACKGROUND, np.uint8)
        frame[y - 1:y - 1 + h, x - 1:x - 1 + w] = TARGET_COLOUR.astype(np.uint8)
        frames.append(frame)
        boxes.append([x, y, w, h])
    return frames, np.asarray(boxes, np.float64)


def _iou(a, b):
    lo = np.maximum(a[:, :2], b[:, :2])
    hi = np.minimum(a[:, :2] + a[:, 2:], b[:, :2] + b[:, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=1)
    return inter / (np.prod(a[:, 2:], 1) + np.prod(b[:, 2:], 1) - inter)


@pytest.fixture(scope="module")
def oracle_tracker():
    counter = {}
    return make_tracker(_colour_layout_embed(counter)), counter


def test_tracker_with_oracle_features_tracks_the_target(oracle_tracker):
    tracker, counter = oracle_tracker
    frames, gt = _synthetic_sequence()
    boxes, seconds = track_sequence(tracker, jnp.asarray(TARGET_COLOUR), iter(frames),
                                    gt[0])
    assert boxes.shape == (len(frames), 4) and boxes.dtype == np.float64
    assert seconds.shape == (len(frames),) and np.all(seconds > 0)
    np.testing.assert_array_equal(boxes[0], gt[0])
    iou = _iou(boxes[1:], gt[1:])
    assert iou.mean() > 0.8 and iou.min() > 0.6
    # the box grows with the target (26 x 18 -> about 34 x 23)
    assert boxes[-1, 2] > 1.1 * gt[0, 2]
    # update traced once for this frame shape: 3 search crops embedded in one batch
    assert counter[(3, 255, 255, 3)] == 1 and counter[(1, 127, 127, 3)] == 1


def test_one_update_moves_the_centre_by_the_target_displacement():
    # without the Hann window (which pulls the peak towards the centre) the centre moves
    # by the target's displacement: the response -> frame pixel conversion
    tracker = make_tracker(_colour_layout_embed({}), SiamFCSettings(window_influence=0.0))
    frames, gt = _synthetic_sequence(num_frames=1)
    colour = jnp.asarray(TARGET_COLOUR)
    state = tracker.init(colour, frames[0], gt[0])
    np.testing.assert_allclose(np.asarray(state.center), box_to_center(gt[0])[:2], atol=1e-5)
    for dy, dx in ((6, -9), (-4, 5), (0, 0)):
        moved = np.roll(frames[0], (dy, dx), axis=(0, 1))
        new, box = tracker.update(colour, state, moved)
        np.testing.assert_allclose(np.asarray(new.center) - np.asarray(state.center),
                                   (dy, dx), atol=0.75)
        np.testing.assert_allclose(np.asarray(box[2:]), gt[0, 2:], rtol=0.03)


def test_model_embed_uses_eval_mode_and_leaves_the_model_alone(tiny_backbone):
    model = tiny_backbone()
    model.train()
    embed, params = model_embed(model)
    embed = jax.jit(embed)
    x = jax.random.uniform(jax.random.key(0), (2, 127, 127, 3)) * 255
    out = embed(params, x)
    assert out.shape == (2, 6, 6, 32)
    assert not model.norms[0].use_running_average  # the caller's model is unchanged
    # eval mode: an image's features do not depend on the rest of the batch (in train
    # mode the batch statistics would change them); the same jitted program on the
    # same first image, so bit for bit
    other = embed(params, x.at[1].set(255.0 - x[1]))
    np.testing.assert_array_equal(np.asarray(other[0]), np.asarray(out[0]))
    assert not np.allclose(np.asarray(other[1]), np.asarray(out[1]))


def test_search_side_is_the_exemplar_side_scaled_to_the_search_crop():
    from ebm_jax.ops.crops import exemplar_side

    s = SiamFCSettings()
    # the same float64 operations in the same order: equal bit for bit
    assert s.search_side(40.0, 30.0) == exemplar_side(40.0, 30.0, 0.5) * (255 / 127)
    assert SiamFCSettings(context=0.0).search_side(40.0, 40.0) == 40.0 * (255 / 127)
