"""Training the detection energy head with the methods of Table 2 (seed 000, sec. 4.2).

The energy of a box is the head's f on one image's frozen feature levels. Samples live
in the relative space (cx/w0, cy/h0, log w, log h) of each (annotated) ground-truth box,
with one sigma for all four coordinates (REFERENCE.md sec. 2), and every loss is the
shared one of `ebm_jax.energy`, vmapped over the ground-truth boxes of an image and over
the images of a batch.

    loss_fn = make_detection_loss("nce+", num_samples=128)
    loss = loss_fn(head, (levels, boxes, classes, valid), key)   # a batch of images

The experiment (`ebm-jax detection`) has three kinds of stage in one run directory:

- `backbone`: a feature pyramid (`ebm_jax.models.fpn`) trained with a dense box head on
  the training boxes; frozen afterwards, loaded from its Orbax checkpoint.
- `head-<method>-m<M>[-<overrides>]`: one energy head per method and setting, trained on
  the frozen levels with SGD (momentum 0.9, weight decay 1e-4, linear warm-up from 1/3,
  learning rate x0.1 at 2/3 and 5/6 of the steps; REFERENCE.md sec. 2).
- its `eval.json`: the detector's boxes, guided NMS by f, then T gradient-ascent steps,
  scored by the COCO evaluator (AP, AP50, AP75) before and after.
"""

from __future__ import annotations

import dataclasses
import hashlib
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

from ebm_jax.data import detection as det_data
from ebm_jax.energy import batch_loss, make_loss
from ebm_jax.ops.boxes import decode_relative, encode_relative, guided_nms

# Table 2's methods: (loss of ebm_jax.energy, hyperparameters other than M).
METHODS = {
    "ml-is": ("ml-is", {"sigmas": (0.0375, 0.075, 0.15)}),
    "kld-is": ("kld-is", {"sigmas": (0.0375, 0.075, 0.15), "label_sigma": 0.0225}),
    "ml-mcmc-1": ("ml-mcmc", {"num_steps": 1, "step_size": 1e-5}),
    "ml-mcmc-4": ("ml-mcmc", {"num_steps": 4, "step_size": 1e-5}),
    "ml-mcmc-8": ("ml-mcmc", {"num_steps": 8, "step_size": 1e-5}),
    "nce": ("nce", {"sigmas": (0.075, 0.15, 0.3)}),
    "dsm": ("dsm", {"sigma": 0.075}),
    "nce+": ("nce+", {"sigmas": (0.075, 0.15, 0.3), "beta": 0.1}),
}

# Refinement step lengths (l_c for cx, cy; l_s for log w, log h), REFERENCE.md sec. 2.
STEP_LENGTHS = {
    "nce+": (8e-4, 3.2e-3), "ml-is": (4e-4, 1.6e-3), "kld-is": (4e-4, 1.6e-3),
    "nce": (4e-4, 1.6e-3), "dsm": (2.5e-5, 1e-4), "ml-mcmc-1": (2.5e-5, 1e-4),
    "ml-mcmc-4": (2.5e-5, 1e-4), "ml-mcmc-8": (2.5e-5, 1e-4),
}


def method_loss(method: str, num_samples: int = 128, **overrides) -> Callable:
    """The bound `ebm_jax.energy` loss of a Table 2 method with M = num_samples
    (overrides replace the paper's sigmas, beta, ...)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
    name, hp = METHODS[method]
    return make_loss(name, **{**hp, "num_samples": num_samples, **overrides})


def step_lengths(method: str) -> tuple[float, float, float, float]:
    lc, ls = STEP_LENGTHS[method]
    return (lc, lc, ls, ls)


def image_loss(head, loss: Callable, levels, boxes, classes, valid, key) -> jax.Array:
    """Mean loss over one image's ground-truth boxes (G, 4) xyxy, classes (G,), valid
    (G,) (False rows are padding, weight 0)."""

    def energy(x, y):  # x: the reference box and its class, (5,)
        ref, cls = x[:4], x[4].astype(jnp.int32)
        return head(levels, decode_relative(y, ref)[None], cls[None])[0]

    xs = jnp.concatenate([boxes, classes[:, None].astype(boxes.dtype)], axis=1)
    y = encode_relative(boxes, boxes)
    return batch_loss(loss, energy, xs, y, key, weights=valid)


def make_detection_loss(method: str, num_samples: int = 128, **overrides) -> Callable:
    """`loss_fn(head, (levels, boxes, classes, valid), key) -> (loss, metrics)` for
    `ebm_jax.train`: levels is a list of (B, H_l, W_l, C) frozen feature maps, boxes
    (B, G, 4) the annotated boxes (padded), classes (B, G) in [1, C], valid (B, G).
    Images without a valid box get weight 0 (documented skip), and a batch without
    any valid box is an error in `check_detection_batch`."""
    loss = method_loss(method, num_samples, **overrides)

    def loss_fn(head, batch, key):
        levels, boxes, classes, valid = batch
        n = boxes.shape[0]
        keys = jax.random.split(key, n)
        per_image = jax.vmap(
            lambda lv, b, c, v, k: image_loss(head, loss, lv, b, c, v, k)
        )(list(levels), boxes, classes, valid, keys)
        has_box = jnp.any(valid, axis=1).astype(per_image.dtype)
        value = jnp.sum(per_image * has_box) / jnp.maximum(jnp.sum(has_box), 1.0)
        return value, {"images_with_boxes": jnp.sum(has_box)}

    return loss_fn


def check_detection_batch(boxes, classes, valid, num_classes: int) -> None:
    """Concrete checks before training: valid boxes with positive size, classes in
    [1, num_classes], and at least one valid box."""
    from ebm_jax.ops.prroi_pool import check_boxes

    b, c, v = np.asarray(boxes), np.asarray(classes), np.asarray(valid, bool)
    if not v.any():
        raise ValueError("the batch has no valid ground-truth box")
    check_boxes(b[v], name="ground-truth boxes")
    if c[v].min() < 1 or c[v].max() > num_classes:
        raise ValueError(f"classes must be in [1, {num_classes}], got range "
                         f"[{c[v].min()}, {c[v].max()}]")


# --------------------------------------------------------------------------------------
# The experiment


TABLE2_METHODS = ("ml-is", "ml-mcmc-1", "ml-mcmc-4", "ml-mcmc-8", "kld-is", "nce", "dsm",
                  "nce+")
SWEEP_M_METHODS = ("ml-is", "kld-is", "nce", "nce+")
# Table 3's NCE sigma sets and Figure 5's NCE+ betas
SIGMA_SETS = ((0.0125, 0.025, 0.05), (0.025, 0.05, 0.1), (0.05, 0.1, 0.2),
              (0.075, 0.15, 0.3), (0.1, 0.2, 0.4))
BETAS = (0.025, 0.05, 0.1, 0.2, 0.3, 0.5)
PAPER_TABLE2 = {"ml-is": (39.4, 58.6, 42.1), "ml-mcmc-1": (36.4, 57.9, 38.8),
                "ml-mcmc-4": (36.4, 57.9, 39.0), "ml-mcmc-8": (36.4, 58.0, 39.0),
                "kld-is": (39.6, 58.6, 42.6), "nce": (39.5, 58.6, 42.4),
                "dsm": (36.3, 57.9, 38.9), "nce+": (39.7, 58.7, 42.7)}
PAPER_TABLE3 = (38.58, 38.95, 39.12, 39.17, 39.05)


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    # generated data (ignored with a real COCO-format dataset)
    num_train: int = 240
    num_val: int = 80
    image_size: int = 128
    num_classes: int = 4
    max_objects: int = 4
    min_size: int = 12
    annotation_noise: float = 0.1
    detector_iou: tuple[float, float] = (0.5, 0.9)
    false_positives: float = 1.0
    # backbone stage
    widths: tuple[int, ...] = (32, 64)
    channels: int = 32
    backbone_steps: int = 300
    backbone_batch: int = 16
    backbone_lr: float = 3e-3
    # head stages
    hidden: int = 128
    pool_size: int = 5
    canonical_size: float = 96.0
    head_steps: int = 300
    boxes_per_batch: int = 16
    learning_rate: float = 1e-2
    weight_decay: float = 1e-4
    warmup_steps: int = 30
    grad_clip: float | None = None  # global gradient-norm limit (None: none, as the paper)
    num_samples: int = 128
    # prediction
    refine_steps: int = 10
    step_scale: float = 1.0
    score_threshold: float = 0.05
    max_detections: int = 100
    m_values: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)


PROFILES = {
    # about ten minutes on 2 CPU cores for Table 2
    # (learning rate 10x the paper's for a 200x shorter schedule; the gradient-norm clip
    # keeps DSM, whose loss is of order 1 / sigma^2, from diverging at that rate)
    "quick": Profile("quick", grad_clip=5.0),
    # the paper's head and schedule (REFERENCE.md sec. 2) on a real COCO-format dataset
    # (--coco-root); 16 images per batch is about 128 boxes on COCO
    "paper": Profile("paper", image_size=800, widths=(64, 128, 256, 512), channels=256,
                     backbone_steps=90000, backbone_batch=16, backbone_lr=1e-3, hidden=1024,
                     pool_size=7, canonical_size=224.0, head_steps=60000,
                     boxes_per_batch=128, learning_rate=1e-3, warmup_steps=500),
    # a few steps of everything, for smoke tests
    "tiny": Profile("tiny", num_train=8, num_val=4, image_size=64, num_classes=2,
                    max_objects=2, min_size=8, widths=(8, 16), channels=8,
                    backbone_steps=2, backbone_batch=4, hidden=16, pool_size=3,
                    canonical_size=48.0, head_steps=2, boxes_per_batch=4, warmup_steps=1,
                    num_samples=4, refine_steps=2, m_values=(1, 4)),
}


def lr_schedule(profile: Profile) -> optax.Schedule:
    """Linear warm-up from lr/3 over warmup_steps, then x0.1 at 2/3 and at 5/6 of the
    steps (the paper's 40k and 50k of 60k)."""
    n, lr = profile.head_steps, profile.learning_rate
    warm = min(profile.warmup_steps, max(n - 1, 1))
    # join_schedules hands the second schedule the steps since the warm-up ended
    steps = optax.piecewise_constant_schedule(
        lr, {max(int(n * 2 / 3), warm + 1) - warm: 0.1,
             max(int(n * 5 / 6), warm + 2) - warm: 0.1})
    ramp = optax.linear_schedule(lr / 3, lr, warm)
    return optax.join_schedules([ramp, steps], [warm])


@dataclasses.dataclass(frozen=True)
class HeadSpec:
    """One head stage: a Table 2 method, M and overrides of its paper hyperparameters."""
    method: str
    num_samples: int = 128
    overrides: tuple = ()  # sorted (name, value) pairs

    @staticmethod
    def make(method: str, num_samples: int, **overrides) -> "HeadSpec":
        if method not in METHODS:
            raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
        paper = METHODS[method][1]
        norm = {k: tuple(v) if isinstance(v, (list, tuple)) else v
                for k, v in overrides.items()}
        unknown = set(norm) - set(paper)
        if unknown:
            raise ValueError(f"{method} has no hyperparameter {sorted(unknown)}; it has "
                             f"{sorted(paper)}")
        kept = tuple(sorted((k, v) for k, v in norm.items() if paper[k] != v))
        return HeadSpec(method, int(num_samples), kept)

    @property
    def name(self) -> str:
        parts = [f"head-{self.method}", f"m{self.num_samples}"]
        for k, v in self.overrides:
            v = "_".join(f"{x:g}" for x in v) if isinstance(v, tuple) else f"{v:g}"
            parts.append(f"{k}{v}")
        return "-".join(parts)


@dataclasses.dataclass
class DetectionData:
    train: det_data.DetectionSet
    val: det_data.DetectionSet
    detections: list[dict]  # the detector's output on val (COCO result format)
    name: str
    _config: dict | None = None  # data_config's cache
    _detections_key: str | None = None  # the detections' hash, computed once


def make_data(profile: Profile, *, root: Path, seed: int = 0, coco_root: Path | None = None,
              detections: Path | None = None, train_split: str = "train2017",
              val_split: str = "val2017") -> DetectionData:
    """The generated benchmark under `root` (written once, reused), or a real
    COCO-format dataset: `coco_root/annotations/instances_<split>.json` and
    `coco_root/<split>/` with the detector's val output in `detections`."""
    if coco_root is not None:
        coco_root = Path(coco_root)
        if detections is None:
            raise ValueError("--detections (the detector's COCO result file on "
                             f"{val_split}) is needed with --coco-root")
        ann = coco_root / "annotations"
        train = det_data.load_detection_set(ann / f"instances_{train_split}.json",
                                            coco_root / train_split,
                                            image_size=profile.image_size)
        val = det_data.load_detection_set(ann / f"instances_{val_split}.json",
                                          coco_root / val_split,
                                          image_size=profile.image_size)
        dets = _read_detections(detections, val)
        return DetectionData(train, val, dets, f"coco:{coco_root}")
    if detections is not None:
        raise ValueError("--detections needs --coco-root (the generated benchmark "
                         "simulates its detector)")
    root = Path(root)
    gen = dict(image_size=profile.image_size, num_classes=profile.num_classes,
               max_objects=profile.max_objects, min_size=profile.min_size,
               annotation_noise=profile.annotation_noise)
    sets = {}
    for split, n, s in (("train", profile.num_train, seed * 2 + 1),
                        ("val", profile.num_val, seed * 2 + 2)):
        d = root / split
        spec = {**gen, "num_images": n, "seed": s}
        spec_path = d / "spec.json"
        if not (spec_path.exists() and json.loads(spec_path.read_text()) == spec):
            det_data.generate_dataset(d, **spec)
            det_data.atomic_write(spec_path, json.dumps(spec))
        sets[split] = d
    train = det_data.load_detection_set(sets["train"] / "annotations_noisy.json",
                                        sets["train"] / "images",
                                        image_size=profile.image_size, name="train",
                                        preload=True)
    val = det_data.load_detection_set(sets["val"] / "annotations.json",
                                      sets["val"] / "images", image_size=profile.image_size,
                                      name="val", preload=True)
    dets = det_data.simulate_detections(val.annotations, seed=seed,
                                        iou_range=profile.detector_iou,
                                        false_positives=profile.false_positives)
    return DetectionData(train, val, dets, f"generated:{root}")


def _read_detections(path: Path, val: det_data.DetectionSet) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"detection file {path} does not exist")
    dets = json.loads(path.read_text())
    if not isinstance(dets, list):
        raise ValueError(f"{path} must hold a list of COCO result entries")
    det_data.check_detections(dets, json.loads(val.annotations.read_text()))
    return dets


def _fingerprint(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def data_config(data: DetectionData) -> dict:
    """What a stage depends on in the data (computed once per DetectionData: the
    training boxes are hashed as bytes, which stays cheap on all of COCO)."""
    if data._config is None:
        boxes = np.ascontiguousarray(data.train.boxes.round(3), np.float32)
        data._config = {
            "name": data.name, "num_train": len(data.train), "num_val": len(data.val),
            "train_boxes": hashlib.sha256(boxes.tobytes()).hexdigest()[:16],
            "image_size": data.train.image_size, "classes": data.train.num_classes}
    return dict(data._config)


# -- backbone stage --------------------------------------------------------------------

def build_backbone(profile: Profile, num_classes: int, seed: int = 0):
    from ebm_jax.models.fpn import DenseBoxModel, FeaturePyramid

    rngs = nnx.Rngs(seed)
    backbone = FeaturePyramid(widths=profile.widths, channels=profile.channels, rngs=rngs)
    return DenseBoxModel(backbone, num_classes, rngs=rngs)


def train_backbone(profile: Profile, data: DetectionData, *, run_dir: Path, mesh,
                   seed: int = 0, restart: bool = False, progress: bool = True):
    """The `backbone` stage (resumes); returns the frozen FeaturePyramid."""
    from ebm_jax.models.fpn import dense_loss, dense_targets
    from ebm_jax.train import create_train_state, fit, make_train_step, merge_model

    train = data.train
    model = build_backbone(profile, train.num_classes, seed)
    strides = model.backbone.strides
    size = train.image_size
    n, b = len(train), profile.backbone_batch
    schedule = optax.warmup_cosine_decay_schedule(
        profile.backbone_lr / 10, profile.backbone_lr, max(1, profile.backbone_steps // 20),
        profile.backbone_steps)
    opt = optax.adamw(schedule, weight_decay=1e-4)
    graphdef, state = create_train_state(model, opt, jax.random.key(seed))
    step = make_train_step(graphdef, dense_loss, opt, mesh)

    def batches(s):  # a function of (seed, step) alone, so a resumed run sees the same
        rng = np.random.default_rng([seed, 11, s])
        idx = rng.choice(n, size=b, replace=n < b)
        imgs = train.images(idx)
        targets = []
        for stride in strides:
            ts = [dense_targets(train.boxes[j], train.classes[j], train.valid[j], size, size,
                                stride) for j in idx]
            targets.append((np.stack([t[0] for t in ts]), np.stack([t[1] for t in ts])))
        return imgs, tuple(targets)

    config = {"stage": "backbone", "data": data_config(data), "seed": seed,
              "widths": list(profile.widths), "channels": profile.channels,
              "steps": profile.backbone_steps, "batch": b, "lr": profile.backbone_lr}
    every = max(1, profile.backbone_steps // 10)
    state = fit(Path(run_dir) / "backbone", state, step, batches,
                num_steps=profile.backbone_steps, config=config, save_every=every * 5,
                keep=2, log_every=every, restart=restart, progress=progress,
                description="backbone", global_batches=True)
    return merge_model(graphdef, state).backbone


class FeatureSource:
    """Frozen feature levels of a DetectionSet's images: computed once and kept in
    memory when they fit in `cache_bytes`, else computed for each request."""

    def __init__(self, backbone, data: det_data.DetectionSet, *, batch: int = 32,
                 cache_bytes: float = 2e9, progress: bool = False):
        graphdef, state = nnx.split(backbone)
        self.data, self.batch = data, batch
        self._fn = jax.jit(lambda st, x: nnx.merge(graphdef, st)(x))
        self._state = state
        s = data.image_size
        per_image = sum((s // st) ** 2 for st in backbone.strides) * backbone.channels * 4
        self.strides = backbone.strides
        self.cache = None
        if per_image * len(data) <= cache_bytes:
            self.cache = self._compute(np.arange(len(data)), progress)

    def _compute(self, idx, progress=False) -> list[np.ndarray]:
        from tqdm import tqdm

        chunks = []
        starts = range(0, len(idx), self.batch)
        for i in tqdm(starts, desc=f"features {self.data.name}", disable=not progress,
                      leave=False):
            part = idx[i:i + self.batch]
            # padded to a power of two: a few compiled shapes, and one image (as in
            # prediction without the cache) costs one image, not a whole batch
            pad = min(self.batch, 1 << (len(part) - 1).bit_length()) - len(part)
            imgs = self.data.images(np.concatenate([part, np.repeat(part[-1:], pad)]))
            out = self._fn(self._state, imgs)
            chunks.append([np.asarray(lv)[:len(part)] for lv in out])
        return [np.concatenate([c[k] for c in chunks]) for k in range(len(self.strides))]

    def levels(self, idx) -> list[np.ndarray]:
        idx = np.asarray(idx, int)
        if self.cache is not None:
            return [lv[idx] for lv in self.cache]
        uniq, inv = np.unique(idx, return_inverse=True)
        return [lv[inv] for lv in self._compute(uniq)]


# -- head stages -----------------------------------------------------------------------

def build_head(profile: Profile, num_classes: int, strides, seed: int = 0):
    from ebm_jax.models.detection_head import DetectionEnergyHead

    return DetectionEnergyHead(profile.channels, num_classes, hidden=profile.hidden,
                               pool_size=profile.pool_size, strides=strides,
                               canonical_size=profile.canonical_size, rngs=nnx.Rngs(seed))


def _box_index(data: det_data.DetectionSet) -> np.ndarray:
    """(K, 2) (image, row) of every valid training box; images without one are
    skipped (documented), and a set with none is an error."""
    idx = np.argwhere(data.valid)
    if len(idx) == 0:
        raise ValueError(f"{data.name}: no image has a (non-crowd) box to train on")
    return idx


def head_config(spec: HeadSpec, profile: Profile, data: DetectionData, seed: int,
                num_devices: int) -> dict:
    keys = ("widths", "channels", "backbone_steps", "backbone_batch", "backbone_lr",
            "hidden", "pool_size", "canonical_size", "head_steps", "boxes_per_batch",
            "learning_rate", "weight_decay", "warmup_steps", "grad_clip")
    return {"stage": spec.name, "spec": dataclasses.asdict(spec), "data": data_config(data),
            "profile": {k: getattr(profile, k) for k in keys}, "seed": seed,
            "devices": num_devices}


def train_head(spec: HeadSpec, profile: Profile, data: DetectionData, features: FeatureSource,
               *, run_dir: Path, mesh, seed: int = 0, restart: bool = False,
               progress: bool = True):
    """The head stage `<run_dir>/<spec.name>` (resumes). Each step takes
    `boxes_per_batch` training boxes at random, each with its image's frozen levels.
    Returns (head, figures)."""
    from ebm_jax.train import create_train_state, fit, make_train_step, merge_model
    from ebm_jax.train.records import read_metrics

    train = data.train
    head = build_head(profile, train.num_classes, features.strides, seed)
    opt = optax.chain(
        *([optax.clip_by_global_norm(profile.grad_clip)] if profile.grad_clip else []),
        optax.add_decayed_weights(profile.weight_decay),
        optax.sgd(lr_schedule(profile), momentum=0.9))
    graphdef, state = create_train_state(head, opt, jax.random.key(seed))
    loss_fn = make_detection_loss(spec.method, spec.num_samples, **dict(spec.overrides))
    step = make_train_step(graphdef, loss_fn, opt, mesh)
    index = _box_index(train)
    k = profile.boxes_per_batch
    check_detection_batch(train.boxes[index[:, 0], index[:, 1]],
                          train.classes[index[:, 0], index[:, 1]],
                          np.ones(len(index), bool), train.num_classes)

    def batches(s):
        rng = np.random.default_rng([seed, 13, s])
        pick = index[rng.choice(len(index), size=k, replace=len(index) < k)]
        img, row = pick[:, 0], pick[:, 1]
        levels = features.levels(img)
        return (levels, train.boxes[img, row][:, None], train.classes[img, row][:, None],
                np.ones((k, 1), bool))

    stage_dir = Path(run_dir) / spec.name
    every = max(1, profile.head_steps // 20)
    state = fit(stage_dir, state, step, batches, num_steps=profile.head_steps,
                config=head_config(spec, profile, data, seed, mesh.devices.size),
                save_every=every * 10, keep=2, log_every=every, restart=restart,
                progress=progress, description=spec.name, global_batches=True)
    records = [r for r in read_metrics(stage_dir) if "steps_per_second" in r]
    rates = [r["steps_per_second"] for r in records][1:]  # the first includes compiling
    losses = [float(r["loss"]) for r in records]
    figures = {
        "steps": profile.head_steps,
        "seconds_per_iteration": 1.0 / float(np.median(rates)) if rates else None,
        "final_loss": losses[-1] if losses else None,
        "finite": bool(losses) and all(math.isfinite(v) for v in losses),
    }
    return merge_model(graphdef, state), figures


# -- prediction and evaluation ---------------------------------------------------------

_ENERGY_FNS: dict = {}


def _energy_fn(graphdef):
    if graphdef not in _ENERGY_FNS:
        _ENERGY_FNS[graphdef] = jax.jit(
            lambda st, levels, boxes, classes: nnx.merge(graphdef, st)(levels, boxes,
                                                                      classes))
    return _ENERGY_FNS[graphdef]


_NMS = jax.jit(lambda b, f, s, c, v, t, m: guided_nms(b, f, s, c, v, iou_threshold=t,
                                                       max_detections=m),
               static_argnums=(5, 6))


def _bucket(n: int) -> int:
    return max(8, 1 << (int(n) - 1).bit_length())


def refine_detections(head, method: str, val: det_data.DetectionSet, features: FeatureSource,
                      detections: list[dict], profile: Profile, *,
                      progress: bool = False) -> dict[str, list[dict]]:
    """The prediction of REFERENCE.md sec. 2 on every val image: the detector's boxes
    with score > threshold, guided NMS by f (IoU 0.5, at most max_detections), then
    `refine_steps` gradient-ascent steps with the method's step lengths (times
    `step_scale`). Returns COCO result lists: "initial" (the detector's boxes above the
    threshold), "nms" and "refined"."""
    from tqdm import tqdm

    from ebm_jax.models.detection_head import refine_boxes

    graphdef, state = nnx.split(head)
    energy = _energy_fn(graphdef)
    row = {im: i for i, im in enumerate(val.image_ids)}
    cat_index = {c: i + 1 for i, c in enumerate(val.category_ids)}
    by_image: dict[int, list[dict]] = {}
    for d in detections:
        if d["score"] > profile.score_threshold:
            by_image.setdefault(d["image_id"], []).append(d)
    lengths = tuple(v * profile.step_scale for v in step_lengths(method))
    out = {"initial": [], "nms": [], "refined": []}
    for image_id, dets in tqdm(sorted(by_image.items()), desc=f"refine {method}",
                               disable=not progress, leave=False):
        i = row[image_id]
        s = float(val.scales[i])
        n, size = len(dets), _bucket(len(dets))
        xywh = np.array([d["bbox"] for d in dets], np.float32)
        boxes = np.zeros((size, 4), np.float32)
        boxes[:, 2:] = 1.0
        boxes[:n] = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], 1) * s
        classes = np.ones(size, np.int32)
        classes[:n] = [cat_index[d["category_id"]] for d in dets]
        scores = np.zeros(size, np.float32)
        scores[:n] = [d["score"] for d in dets]
        valid = np.arange(size) < n
        levels = [lv[0] for lv in features.levels([i])]
        f = energy(state, levels, boxes, classes)
        keep, new_scores = _NMS(boxes, f, scores, classes, valid, 0.5,
                                profile.max_detections)
        keep, new_scores = np.asarray(keep), np.asarray(new_scores)
        kept = np.flatnonzero(keep)
        kb = np.zeros((_bucket(len(kept)), 4), np.float32)
        kb[:, 2:] = 1.0
        kb[:len(kept)] = boxes[kept]
        kc = np.ones(len(kb), np.int32)
        kc[:len(kept)] = classes[kept]
        refined, _, _ = refine_boxes(head, levels, kb, kc, step_length=lengths,
                                     num_steps=profile.refine_steps)
        refined = np.asarray(refined)[:len(kept)]

        def entry(box, j, score):
            x0, y0, x1, y1 = (np.asarray(box, float) / s).tolist()
            return {"image_id": image_id, "category_id": dets[j]["category_id"],
                    "bbox": [x0, y0, x1 - x0, y1 - y0], "score": float(score)}

        out["initial"] += [entry(boxes[j], j, scores[j]) for j in range(n)]
        out["nms"] += [entry(boxes[j], j, new_scores[j]) for j in kept]
        out["refined"] += [entry(refined[r], j, new_scores[j]) for r, j in enumerate(kept)]
    return out


def evaluate_head(spec: HeadSpec, head, profile: Profile, data: DetectionData,
                  features: FeatureSource, *, run_dir: Path, config: dict,
                  restart: bool = False, progress: bool = False) -> dict:
    """AP / AP50 / AP75 of the initial, guided-NMS and refined boxes, cached in the
    stage's eval.json for the same config and detections."""
    path = Path(run_dir) / spec.name / "eval.json"
    if data._detections_key is None:
        data._detections_key = _fingerprint(data.detections)
    key = {"config": config, "detections": data._detections_key,
           "prediction": {k: getattr(profile, k) for k in (
               "refine_steps", "step_scale", "score_threshold", "max_detections")}}
    key = json.loads(json.dumps(key))  # as stored: tuples become lists
    if path.exists() and not restart:
        cached = json.loads(path.read_text())
        if cached.get("key") == key:
            return cached["result"]
    t0 = time.perf_counter()
    results = refine_detections(head, spec.method, data.val, features, data.detections,
                                profile, progress=progress)
    seconds = time.perf_counter() - t0
    result = {name: det_data.coco_evaluate(data.val.annotations, dets)
              for name, dets in results.items()}
    result["refine_seconds"] = seconds
    result["num_boxes"] = len(results["refined"])
    det_data.atomic_write(path, json.dumps({"key": key, "result": result}, indent=1))
    return result


# -- the experiment --------------------------------------------------------------------

def plan(profile: Profile, *, methods=TABLE2_METHODS, sweep_m: bool = False,
         sweep_beta: bool = False, sweep_sigma: bool = False,
         num_samples: int | None = None) -> dict[str, list[HeadSpec]]:
    m = num_samples or profile.num_samples
    tables = {"table2": [HeadSpec.make(x, m) for x in methods]}
    if sweep_m:
        tables["sweep_m"] = [HeadSpec.make(x, v) for x in SWEEP_M_METHODS
                             for v in profile.m_values]
    if sweep_beta:
        tables["sweep_beta"] = ([HeadSpec.make("nce", m)]
                                + [HeadSpec.make("nce+", m, beta=b) for b in BETAS])
    if sweep_sigma:
        tables["sweep_sigma"] = [HeadSpec.make("nce", m, sigmas=s) for s in SIGMA_SETS]
    return tables


def run_experiment(profile: Profile, data: DetectionData, *, run_dir: Path, out: Path,
                   mesh, tables: dict[str, list[HeadSpec]], seed: int = 0,
                   restart: bool = False, progress: bool = True, writer: bool = True,
                   log=print) -> dict:
    """Trains the backbone and every head of `tables`, evaluates them, and writes
    `<out>/detection.json`, `detection.md` and the PNG figures of the sweeps."""
    started = time.time()
    run_dir, out = Path(run_dir), Path(out)
    _box_index(data.train)
    log("backbone stage")
    backbone = train_backbone(profile, data, run_dir=run_dir, mesh=mesh, seed=seed,
                              restart=restart, progress=progress)
    train_feats = FeatureSource(backbone, data.train, progress=progress)
    val_feats = FeatureSource(backbone, data.val, progress=progress)
    specs = list(dict.fromkeys(s for rows in tables.values() for s in rows))
    results: dict[str, dict] = {}
    for i, spec in enumerate(specs, 1):
        head, figures = train_head(spec, profile, data, train_feats, run_dir=run_dir,
                                   mesh=mesh, seed=seed, restart=restart, progress=progress)
        row = {"stage": spec.name, "method": spec.method, "num_samples": spec.num_samples,
               **{k: list(v) if isinstance(v, tuple) else v for k, v in spec.overrides},
               **figures}
        if figures["finite"]:
            config = head_config(spec, profile, data, seed, mesh.devices.size)
            row.update(evaluate_head(spec, head, profile, data, val_feats, run_dir=run_dir,
                                     config=config, restart=restart, progress=progress))
        results[spec.name] = row
        ap = (f"AP {100 * row['initial']['AP']:.1f} -> {100 * row['refined']['AP']:.1f}"
              if "refined" in row else "loss not finite: not evaluated")
        log(f"[{i}/{len(specs)}] {spec.name}: {ap}")
    rows = {name: [results[s.name] for s in specs_] for name, specs_ in tables.items()}
    meta = {"experiment": "ebm-jax detection", "data": data_config(data),
            "profile": dataclasses.asdict(profile), "seed": seed,
            "devices": [str(d) for d in mesh.devices.flat], "jax": jax.__version__,
            "wall_seconds": time.time() - started}
    payload = {**meta, "tables": rows}
    markdown = report_markdown(rows, meta)
    if writer:
        from ebm_jax.io import write_report

        for name, figure in plot_tables(rows, out).items():
            markdown += f"\n![{name}]({figure})\n"
        write_report(out, "detection", payload, markdown)
    return payload


def _ap(row: dict, which: str, key: str = "AP") -> str:
    return f"{100 * row[which][key]:.1f}" if which in row else "n/a"


def _m_cell(row: dict | None, method: str) -> str:
    if row is None:
        return "-"
    if not row["finite"]:
        return "NaN"
    cost = row["seconds_per_iteration"]
    return _ap(row, "refined") + (f" ({cost:.3f}s)" if method == "ml-is" and cost else "")


def report_markdown(tables: dict[str, list[dict]], meta: dict) -> str:
    p = meta["profile"]
    parts = [f"# Detection box refinement ({meta['data']['name']}, profile {p['name']})\n",
             f"{meta['data']['num_train']} training and {meta['data']['num_val']} val images "
             f"at {meta['data']['image_size']}px; head: PrRoIPool {p['pool_size']}x"
             f"{p['pool_size']} on {p['channels']} channels, FC {p['hidden']}, "
             f"{p['head_steps']} steps of {p['boxes_per_batch']} boxes; T = "
             f"{p['refine_steps']} refinement steps. AP in %, COCO evaluator.\n"]
    if "table2" in tables:
        rows = tables["table2"]
        first = next((r for r in rows if "initial" in r), None)
        parts.append("## Table 2: methods\n")
        if first:
            parts.append(f"Detector boxes (initial): AP {_ap(first, 'initial')}, "
                         f"AP50 {_ap(first, 'initial', 'AP50')}, "
                         f"AP75 {_ap(first, 'initial', 'AP75')}.\n")
        parts.append("| method | M | AP | AP50 | AP75 | AP after guided NMS | "
                     "gain (AP) | s / iter | paper AP / AP50 / AP75 |")
        parts.append("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            gain = (f"{100 * (r['refined']['AP'] - r['initial']['AP']):+.1f}"
                    if "refined" in r else "n/a")
            sp = r["seconds_per_iteration"]
            paper = " / ".join(f"{v:.1f}" for v in PAPER_TABLE2.get(r["method"], ()))
            sp = f"{sp:.3f}" if sp else "n/a"
            parts.append(f"| {r['method'].upper()} | {r['num_samples']} | "
                         f"{_ap(r, 'refined')} | {_ap(r, 'refined', 'AP50')} | "
                         f"{_ap(r, 'refined', 'AP75')} | {_ap(r, 'nms')} | {gain} | "
                         f"{sp} | {paper} |")
    if "sweep_m" in tables:
        rows = tables["sweep_m"]
        ms = sorted({r["num_samples"] for r in rows})
        parts.append("\n## Figure 3 / 4: AP (and s / iter) against M\n")
        parts.append("| method | " + " | ".join(f"M={m}" for m in ms) + " |")
        parts.append("|---|" + "---|" * len(ms))
        for method in dict.fromkeys(r["method"] for r in rows):
            cells = {r["num_samples"]: r for r in rows if r["method"] == method}
            parts.append(f"| {method.upper()} | "
                         + " | ".join(_m_cell(cells.get(m), method) for m in ms) + " |")
    if "sweep_beta" in tables:
        parts.append("\n## Figure 5: NCE+ against beta\n")
        parts.append("| run | beta | AP | AP50 | AP75 |")
        parts.append("|---|---|---|---|---|")
        for r in tables["sweep_beta"]:
            beta = r.get("beta", 0.1 if r["method"] == "nce+" else "-")
            parts.append(f"| {r['method'].upper()} | {beta} | {_ap(r, 'refined')} | "
                         f"{_ap(r, 'refined', 'AP50')} | {_ap(r, 'refined', 'AP75')} |")
    if "sweep_sigma" in tables:
        parts.append("\n## Table 3: NCE sigmas\n")
        parts.append("| sigmas | AP | AP50 | AP75 | paper (val AP) |")
        parts.append("|---|---|---|---|---|")
        for r, paper in zip(tables["sweep_sigma"], PAPER_TABLE3):
            sig = r.get("sigmas", list(METHODS["nce"][1]["sigmas"]))
            parts.append(f"| {', '.join(f'{s:g}' for s in sig)} | {_ap(r, 'refined')} | "
                         f"{_ap(r, 'refined', 'AP50')} | {_ap(r, 'refined', 'AP75')} | "
                         f"{paper} |")
    parts.append(f"\nWall time {meta['wall_seconds']:.0f} s on {len(meta['devices'])} "
                 f"device(s), JAX {meta['jax']}.\n")
    return "\n".join(parts)


def plot_tables(tables: dict[str, list[dict]], out: Path) -> dict[str, str]:
    """Figures 3, 4 (M sweep) and 5 (beta sweep) as PNG; returns {caption: file}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ebm_jax.io import atomic_savefig

    written = {}
    if "sweep_m" in tables:
        rows = tables["sweep_m"]
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
        for method in dict.fromkeys(r["method"] for r in rows):
            rs = sorted((r for r in rows if r["method"] == method),
                        key=lambda r: r["num_samples"])
            a.plot([r["num_samples"] for r in rs],
                   [100 * r["refined"]["AP"] if "refined" in r else np.nan for r in rs],
                   "o-", label=method.upper())
            if method == "ml-is":
                b.plot([r["num_samples"] for r in rs],
                       [r["seconds_per_iteration"] or np.nan for r in rs], "o-", color="C0")
        first = next((r for r in rows if "initial" in r), None)
        if first:
            a.axhline(100 * first["initial"]["AP"], color="gray", ls="--", label="initial")
        for ax in (a, b):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("M")
        a.set_ylabel("AP after refinement (%)")
        a.set_title("Figure 3: AP against M")
        a.legend()
        b.set_ylabel("training s / iteration")
        b.set_title("Figure 4: ML-IS training cost")
        fig.tight_layout()
        atomic_savefig(fig, out / "detection_sweep_m.png")
        plt.close(fig)
        written["AP and ML-IS cost against M"] = "detection_sweep_m.png"
    if "sweep_beta" in tables:
        rows = tables["sweep_beta"]
        plus = [r for r in rows if r["method"] == "nce+"]
        fig, ax = plt.subplots(figsize=(5, 3.8))
        ax.plot([r.get("beta", 0.1) for r in plus],
                [100 * r["refined"]["AP"] if "refined" in r else np.nan for r in plus],
                "o-", label="NCE+")
        for r in rows:
            if r["method"] == "nce" and "refined" in r:
                ax.axhline(100 * r["refined"]["AP"], color="C1", ls="--", label="NCE")
        ax.set_xlabel("beta")
        ax.set_ylabel("AP after refinement (%)")
        ax.set_title("Figure 5: NCE+ against beta")
        ax.legend()
        fig.tight_layout()
        atomic_savefig(fig, out / "detection_sweep_beta.png")
        plt.close(fig)
        written["NCE+ against beta"] = "detection_sweep_beta.png"
    return written
