"""The ResNet-18 tracking backbone: its output sizes (a 17 x 17 SiamFC response), the
stride and offset of each level read off the receptive field's support, the ImageNet
normalisation inside, the levels, and SiamFC's loss and the correlation filter on it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ebm_jax.models.siam_resnet import LEVEL_NAMES, SiamResNet18, resnet_channels
from ebm_jax.ops.xcorr import xcorr

# a minute or more on 2 CPU cores: in `make test-heavy` (and CI), not `make test`
pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def net():
    model = SiamResNet18(width=0.125, rngs=nnx.Rngs(0))
    model.eval()
    return model


def test_sizes_give_siamfc_a_17_by_17_response(net):
    z = jnp.zeros((1, 127, 127, 3))
    x = jnp.zeros((2, 255, 255, 3))
    fz, fx = net(z), net(x)
    assert fz.shape == (1, 16, 16, 32) and fx.shape == (2, 32, 32, 32)
    assert xcorr(jnp.broadcast_to(fz, (2, 16, 16, 32)), fx).shape == (2, 17, 17)
    levels = net.features(x, tuple(range(len(LEVEL_NAMES))))
    assert [f.shape[1] for f in levels] == [128, 64, 32, 32, 32]
    assert [f.shape[-1] for f in levels] == list(net.level_channels(range(5)))
    assert resnet_channels(1.0) == (64, 64, 128, 256)
    assert SiamResNet18(width=0.125, out_channels=12, rngs=nnx.Rngs(1))(z).shape[-1] == 12


@pytest.mark.parametrize("level", range(5))
def test_level_geometry_is_the_receptive_fields_centre(net, level):
    # the input pixels an output cell depends on (non-zero gradient) form a window
    # whose centre is stride * i + offset: symmetric padding keeps every centre. A
    # random image, so that no max-pool window holds ties
    (stride, offset), = net.level_geometry((level,))
    # (layer3's dilated field is 227 px wide: the image must hold it whole)
    x = jnp.asarray(np.random.default_rng(0).uniform(0, 255, (1, 320, 320, 3)), jnp.float32)
    cell = 160 // stride

    def out(image):
        return jnp.sum(net.features(image, (level,))[0][0, cell, cell])

    grad = np.abs(np.asarray(jax.grad(out)(x))[0]).sum(-1)
    rows, cols = np.nonzero(grad)
    for idx in (rows, cols):
        assert (idx.min() + idx.max()) / 2 == stride * cell + offset
        if level == len(LEVEL_NAMES) - 1:  # the embedding: its window is the field
            assert idx.max() - idx.min() + 1 == SiamResNet18.receptive_field() == 227


def test_inputs_are_raw_pixels_normalised_inside(net):
    # an image at ImageNet's mean colour is zero after the normalisation, so conv1
    # (no bias) sees zeros and its output is BN(0) through ReLU: the same everywhere
    mean = np.asarray([0.485, 0.456, 0.406]) * 255
    image = jnp.broadcast_to(jnp.asarray(mean, jnp.float32), (1, 64, 64, 3))
    (c1,) = net.features(image, (0,))
    assert np.ptp(np.asarray(c1), axis=(1, 2)).max() == 0.0


def test_bad_levels_and_inputs_name_the_argument(net):
    with pytest.raises(ValueError, match="levels must be indices"):
        net.features(jnp.zeros((1, 64, 64, 3)), (5,))
    with pytest.raises(ValueError, match="increasing"):
        net.features(jnp.zeros((1, 64, 64, 3)), (3, 0))
    with pytest.raises(ValueError, match="at least 16"):
        net(jnp.zeros((1, 8, 8, 3)))
    with pytest.raises(ValueError, match="width"):
        SiamResNet18(width=0.0, rngs=nnx.Rngs(0))


def test_siamfc_loss_and_the_correlation_filter_run_on_it():
    from ebm_jax.tracking.dcf import DCFSettings, make_dcf_tracker
    from ebm_jax.tracking.siamfc_training import make_siamfc_loss
    from tests.tracking.drawn_targets import drawn_frame

    model = SiamResNet18(width=0.125, rngs=nnx.Rngs(0))
    frames = jnp.asarray(np.stack([drawn_frame(60, 50), drawn_frame(64, 52)]))
    batch = {"z_frames": frames, "z_boxes": jnp.asarray([[60, 50, 30, 24.0]] * 2),
             "x_frames": frames[::-1], "x_boxes": jnp.asarray([[64, 52, 30, 24.0]] * 2)}
    loss, metrics = make_siamfc_loss()(model, batch, jax.random.key(0))
    assert np.isfinite(float(loss)) and 0 <= float(metrics["peak_in_positive"]) <= 1
    # the paper's SoCL-CF levels: conv1 (stride 2) and layer3 (stride 8)
    tracker, params = make_dcf_tracker(model, DCFSettings(levels=(0, 3), scale_num=3))
    state = tracker.init(params, drawn_frame(60, 50), [60, 50, 30, 24])
    state, box = tracker.update(params, state, drawn_frame(63, 52))
    assert np.all(np.isfinite(np.asarray(box)))
