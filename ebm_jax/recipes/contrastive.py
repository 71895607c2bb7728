"""Contrastive pretraining (MoCo, He et al. 2020; InstDisc, Wu et al. 2018) and linear
evaluation of the frozen encoders, with MoCo's ablations (sec. 4.1: momentum, Table 1
"mechanism", and the queue size of Fig. 3).

Every run of a table is two stages of the work directory:

    <workdir>/<run>-<hash>          pretraining (TrainStage: checkpoints, metrics)
    <workdir>/<run>-linear-<hash>   linear evaluation of the frozen encoder (batch norm
                                    in inference mode): a linear classifier on all
                                    labels and on `few_labels` per class, and kNN;
                                    cached in result.json with the classifier

Runs: "moco" (queue + momentum encoder + shuffled BN), "end-to-end" (keys from the
current batch), "memory-bank" (InfoNCE against sampled bank entries), "instdisc"
(memory bank + NCE), "supervised" (cross-entropy on the same augmented views, the
ceiling), "random" (the untrained encoder) and "pixels" (the raw pixels, no encoder):
the two floors. The floors and the ceiling are beside every table; runs shared by
several tables or config files train once.

With `seeds`, every run is repeated per seed (its own data split, initialisation and
batches; stage directories differ by seed) and the tables give mean +- sd over seeds,
with each method's paired difference from the random encoder (mean +- standard error
over seeds). `eval_split="val"` scores on a validation split held out from training,
for choosing hyperparameters; the reported tables use the test split.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ebm_jax import checks
from ebm_jax.config import ADDED_FIELD, MATMUL_PRECISIONS, Checks, ConfigError
from ebm_jax.contrastive import check_queue_size
from ebm_jax.data import images as image_data
from ebm_jax.ops.augment import AUGMENTATIONS
from ebm_jax.models.contrastive import METHODS, resnet_activation_bytes
from ebm_jax.models.resnet import ARCHS
from ebm_jax.recipes.contrastive_stages import (
    MECHANISMS,
    TABLES,
    UNTRAINED,
    RunSpec,
    all_specs,
    features_of,
    linear_eval,
    load_data,
    make_loss,
    plan,
    pretrain,
)
from ebm_jax.report import Report
from ebm_jax.report import contrastive as report
from ebm_jax.report.statistics import aggregate
from ebm_jax.train.stages import RunContext

__all__ = ["Config", "RunSpec", "check", "plan", "run"]


@dataclasses.dataclass(frozen=True)
class Config:
    """The defaults are the quick profile: a small ResNet-18 on 16x16 digits."""

    main: str = "moco"  # "moco" or "instdisc": the method of the main table
    # the precision of float32 matrix products and convolutions
    # (`jax.default_matmul_precision`): "highest" (full float32: what a CPU computes
    # under any setting, so every result made on a CPU), "high", or "default" (the
    # backend's fast passes, TF32 on NVIDIA GPUs, which moved a MoCo start and SoCL by
    # several AUC points on one GPU: docs/gpu.md). Set away from "highest", every stage
    # of the run is its own (`RunContext.run_identity`)
    matmul_precision: str = dataclasses.field(default="highest", metadata=ADDED_FIELD)
    tables: tuple[str, ...] = ("main",)  # of TABLES
    data: str = "embedded"  # embedded, digits, opencv-digits, digits-on-photos, cifar10, folder
    # "test": train on the training split, score on the test split (the reported
    # tables); "val": hold out a validation split of the training data and score on it
    # (every choice of hyperparameters), the test split untouched
    eval_split: str = "test"
    # cifar10 / folder / records (a directory); nothing is downloaded
    data_root: str | None = None
    # how pretraining reads its batches: "memory" (indexed from the loaded arrays, the
    # whole global batch on every process) or "grain" (a grain pipeline, from the
    # ArrayRecord records with data=records, each process reading only its rows;
    # `ebm_jax.data.pipeline`). The batches are the same.
    loader: str = "memory"
    num_train: int | None = None  # keep the first images of each split (None: all)
    num_test: int | None = None
    image_size: int = 16
    arch: str = "resnet18"
    width: int = 16  # ResNet base width (64 in the published nets)
    head: str = "linear"  # "linear" (MoCo v1) or "mlp" (v2)
    dim: int = 64
    batch_size: int = 64
    epochs: int = 15
    learning_rate: float = 0.06
    weight_decay: float = 5e-4
    temperature: float = 0.1  # MoCo, end-to-end, memory bank
    momentum: float = 0.99
    queue_size: int = 1024
    num_splits: int = 4  # BN groups of MoCo, end-to-end and the memory bank on one device
    augment: str = "digits"
    instdisc_temperature: float = 0.07
    instdisc_learning_rate: float = 0.03  # NCE's summed noise terms diverge at 0.06
    instdisc_noise: int = 256
    # "random": unit vectors (InstDisc); "features": the untrained encoder's features
    # of every training image, so that Z, estimated on the first batch, sees a bank
    # like the later ones (on a small dataset a random bank gives a Z far too small).
    bank_init: str = "features"
    linear_epochs: int = 100
    linear_learning_rate: float = 0.1
    knn_ks: tuple[int, ...] = (20, 200)  # the kNN monitor at each k (InstDisc: 200)
    few_labels: int = 10  # labelled examples per class of the low-label evaluation
    momentum_values: tuple[float, ...] = (0.0, 0.9, 0.99, 0.999)
    queue_values: tuple[int, ...] = (64, 256, 1024)
    plot: str = "tsne"  # 2-D embedding of the main table's test features: tsne|pca|none
    # the paper's figures: (row label as in the table, e.g. "m = 0.9", figure)
    reference: tuple[tuple[str, str], ...] = ()
    reference_note: str = ""
    seed: int = 0
    # every run repeated over these seeds (each with its own data split, initialisation
    # and batches); tables give mean +- sd. None: `seed` alone
    seeds: tuple[int, ...] | None = None

    @property
    def run_seeds(self) -> tuple[int, ...]:
        return tuple(self.seeds) if self.seeds else (self.seed,)

    def __post_init__(self):
        c = Checks(self)
        c.one_of("main", ("moco", "instdisc"))
        c.one_of("matmul_precision", MATMUL_PRECISIONS)
        c.one_of("eval_split", ("test", "val"))
        if not self.knn_ks or not all(isinstance(k, int) and not isinstance(k, bool)
                                      and k >= 1 for k in self.knn_ks):
            raise ConfigError(f"--config.knn_ks must be integers >= 1, got {self.knn_ks!r}")
        if self.seeds is not None and (not self.seeds or len(set(self.seeds)) != len(
                self.seeds) or not all(isinstance(v, int) and not isinstance(v, bool)
                                       and 0 <= v < 2**31 for v in self.seeds)):
            raise ConfigError("--config.seeds must be distinct integers in [0, 2^31), "
                              f"got {self.seeds!r}")
        c.each_in("tables", TABLES)
        c.one_of("data", image_data.DATASETS)
        c.one_of("loader", ("memory", "grain"))
        for f in ("num_train", "num_test"):
            if getattr(self, f) is not None:
                c.int_range(f, 1)
        c.int_range("image_size", 4)
        c.one_of("arch", tuple(ARCHS))
        c.one_of("head", ("linear", "mlp"))
        c.one_of("augment", tuple(AUGMENTATIONS))
        c.one_of("bank_init", ("random", "features"))
        c.one_of("plot", ("tsne", "pca", "none"))
        for f in ("width", "dim", "batch_size", "epochs", "queue_size", "num_splits",
                  "instdisc_noise", "linear_epochs", "few_labels"):
            c.int_range(f, 1)
        for f in ("learning_rate", "temperature", "instdisc_temperature",
                  "instdisc_learning_rate", "linear_learning_rate"):
            c.positive(f)
        c.float_range("weight_decay", 0.0, 1.0)
        c.float_range("momentum", 0.0, 1.0)
        c.seed()
        if not self.momentum_values or not all(
                isinstance(m, (int, float)) and 0.0 <= m <= 1.0
                for m in self.momentum_values):
            raise ConfigError("--config.momentum_values must be numbers in [0, 1], got "
                              f"{self.momentum_values!r}")
        if not self.queue_values or not all(
                isinstance(k, int) and k >= 1 for k in self.queue_values):
            raise ConfigError("--config.queue_values must be integers >= 1, got "
                              f"{self.queue_values!r}")


# --------------------------------------------------------------------------- recipe


def _check_memory(cfg: Config, specs: list[RunSpec]) -> None:
    n_train, n_test, channels = image_data.dataset_sizes(cfg.data, cfg.data_root)
    n_train = min(n_train, cfg.num_train or n_train)
    n_test = min(n_test, cfg.num_test or n_test)
    fix = "lower it with --config.<field>"
    checks.fits_in_memory(
        f"the dataset ({n_train + n_test} images of {cfg.image_size}x{cfg.image_size}x"
        f"{channels})", 4.0 * (n_train + n_test) * cfg.image_size**2 * channels,
        hint="lower --config.image_size or --config.num_train")
    for s in specs:  # state, its donated copy and the step's update: three copies
        if s.method == "moco":
            checks.fits_in_memory(f"the queue of {s.name} (K {s.queue_size} x dim "
                                  f"{cfg.dim})", 12.0 * s.queue_size * cfg.dim,
                                  hint=f"{fix} (queue_size, queue_values, dim)")
        if s.method in ("instdisc", "memory-bank"):
            checks.fits_in_memory(f"the memory bank of {s.name} ({n_train} training "
                                  f"images x dim {cfg.dim})", 12.0 * n_train * cfg.dim,
                                  hint=f"{fix} (dim, num_train)")
    views = 2 * 2  # two views (query and key), forward and backward
    checks.fits_in_memory(
        f"the activations of a batch of {cfg.batch_size} ({cfg.arch} width {cfg.width} "
        f"at {cfg.image_size}x{cfg.image_size})",
        views * resnet_activation_bytes(cfg.arch, cfg.image_size, cfg.width,
                                        cfg.batch_size),
        hint=f"{fix} (batch_size, width, image_size)")


def extras(cfg: Config) -> tuple[str, ...]:
    """Records data and the grain loader need the `data` extra; the other data and the
    in-memory loader need the core only."""
    return ("data",) if cfg.data == "records" or cfg.loader == "grain" else ()


def check(cfg: Config, ctx: RunContext) -> None:
    """Every error that can be known before the first training step: the data root,
    devices, queue sizes and memory (before any data is read), then the data itself."""
    if cfg.data in image_data.NEEDS_ROOT and cfg.data_root is None:
        raise ValueError(f"--config.data={cfg.data} needs --config.data_root (a local "
                         "directory; nothing is downloaded)")
    if cfg.data_root is not None and cfg.data in (image_data.NEEDS_ROOT
                                                  + image_data.OPTIONAL_ROOT):
        checks.existing_dir("--config.data_root", cfg.data_root)
    b, devices = cfg.batch_size, ctx.num_devices
    if b % devices:
        raise ValueError(f"--config.batch_size {b} must be divisible by --devices "
                         f"{devices}")
    specs = all_specs(cfg)
    for s in specs:
        if s.method == "moco":
            try:
                check_queue_size(s.queue_size, b)
            except ValueError as e:
                raise ValueError(f"{s.name}: {e} (--config.queue_size / queue_values)"
                                 ) from None
        if s.method in MECHANISMS and devices == 1 and b % cfg.num_splits:
            raise ValueError(f"--config.batch_size {b} must be divisible by "
                             f"--config.num_splits {cfg.num_splits} (the batch norm groups "
                             f"of {s.name})")
        if s.method in METHODS[:-1]:  # every loss is built once: bad settings fail here
            make_loss(s, cfg, devices)
    _check_memory(cfg, specs)
    data = load_data(cfg, ctx.with_seed(cfg.run_seeds[0]))
    n = len(data.train_images)
    if b > n:
        raise ValueError(f"--config.batch_size {b} must be <= the {n} training images")
    if max(cfg.knn_ks) > n:
        raise ValueError(f"--config.knn_ks must be integers in [1, {n}] (the {n} training "
                         f"images the kNN classifier votes from), got {list(cfg.knn_ks)}")
    counts = np.bincount(data.train_labels, minlength=data.num_classes)
    if cfg.few_labels > counts.min():
        raise ValueError(f"--config.few_labels {cfg.few_labels} exceeds the "
                         f"{counts.min()} training images of class {counts.argmin()}")
    if cfg.image_size > max(data.image_shape[:2]) * 4:
        raise ValueError(f"--config.image_size {cfg.image_size} is more than 4x the "
                         f"data's {data.image_shape[:2]}")


METRICS = ("linear_accuracy", "few_label_accuracy", "linear_train_accuracy",
           "images_per_second", "seconds", "final_loss", "steps")


def _knn_keys(cfg: Config) -> tuple[str, ...]:
    return tuple(f"knn{k}_accuracy" for k in cfg.knn_ks)


def count_stages(cfg: Config) -> int:
    """The run's training stages, for "stage i of n" and the run's ETA: per seed one
    pretraining per run of the tables that trains (not the random encoder, not pixels;
    the linear evaluation is not a stage)."""
    return len(cfg.run_seeds) * sum(s.method not in UNTRAINED for s in all_specs(cfg))


def run(cfg: Config, ctx: RunContext) -> Report:
    tables = plan(cfg)
    specs = all_specs(cfg)
    seeds = cfg.run_seeds
    per_seed: dict[str, list[dict]] = {s.name: [] for s in specs}
    data = first = None
    for seed in seeds:
        sctx = ctx.with_seed(seed)
        data = load_data(cfg, sctx)
        first = first or (data, sctx)  # the plot's seed: kept, not loaded again
        for i, spec in enumerate(specs, 1):
            tag = f"[{i}/{len(specs)}] {spec.name}" + (f" (seed {seed})" if len(seeds) > 1
                                                        else "")
            ctx.log(f"{tag}: pretraining")
            pre = pretrain(spec, cfg, data, sctx)
            ev = linear_eval(spec, cfg, data, sctx)
            per_seed[spec.name].append({"seed": seed, **pre, **ev})
            knn = ", ".join(f"kNN k={k} {100 * ev[f'knn{k}_accuracy']:.1f}%"
                            for k in cfg.knn_ks)
            ctx.log(f"{tag}: linear {100 * ev['linear_accuracy']:.1f}%, "
                    f"{cfg.few_labels}/class {100 * ev['few_label_accuracy']:.1f}%, {knn}")
    keys = METRICS + _knn_keys(cfg)
    results = {s.name: {"name": s.name, "method": s.method, "momentum": s.momentum,
                        "queue_size": s.queue_size,
                        **aggregate(per_seed[s.name], keys), "seeds": per_seed[s.name]}
               for s in specs}
    rows = {t: [results[s.name] for s in tables[t]] for t in TABLES if t in cfg.tables}
    floor, pixels, ceiling = results["random"], results["pixels"], results["supervised"]
    shown = {t: r if t == "main" else [floor, pixels, *r, ceiling] for t, r in rows.items()}
    split = "val" if cfg.eval_split == "val" else "test"
    title = (f"{cfg.main} on {data.name} ({len(data.train_images)} train / "
             f"{len(data.test_images)} {split} images, {cfg.arch} width {cfg.width}, "
             f"{cfg.epochs} epochs" + (f", mean +- sd over seeds {', '.join(map(str, seeds))}"
                                      if len(seeds) > 1 else f", seed {seeds[0]}") + ")")
    differences = report.paired_differences(rows, per_seed, reference="random",
                                            keys=("linear_accuracy", "few_label_accuracy")
                                            + _knn_keys(cfg))
    markdown = report.report_markdown(
        shown, title=title, batch_size=cfg.batch_size, few_labels=cfg.few_labels,
        queue_size=cfg.queue_size, momentum=cfg.momentum, knn_ks=cfg.knn_ks,
        reference=dict(cfg.reference), reference_note=cfg.reference_note,
        differences=differences if len(seeds) > 1 else None)
    figures = {}
    if cfg.plot != "none":
        data, sctx = first
        feats = {s.name: np.asarray(features_of(s, cfg, data, sctx, data.test_images))
                 for s in tables["main"]}
        name = f"{cfg.main}_features.png"
        figures[name] = functools.partial(report.embedding_figure, feats, data.test_labels,
                                          method=cfg.plot, seed=seeds[0])
        markdown += f"\n![{cfg.plot} of the {split} features (seed {seeds[0]})]({name})\n"
    payload = {"experiment": cfg.main, "data": data.name, "eval_split": cfg.eval_split,
               "seeds": list(seeds), "num_train": len(data.train_images),
               "num_test": len(data.test_images), "image_shape": list(data.image_shape),
               "tables": rows, "differences": differences, "floor": floor,
               "pixels": pixels, "ceiling": ceiling, "reference": dict(cfg.reference)}
    return Report(payload, markdown, figures)
