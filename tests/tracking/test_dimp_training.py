"""Training DiMP's classifier end to end (features net + model predictor) on generated
sequences: the test loss falls, and the trained classifier finds held-out targets."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from ebm_jax.models.dimp_features import DiMPFeatures, instance_l2_norm
from ebm_jax.tracking import dimp
from ebm_jax.tracking.dimp_training import make_classifier_loss

HW, CIN = 10, 6
SETTINGS = dimp.PredictorSettings(filter_size=3, num_iter=3)


def _sequences(key, b, ntr=3, nte=2):
    """B sequences: noise levels with the sequence's target pattern (a 2 x 2 block of
    one random vector) at a random place per frame, and a distractor block of another
    random vector. Boxes and centres in cells."""
    k_noise, k_target, k_other, k_place = jax.random.split(key, 4)
    n = ntr + nte
    levels = 0.5 * jax.random.normal(k_noise, (b, n, HW, HW, CIN))
    target = jax.random.normal(k_target, (b, 1, 1, 1, CIN)) * 1.5
    other = jax.random.normal(k_other, (b, 1, 1, 1, CIN)) * 1.5
    places = jax.random.randint(k_place, (b, n, 2, 2), 1, HW - 3)  # (y, x) of both
    yy = jnp.arange(HW)[:, None]
    xx = jnp.arange(HW)[None, :]

    def block(p):
        return ((yy >= p[..., 0, None, None]) & (yy < p[..., 0, None, None] + 2)
                & (xx >= p[..., 1, None, None]) & (xx < p[..., 1, None, None] + 2))

    levels = levels + block(places[:, :, 0])[..., None] * target
    levels = levels + block(places[:, :, 1])[..., None] * other
    centers = places[:, :, 0, ::-1].astype(jnp.float32) + 0.5  # xy, the block's centre
    boxes = jnp.concatenate([centers - 1.5, centers + 1.5], -1)
    return {"train_levels": levels[:, :ntr], "train_boxes": boxes[:, :ntr],
            "test_levels": levels[:, ntr:], "test_centers": centers[:, ntr:]}


@pytest.mark.heavy
def test_training_lowers_the_test_loss_and_finds_held_out_targets():
    net = DiMPFeatures(CIN, 8, filter_size=SETTINGS.filter_size, rngs=nnx.Rngs(0))
    params = dimp.init_predictor_params(SETTINGS)
    loss_fn = make_classifier_loss(SETTINGS, label_sigma=0.75)
    graphdef, state = nnx.split(net)
    opt = optax.adam(3e-3)
    trainable = (state, params)
    opt_state = opt.init(trainable)

    @jax.jit
    def step(trainable, opt_state, batch):
        def f(t):
            return loss_fn(nnx.merge(graphdef, t[0]), t[1], batch)

        (value, metrics), grads = jax.value_and_grad(f, has_aux=True)(trainable)
        updates, opt_state = opt.update(grads, opt_state, trainable)
        return optax.apply_updates(trainable, updates), opt_state, value, metrics

    @jax.jit
    def evaluate(trainable, batch):
        return loss_fn(nnx.merge(graphdef, trainable[0]), trainable[1], batch)

    held_out = _sequences(jax.random.key(1000), 16)
    before, m_before = evaluate(trainable, held_out)
    for i in range(60):
        trainable, opt_state, value, _ = step(trainable, opt_state,
                                              _sequences(jax.random.key(i), 8))
        assert np.isfinite(float(value))
    after, m_after = evaluate(trainable, held_out)
    assert float(after) < 0.8 * float(before)
    # the trained classifier puts its peak on the held-out target, not the distractor
    assert float(m_after["center_error_cells"]) < 1.0
    assert float(m_after["optimizer_loss_after"]) < float(m_after["optimizer_loss_before"])
    assert float(m_after["test_loss_final"]) < float(m_after["test_loss_initial"])


def test_instance_l2_norm_sets_each_samples_norm():
    x = jax.random.normal(jax.random.key(3), (2, 4, 5, 3)) * jnp.asarray([1.0, 7.0])[:, None,
                                                                               None, None]
    y = instance_l2_norm(x, 0.5)
    np.testing.assert_allclose(jnp.sum(y ** 2, axis=(1, 2, 3)), 0.25 * 60, rtol=1e-5)


@pytest.mark.parametrize("kwargs, says", [
    (dict(label_sigma=0.0), "label_sigma must be > 0 cells, got 0.0"),
    (dict(label_sigma=1.0, threshold=1.0), r"threshold must be in \(0, 1\), got 1.0"),
])
def test_bad_loss_settings_are_one_line(kwargs, says):
    with pytest.raises(ValueError, match=says):
        make_classifier_loss(SETTINGS, **kwargs)


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    from ebm_jax.data.dimp_samples import dimp_sample_batches
    from ebm_jax.data.sequences import read_got10k
    from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split
    from ebm_jax.ops.jitter import CropJitter

    spec = TrackingSpec(split="train", num_sequences=2, num_frames=10, height=96,
                        width=128, seed=2)
    root = tmp_path_factory.mktemp("dimp-frames")
    seqs = read_got10k(generate_tracking_split(root / "seq", spec, progress=False))
    return dimp_sample_batches(seqs, batch_size=2, max_gap=10, seed=0,
                               jitter=CropJitter(), out_size=127)


def _net(frozen=False):
    from ebm_jax.models.tracking_backbones import tracking_backbone
    from ebm_jax.tracking.dimp_training import DiMPNet

    backbone = tracking_backbone("alexnet", width=0.125, rngs=nnx.Rngs(0))
    return DiMPNet(backbone, level=4, settings=dimp.PredictorSettings(num_iter=2),
                   channels=8, frozen_backbone=frozen, rngs=nnx.Rngs(1))


@pytest.mark.heavy
@pytest.mark.parametrize("frozen", [False, True])
def test_the_frame_loss_trains_the_branch_and_freezes_the_backbone_on_request(samples,
                                                                             frozen):
    """Through the project's train step (batch norm statistics and all): a few steps on
    one batch lower its loss; the backbone moves unless frozen, the branch always."""
    from ebm_jax.train import create_train_state, make_train_step
    from ebm_jax.train.step import make_mesh
    from ebm_jax.tracking.dimp_training import make_dimp_loss

    net = _net(frozen)
    loss_fn = make_dimp_loss(dimp.PredictorSettings(num_iter=2), label_sigma=0.5)
    opt = optax.adam(1e-2)
    graphdef, state = create_train_state(net, opt, jax.random.key(0))
    step = make_train_step(graphdef, loss_fn, opt, make_mesh(1))
    batch = samples(0)

    def split(params):
        flat = jax.tree_util.tree_leaves_with_path(params)
        return ([np.asarray(v) for p, v in flat if "backbone" in jax.tree_util.keystr(p)],
                [np.asarray(v) for p, v in flat if "backbone" not in jax.tree_util.keystr(p)])

    before_backbone, before_branch = split(state.params)
    losses = []
    for _ in range(15):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]) if "loss" in metrics else None)
        assert np.isfinite(float(metrics["center_error_cells"]))
    after_backbone, after_branch = split(state.params)
    moved = [not np.array_equal(a, b) for a, b in zip(before_backbone, after_backbone)]
    assert any(moved) != frozen
    assert any(not np.array_equal(a, b) for a, b in zip(before_branch, after_branch))
    assert losses[-1] < losses[0]
