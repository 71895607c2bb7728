# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Detection box refinement with an energy-based head
#
# Fredrik K. Gustafsson, Martin Danelljan, Radu Timofte and Thomas B. Schön, "How to
# Train Your Energy-Based Model for Regression", sec. 4.2 (object detection) with
# sec. 2.2 (prediction by gradient ascent) and eqs. 11-12 (NCE). A detector's
# boxes are refined by an energy head f(x, y): the features of box y are pooled from
# frozen feature maps (PrRoIPool), fully connected layers give one f per class, and
# each box is moved by gradient ascent on f (sec. 2.2). The head is trained with NCE
# (eq. 12): each annotated box against M noise boxes drawn around it.
#
# This notebook runs the pieces of the Table 2 recipe (`ebm_jax.recipes.detection`) one
# by one, on the benchmark the library generates:
#
# 1. the generated detection set (drawn shapes, ground-truth boxes) and the simulated
#    detector's boxes before NMS;
# 2. the frozen feature pyramid (the recipe's `backbone` stage);
# 3. the NCE noise boxes of one annotated box, and the training of the energy head
#    (the recipe's head stage);
# 4. f around a few test boxes;
# 5. guided NMS by f and T gradient-ascent steps: the boxes before and after
#    refinement drawn on the same test images;
# 6. COCO AP, AP50 and AP75 on the held-out test split, before and after refinement.
#
# With the default sizes it runs in one and a half to two minutes on 2 CPU cores (more
# when other jobs share them). Its data, backbone and head are far smaller than the
# paper's (96 x 96 images, a 16-channel pyramid, a 5 x 5 pool and 64 hidden units, 600
# training steps; the paper: COCO, Faster R-CNN's 256-channel FPN, pool 7, FC 1024, 60k
# steps), so its AP figures show the pipeline at work, not the paper's numbers. The
# `large` size has the paper's head (pool 7, 256 channels, FC 1024) on a four-level
# pyramid, for a GPU.

# %%
# Colab: install the package where it is not importable yet, from REPO: the one place to
# say where (the repository's git URL, https://... or ssh://..., or a local checkout's
# path; or set EBM_JAX_REPO). pip is held to the runtime's jax and jaxlib, so Colab's GPU
# or TPU build of JAX stays as it is.
import os

REPO = os.environ.get("EBM_JAX_REPO", "")
EXTRAS = "[coco]"  # beyond the core, this notebook needs pycocotools (COCO AP)
try:
    import ebm_jax  # noqa: F401
except ImportError:
    import importlib.metadata as metadata
    import subprocess
    import sys

    if not REPO:
        raise RuntimeError("ebm_jax is not installed: set REPO above to the repository's "
                           "git URL or a local checkout's path, then run this cell again")
    pins = "".join(f"{name}=={metadata.version(name)}\n" for name in ("jax", "jaxlib")
                   if any(metadata.distributions(name=name)))
    target = (f"ebm_jax{EXTRAS} @ git+{REPO}" if REPO.startswith(
        ("http://", "https://", "ssh://")) else f"{REPO}{EXTRAS}")
    if subprocess.run([sys.executable, "-m", "pip", "install", "-q", target, "-c",
                       "/dev/stdin"], input=pins, text=True).returncode:  # the pins
        raise RuntimeError(f"pip could not install ebm_jax beside {pins.split()} (it needs "
                           "jax >= 0.11): see pip's message above")
    import ebm_jax  # noqa: F401

# %% [markdown]
# ## Parameters
#
# One size preset sets every cost. The method's hyperparameters (NCE's sigmas, the
# refinement's step lengths, guided NMS) are the recipe's defaults: the paper's.

# %%
import tempfile
import time

# "tiny": seconds, for the tests; "default": about two minutes on 2 CPU cores;
# "large": a Colab GPU/TPU runtime.
SIZE = "default"  # @param ["tiny", "default", "large"]
SIZE = os.environ.get("EBM_JAX_NOTEBOOK_SIZE", SIZE)  # scripts and the tests set it
SIZES = {
    "tiny": dict(num_train=8, num_test=4, image_size=64, num_classes=2, max_objects=2,
                 min_size=8, widths=(8,), channels=8, backbone_steps=2, backbone_batch=4,
                 hidden=16, pool_size=3, canonical_size=48.0, head_steps=2,
                 boxes_per_batch=4, warmup_steps=1, num_samples=4, refine_steps=2,
                 shown=2),
    "default": dict(num_train=240, num_test=40, image_size=96, num_classes=3,
                    max_objects=3, min_size=12, widths=(16, 32), channels=16,
                    backbone_steps=300, backbone_batch=16, hidden=64, pool_size=5,
                    canonical_size=72.0, head_steps=600, boxes_per_batch=16,
                    warmup_steps=30, num_samples=128, refine_steps=10, shown=4),
    "large": dict(num_train=1000, num_test=200, image_size=256, num_classes=4,
                  max_objects=4, min_size=16, widths=(32, 64, 128, 256), channels=256,
                  backbone_steps=3000, backbone_batch=32, hidden=1024, pool_size=7,
                  canonical_size=192.0, head_steps=3000, boxes_per_batch=128,
                  warmup_steps=100, num_samples=128, refine_steps=10, shown=4),
}
if SIZE not in SIZES:
    raise ValueError(f"SIZE must be one of {sorted(SIZES)}, got {SIZE!r}")
P = SIZES[SIZE]
SEED = 0
START = time.perf_counter()

NUM_TRAIN = P["num_train"]  # generated training images (their boxes carry noise)
NUM_TEST = P["num_test"]  # held-out test images, clean boxes: the scored split
IMAGE_SIZE = P["image_size"]  # square images, in pixels
NUM_CLASSES = P["num_classes"]  # one drawn shape per class
MAX_OBJECTS = P["max_objects"]  # objects per image: 1 .. MAX_OBJECTS
MIN_SIZE = P["min_size"]  # smallest object side, in pixels
WIDTHS = P["widths"]  # the pyramid's stage widths: one level each, strides 4, 8, ...
CHANNELS = P["channels"]  # channels of every pyramid level (the paper: 256)
BACKBONE_STEPS = P["backbone_steps"]  # training steps of the frozen backbone
BACKBONE_BATCH = P["backbone_batch"]  # images per backbone step
HIDDEN = P["hidden"]  # the head's two FC widths (the paper: 1024)
POOL_SIZE = P["pool_size"]  # PrRoIPool output P x P (the paper: 7)
CANONICAL_SIZE = P["canonical_size"]  # box side assigned to the middle level
HEAD_STEPS = P["head_steps"]  # head training steps (the paper: 60k)
BOXES_PER_BATCH = P["boxes_per_batch"]  # annotated boxes per head step
WARMUP_STEPS = P["warmup_steps"]  # linear warm-up of the head's learning rate
NUM_SAMPLES = P["num_samples"]  # M: NCE noise boxes per annotated box (the paper: 128)
REFINE_STEPS = P["refine_steps"]  # T: gradient-ascent steps (the paper: 10)
SHOWN = P["shown"]  # test images drawn in the figures
LEARNING_RATE = 1e-2  # SGD, momentum 0.9: 10x the paper's 1e-3, for a short schedule
GRAD_CLIP = 5.0  # global gradient-norm clip, as the recipe's quick variant
WORKDIR = tempfile.mkdtemp(prefix="detection_notebook_")  # data, checkpoints, records

# %%
import jax
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

from ebm_jax.recipes import detection as recipe
from ebm_jax.train.stages import RunContext

# the recipe's config: the paper's hyperparameters (its defaults) at this notebook's
# sizes; one method, NCE, scored on the held-out test split
cfg = recipe.Config(
    name=f"notebook-{SIZE}", methods=("nce",), eval_split="test", seed=SEED,
    num_train=NUM_TRAIN, num_test=NUM_TEST, image_size=IMAGE_SIZE,
    num_classes=NUM_CLASSES, max_objects=MAX_OBJECTS, min_size=MIN_SIZE, widths=WIDTHS,
    channels=CHANNELS, backbone_steps=BACKBONE_STEPS, backbone_batch=BACKBONE_BATCH,
    hidden=HIDDEN, pool_size=POOL_SIZE, canonical_size=CANONICAL_SIZE,
    head_steps=HEAD_STEPS, boxes_per_batch=BOXES_PER_BATCH, warmup_steps=WARMUP_STEPS,
    num_samples=NUM_SAMPLES, refine_steps=REFINE_STEPS, learning_rate=LEARNING_RATE,
    grad_clip=GRAD_CLIP)
# the run's context: the work directory, one device, the seed; every stage draws its
# keys as fold_in(fold_in(key(SEED), hash(stage)), hash(purpose)). A fresh temporary
# directory that no other run uses: no lock is taken.
ctx = RunContext(WORKDIR, seed=SEED, progress=False, lock=False)
recipe.check(cfg, ctx)  # every setting checked before any data is made
print(f"JAX {jax.__version__} on {jax.devices()[0].platform}; SIZE={SIZE}; work "
      f"directory {WORKDIR}")
print(f"NCE sigmas {cfg.nce_sigmas}, M = {cfg.num_samples}; refinement T = "
      f"{cfg.refine_steps} steps of {recipe.step_lengths(cfg, 'nce')} (cx, cy, log w, "
      f"log h); guided NMS at IoU {cfg.nms_iou}")


def show_image(ax, image, title=None):
    """An image on axes whose units are the boxes' (continuous) pixel coordinates."""
    h, w = image.shape[:2]
    ax.imshow(image, extent=(0, w, h, 0))
    ax.set_xlim(0, w)
    ax.set_ylim(h, 0)
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=9)


def draw_boxes(ax, boxes, color, **kwargs):
    """xyxy boxes (N, 4) in input pixels."""
    for x0, y0, x1, y1 in np.asarray(boxes, float).reshape(-1, 4):
        ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, color=color,
                               **kwargs))


def xyxy(entries, scale):
    """COCO result entries (xywh in the image's pixels) as xyxy input pixels."""
    b = np.array([e["bbox"] for e in entries], np.float32).reshape(-1, 4) * scale
    return np.concatenate([b[:, :2], b[:, :2] + b[:, 2:]], 1)


# %% [markdown]
# ## The generated detection set
#
# `open_data` (the recipe's) writes the benchmark under the work directory
# (`ebm_jax.data.detection.generate_dataset`): drawn shapes, one shape per class, of
# random colours and sizes on textured backgrounds, later objects occluding earlier ones;
# a box is an object's full extent. The training split's boxes carry annotation noise
# (std 0.1 in the relative box space); the held-out test split's are clean. Below, test
# images with their ground-truth boxes, coloured by class.

# %%
import json

from ebm_jax.recipes.detection_stages import open_data

data = open_data(cfg, ctx)
train, test = data.train, data.val  # data.val is the scored split: here the test split
# the class names, in the categories' order (class c is category_ids[c - 1])
category_names = {c["id"]: c["name"]
                  for c in json.loads(test.annotations.read_text())["categories"]}
class_names = [category_names[c] for c in test.category_ids]
print(f"train: {len(train)} images, {int(train.valid.sum())} boxes (noisy); "
      f"test: {len(test)} images, {int(test.valid.sum())} boxes; classes {class_names}; "
      f"{IMAGE_SIZE}x{IMAGE_SIZE} pixels")

class_colours = plt.cm.tab10(np.arange(10))
fig, axes = plt.subplots(1, SHOWN, figsize=(3 * SHOWN, 3.2), squeeze=False)
for i, ax in enumerate(axes[0]):
    show_image(ax, test.images([i])[0], f"test image {test.image_ids[i]}")
    for box, c in zip(test.boxes[i][test.valid[i]], test.classes[i][test.valid[i]]):
        draw_boxes(ax, box, class_colours[c], linewidth=1.5)
        ax.text(box[0] + 1, box[1] + 4, class_names[c - 1], color=class_colours[c],
                fontsize=7, fontweight="bold")
fig.suptitle("ground-truth boxes (colour: the class)", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## The detector's boxes, before NMS
#
# The detector is simulated as a per-class detector before NMS
# (`ebm_jax.data.detector.simulate_detections`): each object is found by several
# candidates at IoU 0.5-0.9 with it, scored by that IoU plus noise (so the best-scored
# box is not always the best-placed), some also under another class at half the score,
# and about one low-scored false cluster per image. These are the boxes the energy head
# gets to choose among (guided NMS) and refine.

# %%
from ebm_jax.data.detector import duplicate_fraction

detections = data.detections
print(f"{len(detections)} detector boxes on {len(test)} test images; "
      f"{100 * duplicate_fraction(detections, cfg.nms_iou):.0f}% overlap another of "
      f"their image and class at IoU > {cfg.nms_iou} (duplicates: pre-NMS)")

fig, axes = plt.subplots(1, SHOWN, figsize=(3 * SHOWN, 3.2), squeeze=False)
for i, ax in enumerate(axes[0]):
    show_image(ax, test.images([i])[0], f"test image {test.image_ids[i]}")
    draw_boxes(ax, test.boxes[i][test.valid[i]], "lime", linewidth=1.5, linestyle="--")
    mine = [d for d in detections if d["image_id"] == test.image_ids[i]]
    for d, box in zip(mine, xyxy(mine, test.scales[i])):
        draw_boxes(ax, box, "yellow", linewidth=0.5 + 1.5 * d["score"], alpha=0.8)
fig.suptitle("the detector's boxes (yellow, width: score) and ground truth (green)",
             fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## The frozen backbone (the recipe's `backbone` stage)
#
# The paper pools from the FPN levels of a trained Faster R-CNN and keeps them frozen.
# Here a small feature pyramid (`ebm_jax.models.fpn`: strides 4, 8, ..., group norm, a
# top-down path) is trained for `BACKBONE_STEPS` steps with a dense FCOS-style box head
# on the (noisy) training boxes, then frozen. `FeatureSource` computes its levels once
# per split and keeps them in memory.

# %%
from ebm_jax import detection as det
from ebm_jax.recipes.detection_stages import backbone_stage

backbone_id, backbone_figures, backbone = backbone_stage(cfg, ctx, data)
cache = cfg.feature_cache_gib * 2**30  # kept in memory up to this, else per request
train_features = det.FeatureSource(backbone, train, cache_bytes=cache)
test_features = det.FeatureSource(backbone, test, cache_bytes=cache)
levels = test_features.levels([0])
print(f"backbone: {backbone_figures.steps} steps, final dense loss "
      f"{backbone_figures.final_loss:.3f}")
print("levels of one image:", [tuple(lv.shape[1:]) for lv in levels],
      f"(strides {train_features.strides})")

# %% [markdown]
# ## NCE's noise boxes (eq. 12)
#
# NCE trains f to pick each annotated box y_i out of M noise boxes y^(m) drawn from the
# mixture q(y | y_i) = (1/K) sum_k N(y; y_i, sigma_k^2 I) (eq. 11) in the box's relative
# space (cx / w0, cy / h0, log w, log h), with the paper's sigmas (0.075, 0.15, 0.3):
#
# $$L = -\log \frac{\exp\{f(x, y^{(0)}) - \log q(y^{(0)} | y_i)\}}
#   {\sum_{m=0}^{M} \exp\{f(x, y^{(m)}) - \log q(y^{(m)} | y_i)\}},
#   \qquad y^{(0)} = y_i.$$
#
# Below, an annotated training box and 24 of the noise boxes the loss
# draws for it (`gaussian_mixture(...).sample`, decoded with `decode_relative`).

# %%
from ebm_jax.energy import gaussian_mixture
from ebm_jax.ops.boxes import decode_relative, encode_relative

key = jax.random.key(SEED)
noise_key = jax.random.fold_in(key, 0)  # purpose 0: the noise boxes of this figure
i_img, i_box = det.box_index(train)[0]
annotated = train.boxes[i_img, i_box]
y_i = encode_relative(annotated, annotated)
noise = gaussian_mixture(cfg.nce_sigmas).sample(noise_key, y_i, 24)
noise_boxes = decode_relative(noise, annotated)

fig, ax = plt.subplots(figsize=(3.6, 3.6))
show_image(ax, train.images([i_img])[0], "NCE: annotated box (green), noise (orange)")
draw_boxes(ax, noise_boxes, "orange", linewidth=0.7, alpha=0.8)
draw_boxes(ax, annotated, "lime", linewidth=2)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Training the energy head (the recipe's head stage)
#
# `DetectionEnergyHead`: PrRoIPool P x P on the box's pyramid level -> FC -> FC -> one
# f per class (the last layer at N(0, 0.001^2), so f starts near 0). `head_stage` trains
# it with `make_detection_loss("nce", M, sigmas=...)`: `BOXES_PER_BATCH` annotated boxes
# a step with their images' frozen levels, SGD with momentum 0.9 and weight decay, a
# linear warm-up and x0.1 at 2/3 and 5/6 of the steps. Its records
# (`metrics.jsonl` in the stage's directory) give the loss curve: each point is the
# loss of one logged step's batch, so the curve is noisy. At f = 0 (the start) the loss
# is log sum_m q(y_i | y_i) / q(y^(m) | y_i) >= log(M + 1); it falls as f learns to
# rank y_i above the noise boxes.

# %%
from ebm_jax.recipes.detection_stages import head_stage
from ebm_jax.train.records import read_metrics

spec = recipe.head_spec(cfg, "nce", cfg.num_samples)
stage, head_id, head_figures, head = head_stage(cfg, ctx, spec, data, train_features,
                                                backbone_id)
records = [r for r in read_metrics(stage.dir(ctx)) if "loss" in r]
head_steps = [int(r["step"]) for r in records]
head_losses = [float(r["loss"]) for r in records]
print(f"{spec.name}: {head_figures.steps} steps, "
      f"{head_figures.seconds_per_step or float('nan'):.3f} s/step, final loss "
      f"{head_figures.final_loss:.3f}")

fig, ax = plt.subplots(figsize=(5.5, 3))
ax.plot(head_steps, head_losses, "o-", markersize=3)
ax.set_xlabel("step")
ax.set_ylabel("NCE loss (eq. 12)")
ax.set_title(f"energy head, M = {cfg.num_samples}")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## f around a test box
#
# The trained head's f for a ground-truth test box moved along one coordinate of its
# relative space at a time: the centre shifted by a fraction of the box's width (left)
# and both sides scaled (right). Refinement climbs these slopes. A head that has
# learned the task peaks near 0 along the centre; along the scale this small head may
# favour a somewhat smaller or larger box, and a jump marks where the box moves to
# another pyramid level (PrRoIPool pools each box from the level of its size).

# %%
from flax import nnx

graphdef, head_state = nnx.split(head)
energy = jax.jit(lambda st, lv, b, c: nnx.merge(graphdef, st)(lv, b, c))  # f of N boxes
shifts = np.linspace(-0.4, 0.4, 41, dtype=np.float32)
fig, axes = plt.subplots(1, 2, figsize=(9, 3))
for i in range(SHOWN):
    gt = test.boxes[i][test.valid[i]][:1]  # the first object of test image i
    cls = int(test.classes[i][test.valid[i]][0])
    lv = [x[0] for x in test_features.levels([i])]
    moved = np.repeat(np.asarray(encode_relative(gt, gt)), 2 * len(shifts), 0)
    moved[:len(shifts), 0] += shifts  # the centre moved by a fraction of the width
    moved[len(shifts):, 2:] += shifts[:, None]  # log w and log h moved together
    f = np.asarray(energy(head_state, lv, decode_relative(moved, gt),
                          np.full(len(moved), cls, np.int32)))
    for ax, f_dim in zip(axes, np.split(f, 2)):
        ax.plot(shifts, f_dim - f_dim[len(shifts) // 2],
                label=f"image {test.image_ids[i]}, {class_names[cls - 1]}")
axes[0].set_xlabel("centre shift / box width")
axes[1].set_xlabel("log w and log h shift")
for ax in axes:
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_ylabel("f - f(ground truth)")
axes[1].legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Guided NMS and refinement (sec. 4.2)
#
# `refine_detections` (what the recipe's evaluation runs): the detector's boxes with
# score > 0.05, clipped to the image; guided NMS by f (per class, IoU 0.5: each group
# keeps its box of highest f, which takes the group's best detector score); then
# T = `REFINE_STEPS` gradient-ascent steps on f in each box's relative space with the
# paper's step lengths for NCE, a step that lowers f undone and that box's step lengths
# halved (sec. 2.2). It returns COCO result lists: "initial", "nms" (the boxes before
# refinement) and "refined" (the same boxes after it), collected per image below.

# %%
settings = dict(step_lengths=recipe.step_lengths(cfg, "nce"),
                refine_steps=cfg.refine_steps, score_threshold=cfg.score_threshold,
                max_detections=cfg.max_detections, guided_nms=cfg.guided_nms,
                nms_iou=cfg.nms_iou)
clock = time.perf_counter()
results = det.refine_detections(head, test, test_features, detections, **settings)
print(f"refined {len(results['refined'])} boxes on {len(test)} images in "
      f"{time.perf_counter() - clock:.1f} s")

per_image = []  # one dict per test image: xyxy boxes in input pixels
for i, image_id in enumerate(test.image_ids):
    mine = {k: [e for e in v if e["image_id"] == image_id] for k, v in results.items()}
    per_image.append({"image_id": image_id, "row": i,
                      "gt": test.boxes[i][test.valid[i]],
                      "gt_classes": test.classes[i][test.valid[i]],
                      **{k: xyxy(v, test.scales[i]) for k, v in mine.items()},
                      **{f"{k}_scores": np.array([e["score"] for e in v])
                         for k, v in mine.items()}})
# a kept box dropped by the refinement (carried wholly out of the image) has no pair
paired = [p for p in per_image if len(p["nms"]) == len(p["refined"])]
print(f"{sum(len(p['nms']) for p in per_image)} boxes after guided NMS, "
      f"{sum(len(p['refined']) for p in per_image)} after refinement")

# %% [markdown]
# The same boxes before (blue) and after (red) refinement, on the same test images, with
# the ground truth (green, dashed); for legibility only the boxes scored at least
# `DRAW_SCORE` are drawn (guided NMS also keeps the low-scored boxes of other classes
# and of false clusters). Most boxes move by a pixel or two, so the second row
# zooms in on the boxes whose IoU with their object changed most (up or down). The
# scatter gives every kept box's IoU with its best-overlapping object before and after.

# %%
from ebm_jax.ops.boxes import box_iou

DRAW_SCORE = 0.5  # the boxes drawn in the first row: score at least this
before_boxes = np.concatenate([p["nms"] for p in paired]).reshape(-1, 4)
after_boxes = np.concatenate([p["refined"] for p in paired]).reshape(-1, 4)
box_row = np.concatenate([np.full(len(p["nms"]), p["row"]) for p in paired]).astype(int)
gt_boxes = np.concatenate([p["gt"] for p in paired]).reshape(-1, 4)
gt_row = np.concatenate([np.full(len(p["gt"]), p["row"]) for p in paired]).astype(int)


def best_iou(boxes):
    """Each box's best IoU with a ground-truth box of its image (any class), for all
    images in one call (one compilation)."""
    iou = np.asarray(box_iou(boxes, gt_boxes))
    return np.where(box_row[:, None] == gt_row[None], iou, 0.0).max(1, initial=0.0)


iou_before, iou_after = best_iou(before_boxes), best_iou(after_boxes)
moved = np.argsort(-np.abs(iou_after - iou_before), kind="stable")[:SHOWN]

fig = plt.figure(figsize=(3 * SHOWN + 3.6, 6.4))
grid = fig.add_gridspec(2, SHOWN + 1, width_ratios=[1] * SHOWN + [1.3])
for i in range(SHOWN):
    p = per_image[i]
    ax = fig.add_subplot(grid[0, i])
    show_image(ax, test.images([i])[0], f"test image {p['image_id']}")
    draw_boxes(ax, p["gt"], "lime", linewidth=1.5, linestyle="--")
    draw_boxes(ax, p["nms"][p["nms_scores"] >= DRAW_SCORE], "dodgerblue", linewidth=2.5)
    draw_boxes(ax, p["refined"][p["refined_scores"] >= DRAW_SCORE], "red", linewidth=1.0)
for k, j in enumerate(moved):
    ax = fig.add_subplot(grid[1, k])
    show_image(ax, test.images([box_row[j]])[0],
               f"IoU {iou_before[j]:.2f} -> {iou_after[j]:.2f}")
    draw_boxes(ax, gt_boxes[gt_row == box_row[j]], "lime", linewidth=1.5, linestyle="--")
    draw_boxes(ax, before_boxes[j], "dodgerblue", linewidth=2.5)
    draw_boxes(ax, after_boxes[j], "red", linewidth=1.0)
    span = np.concatenate([before_boxes[j], after_boxes[j]]).reshape(2, 4)
    lo = np.maximum(span[:, :2].min(0) - 4, 0)  # the two boxes and 4 px, in the image
    hi = np.minimum(span[:, 2:].max(0) + 4, IMAGE_SIZE)
    ax.set_xlim(lo[0], hi[0])
    ax.set_ylim(hi[1], lo[1])
ax = fig.add_subplot(grid[:, SHOWN])
ax.scatter(iou_before, iou_after, s=10, alpha=0.6)
ax.plot([0, 1], [0, 1], color="grey", lw=0.8)
ax.set_aspect("equal")
ax.set_xlabel("IoU before refinement")
ax.set_ylabel("IoU after")
ax.set_title(f"{np.mean(iou_after > iou_before + 1e-6):.0%} of {len(iou_before)} boxes "
             "improved", fontsize=9)
fig.suptitle(f"ground truth (green), after guided NMS (blue), refined (red); top row: "
             f"score >= {DRAW_SCORE}; bottom row: the largest changes, zoomed",
             fontsize=10)
fig.tight_layout()
plt.show()
print(f"mean IoU with the best ground-truth box: {iou_before.mean():.3f} before, "
      f"{iou_after.mean():.3f} after refinement")

# %% [markdown]
# ## AP before and after refinement
#
# COCO AP (IoU 0.5:0.95), AP50 and AP75 from pycocotools (`ebm_jax.eval.coco`), on the
# held-out test split, of the detector's boxes, of the same boxes after guided NMS by f
# (`ap_before`: the boxes the refinement starts from) and after refinement
# (`ap_after`). The refinement's own gain is `ap_after - ap_before`. The detector's
# boxes include its duplicates; guided NMS keeps the box of highest f of each group, so
# its AP depends on how well f ranks the candidates, and with a small head it can fall
# below the detector's. With a few dozen test images every figure moves by a point or
# two with the seed (Table 2 on the docs' detection page gives the spread over seeds).

# %%
from ebm_jax.eval.coco import coco_evaluate

ap_detector = coco_evaluate(test.annotations, results["initial"])
ap_before = coco_evaluate(test.annotations, results["nms"])
ap_after = coco_evaluate(test.annotations, results["refined"])
METRICS = ("AP", "AP50", "AP75")
print(f"{'boxes':32s} " + " ".join(f"{k:>6s}" for k in METRICS))
for label, ap in (("detector (before NMS)", ap_detector),
                  ("guided NMS (before refinement)", ap_before),
                  (f"refined (T = {cfg.refine_steps})", ap_after)):
    print(f"{label:32s} " + " ".join(f"{100 * ap[k]:6.1f}" for k in METRICS))
print(f"{'refinement gain':32s} "
      + " ".join(f"{100 * (ap_after[k] - ap_before[k]):+6.1f}" for k in METRICS))
print(f"notebook ran in {time.perf_counter() - START:.0f} s")

# %% [markdown]
# ## Further
#
# The paper's detection experiments are configs of this recipe
# (`ebm_jax/recipes/detection.py`), each run by the command in its docstring, e.g.
# `ebm-jax run table2_detection` (the quick variant: 128 x
# 128 images, six methods, three seeds, about half an hour on 2 CPU cores):
#
# - `experiments/ebm_regression/table2_detection.py`: the eight training methods
#   (Table 2), with a `paper` variant for COCO and a detector's pre-NMS boxes;
# - `experiments/ebm_regression/figure3_detection_m.py`: AP and cost against M
#   (Figures 3 and 4);
# - `experiments/ebm_regression/figure5_detection_beta.py`: NCE+ against beta (Figure 5);
# - `experiments/ebm_regression/table3_detection_sigma.py`: NCE's sigmas (Table 3).
#
# The pieces used here: docs/library.md, "Detection energy head"; the experiments and
# their results: docs/detection.md.
