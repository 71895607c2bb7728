"""A tracking backbone pretrained offline with the project's MoCo (He et al. 2020)
on the unlabelled frames of the training split and its photo pool: the
stand-in for the ImageNet ResNet-18 that SoCL-Siam and SoCL-CF start from in the paper
(Wu & Chan, sec. 4.1), for machines with no ImageNet file (`--config.init=moco`).

    <workdir>/moco-s<seed>-<hash>      the MoCo stage (TrainStage: checkpoints, metrics)
    <workdir>/moco-probe-<hash>        its probe, cached (result.json)

- Images: `frame_crops` of the frames of the sequences the arms train on (the training
  split less any validation split; pixels only, no box or point) and of the training
  photo pool (`PHOTO_POOLS["train"]`: the test split's photos are never seen).
- Encoder: the backbone (`--config.backbone`, `--config.width`) under `PooledEncoder`
  (cell mean, MLP head to `dim`), shuffled batch norm in `num_splits` groups on one
  device. MoCo v2's augmentation, InfoNCE over the queue, momentum key encoder
  (`ebm_jax.contrastive.moco.make_moco_loss`); SGD + momentum 0.9 with a cosine rate.
- One pretraining (seed `moco.seed`) is the start of every training seed's arms, as the
  paper's one ImageNet file is: the seeds' error bars do not include the pretraining's.
  SoCL's `moco_per_seed` gives each training seed its own (`socl_arms.seed_config`).
- What a tracker gets: the query encoder's backbone (parameters and batch statistics);
  the MLP head is dropped.
- The probe (`probe`): kNN (k = 20) and a linear classifier on the cell-mean embedding of
  digits-on-photos (`ebm_jax.data.digits_on_photos`, at `probe_size` px; test photos
  disjoint from the training pool), for the MoCo backbone beside the same backbone at
  its random initialisation, so that the pretraining's quality is known.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ebm_jax.config import ConfigError

__all__ = ["MOCO_SCREEN", "MoCoPretraining", "moco_stage", "moco_training",
           "pretrained_backbone", "probe", "screen", "start_figures"]


@dataclasses.dataclass(frozen=True)
class MoCoPretraining:
    """The MoCo stage's settings (`--config.moco.<field>`); defaults: the quick profile
    (ResNet-18 at width 0.25, 2 CPU cores, some 4 minutes)."""

    steps: int = 1500
    batch_size: int = 64
    crops: int = 8192  # images of the pretraining set (frame and photo crops)
    crop_size: int = 96  # their side in px
    photo_fraction: float = 0.25  # of them from the training photo pool
    input_size: int = 64  # the side of MoCo's augmented views
    augment: str = "moco-v2"
    queue_size: int = 1024  # chosen on the probe's validation split (README)
    momentum: float = 0.99  # of the key encoder
    temperature: float = 0.2
    lr: float = 0.06
    weight_decay: float = 1e-4
    dim: int = 128
    num_splits: int = 4  # shuffled batch norm groups
    seed: int = 0
    probe_size: int = 64  # digits-on-photos side for the probe
    probe_epochs: int = 60

    def __post_init__(self):
        from ebm_jax.ops.augment import AUGMENTATIONS

        def fail(field, allowed):
            raise ConfigError(f"--config.moco.{field} must be {allowed}, got "
                              f"{getattr(self, field)!r}")

        def integer(field, low, high=None):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, int) or v < low or (
                    high is not None and v > high):
                fail(field, f"an integer in [{low}, {high}]" if high else
                     f"an integer >= {low}")

        for field, low in (("steps", 1), ("batch_size", 2), ("crops", 2), ("crop_size", 16),
                           ("input_size", 16), ("queue_size", 1), ("dim", 2),
                           ("num_splits", 1), ("probe_size", 16), ("probe_epochs", 1)):
            integer(field, low)
        integer("seed", 0, 2**31 - 1)
        for field, lo, hi, open_lo in (("photo_fraction", 0.0, 1.0, False),
                                       ("momentum", 0.0, 1.0, False),
                                       ("temperature", 0.0, 10.0, True),
                                       ("lr", 0.0, 10.0, True),
                                       ("weight_decay", 0.0, 1.0, False)):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                    (v > lo if open_lo else v >= lo) and v <= hi):
                fail(field, f"a number in {'(' if open_lo else '['}{lo}, {hi}]")
        if self.augment not in AUGMENTATIONS:
            fail("augment", f"one of {sorted(AUGMENTATIONS)}")
        if self.batch_size % self.num_splits:
            fail("num_splits", f"a divisor of --config.moco.batch_size ({self.batch_size})")
        if self.queue_size % self.batch_size:
            fail("queue_size", f"a multiple of --config.moco.batch_size ({self.batch_size})")
        if self.input_size > self.crop_size:
            fail("input_size", f"<= --config.moco.crop_size ({self.crop_size})")


def moco_stage(cfg, data):
    """The MoCo stage (`TrainStage`) of `cfg` on the frames of `data`'s training split (a
    `TrackingData` whose validation split the caller has held out,
    `stages.held_out`): its identity holds the settings, the backbone, the
    width and the pretraining images' source."""
    from ebm_jax.data.tracking import PHOTO_POOLS
    from ebm_jax.train.stages import TrainStage

    data_identity = data.identity["train"]
    m = cfg.moco
    settings = {k: v for k, v in dataclasses.asdict(m).items()
                if k not in ("probe_size", "probe_epochs")}
    # "key_encoder": stages trained before the key encoder followed the query encoder
    # (it was left at its random start, so nothing was learned) are not reused
    identity = {"backbone": cfg.backbone, "width": cfg.width, "moco": settings,
                "frames": data_identity, "photos": list(PHOTO_POOLS["train"]),
                "key_encoder": "momentum"}
    every = max(1, m.steps // 20)
    return TrainStage(f"moco-s{m.seed}", identity, m.steps, log_every=every,
                      save_every=every * 5)


def _encoder_factory(cfg, num_splits: int):
    from ebm_jax.models.tracking_backbones import PooledEncoder

    def make(rngs):
        return PooledEncoder(cfg.backbone, width=cfg.width, dim=cfg.moco.dim,
                             num_splits=num_splits, rngs=rngs)

    return make


def moco_training(cfg, ctx, data):
    """(stage, graphdef, initial train state, jitted step, batches) of the MoCo stage:
    the optimizer moves the query encoder only (`QUERY_PARAMS`); the key encoder is
    the momentum average of it, written by the loss (`make_moco_loss`) and carried in
    the state's non-trainable part. `batches(s)` is step s's images in [0, 1]."""
    import optax
    from flax import nnx

    from ebm_jax.contrastive.moco import check_queue_size, make_moco_loss
    from ebm_jax.data.frame_crops import frame_crops
    from ebm_jax.data.pipeline import batch_indices
    from ebm_jax.data.tracking import PHOTO_POOLS
    from ebm_jax.data.tracking_render import load_photo
    from ebm_jax.models.contrastive import make_contrastive_model
    from ebm_jax.ops.augment import get_augment
    from ebm_jax.train import create_train_state, make_train_step

    m = cfg.moco
    check_queue_size(m.queue_size, m.batch_size)
    stage = moco_stage(cfg, data)
    built = make_contrastive_model("moco", _encoder_factory(cfg, m.num_splits), dim=m.dim,
                                   queue_size=m.queue_size, num_items=m.crops,
                                   num_classes=0, rngs=nnx.Rngs(stage.key(ctx, "init")))
    opt = optax.chain(optax.add_decayed_weights(m.weight_decay),
                      optax.sgd(optax.cosine_decay_schedule(m.lr, m.steps), momentum=0.9))
    graphdef, state = create_train_state(built.model, opt, stage.key(ctx, "train"),
                                         trainable=built.trainable)
    loss = make_moco_loss(momentum=m.momentum, temperature=m.temperature,
                          augment=get_augment(m.augment), image_size=m.input_size,
                          shuffle="batch")
    step = make_train_step(graphdef, loss, opt, ctx.mesh, trainable=built.trainable)
    crops = []  # built on the first batch asked for: a finished stage reads no frame

    def batches(s):
        if not crops:
            photos = [load_photo(p) for p in PHOTO_POOLS["train"]]
            crops.append(frame_crops(data.train, photos, count=m.crops, size=m.crop_size,
                                     photo_fraction=m.photo_fraction,
                                     seed=ctx.seed_of(stage.name, "crops"),
                                     progress=ctx.progress))
        idx = batch_indices(ctx.seed_of(stage.name, "batches"), s, m.crops, m.batch_size)
        return crops[0][idx].astype(np.float32) / 255.0

    return stage, graphdef, state, step, batches


def _train(cfg, ctx, data):
    """(graphdef, final train state, StageFigures) of the MoCo stage, trained or
    resumed."""
    from ebm_jax.train.checkpoint import latest_step

    m = cfg.moco
    stage, graphdef, state, step, batches = moco_training(cfg, ctx, data)
    if (latest_step(stage.dir(ctx)) or 0) < m.steps:
        ctx.log(f"stage {stage.name} (MoCo pretraining of {cfg.backbone}): {m.steps} steps "
                f"of {m.batch_size} crops ({m.input_size} px views of {m.crops} crops)")
    state, figures = stage.run(ctx, state, step, batches)
    if figures.final_loss is not None and not figures.finite:
        raise FloatingPointError(f"{stage.name}: the MoCo loss is not finite")
    return graphdef, state, figures


def _pretrained_encoder(cfg, ctx, data):
    """The query encoder of the finished MoCo stage (trained first if it is not), as a
    `num_splits=1` module (parameters and batch statistics)."""
    from flax import nnx

    from ebm_jax.train import merge_model

    graphdef, state, _ = _train(cfg, ctx, data)
    encoder = _encoder_factory(cfg, 1)(nnx.Rngs(0))
    nnx.update(encoder, nnx.state(merge_model(graphdef, state).query))
    return encoder


def pretrained_backbone(cfg, ctx, data):
    """The backbone of the finished MoCo stage (its query encoder's; the head is
    dropped)."""
    return _pretrained_encoder(cfg, ctx, data).backbone


def probe(cfg, ctx, data, split: str = "test") -> dict:
    """kNN (k = 20) and linear accuracy (%) on digits-on-photos of the cell-mean embedding
    of the MoCo backbone (`pretrained_backbone`) and of the same backbone at random
    initialisation (the MoCo stage's own initial weights); cached per MoCo stage.
    `split="val"` scores held-out training digits on training photos instead of the
    test split: the split to choose `cfg.moco`'s settings on."""
    if split not in ("test", "val"):
        raise ValueError(f"split must be 'test' or 'val', got {split!r}")
    stage = moco_stage(cfg, data)
    m = cfg.moco
    identity = {"pretraining": stage.full_identity, "size": m.probe_size,
                "epochs": m.probe_epochs, "k": 20,
                **({"split": split} if split != "test" else {})}

    def compute() -> dict:
        from flax import nnx

        from ebm_jax.contrastive import normalise
        from ebm_jax.data.digits_on_photos import load_digits_on_photos
        from ebm_jax.eval.knn import knn_accuracy
        from ebm_jax.eval.linear_probe import (classifier_accuracy, extract_features,
                                               train_linear_classifier)
        from ebm_jax.models.tracking_backbones import PooledEncoder

        digits = load_digits_on_photos(m.probe_size, seed=0, split=split)
        out = {"split": split,
               "images": [len(digits.train_images), len(digits.test_images)]}
        trained = _pretrained_encoder(cfg, ctx, data)
        random = PooledEncoder(cfg.backbone, width=cfg.width, dim=m.dim,
                               rngs=nnx.Rngs(stage.key(ctx, "init")))
        for name, encoder in (("random", random), ("moco", trained)):
            t0 = time.perf_counter()
            f_train = np.asarray(extract_features(encoder, digits.train_images))
            f_test = np.asarray(extract_features(encoder, digits.test_images))
            w, b, _ = train_linear_classifier(f_train, digits.train_labels, 10,
                                              key=ctx.key("moco-probe", "classifier"),
                                              epochs=m.probe_epochs)
            out[name] = {
                "linear": 100 * classifier_accuracy(w, b, f_test, digits.test_labels),
                "knn": 100 * knn_accuracy(normalise(f_test), digits.test_labels,
                                          normalise(f_train), digits.train_labels, 10,
                                          k=20),
                "seconds": time.perf_counter() - t0}
        return out

    return ctx.cached(ctx.stage_dir("moco-probe", identity), "result", identity, compute)


# The MoCo start's settings screened on the probe's validation split (`screen`; the
# docs' "SoCL from the MoCo start"): each a change of `cfg.moco` (the defaults are the
# setting chosen there), so that a preset of any size screens its own settings
MOCO_SCREEN = {
    # a query's own crop of the previous pass sits in the queue as a negative
    "queue as large as the crops": lambda m: dict(crops=m.crops // 2,
                                                  queue_size=m.crops // 2),
    "chosen": lambda m: {},
    "twice the steps": lambda m: dict(steps=2 * m.steps),
}


def screen(cfg, ctx, data, names) -> dict:
    """The MoCo start's settings `names` (keys of `MOCO_SCREEN`, each a change of
    `cfg.moco`) on the probe's validation split (`probe(..., split="val")`; the test
    split is never read): per setting, its MoCo stage (trained or resumed) with its
    settings, its final InfoNCE loss and the loss at chance (log(K + 1), K the queue),
    and its probe. The random initialisation is the stages' own (keyed by the stage's
    name and the seed: the same weights for every setting). `data`: the training split
    the arms would train on (`stages.held_out`)."""
    rows = {}
    for name in names:
        if name not in MOCO_SCREEN:
            raise ConfigError(f"MoCo screen setting {name!r} is not one of "
                              f"{sorted(MOCO_SCREEN)}")
        c = dataclasses.replace(cfg, moco=dataclasses.replace(
            cfg.moco, **MOCO_SCREEN[name](cfg.moco)))
        rows[name] = start_figures(c, ctx, data, split="val")
    return rows


def start_figures(cfg, ctx, data, split: str = "test") -> dict:
    """The MoCo stage of `cfg` (trained or resumed) in figures: its settings, its final
    InfoNCE loss and the loss at chance (log(K + 1), K the queue), its training seconds
    and its probe on `split` (`probe`). `data`: the training split the arms would train
    on (`stages.held_out`)."""
    import math

    _, _, figures = _train(cfg, ctx, data)
    return {"settings": dataclasses.asdict(cfg.moco), "final_loss": figures.final_loss,
            "chance_loss": math.log(cfg.moco.queue_size + 1),
            "train_seconds": figures.seconds, "probe": probe(cfg, ctx, data, split=split)}
