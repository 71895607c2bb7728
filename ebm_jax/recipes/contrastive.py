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
ceiling) and "random" (the untrained encoder, the floor). The floor and ceiling are
beside every table; runs shared by several tables or config files train once.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ebm_jax import checks
from ebm_jax.config import Checks, ConfigError
from ebm_jax.contrastive import check_queue_size
from ebm_jax.data import images as image_data
from ebm_jax.data.augment import AUGMENTATIONS
from ebm_jax.eval.linear_probe import extract_features
from ebm_jax.models.contrastive import METHODS, resnet_activation_bytes
from ebm_jax.models.resnet import ARCHS
from ebm_jax.recipes.contrastive_stages import (
    MECHANISMS,
    TABLES,
    RunSpec,
    all_specs,
    linear_eval,
    load_data,
    load_encoder,
    make_loss,
    plan,
    pretrain,
)
from ebm_jax.report import Report
from ebm_jax.report import contrastive as report
from ebm_jax.train.stages import RunContext

__all__ = ["Config", "RunSpec", "check", "plan", "run"]


@dataclasses.dataclass(frozen=True)
class Config:
    """The defaults are the quick profile: a small ResNet-18 on 16x16 digits."""

    main: str = "moco"  # "moco" or "instdisc": the method of the main table
    tables: tuple[str, ...] = ("main",)  # of TABLES
    data: str = "embedded"  # embedded, digits, opencv-digits, cifar10, folder
    data_root: str | None = None  # cifar10 / folder (a directory); nothing is downloaded
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
    knn_k: int = 200
    few_labels: int = 10  # labelled examples per class of the low-label evaluation
    momentum_values: tuple[float, ...] = (0.0, 0.9, 0.99, 0.999)
    queue_values: tuple[int, ...] = (64, 256, 1024)
    plot: str = "tsne"  # 2-D embedding of the main table's test features: tsne|pca|none
    # the paper's figures: (row label as in the table, e.g. "m = 0.9", figure)
    reference: tuple[tuple[str, str], ...] = ()
    reference_note: str = ""
    seed: int = 0

    def __post_init__(self):
        c = Checks(self)
        c.one_of("main", ("moco", "instdisc"))
        c.each_in("tables", TABLES)
        c.one_of("data", image_data.DATASETS)
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
                  "instdisc_noise", "linear_epochs", "knn_k", "few_labels"):
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
    data = load_data(cfg, ctx)
    n = len(data.train_images)
    if b > n:
        raise ValueError(f"--config.batch_size {b} must be <= the {n} training images")
    counts = np.bincount(data.train_labels, minlength=data.num_classes)
    if cfg.few_labels > counts.min():
        raise ValueError(f"--config.few_labels {cfg.few_labels} exceeds the "
                         f"{counts.min()} training images of class {counts.argmin()}")
    if cfg.image_size > max(data.image_shape[:2]) * 4:
        raise ValueError(f"--config.image_size {cfg.image_size} is more than 4x the "
                         f"data's {data.image_shape[:2]}")


def run(cfg: Config, ctx: RunContext) -> Report:
    data = load_data(cfg, ctx)
    tables = plan(cfg)
    specs = all_specs(cfg)
    results: dict[str, dict] = {}
    for i, spec in enumerate(specs, 1):
        ctx.log(f"[{i}/{len(specs)}] {spec.name}: pretraining")
        pre = pretrain(spec, cfg, data, ctx)
        ev = linear_eval(spec, cfg, data, ctx)
        results[spec.name] = {"name": spec.name, "method": spec.method,
                              "momentum": spec.momentum, "queue_size": spec.queue_size,
                              **pre, **ev}
        ctx.log(f"[{i}/{len(specs)}] {spec.name}: linear "
                f"{100 * ev['linear_accuracy']:.1f}%, {cfg.few_labels}/class "
                f"{100 * ev['few_label_accuracy']:.1f}%, kNN {100 * ev['knn_accuracy']:.1f}%")
    rows = {t: [results[s.name] for s in tables[t]] for t in TABLES if t in cfg.tables}
    floor, ceiling = results["random"], results["supervised"]
    shown = {t: r if t == "main" else [floor, *r, ceiling] for t, r in rows.items()}
    title = (f"{cfg.main} on {data.name} ({len(data.train_images)} train / "
             f"{len(data.test_images)} test images, {cfg.arch} width {cfg.width}, "
             f"{cfg.epochs} epochs)")
    markdown = report.report_markdown(
        shown, title=title, batch_size=cfg.batch_size, few_labels=cfg.few_labels,
        queue_size=cfg.queue_size, momentum=cfg.momentum,
        reference=dict(cfg.reference), reference_note=cfg.reference_note)
    figures = {}
    if cfg.plot != "none":
        feats = {s.name: np.asarray(extract_features(load_encoder(s, cfg, data, ctx),
                                                     data.test_images))
                 for s in tables["main"]}
        name = f"{cfg.main}_features.png"
        figures[name] = functools.partial(report.embedding_figure, feats, data.test_labels,
                                          method=cfg.plot, seed=cfg.seed)
        markdown += f"\n![{cfg.plot} of the test features]({name})\n"
    payload = {"experiment": cfg.main, "data": data.name,
               "num_train": len(data.train_images), "num_test": len(data.test_images),
               "image_shape": list(data.image_shape), "tables": rows,
               "floor": floor, "ceiling": ceiling, "reference": dict(cfg.reference)}
    return Report(payload, markdown, figures)
