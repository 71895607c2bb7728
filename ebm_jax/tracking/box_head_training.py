"""The training crops and loss of the tracker's energy-based box head (Gustafsson et
al. 2020, sec. 5; the box branch of PrDiMP, Danelljan et al. 2020): SiamFC-style crops
of the pairs' regions (`box_head_crops`) or pytracking's PrDiMP processing (crops cut on
the host around jittered boxes, `ebm_jax.data.box_head_pairs`, then
`augment_appearance`), the backbone's levels of both crops, and the box loss of
`ebm_jax.energy.boxes` on the head.

    loss_fn = make_box_head_loss(BoxHeadSettings(method="nce+"))
    value, metrics = loss_fn(net, batch, key)          # for make_train_step
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from ebm_jax.energy.boxes import make_tracking_box_loss
from ebm_jax.ops.augment import gaussian_blur, grayscale
from ebm_jax.ops.crops import box_to_center, crop_box, crop_square
from ebm_jax.tracking.box_head import BoxHeadSettings
from ebm_jax.tracking.siamfc import SiamFCSettings

# fold_in purposes of the training step's key, and of its crops' key
_CROPS, _LOSS = 0, 1
_SHIFT, _SCALE, _BRIGHTNESS, _GRAY, _BLUR = 0, 1, 2, 3, 4


def box_head_crops(key, batch: dict, settings: BoxHeadSettings,
                   siamfc: SiamFCSettings = SiamFCSettings()):
    """The box head's training crops of B pairs (`ebm_jax.data.tracking_pairs`:
    "z_frames"/"x_frames" (B, H, W, 3) regions, "z_boxes"/"x_boxes" (B, 4) xywh): the
    reference crop of the z region centred on its target, the test crop of the x region
    moved and scaled at random (`BoxHeadSettings`), both search_size crops of side
    exemplar_side x search_size / exemplar_size (SiamFC's conventions; mean-colour
    padding). Keys: fold_in(key, purpose) for the shift and the scale. Returns
    (ref crops, ref boxes (B, 4), test crops, test boxes (B, 4)), boxes xyxy in crop
    pixels. Jittable."""
    s, size = siamfc, siamfc.search_size
    z_boxes = jnp.asarray(batch["z_boxes"], jnp.float32)
    x_boxes = jnp.asarray(batch["x_boxes"], jnp.float32)
    b = z_boxes.shape[0]
    batched_crop = jax.vmap(crop_square, in_axes=(0, 0, 0, None))

    zcy, zcx, zh, zw = box_to_center(z_boxes)
    z_center, z_size = jnp.stack([zcy, zcx], -1), jnp.stack([zh, zw], -1)
    z_side = s.search_side(zh, zw)
    ref = batched_crop(jnp.asarray(batch["z_frames"]), z_center, z_side, size)
    ref_boxes = crop_box(z_center, z_size, z_center, z_side, size)

    xcy, xcx, xh, xw = box_to_center(x_boxes)
    x_center, x_size = jnp.stack([xcy, xcx], -1), jnp.stack([xh, xw], -1)
    shift = jax.random.uniform(jax.random.fold_in(key, _SHIFT), (b, 2),
                               minval=-settings.center_jitter,
                               maxval=settings.center_jitter)
    log_scale = jax.random.uniform(jax.random.fold_in(key, _SCALE), (b,),
                                   minval=-settings.scale_jitter,
                                   maxval=settings.scale_jitter)
    crop_center = x_center + shift * jnp.sqrt(xh * xw)[:, None]
    x_side = s.search_side(xh, xw) * jnp.exp(log_scale)
    test = batched_crop(jnp.asarray(batch["x_frames"]), crop_center, x_side, size)
    test_boxes = crop_box(x_center, x_size, crop_center, x_side, size)
    return ref, ref_boxes, test, test_boxes


def augment_appearance(key, batch: dict, settings: BoxHeadSettings):
    """The PrDiMP processing's appearance augmentation of a batch of
    `ebm_jax.data.box_head_pairs` ("ref"/"test" (B, S, S, 3) in [0, 255], boxes xyxy):
    each crop's brightness scaled by U[1 - b, 1 + b] (pytracking's ToTensorAndJitter)
    and clipped, a pair made grey with `grayscale_prob` (both crops: pytracking's joint
    ToGrayscale), each crop blurred with `blur_prob`. Keys: fold_in(key, purpose).
    Returns (ref crops, ref boxes, test crops, test boxes) as `box_head_crops`."""
    ref = jnp.asarray(batch["ref"], jnp.float32)
    test = jnp.asarray(batch["test"], jnp.float32)
    b, s = ref.shape[0], settings
    factors = jax.random.uniform(jax.random.fold_in(key, _BRIGHTNESS), (2, b, 1, 1, 1),
                                 minval=1 - s.brightness_jitter,
                                 maxval=1 + s.brightness_jitter)
    ref, test = jnp.clip(ref * factors[0], 0, 255), jnp.clip(test * factors[1], 0, 255)
    if s.grayscale_prob > 0:
        grey = jax.random.bernoulli(jax.random.fold_in(key, _GRAY), s.grayscale_prob,
                                    (b, 1, 1, 1))
        ref = jnp.where(grey, jax.vmap(grayscale)(ref), ref)
        test = jnp.where(grey, jax.vmap(grayscale)(test), test)
    if s.blur_prob > 0:
        keys = jax.random.split(jax.random.fold_in(key, _BLUR), 2 * b).reshape(2, b)

        def blur(k, x):
            return gaussian_blur(k, x, sigma=(0.1, 2.0), p=s.blur_prob)

        ref, test = jax.vmap(blur)(keys[0], ref), jax.vmap(blur)(keys[1], test)
    return (ref, jnp.asarray(batch["ref_boxes"], jnp.float32), test,
            jnp.asarray(batch["test_boxes"], jnp.float32))


def training_crops(key, batch: dict, settings: BoxHeadSettings,
                   siamfc: SiamFCSettings = SiamFCSettings(), *, augment: bool = True):
    """(ref crops, ref boxes, test crops, test boxes) of a training batch by
    `settings.processing`: `box_head_crops` of SiamFC's regions, or the host's PrDiMP
    crops with `augment_appearance` (none with `augment=False`: the probe's crops)."""
    if settings.processing == "siamfc":
        return box_head_crops(key, batch, settings, siamfc)
    if not augment:
        return tuple(jnp.asarray(batch[k], jnp.float32)
                     for k in ("ref", "ref_boxes", "test", "test_boxes"))
    return augment_appearance(key, batch, settings)


def make_box_head_loss(settings: BoxHeadSettings,
                       siamfc: SiamFCSettings = SiamFCSettings()) -> Callable:
    """`loss_fn(net, batch, key) -> (loss, metrics)` for `make_train_step`: `net` a
    `BoxHeadNet`, batch the pairs of `ebm_jax.data.tracking_pairs.pair_batches`
    (`processing="siamfc"`) or `ebm_jax.data.box_head_pairs.jittered_pair_batches`
    ("prdimp"); `training_crops` (key fold_in(key, 0)), the backbone's levels of both crops, and
    `make_tracking_box_loss(method, num_samples, ...)` on the head with the target's
    box in the test crop (key fold_in(key, 1)). Metric: the mean energy of the target
    box ("f_target")."""
    box_loss = make_tracking_box_loss(settings.method, settings.num_samples,
                                      **settings.loss_hyperparameters)

    def loss_fn(net, batch, key):
        ref, ref_boxes, test, test_boxes = training_crops(
            jax.random.fold_in(key, _CROPS), batch, settings, siamfc)
        inputs = net.pair_inputs(ref, ref_boxes, test)
        value, metrics = box_loss(net.head, (inputs, test_boxes),
                                  jax.random.fold_in(key, _LOSS))
        f_target = jax.vmap(lambda x, b: net.head(x, b[None])[0])(inputs, test_boxes)
        return value, {**metrics, "f_target": jnp.mean(jax.lax.stop_gradient(f_target))}

    return loss_fn


__all__ = ["augment_appearance", "box_head_crops", "make_box_head_loss", "training_crops"]
