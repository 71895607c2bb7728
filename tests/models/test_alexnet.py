from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ebm_jax.models.alexnet import (
    SiamFCAlexNet,
    alexnet_channels,
    alexnet_flops,
    alexnet_output_size,
)
from tests.tolerances import assert_within, float32_sum_atol


def _count(module, kind=nnx.Param) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(module, kind)))


def _abstract(width):
    """The model's structure and shapes without computing any value (fast)."""
    return nnx.eval_shape(lambda: SiamFCAlexNet(width=width, rngs=nnx.Rngs(0)))


def test_parameter_count_width_1_matches_hand_count():
    # conv: k*k*(in/groups)*out + out; BN: scale + bias (running stats are not parameters)
    conv1 = 11 * 11 * 3 * 96 + 96          # 34_944
    conv2 = 5 * 5 * 48 * 256 + 256         # 307_456 (groups 2: 96/2 inputs)
    conv3 = 3 * 3 * 256 * 384 + 384        # 885_120
    conv4 = 3 * 3 * 192 * 384 + 384        # 663_936 (groups 2)
    conv5 = 3 * 3 * 192 * 256 + 256        # 442_624 (groups 2)
    bn = 2 * (96 + 256 + 384 + 384)        # 2_240
    hand = conv1 + conv2 + conv3 + conv4 + conv5 + bn
    assert hand == 2_336_320  # the port's AlexNetV1: ~2.33M
    net = _abstract(1.0)
    assert _count(net) == hand
    assert _count(net, nnx.BatchStat) == 2 * (96 + 256 + 384 + 384)


def test_grouped_kernels_bn_settings_and_init():
    net = _abstract(1.0)
    shapes = [tuple(c.kernel.get_value().shape) for c in net.convs]
    assert shapes == [(11, 11, 3, 96), (5, 5, 48, 256), (3, 3, 256, 384),
                      (3, 3, 192, 384), (3, 3, 192, 256)]
    assert [c.feature_group_count for c in net.convs] == [1, 2, 1, 2, 2]
    norms = [n for n in net.norms if n is not None]
    assert len(norms) == 4 and net.norms[-1] is None  # no BN after conv5
    for n in norms:
        assert n.epsilon == 1e-6 and n.momentum == pytest.approx(0.95)
    # the values, initialised in one compiled call
    params = jax.jit(lambda: nnx.state(SiamFCAlexNet(width=1.0, rngs=nnx.Rngs(0)),
                                       nnx.Param))()
    for conv in params["convs"].values():
        assert np.all(np.asarray(conv["bias"].get_value()) == 0)
    # Xavier uniform: bound sqrt(6 / (fan_in + fan_out)), fan_in = k*k*in/groups,
    # fan_out = k*k*out (PyTorch's convention for grouped kernels)
    k = np.asarray(params["convs"][1]["kernel"].get_value())
    bound = np.sqrt(6.0 / (25 * 48 + 25 * 256))
    assert np.abs(k).max() <= bound and np.abs(k).max() > 0.95 * bound
    assert np.std(k) == pytest.approx(bound / np.sqrt(3), rel=0.02)


@pytest.mark.parametrize("width, channels", [(1.0, (96, 256, 384, 384, 256)),
                                             (0.125, (12, 32, 48, 48, 32)),
                                             (0.3, (28, 76, 116, 116, 76))])
def test_channels_even_and_output_sizes(width, channels):
    assert alexnet_channels(width) == channels
    net = _abstract(width)
    net.eval()
    graphdef, state = nnx.split(net)

    def shape(n, size):
        x = jax.ShapeDtypeStruct((n, size, size, 3), jnp.float32)
        return jax.eval_shape(lambda s, x: nnx.merge(graphdef, s)(x), state, x)

    fz, fx = shape(2, 127), shape(1, 255)
    assert [tuple(c.kernel.get_value().shape)[-2:] for c in net.convs] == [
        (3, channels[0]), (channels[0] // 2, channels[1]), (channels[1], channels[2]),
        (channels[2] // 2, channels[3]), (channels[3] // 2, channels[4])]
    assert fz.shape == (2, 6, 6, channels[-1])
    assert fx.shape == (1, 22, 22, channels[-1])
    assert alexnet_output_size(127) == 6 and alexnet_output_size(255) == 22


def test_train_mode_updates_running_stats_with_port_momentum():
    @jax.jit
    def run(x):
        net = SiamFCAlexNet(width=0.125, rngs=nnx.Rngs(0))
        net.train()
        net(x)
        return net.norms[0].mean[...], jnp.mean(net.convs[0](x), axis=(0, 1, 2))

    x = jax.random.uniform(jax.random.key(0), (2, 87, 87, 3)) * 255
    running_mean, batch_mean = run(x)
    # first BN: running mean = 0.95 * 0 + 0.05 * batch mean of conv1's output
    np.testing.assert_allclose(np.asarray(running_mean), 0.05 * np.asarray(batch_mean),
                               rtol=1e-4, atol=1e-5)


def test_flops_hand_count_and_xla():
    # width 1, 127 x 127: conv outputs 59, 25, 10, 8, 6
    hand = 2 * (59**2 * 121 * 3 * 96 + 25**2 * 25 * 48 * 256 + 10**2 * 9 * 256 * 384
                + 8**2 * 9 * 192 * 384 + 6**2 * 9 * 192 * 256)
    assert alexnet_flops(1.0, 127) == hand
    # XLA's own count of the whole forward (BN, ReLU, pooling add a little)
    net = _abstract(0.5)
    net.eval()
    graphdef, state = nnx.split(net)
    f = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))
    x = jax.ShapeDtypeStruct((1, 127, 127, 3), jnp.float32)
    cost = f.lower(state, x).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    assert cost["flops"] == pytest.approx(alexnet_flops(0.5, 127), rel=0.03)


def test_rejects_bad_inputs():
    with pytest.raises(ValueError, match="width"):
        SiamFCAlexNet(width=0.0, rngs=nnx.Rngs(0))
    net = _abstract(0.125)  # the checks run before any parameter is used
    with pytest.raises(ValueError, match="at least 87"):
        net(jnp.zeros((1, 80, 80, 3)))
    with pytest.raises(ValueError, match=r"\(N, H, W, 3\)"):
        net(jnp.zeros((127, 127, 3)))


def test_grouped_conv_equals_xla_feature_group_count():
    from ebm_jax.models.alexnet import GroupedConv

    conv = GroupedConv(6, 4, 3, 2, 2, rngs=nnx.Rngs(0))
    conv.bias[...] = jnp.arange(4.0)
    x = jax.random.normal(jax.random.key(1), (2, 9, 9, 6))
    reference = jax.lax.conv_general_dilated(
        x, conv.kernel[...], (2, 2), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=2) + jnp.arange(4.0)
    # two float32 orders of 3 * 3 * 3 products and the bias per output
    # (tests/tolerances.py)
    scale = jax.lax.conv_general_dilated(
        jnp.abs(x), jnp.abs(conv.kernel[...]), (2, 2), "VALID",
        dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=2) + jnp.arange(4.0)
    assert_within(conv(x), reference, float32_sum_atol(3 * 3 * 3 + 1, scale))
    # group 0's outputs see only the first 3 input channels (the same program on the
    # same channels, so bit for bit)
    x2 = x.at[..., 3:].add(10.0)
    np.testing.assert_array_equal(np.asarray(conv(x2))[..., :2],
                                  np.asarray(conv(x))[..., :2])


def test_receptive_field_is_the_window_an_embedding_cell_sees():
    # the input pixels one conv5 cell depends on (non-zero gradient of a random image,
    # so that no max-pool window holds ties) span SiamFC's 87 px field
    net = SiamFCAlexNet(width=0.125, rngs=nnx.Rngs(0))
    net.eval()
    x = jnp.asarray(np.random.default_rng(0).uniform(0, 255, (1, 127, 127, 3)), jnp.float32)
    grad = jax.grad(lambda image: jnp.sum(net(image)[0, 3, 3]))(x)
    rows, cols = np.nonzero(np.abs(np.asarray(grad)[0]).sum(-1))
    for idx in (rows, cols):
        assert idx.max() - idx.min() + 1 == SiamFCAlexNet.receptive_field() == 87
