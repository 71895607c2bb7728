"""SoCL-Siam: SiamFC's backbone trained from scratch with the soft contrastive loss on
point annotations only (Wu & Chan, "Learning Tracking Representations from Single Point
Annotations", sec. 3.2-3.3, "Siamese Tracking"); the trained backbone then tracks with
the unchanged SiamFC tracker (`ebm_jax.tracking.siamfc.make_tracker`).

    loss_fn = make_socl_siam_loss(SoCLSettings())
    step = make_train_step(graphdef, loss_fn, optax.adam(3e-4), mesh)

A batch (`ebm_jax.data.socl_pairs.context_batches`) holds two context regions of each of
N videos and their TOP maps on the backbone's feature grid.

Fine-tuning that keeps a start (SiamRPN++, Li et al. 2019, sec. 4.1: the backbone's
first layers frozen, its learning rate a tenth of the head's, batch-norm statistics
fixed), for a backbone that starts from useful weights:

    model = ...; freeze_batch_norm(model, "layer1", every=False)
    trainable = trainable_filter(model, "layer1")        # for create_train_state / step
    opt = optax.chain(optax.adam(lr), scale_backbone_updates(model, 0.1))

`freeze` names a level of the backbone (`model.level_names`, not its last, the
embedding): that level and every level before it keep their start (ResNet-18: "conv1"
is the stem, conv1 and its batch norm; "layer1" the stem and layer1; AlexNet: "conv1"
to "conv4"). The backbone of the learning-rate multiplier is every level but the
last (ResNet-18's adjust layer, AlexNet's conv5): the head that SiamRPN++ trains at the
full rate.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from ebm_jax.contrastive.socl import SoCLSettings, socl_loss
from ebm_jax.models.alexnet import SiamFCAlexNet
from ebm_jax.models.norm import SplitBatchNorm
from ebm_jax.models.siam_resnet import SiamResNet18

# the attributes of each backbone's levels (`level_names`), in order
_LEVEL_ATTRIBUTES = {
    SiamResNet18: (("conv1", "bn1"), ("layer1",), ("layer2",), ("layer3",), ("adjust",)),
    SiamFCAlexNet: tuple((("convs", i), ("norms", i)) for i in range(5)),
}


def make_socl_siam_loss(settings: SoCLSettings = SoCLSettings()) -> Callable:
    """`loss_fn(model, batch, key) -> (loss, metrics)` for `make_train_step`: batch =
    {"i_images", "j_images": (N, S, S, 3) uint8, "h_i", "h_j": (N, g, g) TOP maps}; the
    model (batch-norm mode is the caller's) embeds all 2N regions in one call, and loss
    (10) of sec. 3.2.4 is taken over the two frames' feature maps."""

    def loss_fn(model, batch, key):
        i_images, j_images = batch["i_images"], batch["j_images"]
        n = i_images.shape[0]
        features = model(jnp.concatenate([i_images, j_images], axis=0))
        if features.shape[1:3] != batch["h_i"].shape[1:]:
            raise ValueError(f"the TOP maps' grid {batch['h_i'].shape[1:]} is not the "
                             f"backbone's feature grid {features.shape[1:3]}")
        return socl_loss(features[:n], features[n:], batch["h_i"], batch["h_j"], key,
                         settings)

    return loss_fn


def freeze_levels(model) -> tuple[str, ...]:
    """The levels `freeze` may name on `model`: every level but its last."""
    return tuple(_backbone_type(model).level_names[:-1])


def _backbone_type(model) -> type:
    cls = model if isinstance(model, type) else type(model)
    for known in _LEVEL_ATTRIBUTES:
        if issubclass(cls, known):
            return known
    raise ValueError(f"fine-tuning options know {', '.join(c.__name__ for c in _LEVEL_ATTRIBUTES)}"
                     f", got {cls.__name__}")


def _prefixes(model, levels) -> tuple:
    attrs = _LEVEL_ATTRIBUTES[_backbone_type(model)]
    return tuple(p if isinstance(p, tuple) else (p,) for lv in levels for p in attrs[lv])


def frozen_predicate(model, freeze: str) -> Callable[[tuple], bool]:
    """`is_frozen(path) -> bool` of a variable's path in `model` (an nnx path, tuple of
    attribute names and list indices): True from its first level to `freeze` ("none":
    nothing). A ValueError names the levels where `freeze` is not one of them."""
    names = freeze_levels(model)
    if freeze == "none":
        return lambda path: False
    if freeze not in names:
        raise ValueError(f"freeze must be 'none' or a level of {type(model).__name__} "
                         f"before its embedding ({', '.join(names)}), got {freeze!r}")
    prefixes = _prefixes(model, range(names.index(freeze) + 1))
    return lambda path: any(tuple(path[:len(p)]) == p for p in prefixes)


def trainable_filter(model, freeze: str = "none"):
    """The nnx filter of what the optimizer updates: every `nnx.Param` outside the frozen
    levels (`frozen_predicate`); the frozen ones join the train state's `rest`, which
    nothing changes. Give it to `create_train_state` and `make_train_step`."""
    frozen = frozen_predicate(model, freeze)
    if freeze == "none":
        return nnx.Param
    return nnx.All(nnx.Param, lambda path, value: not frozen(path))


def freeze_batch_norm(model, freeze: str = "none", *, every: bool = False) -> int:
    """Switches batch norm to its running statistics (eval mode) in the frozen levels,
    or in every level with `every` (SiamRPN++'s fixed statistics), in place, so that a
    training step normalises with the start's statistics and leaves them unchanged
    (a static attribute: the graphdef of `create_train_state` keeps it). Returns the
    number of batch-norm layers switched."""
    frozen = (lambda path: True) if every else frozen_predicate(model, freeze)
    count = 0
    for path, module in nnx.iter_modules(model):
        if isinstance(module, (nnx.BatchNorm, SplitBatchNorm)) and frozen(path):
            module.use_running_average = True
            count += 1
    return count


def scale_backbone_updates(model, scale: float):
    """An optax transform (after the optimizer) that multiplies the updates of every
    level but the last by `scale` in (0, 1]: for Adam or SGD, the backbone's learning
    rate x scale and the head's unchanged (SiamRPN++'s x0.1). The mask is taken from
    the parameters' paths, so it fits whatever `trainable_filter` left in."""
    import optax

    scale = float(scale)
    if not 0 < scale <= 1:
        raise ValueError(f"backbone_lr_scale must be in (0, 1], got {scale!r}")
    head = _prefixes(model, (len(_backbone_type(model).level_names) - 1,))

    def mask(params):
        def is_backbone(path, _):
            keys = tuple(getattr(k, "key", getattr(k, "idx", getattr(k, "name", None)))
                         for k in path)
            return not any(keys[:len(p)] == p for p in head)

        return jax.tree_util.tree_map_with_path(is_backbone, params)

    return optax.masked(optax.scale(scale), mask)
