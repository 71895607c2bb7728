"""SoCL-Siam's fine-tuning options (`ebm_jax.tracking.socl_siam`, SiamRPN++'s): after a
training step the frozen levels' parameters and batch-norm statistics have not moved,
the others have; frozen batch norm leaves every statistic as it was; the backbone's
learning-rate multiplier scales Adam's updates exactly and bounds the backbone's first
step, the head's not at all."""

from __future__ import annotations

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from ebm_jax.contrastive.socl import SoCLSettings
from ebm_jax.models.alexnet import SiamFCAlexNet
from ebm_jax.models.siam_resnet import SiamResNet18
from ebm_jax.tracking import socl_siam
from ebm_jax.train import create_train_state, make_mesh, make_train_step

SIZE = 103  # AlexNet: a 3 x 3 grid


def batch(grid: int, size: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    h = rng.uniform(0, 1, (2, 2, grid, grid)) ** 4
    h /= h.sum(axis=(2, 3), keepdims=True)
    return {"i_images": rng.integers(0, 256, (2, size, size, 3)).astype(np.uint8),
            "j_images": rng.integers(0, 256, (2, size, size, 3)).astype(np.uint8),
            "h_i": h[0].astype(np.float32), "h_j": h[1].astype(np.float32)}


def flat(model) -> dict:
    """{(path, variable type): array copy} of every variable of the model."""
    return {(tuple(str(k) for k in path), type(v).__name__): np.array(v.get_value())
            for path, v in nnx.to_flat_state(nnx.state(model))}


def one_step(model, *, freeze="none", freeze_bn=False, lr_scale=1.0, lr=1e-2, size=SIZE):
    """(variables before, variables after) one SoCL training step of `model`."""
    socl_siam.freeze_batch_norm(model, freeze, every=freeze_bn)
    trainable = socl_siam.trainable_filter(model, freeze)
    opt = optax.adam(lr)
    if lr_scale != 1.0:
        opt = optax.chain(opt, socl_siam.scale_backbone_updates(model, lr_scale))
    before = flat(model)
    graphdef, state = create_train_state(model, opt, jax.random.key(0), trainable)
    loss = socl_siam.make_socl_siam_loss(SoCLSettings(use_lst=False))
    step = make_train_step(graphdef, loss, opt, make_mesh(1), trainable=trainable)
    state, metrics = step(state, batch(model.embedding_grid(size)[0], size))
    assert np.isfinite(float(metrics["loss"]))
    after = flat(nnx.merge(graphdef, state.params, state.rest))
    return before, after


def moved(before, after, prefix: str, kind: str, index=None) -> list[bool]:
    return [not np.array_equal(before[k], after[k]) for k in before
            if k[0][0] == prefix and k[1] == kind
            and (index is None or int(k[0][1]) in index)]


def alexnet() -> SiamFCAlexNet:
    return SiamFCAlexNet(width=0.125, rngs=nnx.Rngs(0))


def resnet(abstract: bool = False) -> SiamResNet18:
    """ResNet-18 at width 0.125; `abstract`: shapes only (`nnx.eval_shape`), no init."""
    build = lambda: SiamResNet18(width=0.125, rngs=nnx.Rngs(0))  # noqa: E731
    return nnx.eval_shape(build) if abstract else build()


@pytest.fixture(scope="module")
def plain():
    """One step of AlexNet with every option off: the reference."""
    return one_step(alexnet())


def test_frozen_levels_keep_their_parameters_and_statistics(plain):
    before, after = one_step(alexnet(), freeze="conv2")
    for key in before:
        frozen = int(key[0][1]) <= 1  # conv1, conv2 and their batch norms
        assert np.array_equal(before[key], after[key]) == frozen, key
    # the same variables move without the option
    assert all(moved(*plain, "convs", "Param")) and all(moved(*plain, "norms", "BatchStat"))


def test_frozen_batch_norm_keeps_every_statistic_and_trains_the_rest(plain):
    before, after = one_step(alexnet(), freeze_bn=True)
    stats = [k for k in before if k[1] == "BatchStat"]
    assert len(stats) == 8 and all(np.array_equal(before[k], after[k]) for k in stats)
    assert all(moved(before, after, "convs", "Param"))
    assert all(moved(before, after, "norms", "Param"))


def test_backbone_learning_rate_scale_scales_adam_exactly():
    """The same gradients through Adam and through Adam then the multiplier: every
    backbone update is 0.1 x Adam's, the head's (conv5, the embedding) Adam's. The
    gradients are given, not computed, so the check does not rest on two trainings
    rounding alike: a conv bias before a batch norm has a gradient of zero in exact
    arithmetic, Adam normalises its rounding noise to a full-size step, and a GPU's
    reductions do not repeat that noise from run to run."""
    model = alexnet()
    _, params, _ = nnx.split(model, socl_siam.trainable_filter(model, "none"), ...)
    rng = np.random.default_rng(0)
    grads = jax.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32), params)
    full = optax.adam(1e-2)
    scaled = optax.chain(optax.adam(1e-2), socl_siam.scale_backbone_updates(model, 0.1))
    u_full, _ = full.update(grads, full.init(params), params)
    u_scaled, _ = scaled.update(grads, scaled.init(params), params)
    pairs = zip(nnx.to_flat_state(u_full), nnx.to_flat_state(u_scaled))
    for (path, a), (path_s, b) in pairs:
        assert path == path_s
        a, b = np.asarray(a.get_value()), np.asarray(b.get_value())
        scale = 1.0 if tuple(str(k) for k in path[:2]) == ("convs", "4") else 0.1
        # one float32 product (or none): within one rounding of the exact scale x a
        np.testing.assert_allclose(b, np.float32(scale) * a, rtol=2.0 ** -23, atol=0,
                                   err_msg=str(path))


def test_backbone_learning_rate_scale_bounds_the_first_step(plain):
    """Through the training step: Adam's first step is lr g / (|g| + eps), at most lr in
    size whatever g, so with the multiplier every backbone parameter moves at most
    0.1 lr, and the head still moves by more than that somewhere."""
    lr, tol = 1e-2, 1e-7  # tol: a float32 difference of parameters below 1 in size
    full_before, full_after = plain
    before, after = one_step(alexnet(), lr_scale=0.1, lr=lr)
    head = ("convs", "4")
    for key in before:
        if key[1] != "Param":
            continue
        step = np.abs(after[key] - before[key])
        bound = lr if key[0][:2] == head else 0.1 * lr
        assert step.max() <= bound * (1 + 1e-6) + tol, key
    head_steps = [np.abs(after[k] - before[k]).max() for k in before
                  if k[1] == "Param" and k[0][:2] == head]
    assert max(head_steps) > 0.2 * lr
    # without the multiplier the backbone takes steps above 0.1 lr
    assert max(np.abs(full_after[k] - full_before[k]).max() for k in full_before
               if k[1] == "Param" and k[0][:2] != head) > 0.2 * lr


def test_resnet_stem_and_layer1_are_split_out_and_their_batch_norm_fixed():
    model = resnet(abstract=True)
    assert socl_siam.freeze_batch_norm(model, "layer1") == 5  # bn1, 2 blocks x 2
    _, params, rest = nnx.split(model, socl_siam.trainable_filter(model, "layer1"), ...)
    trained = {path[0] for path, _ in nnx.to_flat_state(params)}
    assert trained == {"layer2", "layer3", "adjust"}
    kept = {path[0] for path, v in nnx.to_flat_state(rest) if isinstance(v, nnx.Param)}
    assert kept == {"conv1", "bn1", "layer1"}
    assert model.bn1.use_running_average and model.layer1[1].bn2.use_running_average
    assert not model.layer2[0].bn1.use_running_average


@pytest.mark.slow
def test_resnet_frozen_levels_do_not_move_in_a_step():
    before, after = one_step(resnet(), freeze="layer1", size=32)
    for level in ("conv1", "bn1", "layer1"):
        assert not any(moved(before, after, level, "Param")), level
        assert not any(moved(before, after, level, "BatchStat")), level
    for level in ("layer2", "layer3", "adjust"):
        assert all(moved(before, after, level, "Param")), level


def test_bad_options_name_the_levels():
    with pytest.raises(ValueError, match=r"SiamFCAlexNet.*conv1, conv2, conv3, conv4.*"
                                         r"'layer2'"):
        socl_siam.trainable_filter(nnx.eval_shape(alexnet), "layer2")
    with pytest.raises(ValueError, match="freeze must be"):
        socl_siam.freeze_batch_norm(resnet(abstract=True), "adjust")
    with pytest.raises(ValueError, match=r"backbone_lr_scale must be in \(0, 1\]"):
        socl_siam.scale_backbone_updates(resnet(abstract=True), 0.0)
    assert socl_siam.freeze_levels(SiamResNet18) == ("conv1", "layer1", "layer2", "layer3")
