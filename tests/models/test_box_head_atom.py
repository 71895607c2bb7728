"""The ATOM-like box energy head (`AtomBoxHead`): its pools per level (reference 3x3 and
1x1, test 5x5 and 3x3) on AlexNet conv3 + conv5 and on ResNet-18 layer2 + layer3,
(N,) energies near 0 at init, batch norm (eval mode deterministic on its running
statistics, train mode normalising by the batch and updating them at PyTorch's
momentum 0.1), bad arguments refused by name, and one gradient step of the box loss."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ebm_jax.models.alexnet import SiamFCAlexNet
from ebm_jax.models.box_head import BoxHeadNet
from ebm_jax.models.box_head_atom import AtomBoxHead, AtomPairInputs
from ebm_jax.models.siam_resnet import SiamResNet18

# exemplar-size crops keep the tests light; the maps still take the 5x5 test pool
CROP, WIDTH, HIDDEN = 127, 8, 16
REF = np.array([[31.0, 36.0, 95.0, 90.0], [36.0, 26.0, 86.0, 106.0]], np.float32)
BOXES = np.array([[26, 36, 86, 106], [36, 36, 76, 76], [10, 15, 40, 60]], np.float32)


@functools.cache
def _backbone(name):
    """A backbone in eval mode (shared: `BoxHeadNet` copies it, nothing mutates it)."""
    net = (SiamFCAlexNet if name == "alexnet" else SiamResNet18)(width=0.125,
                                                                  rngs=nnx.Rngs(0))
    net.eval()
    return net


@pytest.fixture(scope="module")
def crops():
    rng = np.random.default_rng(0)
    return jnp.asarray(rng.uniform(0, 255, (2, CROP, CROP, 3)), jnp.float32)


@pytest.fixture(scope="module", params=["alexnet", "resnet18"])
def setup(request, crops):
    """(backbone, its box-head levels of the two crops): AlexNet conv3 + conv5 or
    ResNet-18 layer2 + layer3."""
    backbone = _backbone(request.param)
    return backbone, backbone.features(crops, backbone.box_head_levels)


def _head(backbone, levels=None, **kw):
    levels = backbone.box_head_levels if levels is None else levels
    geometry = backbone.level_geometry(levels)
    return AtomBoxHead(backbone.level_channels(levels), strides=[s for s, _ in geometry],
                       offsets=[o for _, o in geometry], width=WIDTH, hidden=HIDDEN,
                       rngs=nnx.Rngs(1), **kw)


def _stats(module):
    return [np.asarray(x) for x in jax.tree.leaves(nnx.state(module, nnx.BatchStat))]


@pytest.mark.heavy
def test_pools_per_level_and_energy_shapes(setup):
    backbone, levels = setup
    head = _head(backbone)
    head.eval()
    # ATOM's pools: reference 3x3 (first level) and 1x1 (second), test 5x5 and 3x3
    assert head.ref_pool_sizes == (3, 1) and head.pool_sizes == (5, 3)
    ref = [lv[0] for lv in levels]
    test = [lv[1] for lv in levels]
    side = (10, 6) if isinstance(backbone, SiamFCAlexNet) else (16, 16)
    t = head.test_features(test)
    assert [x.shape for x in t] == [(side[0], side[0], WIDTH), (side[1], side[1], WIDTH)]
    # the pools as the head reads them, on its own reference and test features
    ref_feat = [block(lv[None], True)[0] for lv, block in zip(ref, head.ref_convs)]
    assert head._pool(ref_feat[0], REF[:1], 0, 3).shape == (1, 3, 3, WIDTH)
    assert head._pool(ref_feat[1], REF[:1], 1, 1).shape == (1, 1, 1, WIDTH)
    assert head._pool(t[0], BOXES, 0, 5).shape == (3, 5, 5, WIDTH)
    assert head._pool(t[1], BOXES, 1, 3).shape == (3, 3, 3, WIDTH)
    # and the layers they feed: an FC block on the 3x3 reference pool only (ATOM's
    # fc3_1r), the joint modulation from both levels, test FCs of 5x5 and 3x3 pools
    assert [fc.linear.in_features for fc in head.ref_fcs] == [9 * WIDTH]
    assert [fc.linear.in_features for fc in head.mod_fcs] == [2 * WIDTH, 2 * WIDTH]
    assert [fc.in_features for fc in head.test_fcs] == [25 * WIDTH, 9 * WIDTH]
    m = head.modulation(ref, REF[0])
    assert [v.shape for v in m] == [(WIDTH,), (WIDTH,)]
    f = head.score(m, t, BOXES)
    assert f.shape == (3,) and np.all(np.isfinite(np.asarray(f)))
    assert len(set(np.asarray(f).tolist())) == 3  # it depends on the box
    assert not np.array_equal(np.asarray(head((ref, REF[0] + 8.0, test), BOXES)),
                              np.asarray(f))  # and on the reference box
    grad = jax.grad(lambda b: head.score(m, t, b[None])[0])(jnp.asarray(BOXES[0]))
    assert np.all(np.isfinite(np.asarray(grad))) and np.any(np.asarray(grad) != 0)
    # near 0 at init where batch norm has statistics (the batch of training): a
    # N(0, 0.001^2) last layer; in eval mode the running statistics are still (0, 1)
    head.train()
    row = jax.tree.map(lambda x: x[0], head.pair_inputs(levels, REF, levels))
    assert np.abs(np.asarray(head(row, BOXES))).max() < 1.0
    # other pools: the layers follow them
    other = _head(backbone, pool_sizes=(4, 2), ref_pool_sizes=(2, 2))
    assert [fc.linear.in_features for fc in other.ref_fcs] == [4 * WIDTH, 4 * WIDTH]
    assert [fc.in_features for fc in other.test_fcs] == [16 * WIDTH, 4 * WIDTH]
    assert other.score(other.modulation(ref, REF[0]), other.test_features(test),
                       BOXES).shape == (3,)


def test_resnet_levels_and_levels_of_other_strides(crops):
    """ResNet-18 layer2 + layer3: stride 8, offset 0 (padded), the net checks the
    geometry; conv1 + layer3 (strides 2 and 8) pool each level at its own stride."""
    backbone = _backbone("resnet18")
    assert backbone.box_head_levels == (2, 3)
    assert backbone.level_geometry((2, 3)) == ((8, 0.0), (8, 0.0))
    head = _head(backbone)
    net = BoxHeadNet(backbone, head)
    inputs = net.pair_inputs(crops, REF, crops)
    assert [m.shape for m in inputs.modulation] == [(2, WIDTH), (2, WIDTH)]
    assert [t.shape for t in inputs.test_features] == [(2, 16, 16, WIDTH)] * 2
    alex = _head(_backbone("alexnet"))
    with pytest.raises(ValueError, match="offsets: the backbone's feature offsets"):
        BoxHeadNet(backbone, alex)
    mixed = _head(backbone, levels=(0, 3))
    assert mixed.strides == (2, 8)
    lv = backbone.features(crops, (0, 3))
    mixed.eval()
    f = mixed.score(mixed.modulation([x[0] for x in lv], REF[0]),
                    mixed.test_features([x[1] for x in lv]), BOXES)
    assert f.shape == (3,) and np.all(np.isfinite(np.asarray(f)))
    # a box spanning exactly cell (5, 9) of each level pools a map of ones to 1
    for l, (stride, offset) in enumerate(backbone.level_geometry((0, 3))):
        cx, cy = offset + stride * 9, offset + stride * 5
        box = jnp.asarray([[cx - stride / 2, cy - stride / 2, cx + stride / 2,
                            cy + stride / 2]])
        assert float(mixed._pool(jnp.ones((20, 20, 1)), box, l, 1)[0, 0, 0, 0]) == (
            pytest.approx(1.0, abs=1e-5))


def test_eval_mode_is_deterministic_on_running_statistics(setup):
    backbone, levels = setup
    head = _head(backbone)
    head.eval()
    before = _stats(head)
    a = head.pair_inputs(levels, REF, levels)
    b = head.pair_inputs(levels, REF, levels)
    assert isinstance(a, AtomPairInputs)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert np.array_equal(np.asarray(x), np.asarray(y))
    assert all(np.array_equal(x, y) for x, y in zip(before, _stats(head)))
    # the batch of pairs in eval mode is the per-frame parts, pair by pair
    for i in range(2):
        m = head.modulation([lv[i] for lv in levels], REF[i])
        t = head.test_features([lv[i] for lv in levels])
        row = jax.tree.map(lambda x, i=i: x[i], a)
        for x, y in zip(m + t, row.modulation + row.test_features):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-4)
        # the energy of a row is the energy of that pair's raw inputs
        np.testing.assert_allclose(np.asarray(head(row, BOXES)),
                                   np.asarray(head(([lv[i] for lv in levels], REF[i],
                                                    [lv[i] for lv in levels]), BOXES)),
                                   rtol=1e-4, atol=1e-6)


def test_train_mode_normalises_by_the_batch_and_updates_statistics(setup):
    backbone, levels = setup
    head = _head(backbone)
    assert head.training  # as built: its batch norm learns in training
    initial = _stats(head)
    # the per-frame parts (the tracker's, the probe's) use the running statistics
    # in either mode and change nothing
    m = head.modulation([lv[0] for lv in levels], REF[0])
    assert all(np.array_equal(x, y) for x, y in zip(initial, _stats(head)))
    train_out = head.pair_inputs(levels, REF, levels)
    # every statistic moved, by PyTorch's momentum 0.1 from (0, 1)
    assert all(not np.array_equal(x, y) for x, y in zip(initial, _stats(head)))
    block = head.test_convs[0][0]
    z = block.conv(levels[0])
    np.testing.assert_allclose(np.asarray(block.norm.mean[...]),
                               0.1 * np.asarray(jnp.mean(z, axis=(0, 1, 2))),
                               rtol=1e-4, atol=1e-5)
    # normalised by the batch: not what the running statistics give
    head.eval()
    eval_out = head.pair_inputs(levels, REF, levels)
    assert not np.allclose(np.asarray(train_out.test_features[0]),
                           np.asarray(eval_out.test_features[0]))
    assert not np.array_equal(np.asarray(m[0]), np.asarray(eval_out.modulation[0][0]))
    # one pair's raw inputs are no batch: refused in train mode, by name
    head.train()
    with pytest.raises(ValueError, match=r"inputs: AtomBoxHead in train mode .* "
                                         r"pair_inputs"):
        head(([lv[0] for lv in levels], REF[0], [lv[0] for lv in levels]), BOXES)
    row = jax.tree.map(lambda x: x[0], train_out)
    assert head(row, BOXES).shape == (3,)


def test_bad_arguments_are_refused_by_name(setup):
    backbone, levels = setup
    for kw, name in ((dict(pool_sizes=(5,)), "pool_sizes"),
                     (dict(pool_sizes=(0, 3)), "pool_sizes"),
                     (dict(pool_sizes=(5.5, 3)), "pool_sizes"),
                     (dict(pool_sizes=(True, 3)), "pool_sizes"),
                     (dict(pool_sizes="53"), "pool_sizes"),
                     (dict(ref_pool_sizes=(3, 1, 1)), "ref_pool_sizes"),
                     (dict(ref_pool_sizes=(3, -1)), "ref_pool_sizes")):
        with pytest.raises(ValueError, match=rf"^{name} must hold one integer >= 1 per "
                                             rf"feature level \(2 levels\), got"):
            _head(backbone, **kw)
    with pytest.raises(ValueError, match="hidden must be an integer >= 1"):
        AtomBoxHead((4, 4), hidden=0, rngs=nnx.Rngs(0))
    head = _head(backbone)
    # a test pool larger than the map
    big = _head(backbone, pool_sizes=(20, 3))
    big.eval()
    t = big.test_features([lv[1] for lv in levels])
    m = big.modulation([lv[0] for lv in levels], REF[0])
    with pytest.raises(ValueError, match="smaller than the 20 x 20 pooling grid"):
        big.score(m, t, BOXES)
    # batches of the wrong shape, a reference box outside the crop, a condition
    with pytest.raises(ValueError, match=r"test_levels\[0\] must have shape \(2, H, W"):
        head.pair_inputs(levels, REF, [lv[:1] for lv in levels])
    with pytest.raises(ValueError, match=r"ref_levels\[0\] must have shape \(B, H, W"):
        head.pair_inputs([lv[0] for lv in levels], REF, levels)
    with pytest.raises(ValueError, match=r"ref_boxes must have shape \(2, 4\)"):
        head.pair_inputs(levels, REF[:1], levels)
    with pytest.raises(ValueError, match=r"ref_box .* lies outside the crop"):
        head.pair_inputs(levels, REF + 400.0, levels)
    head.eval()
    with pytest.raises(ValueError, match="conditions must be None"):
        head(([lv[0] for lv in levels], REF[0], [lv[0] for lv in levels]), BOXES,
             np.array([1]))


# ----------------------------------------------------------------- training


def _pairs(b=2):
    """A batch of `pair_batches` form: regions (B, 96, 128, 3) and xywh boxes."""
    rng = np.random.default_rng(3)
    frames = rng.uniform(0, 255, (2, b, 96, 128, 3)).astype(np.float32)
    boxes = np.tile(np.array([[40.0, 30.0, 36.0, 28.0]], np.float32), (b, 1))
    return {"z_frames": frames[0], "x_frames": frames[1], "z_boxes": boxes,
            "x_boxes": boxes + np.array([3.0, -2.0, 4.0, 2.0], np.float32)}


def _step(net, loss_fn):
    """One jitted Adam step of `loss_fn` on `net` (`make_train_step`, the head's
    parameters only): (loss, metrics, the net after the step)."""
    import optax

    from ebm_jax.train import create_train_state, make_mesh, make_train_step, merge_model

    opt = optax.adam(1e-3)
    graphdef, state = create_train_state(net, opt, jax.random.key(0),
                                         trainable=net.trainable_filter)
    step = make_train_step(graphdef, loss_fn, opt, make_mesh(1),
                           trainable=net.trainable_filter, donate=False)
    new_state, metrics = step(state, _pairs())
    return metrics, merge_model(graphdef, new_state)


SETTINGS_KW = dict(method="nce+", num_samples=8, batch_size=2, width=WIDTH,
                   hidden=HIDDEN, head="atom")


def test_one_gradient_step_of_the_box_loss_through_pair_inputs():
    """The box loss (`make_tracking_box_loss`, NCE+, M = 8) on the energy inputs of the
    whole batch (`BoxHeadNet.pair_inputs`, batch norm over the batch): one step gives
    a finite loss, moves the head's parameters and its running statistics and leaves
    the frozen backbone as it was."""
    from ebm_jax.energy.boxes import make_tracking_box_loss
    from ebm_jax.tracking.box_head import BoxHeadSettings
    from ebm_jax.tracking.box_head_training import training_crops

    settings = BoxHeadSettings(**SETTINGS_KW)
    box_loss = make_tracking_box_loss(settings.method, settings.num_samples,
                                      **settings.loss_hyperparameters)

    def loss_fn(net, batch, key):
        ref, ref_boxes, test, test_boxes = training_crops(jax.random.fold_in(key, 0),
                                                          batch, settings)
        inputs = net.pair_inputs(ref, ref_boxes, test)
        return box_loss(net.head, (inputs, test_boxes), jax.random.fold_in(key, 1))

    backbone = _backbone("alexnet")
    net = BoxHeadNet(backbone, _head(backbone))
    metrics, after = _step(net, loss_fn)
    assert np.isfinite(float(metrics["loss"]))
    params = lambda m: [np.asarray(x) for x in  # noqa: E731
                        jax.tree.leaves(nnx.state(m, nnx.Param))]
    assert any(not np.array_equal(a, b) for a, b in zip(params(after.head),
                                                        params(net.head)))
    assert all(np.isfinite(a).all() for a in params(after.head))
    assert all(not np.array_equal(a, b) for a, b in zip(_stats(after.head),
                                                        _stats(net.head)))
    assert all(np.array_equal(a, b) for a, b in zip(params(after.backbone),
                                                    params(backbone)))


def test_one_gradient_step_of_make_box_head_loss():
    from ebm_jax.tracking.box_head import BoxHeadSettings
    from ebm_jax.tracking.box_head_training import make_box_head_loss

    backbone = _backbone("alexnet")
    net = BoxHeadNet(backbone, _head(backbone))
    metrics, after = _step(net, make_box_head_loss(BoxHeadSettings(**SETTINGS_KW)))
    assert np.isfinite(float(metrics["loss"]))
    assert np.isfinite(float(metrics["f_target"]))
    assert all(not np.array_equal(a, b) for a, b in zip(_stats(after.head),
                                                        _stats(net.head)))
