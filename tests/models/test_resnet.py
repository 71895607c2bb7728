"""ResNet encoders: parameter counts of the standard architectures, shapes, heads."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ebm_jax.models.resnet import ResNetEncoder


def _params(model):
    return sum(p.size for p in jax.tree.leaves(nnx.state(model, nnx.Param)))


@pytest.mark.parametrize("arch, backbone", [("resnet18", 11_176_512), ("resnet50", 23_508_032)])
def test_backbone_parameter_counts_match_torchvision(arch, backbone):
    # torchvision's resnet18 / resnet50 without their fc layer
    model = nnx.eval_shape(lambda: ResNetEncoder(arch, head=None, rngs=nnx.Rngs(0)))
    assert _params(model) == backbone
    linear = nnx.eval_shape(lambda: ResNetEncoder(arch, head="linear", rngs=nnx.Rngs(0)))
    c = 512 if arch == "resnet18" else 2048
    assert _params(linear) == backbone + c * 128 + 128
    mlp = nnx.eval_shape(lambda: ResNetEncoder(arch, head="mlp", rngs=nnx.Rngs(0)))
    assert _params(mlp) == backbone + c * c + c + c * 128 + 128


@pytest.mark.heavy
def test_small_image_encoder_outputs_unit_vectors_and_bn_modes():
    model = ResNetEncoder("resnet18", small_images=True, in_channels=1, num_splits=2,
                          rngs=nnx.Rngs(0))
    x = jnp.asarray(np.random.default_rng(0).uniform(size=(4, 16, 16, 1)), jnp.float32)
    z = model(x)
    assert z.shape == (4, 128)
    np.testing.assert_allclose(np.linalg.norm(z, axis=1), 1.0, rtol=1e-5)
    assert model.features(x).shape == (4, 512)
    model.eval()
    z_eval = model(x)
    assert z_eval.shape == (4, 128) and not np.allclose(z, z_eval)
    with pytest.raises(ValueError, match=r"images must have shape \(N, H, W, 1\)"):
        model(jnp.zeros((4, 16, 16, 3)))
    with pytest.raises(ValueError, match="arch must be one of"):
        ResNetEncoder("resnet34", rngs=nnx.Rngs(0))
