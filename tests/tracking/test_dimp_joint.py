"""DiMP's two branches trained jointly (`ebm_jax.tracking.dimp_joint`): the joint loss is
the classifier's loss plus box_weight x the box head's, each computed by its own code path
(`make_dimp_loss` on the classifier, `make_tracking_box_loss` on `BoxHeadNet`'s pairs);
the backbone is held once, frozen (no gradient) or shared by both gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ebm_jax.energy.boxes import make_tracking_box_loss
from ebm_jax.models.tracking_backbones import tracking_backbone
from ebm_jax.recipes.tracking.box_head_stages import build_box_head
from ebm_jax.tracking import dimp
from ebm_jax.tracking.box_head import BoxHeadSettings
from ebm_jax.tracking.dimp_joint import DiMPJointNet, make_joint_loss, param_groups
from ebm_jax.tracking.dimp_training import make_dimp_loss
from tests.tolerances import EPS32

SETTINGS = dimp.PredictorSettings(num_iter=2)
BOX = BoxHeadSettings(method="nce", num_samples=8, width=8, hidden=16)
SIGMA = 0.5
WEIGHT = 3.0
S = 127  # crop side: AlexNet's conv5 grid is 8 x 8 cells there


def _net(frozen: bool):
    backbone = tracking_backbone("alexnet", width=0.125, rngs=nnx.Rngs(0))
    head = build_box_head(backbone, BOX, jax.random.key(1))
    return DiMPJointNet(backbone, 4, SETTINGS, head, channels=8, frozen_backbone=frozen,
                        rngs=nnx.Rngs(2))


def _batch(b=1, n=2):
    rng = np.random.default_rng(0)
    centre = rng.uniform(50, 77, (b, 2 * n, 2))
    half = rng.uniform(12, 22, (b, 2 * n, 2))
    boxes = np.concatenate([centre - half, centre + half], -1).astype(np.float32)
    crops = rng.uniform(0, 255, (b, 2 * n, S, S, 3)).astype(np.float32)
    return {"train": crops[:, :n], "test": crops[:, n:], "train_boxes": boxes[:, :n],
            "test_boxes": boxes[:, n:]}


def _apart(net, batch, key):
    """The two losses, each by its branch's own code: the classifier's `make_dimp_loss`
    on `net.classifier`; the head's loss on `net.box.pair_inputs` of the pairs (first
    training crop, each test crop)."""
    clf, _ = make_dimp_loss(SETTINGS, SIGMA)(net.classifier, batch, key)
    b, nte = batch["test"].shape[:2]
    ref = np.repeat(batch["train"][:, :1], nte, axis=1).reshape(-1, S, S, 3)
    ref_boxes = np.repeat(batch["train_boxes"][:, :1], nte, axis=1).reshape(-1, 4)
    inputs = net.box.pair_inputs(jnp.asarray(ref), jnp.asarray(ref_boxes),
                                 jnp.asarray(batch["test"].reshape(-1, S, S, 3)))
    box_loss = make_tracking_box_loss(BOX.method, BOX.num_samples,
                                      **BOX.loss_hyperparameters)
    box, _ = box_loss(net.box.head, (inputs, batch["test_boxes"].reshape(-1, 4)),
                      jax.random.fold_in(key, 0))
    return clf, box


def _grads(net, fn):
    graphdef, params, rest = nnx.split(net, nnx.Param, ...)

    def f(p):
        return fn(nnx.merge(graphdef, p, rest))

    return jax.grad(f)(params)


# The joint loss runs the backbone once on all crops and the branches apart run it on
# their own batches: XLA may pick other kernels, so the same sums come in another order.
# Forward and backward through AlexNet's 5 convolutions, the pools and the predictor's
# iterations are L < 30 float32 reductions in a chain, each of n < 1,000 terms (3 x 3 x C
# windows, C <= 96 at width 0.125; the pooled bins): to first order within L n eps of
# the largest term's scale (`tests.tolerances`: n eps sum|terms| per reduction).
CHAIN, TERMS = 30, 1000


def _close(a, b, scale):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0,
                               atol=CHAIN * TERMS * EPS32 * scale)


@pytest.mark.parametrize("frozen", [pytest.param(True, marks=pytest.mark.slow),
                                    pytest.param(False, marks=pytest.mark.heavy)])
def test_the_joint_loss_is_the_classifiers_plus_weight_times_the_heads(frozen):
    net, batch, key = _net(frozen), _batch(), jax.random.key(5)
    joint = make_joint_loss(SETTINGS, SIGMA, BOX, box_weight=WEIGHT)
    value, metrics = joint(net, batch, key)
    clf, box = _apart(net, batch, key)
    _close(metrics["classifier_loss"], clf, abs(float(clf)))
    _close(metrics["box_loss"], box, abs(float(box)))
    _close(value, clf + WEIGHT * box, abs(float(clf)) + WEIGHT * abs(float(box)))

    g_joint = _grads(net, lambda m: joint(m, batch, key)[0])
    g_clf = _grads(net, lambda m: _apart(m, batch, key)[0])
    g_box = _grads(net, lambda m: _apart(m, batch, key)[1])
    groups = param_groups(g_joint)
    # a gradient entry's rounding follows the terms summed into it, of the size of the
    # branch's largest gradients (entries near 0 are differences of such terms)
    scale = {k: max(float(np.max(np.abs(c))) + WEIGHT * float(np.max(np.abs(b)))
                    for c, b, g in zip(jax.tree.leaves(g_clf), jax.tree.leaves(g_box),
                                       jax.tree.leaves(groups)) if g == k)
             for k in set(jax.tree.leaves(groups))}
    for leaf_j, leaf_c, leaf_b, group in zip(jax.tree.leaves(g_joint),
                                             jax.tree.leaves(g_clf),
                                             jax.tree.leaves(g_box),
                                             jax.tree.leaves(groups)):
        expected = np.asarray(leaf_c) + WEIGHT * np.asarray(leaf_b)
        _close(leaf_j, expected, scale[group])
        if group == "classifier":
            assert not np.any(np.asarray(leaf_b))  # the head's loss never reaches it
        if group == "head":
            assert not np.any(np.asarray(leaf_c))
        if group == "backbone":
            if frozen:
                assert not np.any(np.asarray(leaf_j))
    backbone = [np.asarray(x) for x, g in zip(jax.tree.leaves(g_joint),
                                              jax.tree.leaves(groups)) if g == "backbone"]
    if not frozen:  # both branches reach the shared backbone
        assert any(np.any(x) for x in backbone)
        box_bb = [np.asarray(x) for x, g in zip(jax.tree.leaves(g_box),
                                                jax.tree.leaves(groups)) if g == "backbone"]
        clf_bb = [np.asarray(x) for x, g in zip(jax.tree.leaves(g_clf),
                                                jax.tree.leaves(groups)) if g == "backbone"]
        assert any(np.any(x) for x in box_bb) and any(np.any(x) for x in clf_bb)


def test_the_backbone_is_held_once_and_grouped_once():
    net = _net(frozen=False)
    assert net.box.backbone is net.classifier.backbone
    _, params, _ = nnx.split(net, nnx.Param, ...)
    groups = jax.tree.leaves(param_groups(params))
    alone = nnx.split(net.backbone, nnx.Param, ...)[1]
    assert groups.count("backbone") == len(jax.tree.leaves(alone))
    assert {"classifier", "head"} <= set(groups)
    assert net.all_levels() == tuple(sorted({4, *net.box.levels_used}))


@pytest.mark.parametrize("weight", [0, -1.0, float("nan"), 1e4, True])
def test_a_box_weight_out_of_range_is_one_line(weight):
    with pytest.raises(ValueError, match=r"box_weight must be a number in \(0, 1000\]"):
        make_joint_loss(SETTINGS, SIGMA, BOX, box_weight=weight)
