"""The stages of the contrastive recipe (`ebm_jax.recipes.contrastive`): the runs of each
table, their pretraining stage (a TrainStage) and their cached linear evaluation.

    <workdir>/<run>-<hash>          pretraining (checkpoints, metrics)
    <workdir>/<run>-linear-<hash>   linear evaluation of the frozen encoder (batch norm
                                    in inference mode): a linear classifier on all
                                    labels and on `few_labels` per class, and kNN;
                                    cached in result.json with the classifier

Every `cfg` here is the recipe's Config (`ebm_jax.recipes.contrastive.Config`), which
this module never imports: a recipe imports its stages, never the reverse.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import time

import numpy as np
import optax
from flax import nnx

from ebm_jax.contrastive import (
    make_end_to_end_loss,
    make_instdisc_loss,
    make_moco_loss,
    make_supervised_loss,
    normalise,
)
from ebm_jax.data import images as image_data
from ebm_jax.ops.augment import get_augment
from ebm_jax.data.pipeline import StepReader, batch_indices, image_batches
from ebm_jax.eval.knn import knn_accuracy
from ebm_jax.eval.linear_probe import (
    classifier_accuracy,
    extract_features,
    few_label_indices,
    train_linear_classifier,
)
from ebm_jax.models.contrastive import make_contrastive_model
from ebm_jax.models.resnet import ResNetEncoder
from ebm_jax.train import create_train_state, load_stage_params, make_train_step
from ebm_jax.train.checkpoint import latest_step
from ebm_jax.train.stages import RunContext, TrainStage
from ebm_jax.train.step import DATA_AXIS


TABLES = ("main", "momentum", "mechanism", "queue")
EVAL_FIELDS = ("linear_epochs", "linear_learning_rate", "knn_ks", "few_labels")
# settings that change no pretraining stage (what is shown, which tables, paths)
# (the loader reads the same batches either way: tests/recipes/test_contrastive_grain.py)
NOT_PRETRAINING = EVAL_FIELDS + ("main", "tables", "plot", "data_root", "loader",
                                 "momentum_values", "queue_values", "reference",
                                 "reference_note", "seed", "seeds")
# rows without pretraining: a random encoder, and the raw pixels (no encoder at all)
UNTRAINED = ("random", "pixels")


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One pretraining run: the method and, for MoCo and the memory bank, m and K."""

    method: str
    momentum: float | None = None
    queue_size: int | None = None

    @property
    def name(self) -> str:
        parts = [self.method]
        if self.method == "moco":
            parts.append(f"m{self.momentum:g}")
        if self.method in ("moco", "memory-bank"):
            parts.append(f"k{self.queue_size}")
        return "-".join(parts)


def default_spec(method: str, cfg) -> RunSpec:
    if method == "moco":
        return RunSpec("moco", cfg.momentum, cfg.queue_size)
    if method == "memory-bank":
        return RunSpec("memory-bank", None, cfg.queue_size)
    return RunSpec(method)


def plan(cfg) -> dict[str, list[RunSpec]]:
    """The runs of every table; "main" (the floors: a random encoder and the raw
    pixels; the main method; the ceiling) is always planned, as the floors and the
    ceiling stand beside every ablation."""
    tables = {"main": [RunSpec("random"), RunSpec("pixels"), default_spec(cfg.main, cfg),
                       RunSpec("supervised")]}
    if "momentum" in cfg.tables:
        tables["momentum"] = [RunSpec("moco", m, cfg.queue_size)
                              for m in cfg.momentum_values]
    if "mechanism" in cfg.tables:
        tables["mechanism"] = [RunSpec("end-to-end"), default_spec("memory-bank", cfg),
                               default_spec("moco", cfg)]
    if "queue" in cfg.tables:
        tables["queue"] = [RunSpec("moco", cfg.momentum, k) for k in cfg.queue_values]
    return tables


def all_specs(cfg) -> list[RunSpec]:
    return list(dict.fromkeys(s for rows in plan(cfg).values() for s in rows))


# --------------------------------------------------------------------------- parts


def load_data(cfg, ctx: RunContext) -> image_data.ImageData:
    """The config's dataset, scored on its `eval_split` (test, or a validation split
    held out from training); its splits are drawn with the run's "data" seed."""
    return _load_data(cfg.data, cfg.image_size, cfg.data_root,
                      ctx.seed_of("data", "split"), cfg.num_train, cfg.num_test,
                      cfg.eval_split)


@functools.lru_cache(maxsize=1)  # check() and run() of one run read it once
def _load_data(name, size, root, seed, num_train, num_test, split):
    return image_data.load_image_data(name, size, data_root=root, seed=seed,
                                      num_train=num_train, num_test=num_test, split=split)


MECHANISMS = ("moco", "end-to-end", "memory-bank")  # the arms of MoCo's Fig. 3


def bn_groups(method: str, num_splits: int, num_devices: int) -> int:
    """Batch-norm groups of the encoder while it trains. The three mechanisms of MoCo's
    ablation normalise alike (He et al. 2020, sec. 3.3 and Fig. 3), in groups of
    batch / num_splits on one device and of one device's shard on several: MoCo's
    per-device step (`shard_map`) normalises each shard by itself, and the other two,
    which train under plain `jit`, split the global batch into the devices' shards.
    InstDisc and the supervised ceiling keep full-batch batch norm."""
    if method not in MECHANISMS:
        return 1
    if num_devices == 1:
        return num_splits
    return 1 if method == "moco" else num_devices


def build_model(spec: RunSpec, cfg, data, ctx: RunContext):
    """The run's model (`Built`), initialised with the stage's "init" key; the same call
    in the linear-evaluation stage rebuilds the structure the checkpoint fills."""
    splits = bn_groups(spec.method, cfg.num_splits, ctx.num_devices)

    def make_encoder(rngs, head=cfg.head):
        return ResNetEncoder(cfg.arch, in_channels=data.image_shape[-1], small_images=True,
                             head=head, dim=cfg.dim, num_splits=splits, width=cfg.width,
                             rngs=rngs)

    return make_contrastive_model(
        spec.method, make_encoder, dim=cfg.dim, queue_size=spec.queue_size,
        num_items=len(data.train_images), num_classes=data.num_classes,
        rngs=nnx.Rngs(ctx.key(spec.name, "init")))


def make_loss(spec: RunSpec, cfg, num_devices: int = 1):
    augment, size = get_augment(cfg.augment), cfg.image_size
    if spec.method == "moco":
        return make_moco_loss(momentum=spec.momentum, temperature=cfg.temperature,
                              augment=augment, image_size=size,
                              shuffle="batch" if num_devices == 1 else "devices",
                              axis_name=DATA_AXIS)
    if spec.method == "end-to-end":
        return make_end_to_end_loss(temperature=cfg.temperature, augment=augment,
                                    image_size=size, shuffle=True)
    if spec.method in ("instdisc", "memory-bank"):
        instdisc = spec.method == "instdisc"
        return make_instdisc_loss(
            temperature=cfg.instdisc_temperature if instdisc else cfg.temperature,
            num_noise=cfg.instdisc_noise if instdisc else spec.queue_size,
            augment=augment, image_size=size, kind="nce" if instdisc else "infonce")
    if spec.method == "supervised":
        return make_supervised_loss(augment=augment, image_size=size)
    raise ValueError(f"method {spec.method!r} does not train")


def _data_identity(data) -> dict:
    return {"name": data.name, "fingerprint": image_data.fingerprint(data),
            "num_train": len(data.train_images), "num_test": len(data.test_images),
            "image_shape": list(data.image_shape)}


def pretrain_stage(spec: RunSpec, cfg, data, ctx: RunContext) -> TrainStage:
    settings = {k: v for k, v in dataclasses.asdict(cfg).items()
                if k not in NOT_PRETRAINING}
    steps_per_epoch = len(data.train_images) // cfg.batch_size
    identity = {"spec": dataclasses.asdict(spec), "settings": settings,
                "data": _data_identity(data), "seed": ctx.seed,
                "devices": ctx.num_devices}
    return TrainStage(spec.name, identity, num_steps=cfg.epochs * steps_per_epoch,
                      log_every=steps_per_epoch,
                      save_every=steps_per_epoch * max(1, cfg.epochs // 5))


def pretrain(spec: RunSpec, cfg, data, ctx: RunContext) -> dict:
    """Trains (or resumes) the pretraining stage; returns its figures."""
    if spec.method in UNTRAINED:
        return {"steps": 0, "seconds": 0.0, "images_per_second": None, "final_loss": None}
    stage = pretrain_stage(spec, cfg, data, ctx)
    built = build_model(spec, cfg, data, ctx)
    fresh = ctx.restart or latest_step(stage.dir(ctx)) is None
    if spec.method in ("instdisc", "memory-bank") and cfg.bank_init == "features" and fresh:
        built.model.fill_bank(extract_features(built.model.encoder, data.train_images,
                                               use_head=True))
    n, b = len(data.train_images), cfg.batch_size
    lr = cfg.instdisc_learning_rate if spec.method == "instdisc" else cfg.learning_rate
    opt = optax.chain(optax.add_decayed_weights(cfg.weight_decay),
                      optax.sgd(optax.cosine_decay_schedule(lr, stage.num_steps),
                                momentum=0.9))
    graphdef, state = create_train_state(built.model, opt, stage.key(ctx, "train"),
                                         trainable=built.trainable)
    per_device = spec.method == "moco" and ctx.num_devices > 1
    step = make_train_step(graphdef, make_loss(spec, cfg, ctx.num_devices), opt, ctx.mesh,
                           per_device=per_device, fold_device_key=not per_device,
                           trainable=built.trainable)
    images, labels = data.train_images, data.train_labels
    order_seed = ctx.seed_of(spec.name, "batches")

    def batch_of(images, positions, labels):  # what the method's step takes
        if spec.method in ("instdisc", "memory-bank"):
            return images, positions.astype(np.int32)
        if spec.method == "supervised":
            return images, labels
        return images

    if cfg.loader == "grain":  # this process's rows only, read ahead by grain
        dataset = image_batches(data, batch_size=b, seed=order_seed,
                                num_steps=stage.num_steps,
                                with_labels=spec.method == "supervised")
        batches = StepReader(dataset, convert=lambda e: batch_of(
            e["image"], e["index"], e.get("label")))
        stage = dataclasses.replace(stage, global_batches=False)
    else:
        def batches(s):  # the whole global batch, the same on every process
            idx = batch_indices(order_seed, s, n, b)
            return batch_of(images[idx], idx, labels[idx])

    _, figures = stage.run(ctx, state, step, batches)
    if figures.final_loss is not None and not figures.finite:
        raise FloatingPointError(f"{spec.name}: the pretraining loss is not finite")
    per_step = figures.seconds_per_step
    return {"steps": figures.steps, "seconds": figures.seconds,
            "images_per_second": b / per_step if per_step else None,
            "final_loss": figures.final_loss}


def load_encoder(spec: RunSpec, cfg, data, ctx: RunContext) -> nnx.Module:
    """The encoder of a finished pretraining stage (parameters and batch statistics),
    or the freshly initialised one for "random". A checkpoint of another architecture
    raises `CheckpointError`."""
    built = build_model(spec, cfg, data, ctx)
    if spec.method != "random":
        stage_dir = pretrain_stage(spec, cfg, data, ctx).dir(ctx).name
        graphdef, params, rest = nnx.split(built.model, built.trainable, ...)
        params = load_stage_params(ctx.workdir, stage_dir, params)
        rest = load_stage_params(ctx.workdir, stage_dir, rest, field="rest")
        built.model = nnx.merge(graphdef, params, rest)
    return built.encoder(built.model)


def features_of(spec: RunSpec, cfg, data, ctx: RunContext, images) -> np.ndarray:
    """The frozen features of `images` for a run: its encoder's, or for "pixels" the
    images themselves, flattened."""
    if spec.method == "pixels":
        return np.asarray(images, np.float32).reshape(len(images), -1)
    return np.asarray(extract_features(load_encoder(spec, cfg, data, ctx), images))


def linear_eval(spec: RunSpec, cfg, data, ctx: RunContext) -> dict:
    """The linear-evaluation stage `<run>-linear`: frozen features, linear classifiers
    on every label and on `few_labels` per class, kNN; cached for the same identity."""
    pre = pretrain_stage(spec, cfg, data, ctx)
    identity = {"pretraining": pre.full_identity,
                "eval": {k: getattr(cfg, k) for k in EVAL_FIELDS}}
    stage_dir = ctx.stage_dir(f"{spec.name}-linear", identity)

    def compute() -> dict:
        f_train = features_of(spec, cfg, data, ctx, data.train_images)
        f_test = features_of(spec, cfg, data, ctx, data.test_images)
        t0 = time.perf_counter()
        w, b, _ = train_linear_classifier(
            f_train, data.train_labels, data.num_classes,
            key=ctx.key("linear", "classifier"), epochs=cfg.linear_epochs,
            learning_rate=cfg.linear_learning_rate)
        few = few_label_indices(data.train_labels, data.num_classes, cfg.few_labels,
                                ctx.seed_of("linear", "few labels"))
        w_few, b_few, _ = train_linear_classifier(
            f_train[few], data.train_labels[few], data.num_classes,
            key=ctx.key("linear", "few-label classifier"), epochs=cfg.linear_epochs * 3,
            learning_rate=cfg.linear_learning_rate)
        if ctx.writer:
            buf = io.BytesIO()
            np.savez(buf, w=np.asarray(w), b=np.asarray(b))
            stage_dir.mkdir(parents=True, exist_ok=True)
            (stage_dir / "classifier.npz").write_bytes(buf.getvalue())
        return {
            "linear_accuracy": classifier_accuracy(w, b, f_test, data.test_labels),
            "few_label_accuracy": classifier_accuracy(w_few, b_few, f_test,
                                                      data.test_labels),
            "linear_train_accuracy": classifier_accuracy(w, b, f_train, data.train_labels),
            **{f"knn{k}_accuracy": knn_accuracy(normalise(f_test), data.test_labels,
                                                normalise(f_train), data.train_labels,
                                                data.num_classes, k=k)
               for k in cfg.knn_ks},
            "linear_seconds": time.perf_counter() - t0,
            "feature_dim": int(f_train.shape[1]),
        }

    return ctx.cached(stage_dir, "result", identity, compute)


