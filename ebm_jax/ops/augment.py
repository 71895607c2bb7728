"""Image augmentations of MoCo v1/v2 and InstDisc (He et al. 2020; Wu et al. 2018) as
jittable JAX functions.

Each takes one PRNG key and one image (H, W, C) with values in [0, 1] and returns an
image of the same value range; batches use `augment_batch`, which vmaps with one key per
example. Random parameters are drawn with `jax.random`, so everything traces once and
runs inside `jit`.

    view = moco_v2_augment(key, image, size=32)
    views = augment_batch(moco_v2_augment, key, images, size=32)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ebm_jax import checks

# NumPy, not jnp: a jnp constant at import would start JAX's backend before
# jax.distributed.initialize() can run (multi-host)
_GRAY = np.array([0.299, 0.587, 0.114], np.float32)


def _check_image(image: jax.Array) -> jax.Array:
    image = jnp.asarray(image)
    if image.ndim != 3 or image.shape[-1] not in (1, 3):
        raise ValueError(f"image must have shape (H, W, 1 or 3), got {image.shape}")
    return image


def random_resized_crop(key, image, size: int, scale=(0.2, 1.0),
                        ratio=(3 / 4, 4 / 3)) -> jax.Array:
    """Crop of a random area fraction in `scale` and aspect ratio in `ratio` (log-
    uniform), resized bilinearly (antialiased) to (size, size). A crop that would not
    fit is shrunk to the image (torchvision instead retries, then takes a centre crop)."""
    image = _check_image(image)
    size = checks.int_at_least("size", size, 1)
    if not 0 < scale[0] <= scale[1] <= 1:
        raise ValueError(f"scale must satisfy 0 < low <= high <= 1, got {scale}")
    if not 0 < ratio[0] <= ratio[1]:
        raise ValueError(f"ratio must satisfy 0 < low <= high, got {ratio}")
    h, w = image.shape[:2]
    k_area, k_ratio, k_y, k_x = jax.random.split(key, 4)
    area = jax.random.uniform(k_area, (), minval=scale[0], maxval=scale[1]) * h * w
    log_r = jax.random.uniform(k_ratio, (), minval=math.log(ratio[0]),
                               maxval=math.log(ratio[1]))
    r = jnp.exp(log_r)
    cw = jnp.clip(jnp.sqrt(area * r), 1.0, w)
    ch = jnp.clip(jnp.sqrt(area / r), 1.0, h)
    y0 = jax.random.uniform(k_y, ()) * (h - ch)
    x0 = jax.random.uniform(k_x, ()) * (w - cw)
    s = jnp.array([size / ch, size / cw])
    t = -jnp.array([y0, x0]) * s
    out = jax.image.scale_and_translate(
        image, (size, size, image.shape[2]), (0, 1), s, t, method="linear", antialias=True
    )
    return jnp.clip(out, 0.0, 1.0)


def horizontal_flip(key, image, p: float = 0.5) -> jax.Array:
    image = _check_image(image)
    return jnp.where(jax.random.bernoulli(key, p), image[:, ::-1], image)


def grayscale(image) -> jax.Array:
    image = _check_image(image)
    if image.shape[-1] == 1:
        return image
    g = image @ _GRAY.astype(image.dtype)
    return jnp.repeat(g[..., None], 3, axis=-1)


def random_grayscale(key, image, p: float = 0.2) -> jax.Array:
    image = _check_image(image)
    return jnp.where(jax.random.bernoulli(key, p), grayscale(image), image)


def _rgb_to_hsv(rgb):
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    v = jnp.max(rgb, axis=-1)
    c = v - jnp.min(rgb, axis=-1)
    s = jnp.where(v > 0, c / jnp.where(v > 0, v, 1.0), 0.0)
    safe = jnp.where(c > 0, c, 1.0)
    h = jnp.where(v == r, (g - b) / safe, jnp.where(v == g, 2.0 + (b - r) / safe,
                                                     4.0 + (r - g) / safe))
    h = jnp.where(c > 0, (h / 6.0) % 1.0, 0.0)
    return h, s, v


def _hsv_to_rgb(h, s, v):
    i = jnp.floor(h * 6.0)
    f = h * 6.0 - i
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    i = i.astype(jnp.int32) % 6
    r = jnp.choose(i, [v, q, p, p, t, v], mode="clip")
    g = jnp.choose(i, [t, v, v, q, p, p], mode="clip")
    b = jnp.choose(i, [p, p, t, v, v, q], mode="clip")
    return jnp.stack([r, g, b], axis=-1)


def color_jitter(key, image, brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1,
                 p: float = 0.8) -> jax.Array:
    """With probability p: brightness, contrast and saturation factors uniform in
    [1 - a, 1 + a] and a hue shift uniform in [-hue, hue] (fractions of a turn), applied
    in that fixed order (torchvision shuffles the order), each clipped to [0, 1]."""
    image = _check_image(image)
    for name, value in (("brightness", brightness), ("contrast", contrast),
                        ("saturation", saturation)):
        checks.non_negative(name, value)
    if not 0.0 <= hue <= 0.5:
        raise ValueError(f"hue must be in [0, 0.5], got {hue}")
    k_apply, kb, kc, ks, kh = jax.random.split(key, 5)

    def factor(k, a):
        return jax.random.uniform(k, (), minval=max(0.0, 1 - a), maxval=1 + a)

    x = jnp.clip(image * factor(kb, brightness), 0.0, 1.0)
    mean = jnp.mean(grayscale(x) if x.shape[-1] == 3 else x)
    x = jnp.clip((x - mean) * factor(kc, contrast) + mean, 0.0, 1.0)
    if x.shape[-1] == 3:
        g = grayscale(x)
        x = jnp.clip((x - g) * factor(ks, saturation) + g, 0.0, 1.0)
        h, s, v = _rgb_to_hsv(x)
        shift = jax.random.uniform(kh, (), minval=-hue, maxval=hue)
        x = jnp.clip(_hsv_to_rgb((h + shift) % 1.0, s, v), 0.0, 1.0)
    return jnp.where(jax.random.bernoulli(k_apply, p), x, image)


def gaussian_blur(key, image, sigma=(0.1, 2.0), p: float = 0.5,
                  kernel_fraction: float = 0.1) -> jax.Array:
    """With probability p, a separable Gaussian blur with sigma uniform in `sigma`
    (pixels), kernel size about `kernel_fraction` of the image side (odd, >= 3), edges
    reflected (MoCo v2)."""
    image = _check_image(image)
    if not 0 < sigma[0] <= sigma[1]:
        raise ValueError(f"sigma must satisfy 0 < low <= high, got {sigma}")
    k_apply, k_sigma = jax.random.split(key)
    side = max(image.shape[:2])
    radius = max(1, int(kernel_fraction * side) // 2)
    s = jax.random.uniform(k_sigma, (), minval=sigma[0], maxval=sigma[1])
    offsets = jnp.arange(-radius, radius + 1, dtype=image.dtype)
    weights = jnp.exp(-0.5 * (offsets / s) ** 2)
    weights = weights / jnp.sum(weights)
    pad = jnp.pad(image, ((radius, radius), (radius, radius), (0, 0)), mode="reflect")

    def blur_axis(x, axis):
        n = x.shape[axis] - 2 * radius
        parts = [jax.lax.slice_in_dim(x, i, i + n, axis=axis) for i in range(2 * radius + 1)]
        return sum(w * part for w, part in zip(weights, parts))

    out = blur_axis(blur_axis(pad, 0), 1)
    return jnp.where(jax.random.bernoulli(k_apply, p), out, image)


def moco_v1_augment(key, image, size: int) -> jax.Array:
    """MoCo v1 / InstDisc: resized crop (0.2-1), grayscale (p 0.2), colour jitter
    (0.4, 0.4, 0.4, 0.4 always on), horizontal flip."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    x = random_resized_crop(k1, image, size)
    x = random_grayscale(k2, x, 0.2)
    x = color_jitter(k3, x, 0.4, 0.4, 0.4, 0.4 if x.shape[-1] == 3 else 0.0, p=1.0)
    return horizontal_flip(k4, x)


def moco_v2_augment(key, image, size: int) -> jax.Array:
    """MoCo v2: resized crop (0.2-1), colour jitter (0.4, 0.4, 0.4, 0.1, p 0.8),
    grayscale (p 0.2), Gaussian blur (sigma 0.1-2, p 0.5), horizontal flip."""
    k1, k2, k3, k4, k5 = jax.random.split(key, 5)
    x = random_resized_crop(k1, image, size)
    x = color_jitter(k2, x, 0.4, 0.4, 0.4, 0.1, p=0.8)
    x = random_grayscale(k3, x, 0.2)
    x = gaussian_blur(k4, x, (0.1, 2.0), p=0.5)
    return horizontal_flip(k5, x)


def cifar_augment(key, image, size: int) -> jax.Array:
    """The single-device CIFAR recipe of MoCo's reference notebook: resized crop
    (0.2-1), colour jitter (0.4, 0.4, 0.4, 0.1, p 0.8), grayscale (p 0.2), flip."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    x = random_resized_crop(k1, image, size)
    x = color_jitter(k2, x, 0.4, 0.4, 0.4, 0.1 if x.shape[-1] == 3 else 0.0, p=0.8)
    x = random_grayscale(k3, x, 0.2)
    return horizontal_flip(k4, x)


def digits_augment(key, image, size: int) -> jax.Array:
    """For handwritten digits (one channel): resized crop (0.3-1; a digit survives it),
    brightness and contrast jitter (0.4, p 0.8), Gaussian blur (sigma 0.1-1 pixel, p
    0.5) and no flip (a mirrored digit is another symbol)."""
    k1, k2, k3 = jax.random.split(key, 3)
    x = random_resized_crop(k1, image, size, scale=(0.3, 1.0))
    x = color_jitter(k2, x, 0.4, 0.4, 0.0, 0.0, p=0.8)
    return gaussian_blur(k3, x, (0.1, 1.0), p=0.5, kernel_fraction=0.25)


def digits_color_augment(key, image, size: int) -> jax.Array:
    """For digits on coloured photo patches (MNIST-M style, three channels): the digits
    augmentation's crop (0.3-1), blur and no flip, with MoCo v1's colour jitter
    (brightness, contrast, saturation and hue 0.4, p 0.8) and grayscale (p 0.2). Two
    views of one image share its background photo, so without hue and saturation
    jitter the background's colours alone tell the instances apart (He et al. 2020,
    sec. 3.3; Chen et al. 2020, sec. 3, on colour as a shortcut)."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    x = random_resized_crop(k1, image, size, scale=(0.3, 1.0))
    colour = x.shape[-1] == 3
    x = color_jitter(k2, x, 0.4, 0.4, 0.4 if colour else 0.0, 0.4 if colour else 0.0,
                     p=0.8)
    x = random_grayscale(k3, x, 0.2)
    return gaussian_blur(k4, x, (0.1, 1.0), p=0.5, kernel_fraction=0.25)


AUGMENTATIONS = {
    "moco-v1": moco_v1_augment,
    "moco-v2": moco_v2_augment,
    "cifar": cifar_augment,
    "digits": digits_augment,
    "digits-color": digits_color_augment,
}


def get_augment(name: str) -> Callable:
    if name not in AUGMENTATIONS:
        raise ValueError(f"augmentation must be one of {sorted(AUGMENTATIONS)}, got {name!r}")
    return AUGMENTATIONS[name]


def augment_batch(augment: Callable, key, images, **kwargs) -> jax.Array:
    """Applies `augment(key_i, image_i, **kwargs)` to a batch (N, H, W, C), one key per
    example (`split(key, N)`)."""
    images = jnp.asarray(images)
    if images.ndim != 4:
        raise ValueError(f"images must have shape (N, H, W, C), got {images.shape}")
    keys = jax.random.split(key, images.shape[0])
    return jax.vmap(lambda k, im: augment(k, im, **kwargs))(keys, images)
