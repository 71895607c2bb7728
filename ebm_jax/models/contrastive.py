"""The models of the contrastive experiments: encoders wrapped with the state each
method keeps. The losses that train them live in `ebm_jax.contrastive` (models never
import losses).

- `MoCo` (He et al. 2020, sec. 3.2): a query encoder, a key encoder that starts as a
  copy of it and follows it by momentum (eq. 2), and the (K, D) queue of keys with its
  pointer. Only the query encoder is trained (`QUERY_PARAMS`).
- `InstDisc` (Wu et al. 2018, sec. 3.1-3.2): an encoder, the (n, D) memory bank of
  every training image's feature and the NCE normaliser log Z (NaN until the first
  batch fixes it).
- `Siamese`: one encoder for both views (MoCo's end-to-end mechanism, Fig. 2a).
- `Supervised`: the same encoder without projection head and a linear classifier (the
  supervised baseline).

`make_contrastive_model` builds the model of a method; the same call rebuilds the
structure a checkpoint is restored into.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from ebm_jax.models.resnet import ARCHS


def _unit_rows(key: jax.Array, rows: int, dim: int) -> jax.Array:
    """(rows, dim) Gaussian vectors scaled to unit length."""
    if int(rows) != rows or rows < 1 or int(dim) != dim or dim < 1:
        raise ValueError(f"rows and dim must be integers >= 1, got {rows} and {dim}")
    x = jax.random.normal(key, (int(rows), int(dim)))
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


class QueueVar(nnx.Variable):
    """Non-trainable MoCo state: the queue and its pointer."""


QUERY_PARAMS = nnx.All(nnx.Param, nnx.PathContains("query"))
"""The `trainable` filter of a MoCo train state: only the query encoder's Params (the
key encoder is moved by the momentum update, never by the optimizer)."""


class MoCo(nnx.Module):
    """Query encoder, key encoder (starting as a copy of it) and the (K, D) queue of
    random unit vectors (the queue's state before any key is written)."""

    def __init__(self, make_encoder: Callable[[nnx.Rngs], nnx.Module], *, queue_size: int,
                 dim: int, rngs: nnx.Rngs):
        self.query = make_encoder(rngs)
        self.key_encoder = make_encoder(rngs)
        # a copy, not shared buffers: the train step donates the state, and XLA refuses
        # to donate one buffer twice
        nnx.update(self.key_encoder, jax.tree.map(jnp.copy, nnx.state(self.query)))
        self.queue = QueueVar(_unit_rows(rngs.params(), queue_size, dim))
        self.pointer = QueueVar(jnp.zeros((), jnp.int32))


class BankVar(nnx.Variable):
    """Non-trainable InstDisc state: the memory bank and the stored log Z."""


ENCODER_PARAMS = nnx.All(nnx.Param, nnx.PathContains("encoder"))


class InstDisc(nnx.Module):
    """An encoder, the (n, D) memory bank (random unit vectors) and log Z (NaN until
    the first batch)."""

    def __init__(self, encoder: nnx.Module, *, num_items: int, dim: int, rngs: nnx.Rngs):
        self.encoder = encoder
        self.bank = BankVar(_unit_rows(rngs.params(), num_items, dim))
        self.log_z = BankVar(jnp.full((), jnp.nan, jnp.float32))

    def fill_bank(self, features: jax.Array) -> None:
        """Writes every item's (normalised) feature into the bank, e.g. the untrained
        encoder's features of the training images."""
        features = jnp.asarray(features, self.bank[...].dtype)
        if features.shape != self.bank[...].shape:
            raise ValueError(f"features must be {self.bank[...].shape}, got {features.shape}")
        norm = jnp.maximum(jnp.linalg.norm(features, axis=-1, keepdims=True), 1e-12)
        self.bank[...] = features / norm


class Siamese(nnx.Module):
    """One encoder used for both views."""

    def __init__(self, encoder: nnx.Module):
        self.encoder = encoder


class Supervised(nnx.Module):
    """The supervised baseline: the same encoder (no projection head) + a linear layer."""

    def __init__(self, encoder: nnx.Module, num_classes: int, *, rngs: nnx.Rngs):
        self.encoder = encoder
        self.classifier = nnx.Linear(encoder.feature_dim, num_classes, rngs=rngs)


METHODS = ("moco", "end-to-end", "memory-bank", "instdisc", "supervised", "random")


@dataclasses.dataclass
class Built:
    """A method's model, the `trainable` filter of its train state, and how to get the
    encoder that linear evaluation freezes."""

    model: nnx.Module
    trainable: object
    encoder: Callable[[nnx.Module], nnx.Module]


def make_contrastive_model(method: str, make_encoder: Callable[..., nnx.Module], *,
                           dim: int, queue_size: int | None, num_items: int,
                           num_classes: int, rngs: nnx.Rngs) -> Built:
    """The model of `method`. `make_encoder(rngs, head=...)` builds one encoder (the
    head argument only for the supervised one, which has none)."""
    if method == "moco":
        return Built(MoCo(make_encoder, queue_size=queue_size, dim=dim, rngs=rngs),
                     QUERY_PARAMS, lambda m: m.query)
    if method in ("instdisc", "memory-bank"):
        model = InstDisc(make_encoder(rngs), num_items=num_items, dim=dim, rngs=rngs)
        return Built(model, nnx.Param, lambda m: m.encoder)
    if method == "supervised":
        model = Supervised(make_encoder(rngs, head=None), num_classes, rngs=rngs)
        return Built(model, nnx.Param, lambda m: m.encoder)
    if method in ("end-to-end", "random"):
        return Built(Siamese(make_encoder(rngs)), nnx.Param, lambda m: m.encoder)
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def resnet_activation_bytes(arch: str, image_size: int, width: int, batch: int, *,
                            small_images: bool = True, bytes_per_value: int = 4) -> float:
    """A lower bound of the activations one forward pass of `batch` images keeps for
    the backward pass: three tensors (conv output, normalised, activated) per
    convolution of every block, at each stage's resolution."""
    kind, layers = ARCHS[arch]
    side = image_size if small_images else image_size / 4
    convs, expansion = (2, 1) if kind == "basic" else (3, 4)
    values = 3.0 * side * side * width  # stem
    for stage, n in enumerate(layers):
        s = side / 2**stage
        values += 3.0 * n * convs * s * s * width * 2**stage * expansion
    return values * batch * bytes_per_value
