"""DiMP's two branches trained jointly on one batch (Bhat et al. 2019, sec. 3.4; the EBM
regression paper, Gustafsson et al. 2020, sec. 5, trains its box branch beside DiMP's
classifier the same way): the classifier's loss on DiMP's samples plus the energy-based
box head's loss (KLD-IS, NCE, NCE+ or ML-IS) on pairs cut from the same crops, through
one backbone shared by both branches.

    net = DiMPJointNet(backbone, level=4, settings=PredictorSettings(), head=head,
                       head_levels=(2, 4), frozen_backbone=False, rngs=nnx.Rngs(0))
    loss_fn = make_joint_loss(PredictorSettings(), label_sigma=1.1,
                              box_settings=BoxHeadSettings(method="nce+"), box_weight=1.0)
    value, metrics = loss_fn(net, dimp_sample_batches(...)(step), key)

A sample is a sequence's 3 training and 3 test frames, each cropped around a jittered
box (`ebm_jax.data.dimp_samples`). The classifier predicts its filter from the training
crops and is scored on the test crops (`make_classifier_loss`); the box head's pairs are
(the first training crop with its box as the reference, each test crop with its box as
the test image), as DiMP's IoU branch takes its reference from a training frame and its
proposals on the test frames. The backbone's levels of every crop are computed once and
read by both branches. Frozen, the backbone runs in eval mode with its gradient stopped
and the two branches share no parameter: the joint loss then trains each branch as it
would alone, on the same crops. Trained, its gradient is the classifier's plus
`box_weight` times the box head's (batch norm still on its running statistics, as
`BoxHeadNet` runs it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from ebm_jax.energy.boxes import make_tracking_box_loss
from ebm_jax.models.box_head import BoxHeadNet
from ebm_jax.tracking import dimp
from ebm_jax.tracking.box_head import BoxHeadSettings
from ebm_jax.tracking.dimp_training import DiMPNet, make_classifier_loss

# fold_in purpose of the joint step's key
_BOX_LOSS = 0
# the optimiser groups of `param_groups`
GROUPS = ("backbone", "classifier", "head")


class DiMPJointNet(nnx.Module):
    """DiMP's classifier (`classifier`, a `DiMPNet`) and the box head (`box`, a
    `BoxHeadNet`) on one backbone, held once (`backbone`) and read by both: what the
    tracker composes (`make_dimp_tracker(net.classifier, ..., refiner=...)` with the
    refiner of `net.box`). The backbone is copied from `backbone` (`detached_copy`) and
    runs in eval mode; `frozen_backbone` stops its gradient in both branches."""

    def __init__(self, backbone, level: int, settings: dimp.PredictorSettings, head, *,
                 head_levels=None, channels: int = 32, frozen_backbone: bool = True,
                 rngs: nnx.Rngs):
        self.classifier = DiMPNet(backbone, level, settings, channels=channels,
                                  frozen_backbone=frozen_backbone, rngs=rngs)
        self.classifier.backbone.eval()
        self.box = BoxHeadNet(backbone, head, levels=head_levels, frozen=frozen_backbone)
        self.box.backbone = self.classifier.backbone  # one backbone, two readers
        self.frozen_backbone = bool(frozen_backbone)

    @property
    def backbone(self):
        return self.classifier.backbone

    def all_levels(self) -> tuple[int, ...]:
        """The backbone levels either branch reads, in order."""
        return tuple(sorted({self.classifier.level, *self.box.levels_used}))

    def levels(self, crops: jax.Array) -> dict:
        """{level: features} of crops (N, S, S, 3) of 0-255 pixels, every level either
        branch reads computed in one pass (gradient stopped when frozen)."""
        wanted = self.all_levels()
        out = self.backbone.features(crops, wanted)
        if self.frozen_backbone:
            out = [jax.lax.stop_gradient(o) for o in out]
        return dict(zip(wanted, out))


def param_groups(params) -> object:
    """The optimiser group (`GROUPS`) of each leaf of a `DiMPJointNet`'s parameter
    state, by its path: the shared backbone, the classifier's features and predictor,
    the box head. For `optax.multi_transform`."""

    def group(path, _):
        names = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
        if "backbone" in names:
            return "backbone"
        return "head" if names[:2] == ["box", "head"] else "classifier"

    return jax.tree_util.tree_map_with_path(group, params)


def make_joint_loss(settings: dimp.PredictorSettings, label_sigma: float,
                    box_settings: BoxHeadSettings, *, box_weight: float = 1.0,
                    threshold: float = 0.05):
    """`loss_fn(net, batch, key) -> (loss, metrics)` for `make_train_step`: `net` a
    `DiMPJointNet`, `batch` DiMP's samples (`dimp_sample_batches`: "train"/"test" crops
    (B, N, S, S, 3) of 0-255 pixels, "train_boxes"/"test_boxes" xyxy in crop pixels).
    loss = the classifier's (`make_classifier_loss`, DiMP sec. 3.4) + `box_weight` x the
    box head's (`make_tracking_box_loss` of `box_settings.method`, the EBM regression
    paper's sec. 5) on the B x Nte pairs (first training crop, each test crop); the box
    loss's key is fold_in(key, 0). Metrics: the classifier's, "box_loss", "f_target"
    (the head's mean energy of the target boxes) and "classifier_loss"."""
    if isinstance(box_weight, bool) or not isinstance(box_weight, (int, float)) or not (
            0 < box_weight <= 1e3):
        raise ValueError(f"box_weight must be a number in (0, 1000], got {box_weight!r}")
    classifier = make_classifier_loss(settings, label_sigma, threshold)
    box_loss = make_tracking_box_loss(box_settings.method, box_settings.num_samples,
                                      **box_settings.loss_hyperparameters)

    def loss_fn(net, batch, key):
        train = jnp.asarray(batch["train"], jnp.float32)
        test = jnp.asarray(batch["test"], jnp.float32)
        b, ntr, nte = train.shape[0], train.shape[1], test.shape[1]
        crops = jnp.concatenate([train.reshape(-1, *train.shape[2:]),
                                 test.reshape(-1, *test.shape[2:])])
        levels = net.levels(crops)
        clf = net.classifier

        def split(x):  # (B*Ntr + B*Nte, ...) -> (B, Ntr, ...), (B, Nte, ...)
            return (x[:b * ntr].reshape(b, ntr, *x.shape[1:]),
                    x[b * ntr:].reshape(b, nte, *x.shape[1:]))

        tr_level, te_level = split(levels[clf.level])
        cells = dimp.to_cells(jnp.asarray(batch["train_boxes"], jnp.float32), clf.stride,
                              clf.offset)
        test_cells = dimp.to_cells(jnp.asarray(batch["test_boxes"], jnp.float32),
                                   clf.stride, clf.offset)
        centers = 0.5 * (test_cells[..., :2] + test_cells[..., 2:])
        clf_value, metrics = classifier(clf.features, clf.predictor_params(),
                                        {"train_levels": tr_level, "train_boxes": cells,
                                         "test_levels": te_level, "test_centers": centers})

        ref_levels, test_levels = [], []
        for lv in net.box.levels_used:
            tr, te = split(levels[lv])
            ref = jnp.broadcast_to(tr[:, :1], (b, nte, *tr.shape[2:]))
            ref_levels.append(ref.reshape(b * nte, *tr.shape[2:]))
            test_levels.append(te.reshape(b * nte, *te.shape[2:]))
        ref_boxes = jnp.broadcast_to(jnp.asarray(batch["train_boxes"], jnp.float32)[:, :1],
                                     (b, nte, 4)).reshape(-1, 4)
        test_boxes = jnp.asarray(batch["test_boxes"], jnp.float32).reshape(-1, 4)
        head = net.box.head
        inputs = head.pair_inputs(ref_levels, ref_boxes, test_levels)
        box_value, _ = box_loss(head, (inputs, test_boxes),
                                jax.random.fold_in(key, _BOX_LOSS))
        f_target = jax.vmap(lambda x, bx: head(x, bx[None])[0])(inputs, test_boxes)
        return clf_value + box_weight * box_value, {
            **metrics, "classifier_loss": clf_value, "box_loss": box_value,
            "f_target": jnp.mean(jax.lax.stop_gradient(f_target))}

    return loss_fn


__all__ = ["DiMPJointNet", "GROUPS", "make_joint_loss", "param_groups"]
