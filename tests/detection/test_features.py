"""The backbone (feature pyramid and its dense box head), its batches, and the frozen
feature source with and without its cache."""

import numpy as np
import pytest
from flax import nnx

from ebm_jax.detection import FeatureSource, backbone_batches, feature_bytes
from ebm_jax.models.fpn import DenseBoxModel, FeaturePyramid, dense_loss, dense_targets
from tests.tolerances import assert_within, float32_sum_atol


def test_feature_pyramid_levels_and_errors():
    fpn = FeaturePyramid(widths=(8, 8, 8), channels=8, rngs=nnx.Rngs(0))
    levels = fpn(np.zeros((2, 64, 32, 3), np.float32))
    assert fpn.strides == (4, 8, 16)
    assert [lv.shape for lv in levels] == [(2, 16, 8, 8), (2, 8, 4, 8), (2, 4, 2, 8)]
    with pytest.raises(ValueError, match="multiples of the top stride 16"):
        fpn(np.zeros((1, 40, 32, 3), np.float32))
    with pytest.raises(ValueError, match=r"shape \(N, H, W, 3\)"):
        fpn(np.zeros((1, 64, 64, 1), np.float32))
    assert feature_bytes(64, fpn.strides, 8) == (16 * 16 + 8 * 8 + 4 * 4) * 8 * 4


def test_dense_targets_hand_case_and_loss_is_finite():
    boxes = np.array([[0, 0, 16, 16], [4, 4, 12, 12]], np.float32)
    cls, dist = dense_targets(boxes, np.array([1, 2]), np.array([True, True]), 16, 16, 4)
    # the inner box is smaller, so it owns the centre positions (cells 1 and 2)
    assert cls.tolist() == [[1, 1, 1, 1], [1, 2, 2, 1], [1, 2, 2, 1], [1, 1, 1, 1]]
    # cell (0, 0) has centre (2, 2): sides 2, 2, 14, 14 of the big box, in strides
    np.testing.assert_allclose(dist[0, 0], np.log(np.array([2, 2, 14, 14]) / 4), rtol=1e-6)
    np.testing.assert_allclose(dist[1, 1], np.log(np.array([2, 2, 6, 6]) / 4), rtol=1e-6)
    model = DenseBoxModel(FeaturePyramid(widths=(8,), channels=8, rngs=nnx.Rngs(0)), 2,
                          rngs=nnx.Rngs(1))
    loss, metrics = dense_loss(model, (np.zeros((1, 16, 16, 3), np.float32),
                                       ((cls[None], dist[None]),)))
    assert np.isfinite(float(loss)) and set(metrics) == {"ce_0", "l1_0"}


def test_backbone_batches_depend_on_seed_and_step_alone(coco_set):
    ds = coco_set(((40, 20), (16, 32), (30, 30)), 32)
    batches = backbone_batches(ds, (4, 8), batch=2, seed=5)
    imgs, targets = batches(3)
    assert imgs.shape == (2, 32, 32, 3) and len(targets) == 2
    assert targets[0][0].shape == (2, 8, 8) and targets[1][1].shape == (2, 4, 4, 4)
    again = backbone_batches(ds, (4, 8), batch=2, seed=5)(3)
    np.testing.assert_array_equal(again[0], imgs)


class _OneConv(nnx.Module):
    """A stand-in backbone of one 4 x 4, stride 4 convolution: each feature is one dot
    product of 4 * 4 * 3 = 48 float32 products, so its rounding error has a simple
    bound (tests/tolerances.py)."""

    strides, channels = (4,), 8

    def __init__(self, rngs: nnx.Rngs):
        self.conv = nnx.Conv(3, 8, (4, 4), strides=(4, 4), padding="VALID",
                             use_bias=False, rngs=rngs)

    def __call__(self, images):
        return [self.conv(images)]


def test_features_without_the_cache_equal_the_cached_ones(coco_set):
    ds = coco_set(((40, 20), (16, 32), (30, 30)), 32)
    backbone = FeaturePyramid(widths=(8,), channels=8, rngs=nnx.Rngs(0))
    cached = FeatureSource(backbone, ds, batch=2)
    direct = FeatureSource(backbone, ds, batch=2, cache_bytes=0)
    assert cached._cache is None  # computed on first use, not when built
    assert cached.cache is not None and direct.cache is None
    # the cache holds images 0 and 1 from one batch of 2 and image 2 from a batch of 1;
    # asked for the same batches, the direct source runs the same jitted program on the
    # same inputs in this process, so bit for bit
    for idx in ([0, 1], [2]):
        for a, b in zip(cached.levels(idx), direct.levels(idx)):
            np.testing.assert_array_equal(a, b)
    # [2, 0, 2]: the direct source computes images 0 and 2 as one batch of 2, so image 2
    # in another batch shape than the cache did, and XLA may pick other convolution
    # kernels (another summation order; on another CPU too). Through the pyramid's
    # convolutions and group norms that error has no simple bound, so the one-convolution
    # stand-in checks the values: two float32 orders of 48 products per feature
    conv = _OneConv(nnx.Rngs(0))
    (a,), (b,) = (FeatureSource(conv, ds, batch=2, cache_bytes=c).levels([2, 0, 2])
                  for c in (2e9, 0))
    assert a.shape == b.shape == (3, 8, 8, 8)
    x = np.abs(ds.images([2, 0, 2]).astype(np.float64))  # (3, 32, 32, 3) -> 4 x 4 patches
    patches = x.reshape(3, 8, 4, 8, 4, 3).transpose(0, 1, 3, 2, 4, 5).reshape(3, 8, 8, 48)
    scale = patches @ np.abs(np.asarray(conv.conv.kernel[...], np.float64)).reshape(48, 8)
    assert_within(a, b, float32_sum_atol(48, scale))
    assert not np.allclose(a[0], a[1])  # the images differ, so a mix-up would show
