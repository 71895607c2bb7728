"""ebm_jax.ops.augment: shapes, value ranges, per-key randomness, exact cases."""

import colorsys

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ebm_jax.ops import augment as A

RNG = np.random.default_rng(0)
IMAGES = jnp.asarray(RNG.uniform(size=(6, 24, 20, 3)), jnp.float32)


@pytest.mark.parametrize("fn", [A.moco_v1_augment, A.moco_v2_augment,
                                A.cifar_augment, A.digits_color_augment])
def test_pipelines_keep_shape_and_range_and_differ_per_key(fn):
    out = jax.jit(lambda k, x: A.augment_batch(fn, k, x, size=16))(jax.random.key(0), IMAGES)
    assert out.shape == (6, 16, 16, 3) and out.dtype == jnp.float32
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0
    flat = np.asarray(out).reshape(6, -1)
    assert all(not np.allclose(flat[i], flat[j]) for i in range(6) for j in range(i))
    # the same image under two keys gives two different views
    same = jnp.broadcast_to(IMAGES[:1], (2, 24, 20, 3))
    a, b = A.augment_batch(fn, jax.random.key(1), same, size=16)
    assert not np.allclose(a, b)


def test_digits_color_changes_hue_and_keeps_one_channel_images_gray():
    # a flat coloured patch: the crop and blur leave it flat, so only the jitter and
    # grayscale can change its colour; over 32 keys the hue must move
    flat = jnp.broadcast_to(jnp.asarray([0.8, 0.3, 0.2], jnp.float32), (32, 12, 12, 3))
    out = np.asarray(A.augment_batch(A.digits_color_augment, jax.random.key(0), flat,
                                     size=12))
    hues = [colorsys.rgb_to_hsv(*o[6, 6])[0] for o in out if np.ptp(o[6, 6]) > 1e-3]
    assert np.ptp(hues) > 0.1
    gray = jnp.asarray(RNG.uniform(size=(4, 12, 12, 1)), jnp.float32)
    g = A.augment_batch(A.digits_color_augment, jax.random.key(1), gray, size=8)
    assert g.shape == (4, 8, 8, 1)
    assert A.get_augment("digits-color") is A.digits_color_augment


def test_pipeline_traces_once():
    f = jax.jit(chex.assert_max_traces(
        lambda k, x: A.augment_batch(A.moco_v2_augment, k, x, size=8), n=1))
    for i in range(3):
        f(jax.random.key(i), IMAGES)


def test_full_crop_is_a_resize_and_flip_is_exact():
    img = IMAGES[0]
    crop = A.random_resized_crop(jax.random.key(0), img, 24, scale=(1.0, 1.0),
                                 ratio=(20 / 24, 20 / 24))
    resized = jax.image.resize(img, (24, 24, 3), "linear", antialias=True)
    np.testing.assert_allclose(crop, resized, atol=2e-2)
    flips = [A.horizontal_flip(jax.random.key(i), img) for i in range(20)]
    assert any(np.array_equal(f, img[:, ::-1]) for f in flips)
    assert any(np.array_equal(f, img) for f in flips)


def test_grayscale_and_hue_round_trip():
    g = A.grayscale(IMAGES[0])
    np.testing.assert_allclose(g[..., 0], g[..., 2])
    np.testing.assert_allclose(g[..., 0], IMAGES[0] @ jnp.array([0.299, 0.587, 0.114]),
                               rtol=1e-6)
    h, s, v = A._rgb_to_hsv(IMAGES[0])
    np.testing.assert_allclose(A._hsv_to_rgb(h, s, v), IMAGES[0], atol=1e-5)
    px = np.asarray(IMAGES[0, 0, 0])
    np.testing.assert_allclose([float(h[0, 0]), float(s[0, 0]), float(v[0, 0])],
                               colorsys.rgb_to_hsv(*px), atol=1e-5)


def test_jitter_off_and_blur_of_a_constant_are_identities():
    img = IMAGES[1]
    same = A.color_jitter(jax.random.key(0), img, 0.0, 0.0, 0.0, 0.0, p=1.0)
    np.testing.assert_allclose(same, img, atol=1e-5)
    flat = jnp.full((16, 16, 3), 0.3)
    np.testing.assert_allclose(A.gaussian_blur(jax.random.key(0), flat, p=1.0), flat,
                               atol=1e-6)
    # a blur smooths: the total variation drops
    blurred = A.gaussian_blur(jax.random.key(0), img, (2.0, 2.0), p=1.0)
    tv = lambda x: float(jnp.abs(jnp.diff(x, axis=0)).sum())  # noqa: E731
    assert tv(blurred) < 0.7 * tv(img)


@pytest.mark.parametrize("call, match", [
    (lambda: A.moco_v2_augment(jax.random.key(0), jnp.zeros((8, 8)), 4), "image must"),
    (lambda: A.moco_v2_augment(jax.random.key(0), jnp.zeros((8, 8, 4)), 4), "image must"),
    (lambda: A.augment_batch(A.moco_v1_augment, jax.random.key(0), jnp.zeros((8, 8, 3)),
                             size=4), "images must"),
    (lambda: A.random_resized_crop(jax.random.key(0), IMAGES[0], 8, scale=(0.5, 1.5)),
     "scale must"),
    (lambda: A.color_jitter(jax.random.key(0), IMAGES[0], hue=0.7), "hue must"),
    (lambda: A.random_resized_crop(jax.random.key(0), IMAGES[0], 0), "size"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
