"""Contrastive pretraining and linear evaluation on real images (seed 002).

Each run is two stages of one run directory:

    <run_dir>/<name>/            pretraining (Orbax checkpoints, run.json, metrics.jsonl)
    <run_dir>/<name>-linear/     linear evaluation: loads the pretraining stage's final
                                 parameters and batch statistics, extracts frozen
                                 features (batch norm in inference mode), trains a linear
                                 classifier; writes result.json and the classifier

Methods: "moco" (queue + momentum encoder + shuffled BN), "end-to-end" (keys from the
current batch, one encoder), "memory-bank" (InfoNCE against sampled bank entries),
"instdisc" (memory bank + NCE), "supervised" (cross-entropy on the same augmented views,
the ceiling) and "random" (the untrained encoder, the floor).

Convolutional nets train one step per call here: on XLA's CPU backend a `lax.scan`
over a ResNet step runs about 9x slower than the same step called from Python.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ebm_jax.contrastive import (
    QUERY_PARAMS,
    InstDisc,
    MoCo,
    Siamese,
    check_queue_size,
    knn_accuracy,
    make_end_to_end_loss,
    make_instdisc_loss,
    make_moco_loss,
    normalise,
)
from ebm_jax.contrastive.linear_eval import (
    classifier_accuracy,
    extract_features,
    train_linear_classifier,
)
from ebm_jax.data import images as image_data
from ebm_jax.data.augment import augment_batch, get_augment
from ebm_jax.energy import checks
from ebm_jax.io import atomic_write
from ebm_jax.models.resnet import ResNetEncoder
from ebm_jax.train import (
    StageCheckpoints,
    create_train_state,
    fit,
    load_stage_params,
    make_train_step,
    read_metrics,
    reset_stage,
)

METHODS = ("moco", "end-to-end", "memory-bank", "instdisc", "supervised", "random")


@dataclasses.dataclass(frozen=True)
class Profile:
    dataset: str  # "embedded", "digits", "opencv-digits", "cifar10" or "folder"
    image_size: int
    arch: str
    width: int
    head: str  # "linear" (MoCo v1) or "mlp" (v2)
    dim: int
    batch_size: int
    epochs: int
    learning_rate: float
    weight_decay: float
    temperature: float  # MoCo, end-to-end, memory bank
    momentum: float
    queue_size: int
    num_splits: int  # shuffled BN groups on one device
    augment: str
    instdisc_temperature: float
    instdisc_learning_rate: float  # InstDisc's 0.03; NCE's summed noise terms diverge at 0.06
    instdisc_noise: int
    # "random": unit vectors (InstDisc); "features": the untrained encoder's features
    # of every training image, so that Z, estimated on the first batch, sees a bank
    # like the later ones. On a small dataset the bank is rewritten every few dozen
    # steps, and a random bank gives a Z far too small once it is (see README).
    bank_init: str
    linear_epochs: int
    linear_learning_rate: float
    knn_k: int
    few_labels: int  # labelled examples per class of the low-label linear evaluation
    momentum_values: tuple[float, ...]
    queue_values: tuple[int, ...]


PROFILES = {
    # About ten minutes on 2 CPU cores for `ebm-jax moco` with every ablation.
    "quick": Profile(
        dataset="embedded", image_size=16, arch="resnet18", width=16, head="linear",
        dim=64, batch_size=64, epochs=15, learning_rate=0.06, weight_decay=5e-4,
        temperature=0.1, momentum=0.99, queue_size=1024, num_splits=4, augment="digits",
        instdisc_temperature=0.07, instdisc_learning_rate=0.03, instdisc_noise=256,
        bank_init="features", linear_epochs=100,
        linear_learning_rate=0.1, knn_k=200, few_labels=10,
        momentum_values=(0.0, 0.9, 0.99, 0.999), queue_values=(64, 256, 1024),
    ),
    # MoCo's single-device CIFAR-10 recipe (its reference notebook): ResNet-18 with the
    # small-image stem, batch 512, lr 0.06 cosine, wd 5e-4, T 0.1, m 0.99, K 4096,
    # shuffled BN over 8 groups, 200 epochs. Needs --data-root and a GPU.
    "cifar": Profile(
        dataset="cifar10", image_size=32, arch="resnet18", width=64, head="linear",
        dim=128, batch_size=512, epochs=200, learning_rate=0.06, weight_decay=5e-4,
        temperature=0.1, momentum=0.99, queue_size=4096, num_splits=8, augment="cifar",
        instdisc_temperature=0.07, instdisc_learning_rate=0.03, instdisc_noise=4096,
        bank_init="random", linear_epochs=100,
        linear_learning_rate=0.1, knn_k=200, few_labels=100,
        momentum_values=(0.0, 0.9, 0.99, 0.999), queue_values=(512, 4096, 16384),
    ),
}


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One pretraining run: the method and, for MoCo and the memory bank, m and K."""

    method: str
    momentum: float | None = None
    queue_size: int | None = None

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.momentum is not None and not 0.0 <= float(self.momentum) <= 1.0:
            raise ValueError(f"momentum must be in [0, 1], got {self.momentum}")

    @property
    def name(self) -> str:
        parts = [self.method]
        if self.method == "moco":
            parts.append(f"m{self.momentum:g}")
        if self.method in ("moco", "memory-bank"):
            parts.append(f"k{self.queue_size}")
        return "-".join(parts)


def default_spec(method: str, profile: Profile) -> RunSpec:
    if method == "moco":
        return RunSpec("moco", profile.momentum, profile.queue_size)
    if method == "memory-bank":
        return RunSpec("memory-bank", None, profile.queue_size)
    return RunSpec(method)


# --------------------------------------------------------------------------- data


def load_data(profile: Profile, *, data: str | None = None, data_root: str | None = None,
              seed: int = 0) -> image_data.ImageData:
    """The profile's dataset (or `data`), read from `data_root` where it needs one."""
    name = data or profile.dataset
    size = profile.image_size
    if name == "embedded":
        return image_data.load_embedded(size, seed=seed)
    if name == "digits":
        return image_data.load_digits(size, seed=seed)
    if name == "opencv-digits":
        return image_data.load_opencv_digits(data_root or image_data.OPENCV_DIGITS, size,
                                             seed=seed)
    if data_root is None:
        raise ValueError(f"--data {name} needs --data-root (a local path; nothing is "
                         "downloaded)")
    if name == "cifar10":
        d = image_data.load_cifar10(data_root)
        if size != 32:
            d = dataclasses.replace(d, train_images=image_data.resize(d.train_images, size),
                                    test_images=image_data.resize(d.test_images, size))
        return d
    if name == "folder":
        return image_data.load_image_folder(data_root, size)
    raise ValueError(f"data must be one of embedded, digits, opencv-digits, cifar10, "
                     f"folder; got {name!r}")


# --------------------------------------------------------------------------- models


class Supervised(nnx.Module):
    """The supervised baseline: the same encoder (no projection head) + a linear layer."""

    def __init__(self, encoder: ResNetEncoder, num_classes: int, *, rngs: nnx.Rngs):
        self.encoder = encoder
        self.classifier = nnx.Linear(encoder.feature_dim, num_classes, rngs=rngs)


@dataclasses.dataclass
class Built:
    model: nnx.Module
    trainable: object
    encoder: Callable[[nnx.Module], nnx.Module]


def build_model(spec: RunSpec, profile: Profile, data: image_data.ImageData, *,
                seed: int, num_devices: int = 1) -> Built:
    """The model of a run; the same call in the linear-evaluation stage rebuilds the
    structure that the pretraining checkpoint is restored into."""
    channels = data.image_shape[-1]
    splits = profile.num_splits if (spec.method == "moco" and num_devices == 1) else 1
    rngs = nnx.Rngs(seed)

    def make_encoder(rngs, head=profile.head):
        return ResNetEncoder(profile.arch, in_channels=channels, small_images=True,
                             head=head, dim=profile.dim, num_splits=splits,
                             width=profile.width, rngs=rngs)

    if spec.method == "moco":
        return Built(MoCo(make_encoder, queue_size=spec.queue_size, dim=profile.dim,
                          rngs=rngs), QUERY_PARAMS, lambda m: m.query)
    if spec.method in ("instdisc", "memory-bank"):
        model = InstDisc(make_encoder(rngs), num_items=len(data.train_images),
                         dim=profile.dim, rngs=rngs)
        return Built(model, nnx.Param, lambda m: m.encoder)
    if spec.method == "supervised":
        model = Supervised(make_encoder(rngs, head=None), data.num_classes, rngs=rngs)
        return Built(model, nnx.Param, lambda m: m.encoder)
    return Built(Siamese(make_encoder(rngs)), nnx.Param, lambda m: m.encoder)


def make_loss(spec: RunSpec, profile: Profile, *, num_devices: int = 1) -> Callable:
    augment = get_augment(profile.augment)
    size = profile.image_size
    if spec.method == "moco":
        return make_moco_loss(momentum=spec.momentum, temperature=profile.temperature,
                              augment=augment, image_size=size,
                              shuffle="batch" if num_devices == 1 else "devices")
    if spec.method == "end-to-end":
        return make_end_to_end_loss(temperature=profile.temperature, augment=augment,
                                    image_size=size)
    if spec.method == "instdisc":
        return make_instdisc_loss(temperature=profile.instdisc_temperature,
                                  num_noise=profile.instdisc_noise, augment=augment,
                                  image_size=size, kind="nce")
    if spec.method == "memory-bank":
        return make_instdisc_loss(temperature=profile.temperature,
                                  num_noise=spec.queue_size, augment=augment,
                                  image_size=size, kind="infonce")
    if spec.method == "supervised":
        def loss_fn(model: Supervised, batch, key):
            images, labels = batch
            x = augment_batch(augment, key, images, size=size)
            logits = model.classifier(model.encoder(x))
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
            return loss, {"accuracy": jnp.mean(jnp.argmax(logits, -1) == labels)}

        return loss_fn
    raise ValueError(f"method {spec.method!r} does not train")


def check_run(spec: RunSpec, profile: Profile, data: image_data.ImageData,
              num_devices: int) -> None:
    """Every error that can be known before training starts. (Images and labels were
    checked when the `ImageData` was built; not scanned again for every run.)"""
    b = checks.int_at_least("batch_size", profile.batch_size, 1)
    n = len(data.train_images)
    if b > n:
        raise ValueError(f"batch_size {b} must be <= the {n} training images")
    if b % num_devices:
        raise ValueError(f"the batch size {b} must be divisible by --devices {num_devices}")
    if spec.method == "moco":
        check_queue_size(spec.queue_size, b)
        if num_devices == 1 and b % profile.num_splits:
            raise ValueError(f"the batch size {b} must be divisible by num_splits "
                             f"{profile.num_splits} (shuffled batch norm groups)")
    if profile.bank_init not in ("random", "features"):
        raise ValueError(f"bank_init must be 'random' or 'features', got "
                         f"{profile.bank_init!r}")
    if spec.method == "memory-bank":
        checks.int_at_least("queue_size (bank negatives)", spec.queue_size, 1)
    counts = np.bincount(data.train_labels, minlength=data.num_classes)
    if profile.few_labels > counts.min():
        raise ValueError(f"few_labels {profile.few_labels} exceeds the "
                         f"{counts.min()} training images of class {counts.argmin()}")
    checks.positive("temperature", profile.temperature)
    checks.positive("instdisc_temperature", profile.instdisc_temperature)
    if profile.image_size > max(data.image_shape[:2]) * 4:
        raise ValueError(f"image_size {profile.image_size} is more than 4x the data's "
                         f"{data.image_shape[:2]}")


# --------------------------------------------------------------------------- stages


EVAL_FIELDS = ("linear_epochs", "linear_learning_rate", "knn_k", "few_labels",
               "momentum_values", "queue_values")


def _config(spec: RunSpec, profile: Profile, data, seed: int, num_devices: int, *,
            stage: str = "pretrain") -> dict:
    """What a stage's result depends on: a resumed stage must match it."""
    settings = dataclasses.asdict(profile)
    for k in ("momentum_values", "queue_values"):
        settings.pop(k)
    if stage == "pretrain":
        for k in EVAL_FIELDS:
            settings.pop(k, None)
    return {"spec": dataclasses.asdict(spec), "profile": settings, "stage": stage,
            "data": data.name, "num_train": len(data.train_images),
            "image_shape": list(data.image_shape), "seed": seed, "devices": num_devices}


def pretrain(spec: RunSpec, profile: Profile, data: image_data.ImageData, *,
             run_dir: Path, mesh, seed: int = 0, restart: bool = False,
             progress: bool = True) -> dict:
    """Trains the pretraining stage `<run_dir>/<spec.name>` (resuming where it stopped);
    returns its figures (steps, seconds, images per second)."""
    num_devices = mesh.devices.size
    check_run(spec, profile, data, num_devices)
    stage_dir = Path(run_dir) / spec.name
    if spec.method == "random":
        return {"steps": 0, "seconds": 0.0, "images_per_second": None, "final_loss": None}
    built = build_model(spec, profile, data, seed=seed, num_devices=num_devices)
    if spec.method in ("instdisc", "memory-bank") and profile.bank_init == "features":
        features = extract_features(built.model.encoder, data.train_images, use_head=True)
        built.model.bank[...] = normalise(features)
    n, b = len(data.train_images), profile.batch_size
    steps_per_epoch = n // b
    num_steps = profile.epochs * steps_per_epoch
    lr = (profile.instdisc_learning_rate if spec.method == "instdisc"
          else profile.learning_rate)
    schedule = optax.cosine_decay_schedule(lr, num_steps)
    opt = optax.chain(optax.add_decayed_weights(profile.weight_decay),
                      optax.sgd(schedule, momentum=0.9))
    graphdef, state = create_train_state(built.model, opt, jax.random.key(seed),
                                         trainable=built.trainable)
    per_device = spec.method == "moco" and num_devices > 1
    step = make_train_step(graphdef, make_loss(spec, profile, num_devices=num_devices),
                           opt, mesh, per_device=per_device,
                           fold_device_key=not per_device, trainable=built.trainable)
    images, labels = data.train_images, data.train_labels

    def batches(s):  # a fresh permutation each epoch, a function of (seed, epoch) alone
        epoch, i = divmod(s, steps_per_epoch)
        perm = np.random.default_rng([seed, 7, epoch]).permutation(n)
        idx = perm[i * b:(i + 1) * b]
        if spec.method in ("instdisc", "memory-bank"):
            return images[idx], idx.astype(np.int32)
        if spec.method == "supervised":
            return images[idx], labels[idx]
        return images[idx]

    fit(stage_dir, state, step, batches, num_steps=num_steps,
        config=_config(spec, profile, data, seed, num_devices),
        save_every=steps_per_epoch * max(1, profile.epochs // 5), keep=2,
        log_every=steps_per_epoch, restart=restart, progress=progress,
        description=spec.name, global_batches=True)
    # figures from the records, so that a resumed or finished stage reports the same
    records = [r for r in read_metrics(stage_dir) if "steps_per_second" in r]
    seconds = sum(steps_per_epoch / r["steps_per_second"] for r in records)
    rates = [r["steps_per_second"] for r in records][1:]  # the first includes compiling
    losses = [r["loss"] for r in records]
    if losses and not math.isfinite(losses[-1]):
        raise FloatingPointError(f"{spec.name}: the pretraining loss is not finite")
    return {
        "steps": num_steps,
        "seconds": seconds,
        "images_per_second": float(np.median(rates)) * b if rates else None,
        "final_loss": losses[-1] if losses else None,
    }


def load_encoder(spec: RunSpec, profile: Profile, data, *, run_dir: Path, seed: int = 0,
                 num_devices: int = 1) -> nnx.Module:
    """The encoder of a finished pretraining stage (parameters and batch statistics),
    or the freshly initialised one for "random". A checkpoint of another architecture
    raises `CheckpointError`."""
    built = build_model(spec, profile, data, seed=seed, num_devices=num_devices)
    if spec.method != "random":
        graphdef, params, rest = nnx.split(built.model, built.trainable, ...)
        stage = spec.name
        params = load_stage_params(run_dir, stage, params)
        rest = load_stage_params(run_dir, stage, rest, field="rest")
        built.model = nnx.merge(graphdef, params, rest)
    return built.encoder(built.model)


def linear_eval(spec: RunSpec, profile: Profile, data: image_data.ImageData, *,
                run_dir: Path, seed: int = 0, num_devices: int = 1,
                restart: bool = False) -> dict:
    """The linear-evaluation stage `<run_dir>/<spec.name>-linear`: frozen features,
    linear classifier, kNN; cached in result.json for the same config."""
    stage_dir = Path(run_dir) / f"{spec.name}-linear"
    config = _config(spec, profile, data, seed, num_devices, stage="linear")
    result_path = stage_dir / "result.json"
    if restart:
        reset_stage(stage_dir)
    if result_path.is_file():
        cached = json.loads(result_path.read_text())
        if cached.get("config") == json.loads(json.dumps(config)):
            return cached["result"]
    encoder = load_encoder(spec, profile, data, run_dir=run_dir, seed=seed,
                           num_devices=num_devices)
    f_train = extract_features(encoder, data.train_images)
    f_test = extract_features(encoder, data.test_images)
    t0 = time.perf_counter()
    w, b, history = train_linear_classifier(
        f_train, data.train_labels, data.num_classes, key=jax.random.key(seed + 1),
        epochs=profile.linear_epochs, learning_rate=profile.linear_learning_rate)
    few = few_label_indices(data.train_labels, data.num_classes, profile.few_labels, seed)
    w_few, b_few, _ = train_linear_classifier(
        f_train[few], data.train_labels[few], data.num_classes,
        key=jax.random.key(seed + 2), epochs=profile.linear_epochs * 3,
        learning_rate=profile.linear_learning_rate)
    result = {
        "linear_accuracy": classifier_accuracy(w, b, f_test, data.test_labels),
        "few_label_accuracy": classifier_accuracy(w_few, b_few, f_test, data.test_labels),
        "linear_train_accuracy": classifier_accuracy(w, b, f_train, data.train_labels),
        "knn_accuracy": knn_accuracy(normalise(f_test), data.test_labels,
                                     normalise(f_train), data.train_labels,
                                     data.num_classes, k=profile.knn_k),
        "linear_seconds": time.perf_counter() - t0,
        "feature_dim": int(f_train.shape[1]),
    }
    ckpt = StageCheckpoints(stage_dir, save_every=1, keep=1, asynchronous=False)
    try:
        ckpt.save(profile.linear_epochs, {"w": w, "b": b}, {"config": config}, force=True)
    finally:
        ckpt.close()
    atomic_write(result_path, json.dumps({"config": config, "result": result}, indent=2))
    return result


def few_label_indices(labels: np.ndarray, num_classes: int, per_class: int,
                      seed: int) -> np.ndarray:
    """`per_class` training indices of each class, drawn once with `seed`."""
    rng = np.random.default_rng([seed, 11])
    out = []
    for c in range(num_classes):
        idx = np.flatnonzero(labels == c)
        if len(idx) < per_class:
            raise ValueError(f"few_labels {per_class} exceeds the {len(idx)} training "
                             f"images of class {c}")
        out.append(rng.choice(idx, per_class, replace=False))
    return np.sort(np.concatenate(out))


def test_features(spec: RunSpec, profile: Profile, data, *, run_dir: Path, seed: int = 0,
                  num_devices: int = 1) -> np.ndarray:
    encoder = load_encoder(spec, profile, data, run_dir=run_dir, seed=seed,
                           num_devices=num_devices)
    return np.asarray(extract_features(encoder, data.test_images))


# --------------------------------------------------------------------------- reports


def row(spec: RunSpec, pre: dict, ev: dict) -> dict:
    return {"name": spec.name, "method": spec.method, "momentum": spec.momentum,
            "queue_size": spec.queue_size, **pre, **ev}


def _fmt(v, spec=".1f", scale=1.0):
    return "-" if v is None else format(v * scale, spec)


def table_markdown(title: str, rows: list[dict], first: str = "method",
                   first_of: Callable[[dict], str] | None = None) -> str:
    first_of = first_of or (lambda r: r["name"])
    lines = [f"### {title}", "",
             f"| {first} | linear acc. % | linear acc. %, {{few}} labels/class | "
             "kNN acc. % | pretrain img/s | pretrain s |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {first_of(r)} | {_fmt(r['linear_accuracy'], '.1f', 100)} | "
            f"{_fmt(r['few_label_accuracy'], '.1f', 100)} | "
            f"{_fmt(r['knn_accuracy'], '.1f', 100)} | "
            f"{_fmt(r.get('images_per_second'), '.0f')} | {_fmt(r.get('seconds'), '.0f')} |")
    return "\n".join(lines) + "\n"


def plot_embeddings(features: dict[str, np.ndarray], labels: np.ndarray, path: Path,
                    method: str = "tsne", seed: int = 0) -> str:
    """One panel per encoder: a 2-D t-SNE (scikit-learn) or PCA of its test features,
    coloured by class. Returns the method used."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ebm_jax.io import atomic_savefig

    fig, axes = plt.subplots(1, len(features), figsize=(4 * len(features), 4))
    axes = np.atleast_1d(axes)
    for ax, (name, f) in zip(axes, features.items()):
        x = (f - f.mean(0)) / (f.std(0) + 1e-6)
        if method == "tsne":
            from sklearn.manifold import TSNE

            pca = np.linalg.svd(x, full_matrices=False)
            x50 = x @ pca[2][: min(50, x.shape[1])].T
            xy = TSNE(2, init="pca", random_state=seed, perplexity=30).fit_transform(x50)
        else:
            _, _, vt = np.linalg.svd(x, full_matrices=False)
            xy = x @ vt[:2].T
        sc = ax.scatter(xy[:, 0], xy[:, 1], c=labels, cmap="tab10", s=6)
        ax.set_title(name)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(sc, ax=list(axes), shrink=0.8, label="class")
    title = {"tsne": "t-SNE", "pca": "PCA"}[method]
    fig.suptitle(f"{title} of frozen test features")
    atomic_savefig(fig, path)
    plt.close(fig)
    return method


# --------------------------------------------------------------------------- experiment

ABLATIONS = ("momentum", "mechanism", "queue")


def plan(main: str, profile: Profile, ablations) -> dict[str, list[RunSpec]]:
    """The tables of an experiment and the runs of each (runs shared between tables
    train once)."""
    if main not in ("moco", "instdisc"):
        raise ValueError(f"main method must be 'moco' or 'instdisc', got {main!r}")
    for a in ablations:
        if a not in ABLATIONS:
            raise ValueError(f"ablations must be among {ABLATIONS}, got {a!r}")
    tables = {"main": [RunSpec("random"), default_spec(main, profile),
                       RunSpec("supervised")]}
    if "momentum" in ablations:
        tables["momentum"] = [RunSpec("moco", m, profile.queue_size)
                              for m in profile.momentum_values]
    if "mechanism" in ablations:
        tables["mechanism"] = [RunSpec("end-to-end"), default_spec("memory-bank", profile),
                               default_spec("moco", profile)]
    if "queue" in ablations:
        tables["queue"] = [RunSpec("moco", profile.momentum, k)
                           for k in profile.queue_values]
    return tables


def _label(table: str, r: dict, profile: Profile) -> str:
    if table == "momentum":
        return f"m = {r['momentum']:g}"
    if table == "queue":
        return f"K = {r['queue_size']}"
    if table == "mechanism":
        k = profile.batch_size - 1 if r["method"] == "end-to-end" else r["queue_size"]
        return f"{r['method']} (K = {k})"
    return r["method"]


TITLES = {
    "main": "Linear evaluation of frozen features",
    "momentum": "Momentum ablation (MoCo, K = {K})",
    "mechanism": "Mechanism ablation (same encoder, loss temperature and schedule)",
    "queue": "Queue size K (MoCo, m = {m})",
}


def report_markdown(tables: dict[str, list[dict]], profile: Profile, meta: dict) -> str:
    few = profile.few_labels
    parts = [f"## {meta['experiment']} on {meta['data']} "
             f"({meta['num_train']} train / {meta['num_test']} test images, "
             f"{profile.arch} width {profile.width}, {profile.epochs} epochs)", ""]
    floor = {r["method"]: r for r in tables["main"]}
    for name, rows in tables.items():
        title = TITLES[name].format(K=profile.queue_size, m=profile.momentum)
        shown = rows
        if name != "main":  # the floor and ceiling beside every ablation
            shown = [floor["random"], *rows, floor["supervised"]]
        md = table_markdown(title, shown, first="encoder" if name == "main" else "run",
                            first_of=lambda r, n=name: (
                                r["method"] if r["method"] in ("random", "supervised")
                                else _label(n, r, profile)))
        parts.append(md.replace("{few}", str(few)))
    return "\n".join(parts)


def run_experiment(main: str, profile: Profile, data: image_data.ImageData, *,
                   run_dir: Path, out: Path, mesh, ablations=(), seed: int = 0,
                   restart: bool = False, progress: bool = True, plot: str = "tsne",
                   writer: bool = True, log: Callable[[str], None] = print) -> dict:
    """Pretrains and evaluates every run of `plan(main, ...)`, then writes
    `<out>/<main>.json`, `<main>.md` and (unless plot="none") `<main>_features.png`."""
    tables = plan(main, profile, ablations)
    specs = list(dict.fromkeys(s for rows in tables.values() for s in rows))
    num_devices = mesh.devices.size
    for s in specs:  # every error that can be known before the first step
        check_run(s, profile, data, num_devices)
    started = time.time()
    results: dict[str, dict] = {}
    for i, spec in enumerate(specs, 1):
        log(f"[{i}/{len(specs)}] {spec.name}: pretraining")
        pre = pretrain(spec, profile, data, run_dir=run_dir, mesh=mesh, seed=seed,
                       restart=restart, progress=progress)
        ev = linear_eval(spec, profile, data, run_dir=run_dir, seed=seed,
                         num_devices=num_devices, restart=restart)
        results[spec.name] = row(spec, pre, ev)
        log(f"[{i}/{len(specs)}] {spec.name}: linear {100 * ev['linear_accuracy']:.1f}%, "
            f"{profile.few_labels}/class {100 * ev['few_label_accuracy']:.1f}%, "
            f"kNN {100 * ev['knn_accuracy']:.1f}%")
    rows = {name: [results[s.name] for s in specs_] for name, specs_ in tables.items()}
    meta = {
        "experiment": f"ebm-jax {main}", "data": data.name,
        "num_train": len(data.train_images), "num_test": len(data.test_images),
        "image_shape": list(data.image_shape), "profile": dataclasses.asdict(profile),
        "seed": seed, "devices": [str(d) for d in mesh.devices.flat],
        "jax": jax.__version__, "wall_seconds": time.time() - started,
    }
    payload = {**meta, "tables": rows}
    markdown = report_markdown(rows, profile, meta)
    if writer:
        from ebm_jax.io import write_report

        if plot != "none":
            shown = [RunSpec("random"), default_spec(main, profile), RunSpec("supervised")]
            feats = {s.name: test_features(s, profile, data, run_dir=run_dir, seed=seed,
                                           num_devices=num_devices) for s in shown}
            used = plot_embeddings(feats, data.test_labels, out / f"{main}_features.png",
                                   plot, seed)
            markdown += f"\n![{used} of the test features]({main}_features.png)\n"
        write_report(out, main, payload, markdown)
    return payload
