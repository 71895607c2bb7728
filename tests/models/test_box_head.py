"""The tracker's box energy head: the backbone's two levels and their geometry, shapes,
a finite energy near 0 at init, where PrRoIPool reads a box, and the bad inputs (a
backbone of other strides, a reference box of zero size or outside the crop,
non-finite candidate boxes)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ebm_jax.models.alexnet import SiamFCAlexNet, alexnet_output_size, level_geometry
from ebm_jax.models.box_head import BoxEnergyHead, BoxHeadNet
from tests.tolerances import EPS32

CROP = 255


@pytest.fixture(scope="module")
def backbone():
    net = SiamFCAlexNet(width=0.125, rngs=nnx.Rngs(0))
    net.eval()
    return net


@pytest.fixture(scope="module")
def crops():
    rng = np.random.default_rng(0)
    return jnp.asarray(rng.uniform(0, 255, (2, CROP, CROP, 3)), jnp.float32)


@pytest.fixture(scope="module")
def levels(backbone, crops):
    return backbone.features(crops)


def _head(backbone, **kw):
    return BoxEnergyHead(backbone.level_channels(), width=8, hidden=16,
                         rngs=nnx.Rngs(1), **kw)


REF = np.array([95.0, 100.0, 159.0, 154.0], np.float32)  # a 64 x 54 target at the centre


def test_two_levels_in_one_pass_and_conv5_unchanged(backbone, crops, levels):
    c3, c5 = levels
    assert c3.shape == (2, 26, 26, backbone.channels[2])
    assert c5.shape == (2, alexnet_output_size(CROP), alexnet_output_size(CROP),
                        backbone.channels[4])
    # __call__ (what SiamFC computes) is the last level of the same pass: bit for bit
    assert np.array_equal(np.asarray(backbone(crops)), np.asarray(c5))
    # both stride 8 and centred on the crop: cell j at offset + 8 j, the middle cell
    # of each map on pixel 127
    assert backbone.level_geometry() == ((8, 27.0), (8, 43.0))
    for (stride, offset), lv in zip(backbone.level_geometry(), levels):
        assert offset + stride * (lv.shape[1] - 1) / 2 == (CROP - 1) / 2
    assert level_geometry(0) == (4, 7.0)  # conv1 after its pool
    with pytest.raises(ValueError, match="levels must be convolution indices"):
        backbone.features(crops, (2, 5))
    with pytest.raises(ValueError, match="increasing"):
        backbone.features(crops, (4, 2))


@pytest.mark.heavy
def test_shapes_finite_and_near_zero_at_init(backbone, levels):
    head = _head(backbone)
    assert float(jnp.std(head.out.kernel[...])) == pytest.approx(0.001, rel=0.3)
    assert float(jnp.abs(head.out.bias[...]).max()) == 0.0
    ref = [lv[0] for lv in levels]
    test = [lv[1] for lv in levels]
    m = head.modulation(ref, REF)
    assert [v.shape for v in m] == [(8,), (8,)]
    t = head.test_features(test)
    assert [x.shape for x in t] == [(26, 26, 8), (22, 22, 8)]
    boxes = np.array([[90, 100, 150, 170], [100, 100, 140, 140], [20, 30, 60, 90]],
                     np.float32)
    f = head.score(m, t, boxes)
    assert f.shape == (3,) and np.all(np.isfinite(np.asarray(f)))
    # the energy of the `ebm_jax.energy.boxes` form is the three parts composed
    g = head((ref, REF, test), boxes)
    assert np.array_equal(np.asarray(f), np.asarray(g))
    # small at init (a N(0, 0.001^2) last layer): far below the losses' scale of 1
    assert np.abs(np.asarray(f)).max() < 1.0
    # it depends on the candidate box and on the reference box
    assert len(set(np.asarray(f).tolist())) == 3
    f_other_ref = head((ref, REF + 8.0, test), boxes)
    assert not np.array_equal(np.asarray(f_other_ref), np.asarray(f))
    # and is differentiable in the box
    grad = jax.grad(lambda b: head.score(m, t, b[None])[0])(jnp.asarray(boxes[0]))
    assert np.all(np.isfinite(np.asarray(grad))) and np.any(np.asarray(grad) != 0)


def test_pooling_reads_the_cell_under_the_box(backbone):
    """A box spanning exactly cell (jy, jx) of a level (crop pixels offset + 8 j +- 4)
    pools the exact average of the bilinear surface over that cell: 1 on a map of ones,
    and (3/4)^2 on a map with a single one at that cell (3/4 the integral of the hat
    over [-1/2, 1/2] on each axis); the next cell over reads (1/8)(3/4) (1/8 the hat's
    integral over [1/2, 3/2]). The offsets are the backbone's."""
    head = _head(backbone)
    for l, (stride, offset) in enumerate(backbone.level_geometry()):
        jy, jx = 5, 9
        cx, cy = offset + stride * jx, offset + stride * jy
        box = jnp.asarray([[cx - stride / 2, cy - stride / 2, cx + stride / 2,
                            cy + stride / 2]])
        # the bin edges in cells come from ~16 float32 operations on numbers up to
        # (cx + stride) / stride; the hat's integrals are 1-Lipschitz in the edges
        atol = 16 * EPS32 * (cx + stride) / stride
        ones = jnp.ones((20, 20, 1))
        delta = jnp.zeros((20, 20, 1)).at[jy, jx].set(1.0)
        assert float(head._pool(ones, box, l, 1)[0, 0, 0, 0]) == pytest.approx(1.0, abs=atol)
        assert float(head._pool(delta, box, l, 1)[0, 0, 0, 0]) == pytest.approx(
            0.5625, abs=atol)
        next_cell = box + jnp.asarray([stride, 0, stride, 0])
        assert float(head._pool(delta, next_cell, l, 1)[0, 0, 0, 0]) == pytest.approx(
            0.09375, abs=atol)


def test_bad_inputs_name_the_argument(backbone, levels):
    head = _head(backbone)
    ref = [lv[0] for lv in levels]
    test = [lv[1] for lv in levels]
    # a backbone whose strides (or offsets) are not the head's
    other = BoxEnergyHead(backbone.level_channels(), strides=(8, 16), width=8, hidden=16,
                          rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"strides: the backbone's feature strides "
                                         r"\(8, 8\) do not match the box head's \(8, 16\)"):
        BoxHeadNet(backbone, other)
    with pytest.raises(ValueError, match="strides"):
        head.check_geometry(backbone.level_geometry((0, 4)))
    with pytest.raises(ValueError, match="offsets"):
        head.check_geometry(((8, 27.0), (8, 35.0)))
    with pytest.raises(ValueError, match="in_channels"):
        head.check_geometry(backbone.level_geometry(), (5, 7))
    # reference box of zero size, outside the crop, non-finite
    with pytest.raises(ValueError, match=r"ref_box\[0\] .* width or height <= 0"):
        head.modulation(ref, np.array([100, 100, 100, 140], np.float32))
    with pytest.raises(ValueError, match=r"ref_box .* lies outside the crop"):
        head.modulation(ref, np.array([300, 300, 340, 340], np.float32))
    with pytest.raises(ValueError, match=r"ref_box .* lies outside the crop"):
        head.modulation(ref, np.array([-80, 100, -20, 140], np.float32))
    with pytest.raises(ValueError, match=r"ref_box\[0\] has a non-finite"):
        head.modulation(ref, np.array([np.inf, 100, 140, 140], np.float32))
    # non-finite candidate boxes
    m, t = head.modulation(ref, REF), head.test_features(test)
    bad = np.array([[90, 100, 150, 170], [100, np.nan, 140, 140]], np.float32)
    with pytest.raises(ValueError, match=r"boxes\[1\] has a non-finite coordinate"):
        head.score(m, t, bad)
    # levels of the wrong count or channels; a condition given
    with pytest.raises(ValueError, match="test_levels must hold 2 feature levels"):
        head.test_features(test[:1])
    with pytest.raises(ValueError, match=r"ref_levels\[1\] must have shape"):
        head.modulation([ref[0], ref[0]], REF)
    with pytest.raises(ValueError, match="conditions must be None"):
        head((ref, REF, test), bad[:1], np.array([1]))
    with pytest.raises(ValueError, match="width must be an integer >= 1"):
        BoxEnergyHead((4, 4), width=0, rngs=nnx.Rngs(0))


def test_frozen_net_trains_the_head_only(backbone, crops):
    head = _head(backbone)
    frozen = BoxHeadNet(backbone, head)
    joint = BoxHeadNet(backbone, head, frozen=False)
    params = nnx.state(frozen, frozen.trainable_filter)
    assert set(params.keys()) == {"head"}
    assert "backbone" in nnx.state(joint, joint.trainable_filter)
    # the frozen backbone's features carry no gradient
    def total(net, x):
        return sum(jnp.sum(lv) for lv in net.levels(x))

    g_frozen = nnx.grad(total)(frozen, crops[:1])
    g_joint = nnx.grad(total)(joint, crops[:1])
    leaves = lambda g: [np.abs(np.asarray(x)).max()  # noqa: E731
                        for x in jax.tree.leaves(nnx.state(g, nnx.Param)["backbone"])]
    assert max(leaves(g_frozen)) == 0.0 and max(leaves(g_joint)) > 0.0
    # the net copies the backbone: the caller's module keeps its own mode
    train_mode = SiamFCAlexNet(width=0.125, rngs=nnx.Rngs(0))
    BoxHeadNet(train_mode, _head(train_mode))
    assert train_mode.norms[0].use_running_average is False
