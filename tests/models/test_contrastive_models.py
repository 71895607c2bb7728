"""The contrastive model wrappers: MoCo's separate key-encoder buffers (donation), the
bank and queue as unit vectors, the model of every method, the activation estimate."""

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from ebm_jax.contrastive import make_moco_loss
from ebm_jax.models.contrastive import (
    METHODS,
    QUERY_PARAMS,
    InstDisc,
    MoCo,
    Siamese,
    Supervised,
    make_contrastive_model,
    resnet_activation_bytes,
)
from ebm_jax.models.resnet import ResNetEncoder
from ebm_jax.ops.augment import digits_augment
from ebm_jax.train import create_train_state, make_mesh, make_train_step, replicate


def _encoder(rngs, head="linear", splits=1, channels=1):
    return ResNetEncoder("resnet4", in_channels=channels, small_images=True, head=head,
                         dim=8, num_splits=splits, width=4, rngs=rngs)


def test_moco_state_donates_without_shared_buffers():
    """The key encoder starts as a copy of the query encoder in its own buffers, so the
    donated train step runs (XLA refuses to donate one buffer twice)."""
    model = MoCo(lambda r: _encoder(r, splits=2), queue_size=16, dim=8, rngs=nnx.Rngs(0))
    q = jax.tree.leaves(nnx.state(model.query, nnx.Param))
    k = jax.tree.leaves(nnx.state(model.key_encoder, nnx.Param))
    for a, b in zip(q, k):
        np.testing.assert_array_equal(a, b)
        assert a.unsafe_buffer_pointer() != b.unsafe_buffer_pointer()
    np.testing.assert_allclose(np.linalg.norm(model.queue[...], axis=1), 1.0, rtol=1e-5)
    assert int(model.pointer[...]) == 0
    opt = optax.sgd(0.01)
    graphdef, state = create_train_state(model, opt, jax.random.key(0),
                                         trainable=QUERY_PARAMS)
    loss = make_moco_loss(momentum=0.9, temperature=0.2, augment=digits_augment,
                          image_size=8)
    step = make_train_step(graphdef, loss, opt, make_mesh(1), trainable=QUERY_PARAMS,
                           donate=True)
    x = np.random.default_rng(0).random((8, 8, 8, 1), np.float32)
    state = replicate(state, make_mesh(1))  # as `fit` does: one compilation
    state, metrics = step(state, x)
    state, metrics = step(state, x)
    assert np.isfinite(float(metrics["loss"]))


def test_every_method_has_a_model_and_an_encoder():
    kinds = {"moco": MoCo, "instdisc": InstDisc, "memory-bank": InstDisc,
             "supervised": Supervised, "end-to-end": Siamese, "random": Siamese}
    assert set(kinds) == set(METHODS)
    for method, cls in kinds.items():
        built = make_contrastive_model(method, _encoder, dim=8, queue_size=16,
                                       num_items=12, num_classes=3, rngs=nnx.Rngs(0))
        assert isinstance(built.model, cls), method
        assert isinstance(built.encoder(built.model), ResNetEncoder)
    sup = make_contrastive_model("supervised", _encoder, dim=8, queue_size=None,
                                 num_items=12, num_classes=3, rngs=nnx.Rngs(0)).model
    assert sup.encoder.head is None and sup.classifier.out_features == 3
    with pytest.raises(ValueError, match="method must be one of"):
        make_contrastive_model("simclr", _encoder, dim=8, queue_size=None, num_items=1,
                               num_classes=1, rngs=nnx.Rngs(0))


def test_instdisc_bank_starts_as_unit_vectors_and_takes_features():
    model = InstDisc(_encoder(nnx.Rngs(0)), num_items=12, dim=8, rngs=nnx.Rngs(1))
    np.testing.assert_allclose(np.linalg.norm(model.bank[...], axis=1), 1.0, rtol=1e-5)
    assert np.isnan(float(model.log_z[...]))
    f = np.random.default_rng(0).normal(size=(12, 8)).astype(np.float32) * 3
    model.fill_bank(f)
    np.testing.assert_allclose(model.bank[...], f / np.linalg.norm(f, axis=1,
                                                                     keepdims=True),
                               rtol=1e-5)
    with pytest.raises(ValueError, match=r"features must be \(12, 8\)"):
        model.fill_bank(f[:3])


def test_an_rgb_encoder_refuses_grey_images():
    built = make_contrastive_model("supervised", lambda r, head="linear": _encoder(
        r, head, channels=3), dim=8, queue_size=None, num_items=4, num_classes=2,
        rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"images must have shape \(N, H, W, 3\)"):
        built.model.encoder(np.zeros((2, 8, 8, 1), np.float32))


def test_activation_estimate_scales_with_batch_and_width():
    a = resnet_activation_bytes("resnet18", 32, 64, 512)
    assert resnet_activation_bytes("resnet18", 32, 64, 1024) == pytest.approx(2 * a)
    assert resnet_activation_bytes("resnet18", 32, 128, 512) == pytest.approx(2 * a)
    # the stem alone: 3 tensors of 32 x 32 x 64 float32 per image
    assert a > 512 * 3 * 32 * 32 * 64 * 4
