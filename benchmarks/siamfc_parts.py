"""The SiamFC benchmark's parts (benchmarks/tracking.py): the convolution formulations it
times side by side, and its inputs (a generated sequence, training pairs, batch norm
calibrated on them, the weights in PyTorch's layout)."""

from __future__ import annotations

from functools import partial

import cv2
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ebm_jax.data.tracking_pairs import pick_pair
from ebm_jax.models.alexnet import LAYERS, SiamFCAlexNet

_DIMS = ("NHWC", "HWIO", "NHWC")


# ------------------------------------------------------ convolution formulations

def _split_conv(lhs, rhs, strides: tuple, groups: int):
    """A grouped VALID convolution as one plain convolution per group, concatenated
    (the numbers of feature_group_count=groups)."""
    conv = partial(jax.lax.conv_general_dilated, window_strides=strides, padding="VALID",
                   dimension_numbers=_DIMS)
    if groups == 1:
        return conv(lhs, rhs)
    return jnp.concatenate([conv(a, k) for a, k in zip(jnp.split(lhs, groups, -1),
                                                       jnp.split(rhs, groups, -1))], -1)


def _patches(x, kh: int, kw: int, strides: tuple, ho: int, wo: int):
    """im2col: (N, H, W, C) -> (N, ho, wo, kh * kw * C), ordered (i, j, c) like an HWIO
    kernel flattened."""
    sy, sx = strides
    cols = [x[:, i:i + sy * (ho - 1) + 1:sy, j:j + sx * (wo - 1) + 1:sx]
            for i in range(kh) for j in range(kw)]
    return jnp.stack(cols, 3).reshape(x.shape[0], ho, wo, kh * kw * x.shape[-1])


@partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _conv_patch_grad(lhs, rhs, strides, groups):
    return _split_conv(lhs, rhs, strides, groups)


def _conv_patch_grad_fwd(lhs, rhs, strides, groups):
    return _split_conv(lhs, rhs, strides, groups), (lhs, rhs)


def _conv_patch_grad_bwd(strides, groups, residuals, ct):
    lhs, rhs = residuals
    (d_lhs,) = jax.vjp(lambda x: _split_conv(x, rhs, strides, groups), lhs)[1](ct)
    kh, kw, c_in, _ = rhs.shape
    ho, wo = ct.shape[1:3]
    d_rhs = [jnp.einsum("nhwk,nhwo->ko", _patches(x, kh, kw, strides, ho, wo), g)
             .reshape(kh, kw, c_in, -1)
             for x, g in zip(jnp.split(lhs, groups, -1), jnp.split(ct, groups, -1))]
    return d_lhs, jnp.concatenate(d_rhs, -1)


_conv_patch_grad.defvjp(_conv_patch_grad_fwd, _conv_patch_grad_bwd)


class FormulatedConv(nnx.Module):
    """A backbone convolution computed by another formulation, on the same kernel
    (k, k, in/groups, out) and bias Variables as the layer it replaces."""

    def __init__(self, kernel: nnx.Param, bias: nnx.Param, stride: int, groups: int,
                 kind: str):
        self.kernel, self.bias = kernel, bias
        self.stride, self.groups, self.kind = int(stride), int(groups), kind

    def __call__(self, x: jax.Array) -> jax.Array:
        strides = (self.stride, self.stride)
        if self.kind == "grouped":
            y = jax.lax.conv_general_dilated(x, self.kernel[...], strides, "VALID",
                                             dimension_numbers=_DIMS,
                                             feature_group_count=self.groups)
        else:
            y = _conv_patch_grad(x, self.kernel[...], strides, self.groups)
        return y + self.bias[...]


# "model": the layers as built (`ebm_jax.models.alexnet`: one convolution per group);
# "grouped": one XLA convolution with feature_group_count; "patchgrad": one convolution
# per group with the kernel gradient as one matmul of image patches.
CONV_FORMULATIONS = ("model", "grouped", "patchgrad")


def with_conv(model: SiamFCAlexNet, kind: str) -> SiamFCAlexNet:
    """A copy of `model` whose convolutions use formulation `kind` (CONV_FORMULATIONS),
    sharing nothing with `model`."""
    if kind not in CONV_FORMULATIONS:
        raise ValueError(f"conv formulation must be one of {CONV_FORMULATIONS}, got {kind!r}")
    model = nnx.clone(model)
    if kind != "model":
        for i, (conv, (_, stride, groups, _, _)) in enumerate(zip(model.convs, LAYERS)):
            model.convs[i] = FormulatedConv(conv.kernel, conv.bias, stride, groups, kind)
    return model


# ------------------------------------------------------------------ inputs, weights

def synthetic_sequence(seed: int, num_frames: int, height: int = 240, width: int = 320
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Frames (N, H, W, 3) uint8 and exact xywh boxes (N, 4) (1-indexed) of a textured
    target moving over smooth colour blobs, with a slow camera pan and pixel noise."""
    if num_frames < 2 or height < 64 or width < 64:
        raise ValueError(f"need num_frames >= 2 and frames of >= 64 px, got {num_frames} "
                         f"frames of {height}x{width}")
    rng = np.random.default_rng(seed)
    m = 16  # pan margin
    bg = cv2.resize(rng.uniform(0, 255, (9, 12, 3)).astype(np.float32),
                    (width + 2 * m, height + 2 * m), interpolation=cv2.INTER_CUBIC)
    bg += rng.normal(0, 12, bg.shape).astype(np.float32)
    texture = cv2.resize(rng.uniform(0, 255, (6, 6, 3)).astype(np.float32), (96, 96),
                         interpolation=cv2.INTER_NEAREST)
    texture += rng.normal(0, 20, texture.shape).astype(np.float32)
    phase = rng.uniform(0, 2 * np.pi, 3)
    frames, boxes = [], []
    for t in np.arange(num_frames) / (num_frames - 1):
        grow = 1 + 0.25 * np.sin(2 * np.pi * t + phase[0])
        tw, th = int(round(0.15 * width * grow)), int(round(0.18 * height * grow))
        cx = width / 2 + 0.3 * width * np.sin(2.6 * np.pi * t + phase[1])
        cy = height / 2 + 0.25 * height * np.sin(1.8 * np.pi * t + phase[2])
        x0 = int(np.clip(round(cx - tw / 2), 0, width - tw))
        y0 = int(np.clip(round(cy - th / 2), 0, height - th))
        oy, ox = int(round(m * (1 + np.sin(np.pi * t)))), int(round(m * (1 + np.cos(np.pi * t))))
        frame = bg[oy:oy + height, ox:ox + width].copy()
        frame[y0:y0 + th, x0:x0 + tw] = cv2.resize(texture, (tw, th))
        frame += rng.normal(0, 4, frame.shape).astype(np.float32)
        frames.append(np.clip(np.rint(frame), 0, 255).astype(np.uint8))
        boxes.append([x0 + 1, y0 + 1, tw, th])
    return np.stack(frames), np.asarray(boxes, np.float64)


def training_pairs(frames: np.ndarray, boxes: np.ndarray, batch_size: int, seed: int,
                   max_gap: int = 100) -> dict[str, np.ndarray]:
    """`batch_size` pairs of frames less than `max_gap` apart (SiamFC, Bertinetto et al.
    2016, sec. 2.2): the batch of `make_siamfc_loss` (whole frames, xywh boxes)."""
    rng = np.random.default_rng(seed)  # the training pair sampler's rule (pick_pair)
    z, x = np.asarray([pick_pair(rng, np.arange(len(frames)), max_gap)
                       for _ in range(batch_size)]).T
    return {"z_frames": frames[z], "z_boxes": boxes[z].astype(np.float32),
            "x_frames": frames[x], "x_boxes": boxes[x].astype(np.float32)}


def calibrate_batch_norm(model: SiamFCAlexNet, images) -> None:
    """Sets each batch norm's running statistics to those of `images` (one train-mode
    pass with momentum 0), so that a fresh model's eval-mode network is normalised (the
    initial mean 0 / variance 1 do not fit raw 0-255 pixels); leaves it in eval mode."""
    model.train()
    norms = [n for n in model.norms if n is not None]
    saved = [n.momentum for n in norms]
    for n in norms:
        n.momentum = 0.0
    model(jnp.asarray(images, jnp.float32))
    for n, momentum in zip(norms, saved):
        n.momentum = momentum
    model.eval()


def torch_state_dict(model: SiamFCAlexNet) -> dict[str, np.ndarray]:
    """The JAX model's weights under the `state_dict` names of torch_siamfc's
    SiamFCAlexNet: conv kernels (k, k, in/groups, out) -> (out, in/groups, k, k)."""
    out = {}
    for i, (conv, norm) in enumerate(zip(model.convs, model.norms), 1):
        out[f"conv{i}.weight"] = np.transpose(np.asarray(conv.kernel[...]), (3, 2, 0, 1))
        out[f"conv{i}.bias"] = np.asarray(conv.bias[...])
        if norm is not None:
            for mine, theirs in (("scale", "weight"), ("bias", "bias"),
                                 ("mean", "running_mean"), ("var", "running_var")):
                out[f"bn{i}.{theirs}"] = np.asarray(getattr(norm, mine)[...])
    return {k: np.ascontiguousarray(v, np.float32) for k, v in out.items()}
