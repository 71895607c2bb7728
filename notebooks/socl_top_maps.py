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
# # SoCL: tracking representations from single point annotations
#
# Qiangqiang Wu and Antoni B. Chan, "Learning Tracking Representations from Single Point
# Annotations" (SoCL). One point per frame, no box: each point becomes a *target
# objectness prior* (TOP) map (sec. 3.1), and SiamFC's backbone is trained from scratch
# with a soft contrastive loss weighted by those maps (sec. 3.2). The trained backbone
# then tracks with the unchanged SiamFC tracker ("SoCL-Siam", sec. 3.3).
#
# This notebook walks through it on a small generated benchmark:
#
# 1. the TOP map of one frame, step by step: random and EdgeBoxes proposals, their
#    objectness, NMS, the pixel score map and the map on the backbone's feature grid;
# 2. one SoCL batch, its TOP maps and the loss (eqs. 1-10) with a random backbone;
# 3. a short SoCL-Siam training;
# 4. SiamFC tracking a test sequence with the trained and with the random backbone.
#
# With the default sizes it runs in one to two minutes on 2 CPU cores; the experiments
# of the paper's tables are the configs `experiments/tracking/socl_*.py` (last cell).

# %%
# Colab: install the package where it is not importable yet, from REPO: the one place to
# say where (the repository's git URL, https://... or ssh://..., or a local checkout's
# path; or set EBM_JAX_REPO). pip is held to the runtime's jax and jaxlib, so Colab's GPU
# or TPU build of JAX stays as it is.
import os

REPO = os.environ.get("EBM_JAX_REPO", "")
EXTRAS = ""  # this notebook needs the core only
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
# One size preset drives every size below: `tiny` takes seconds (the tests), `default`
# one to two minutes on 2 CPU cores, `large` is for a Colab GPU runtime (the quick
# config's sizes, `experiments/tracking/socl_table1_ablation.py`; the TOP maps are
# computed on the CPU, about 0.4 s a frame, so its 2,000 annotated frames take some 15
# minutes, the training and tracking a few on the GPU). The environment variable
# `EBM_JAX_NOTEBOOK_SIZE` sets it too.

# %%
import tempfile

SIZE = "default"  # @param ["tiny", "default", "large"]
SIZE = os.environ.get("EBM_JAX_NOTEBOOK_SIZE", SIZE)  # scripts and the tests set it
SIZES = {  # videos, frames, frame size; proposals; SoCL batch, steps, network
    "tiny": dict(train=3, frames=6, test_frames=5, height=96, width_px=128,
                 num_random=300, edgeboxes=50, videos=2, steps=3, width=0.125,
                 input_size=111, context_side=64.0),
    "default": dict(train=8, frames=20, test_frames=60, height=120, width_px=160,
                    num_random=5000, edgeboxes=1000, videos=6, steps=30, width=0.125,
                    input_size=127, context_side=96.0),
    "large": dict(train=50, frames=80, test_frames=80, height=240, width_px=320,
                  num_random=5000, edgeboxes=1000, videos=12, steps=300, width=0.25,
                  input_size=159, context_side=144.0),
}
if SIZE not in SIZES:
    raise ValueError(f"SIZE must be one of {sorted(SIZES)}, got {SIZE!r}")
P = SIZES[SIZE]
NUM_TRAIN, NUM_FRAMES, TEST_FRAMES = P["train"], P["frames"], P["test_frames"]  # videos
HEIGHT, WIDTH_PX = P["height"], P["width_px"]  # frame size in pixels
NUM_RANDOM, EDGEBOXES = P["num_random"], P["edgeboxes"]  # proposals per frame
VIDEOS = P["videos"]  # N: videos per batch (2N regions)
STEPS = P["steps"]  # SoCL-Siam training steps
WIDTH = P["width"]  # AlexNet channel multiplier
INPUT_SIZE = P["input_size"]  # context region, input pixels
CONTEXT_SIDE = P["context_side"]  # ... in frame pixels
ANNOTATE_EVERY = 2  # a point every k frames
LR = 3e-4  # Adam, the paper's learning rate
MAX_GAP = 100  # the two frames of a video are fewer than this apart
SEED = 0
DATA_DIR = tempfile.mkdtemp(prefix="socl_notebook_")  # the generated videos

# %%
import time

import jax
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

START = time.perf_counter()
print(f"JAX {jax.__version__} on {jax.devices()[0].platform}; SIZE={SIZE}; data in "
      f"{DATA_DIR}")


def draw_box(ax, box, color, **kwargs):
    """An xywh box, 1-indexed (GOT-10k): pixel columns x - 1 .. x + w - 2, drawn on
    imshow's axes, where pixel j spans [j - 0.5, j + 0.5]."""
    x, y, w, h = box
    ax.add_patch(Rectangle((x - 1.5, y - 1.5), w, h, fill=False, color=color, **kwargs))


def draw_point(ax, point, **kwargs):
    """A point (x, y), 1-indexed as points.txt: on imshow's axes at (x - 1, y - 1)."""
    ax.plot(point[0] - 1, point[1] - 1, "*", color="red", markersize=12,
            markeredgecolor="white", **kwargs)


# %% [markdown]
# ## The data
#
# A generated benchmark in the GOT-10k layout (`ebm_jax.data.tracking`): a target
# textured from a photo moves over another photo, with distractors, occluders and
# out-of-view stretches; train and test use disjoint photos. Each sequence carries
# `points.txt`, the centre of the true box on every frame where the target is visible:
# the only annotation SoCL trains on. The boxes are read for the figures and the
# tracking scores only.

# %%
from ebm_jax.data.sequences import read_got10k
from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split

specs = {split: TrackingSpec(split=split, num_sequences=n, num_frames=frames,
                             height=HEIGHT, width=WIDTH_PX, seed=SEED)
         for split, n, frames in (("train", NUM_TRAIN, NUM_FRAMES),
                                  ("test", 1, TEST_FRAMES))}
for split, spec in specs.items():
    generate_tracking_split(os.path.join(DATA_DIR, split), spec, progress=False)
train = read_got10k(os.path.join(DATA_DIR, "train"))
test = read_got10k(os.path.join(DATA_DIR, "test"))
print(f"{len(train)} training sequences of {NUM_FRAMES} frames and a test sequence of "
      f"{TEST_FRAMES}, {WIDTH_PX}x{HEIGHT}")

# %% [markdown]
# ## The TOP map of one frame (sec. 3.1)
#
# From the point P of a frame: 5,000 random boxes centred on P (log-uniform scales and
# aspect ratios) and the EdgeBoxes proposals whose centre lies within 30 px of P; each
# box scored by objectness (saliency, colour contrast and edge density, after Alexe et
# al.); NMS at IoU 0.7 keeps the best 64. The pixel score map is, at each pixel, the sum
# of the scores of the kept boxes covering it; averaged over the cells of the backbone's
# feature grid and put through a softmax over the cells, it is the TOP map h that
# weights the features in the loss.

# %%
from ebm_jax.data.socl_pairs import feature_grid, point_frames, region_top_map
from ebm_jax.ops.crops import crop_square_np
from ebm_jax.tracking.top_maps import (TopMapSettings, edgebox_proposals, random_proposals,
                                       score_map, top_boxes)

top_settings = TopMapSettings(num_random=NUM_RANDOM, edgeboxes=EDGEBOXES)
seq = train[0]
t = int(point_frames(seq, seq.points)[0])  # the first frame with a usable point
frame, point, true_box = seq.read_frame(t), seq.points[t], seq.boxes[t]

rng = np.random.default_rng(SEED)
random_boxes = random_proposals(frame.shape, point, top_settings, rng)
edge_boxes = edgebox_proposals(frame, point, top_settings)
kept, scores = top_boxes(frame, point, top_settings, seed=SEED)
pixels = score_map(frame.shape[:2], kept, scores)

# a context region around the point, as the training batches cut it (0-indexed centre)
centre_yx = (point[1] - 1, point[0] - 1)
region = crop_square_np(frame, centre_yx, CONTEXT_SIDE, INPUT_SIZE)
h_region = region_top_map(kept, scores, centre_yx, CONTEXT_SIDE, INPUT_SIZE)
g, lo, stride = feature_grid(INPUT_SIZE)
print(f"{len(random_boxes)} random and {len(edge_boxes)} EdgeBoxes proposals; {len(kept)} "
      f"kept after NMS; TOP map on a {g}x{g} feature grid (sums to {h_region.sum():.3f})")

fig, axes = plt.subplots(2, 3, figsize=(13, 7))
for ax in axes.flat:
    ax.set_xticks([])
    ax.set_yticks([])
ax = axes[0, 0]
ax.imshow(frame)
draw_box(ax, true_box, "lime", linestyle="--")
draw_point(ax, point)
ax.set_title(f"{seq.name}, frame {t + 1}: point\n(true box dashed, not used)")
ax = axes[0, 1]
ax.imshow(frame)
for box in random_boxes[rng.choice(len(random_boxes), min(60, len(random_boxes)),
                                   replace=False)]:
    draw_box(ax, box, "yellow", linewidth=0.6, alpha=0.7)
draw_point(ax, point)
ax.set_title("random proposals centred on the point\n(60 of them)")
ax = axes[0, 2]
ax.imshow(frame)
for box in edge_boxes:
    draw_box(ax, box, "cyan", linewidth=0.6, alpha=0.7)
draw_point(ax, point)
ax.set_title(f"EdgeBoxes within {top_settings.edgebox_radius:g} px of the point\n"
             f"({len(edge_boxes)} proposals)")
ax = axes[1, 0]
ax.imshow(frame)
colours = plt.cm.viridis((scores - scores.min()) / max(np.ptp(scores), 1e-9))
for box, colour in zip(kept[::-1], colours[::-1]):  # the best drawn last, on top
    draw_box(ax, box, colour, linewidth=1.0)
draw_point(ax, point)
ax.set_title(f"the {len(kept)} kept after NMS\n(colour: objectness, yellow = best)")
ax = axes[1, 1]
ax.imshow(pixels, cmap="magma")
draw_box(ax, true_box, "lime", linestyle="--")
draw_point(ax, point)
ax.set_title("pixel score map\n(sum of the scores of the covering boxes)")
ax = axes[1, 2]
ax.imshow(np.asarray(region, np.uint8))
edge = lo + stride * g - 0.5  # the cells tile input pixels lo .. lo + stride g - 1
ax.imshow(h_region, cmap="magma", alpha=0.55, extent=(lo - 0.5, edge, edge, lo - 0.5),
          interpolation="nearest")
ax.plot((INPUT_SIZE - 1) / 2, (INPUT_SIZE - 1) / 2, "*", color="red", markersize=12,
        markeredgecolor="white")  # the region is centred on the point here
ax.set_xlim(-0.5, INPUT_SIZE - 0.5)
ax.set_ylim(INPUT_SIZE - 0.5, -0.5)
ax.set_title(f"TOP map h of a context region\n({g}x{g} feature cells, softmax over cells)")
for ax in axes.flat[:5]:  # proposals reach past the frame: keep its extent
    ax.set_xlim(-0.5, frame.shape[1] - 0.5)
    ax.set_ylim(frame.shape[0] - 0.5, -0.5)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## TOP proposals of every annotated frame
#
# As the recipe does (`ebm_jax.recipes.tracking.socl_stages.top_cache`), the kept boxes and their
# scores are computed once per annotated frame (every `ANNOTATE_EVERY`-th frame with a
# usable point); the batches then draw each region's map from them.

# %%
tops = {}
clock = time.perf_counter()
for i, s in enumerate(train):
    frames = point_frames(s, s.points)
    frames = frames[frames % ANNOTATE_EVERY == 0]
    boxes = np.full((len(frames), top_settings.keep, 4), np.nan, np.float32)
    box_scores = np.full((len(frames), top_settings.keep), np.nan, np.float32)
    for r, f in enumerate(frames):
        b, sc = top_boxes(s.read_frame(int(f)), s.points[f], top_settings,
                          seed=SEED * 100_000 + i * 1000 + int(f))
        boxes[r, :len(b)], box_scores[r, :len(sc)] = b, sc
    tops[i] = {"frames": frames, "boxes": boxes, "scores": box_scores}
count = sum(len(v["frames"]) for v in tops.values())
print(f"TOP proposals of {count} frames in {time.perf_counter() - clock:.1f} s")

# %% [markdown]
# ## One SoCL batch (sec. 3.2.4)
#
# `context_batches` takes N distinct videos and two frames of each (fewer than
# `MAX_GAP` apart), and cuts a square context region around each frame's point, moved
# and scaled a little so that the target is not always centred nor of one size; each
# region's TOP map is drawn from its frame's proposals. Row i and row j below are the
# two frames of each video; the map is overlaid.

# %%
from ebm_jax.data.socl_pairs import context_batches

batches = context_batches(train, tops, points=[s.points for s in train], videos=VIDEOS,
                          max_gap=MAX_GAP, seed=SEED, input_size=INPUT_SIZE,
                          context_side=CONTEXT_SIDE)
batch = batches(0)
print({k: v.shape for k, v in batch.items()})

fig, axes = plt.subplots(2, VIDEOS, figsize=(2.2 * VIDEOS, 4.8), squeeze=False)
for n in range(VIDEOS):
    for row, tag in enumerate("ij"):
        ax = axes[row, n]
        ax.imshow(batch[f"{tag}_images"][n])
        ax.imshow(batch[f"h_{tag}"][n], cmap="magma", alpha=0.5, interpolation="nearest",
                  extent=(lo - 0.5, edge, edge, lo - 0.5))
        ax.set_xlim(-0.5, INPUT_SIZE - 0.5)
        ax.set_ylim(INPUT_SIZE - 0.5, -0.5)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"video {n}, frame {tag}", fontsize=9)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## The loss on it, with a random backbone (eqs. 1-10)
#
# SiamFC's AlexNet embeds the 2N regions into (g, g, C) feature maps. Each frame's
# *global soft template* is its features averaged with the TOP map as weights (eq. 1);
# the queries' positives are the other frame of the same video, and the *local soft
# templates* made from the top of each map (eqs. 7-8). The negatives of a pair: the
# templates of the other N - 1 videos' two frames (2N - 2), the *soft negative samples*
# of both frames for both queries (4N: each frame's features weighted away from the
# target, eqs. 2-6) and the *mix-ups* of the two hardest of them for each query (2N):
# 8N - 2 in all.

# %%
from flax import nnx

from ebm_jax.contrastive.socl import SoCLSettings, socl_loss
from ebm_jax.models.alexnet import SiamFCAlexNet


def new_backbone():
    """SiamFC's AlexNet with the weights of SEED (every call gives the same weights,
    in fresh buffers: the training below donates its own)."""
    return SiamFCAlexNet(width=WIDTH, rngs=nnx.Rngs(SEED))


settings = SoCLSettings()  # tau 0.5, theta_b 0.8, b_p 0.6: the paper's
backbone = new_backbone()  # train mode: batch statistics, as in training
images = np.concatenate([batch["i_images"], batch["j_images"]])
features = backbone(images)
print(f"features {features.shape} (2N regions, {g}x{g} grid, C channels)")
loss, metrics = socl_loss(features[:VIDEOS], features[VIDEOS:], batch["h_i"],
                          batch["h_j"], jax.random.key(SEED), settings)
print(f"SoCL loss with a random backbone: {float(loss):.4f}")
print(f"negatives per pair: {int(metrics['num_negatives'])} = 8N - 2 with N = {VIDEOS}")
for name in ("positive_similarity", "hardest_negative_similarity", "accuracy"):
    print(f"  {name}: {float(metrics[name]):.3f}")

# %% [markdown]
# ## SoCL-Siam: a short training
#
# The recipe's stage (`ebm_jax.recipes.tracking.socl_stages.train_socl`) with a plain loop in
# place of its checkpointing one: the backbone from scratch, Adam at 3e-4, one jitted,
# donated step per batch (`ebm_jax.train.make_train_step`), the loss above
# (`make_socl_siam_loss`). The recipe also drops the learning rate x0.1 at half of its
# steps, left out in this short run.

# %%
import optax

from ebm_jax.tracking.socl_siam import make_socl_siam_loss
from ebm_jax.train import (create_train_state, make_mesh, make_train_step, merge_model,
                           replicate, shard_batch)

mesh = make_mesh(1)  # one device; make_mesh() spreads the batch over all of them
optimizer = optax.adam(LR)
graphdef, state = create_train_state(new_backbone(), optimizer,
                                     jax.random.key(SEED + 1))
train_step = make_train_step(graphdef, make_socl_siam_loss(settings), optimizer, mesh)
state = replicate(state, mesh)
losses, accuracies = [], []
clock = time.perf_counter()
for step in range(STEPS):
    state, step_metrics = train_step(state, shard_batch(batches(step), mesh))
    losses.append(float(step_metrics["loss"]))
    accuracies.append(float(step_metrics["accuracy"]))
    if step % max(1, STEPS // 5) == 0 or step == STEPS - 1:
        print(f"step {step:4d}  loss {losses[-1]:.4f}  accuracy {accuracies[-1]:.2f}")
print(f"{STEPS} steps in {time.perf_counter() - clock:.1f} s (the first compiles)")
trained = merge_model(graphdef, state)

fig, ax = plt.subplots(figsize=(6, 3.2))
ax.plot(losses, label="loss (eq. 10)")
ax.set_xlabel("step")
ax.set_ylabel("loss")
ax2 = ax.twinx()
ax2.plot(accuracies, color="tab:orange", alpha=0.6, label="accuracy")
ax2.set_ylabel("GST positive beats every negative")
ax.set_title("SoCL-Siam training")
fig.legend(loc="upper right", bbox_to_anchor=(0.88, 0.88))
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Tracking with SiamFC (sec. 3.3)
#
# The trained backbone tracks with the unchanged SiamFC tracker (its first frame's box
# given, as in every tracking benchmark), beside the same tracker with the random
# backbone it started from. AUC is the area under the OTB success curve of the
# sequence. After a few dozen steps on a handful of videos the gap is small and noisy;
# the experiment configs train longer on more videos and average over sequences and
# seeds.

# %%
from ebm_jax.eval.tracking import sequence_scores
from ebm_jax.tracking.siamfc import (SiamFCSettings, make_tracker, model_embed,
                                     track_sequence)

embed, trained_params = model_embed(trained)
_, random_params = model_embed(new_backbone())  # the same architecture: one tracker
tracker = make_tracker(embed, SiamFCSettings())
seq = test[0]
results = {}
for label, params in (("SoCL-Siam", trained_params), ("random backbone", random_params)):
    boxes, seconds = track_sequence(tracker, params,
                                    (seq.read_frame(k) for k in range(len(seq))),
                                    seq.boxes[0])
    results[label] = boxes
    auc = sequence_scores(boxes, seq.boxes)["auc"]
    print(f"{label:16s} AUC {100 * auc:5.1f} %  ({len(seq)} frames of {seq.name})")

shown = np.unique(np.linspace(0, len(seq) - 1, 6).round().astype(int))
fig, axes = plt.subplots(1, len(shown), figsize=(2.6 * len(shown), 2.6), squeeze=False)
for ax, k in zip(axes[0], shown):
    ax.imshow(seq.read_frame(int(k)))
    if np.all(np.isfinite(seq.boxes[k])):
        draw_box(ax, seq.boxes[k], "lime", linewidth=1.5)
    draw_box(ax, results["random backbone"][k], "dodgerblue", linewidth=1.2)
    draw_box(ax, results["SoCL-Siam"][k], "red", linewidth=1.2)
    ax.set_xlim(-0.5, seq.image_size[1] - 0.5)
    ax.set_ylim(seq.image_size[0] - 0.5, -0.5)
    ax.set_title(f"frame {k + 1}", fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
fig.suptitle("true (green), SoCL-Siam (red), random backbone (blue)", fontsize=10)
fig.tight_layout()
plt.show()
print(f"notebook ran in {time.perf_counter() - START:.0f} s")

# %% [markdown]
# ## Further
#
# The paper's experiments are configs of one recipe (`ebm_jax/recipes/tracking/socl.py`), each
# run by the command in its docstring, e.g.
# `ebm-jax run socl_table1_ablation:quick` (after
# `pip install 'ebm_jax[experiments]'`: the tracking runs read records through grain):
#
# - `experiments/tracking/socl_table1_ablation.py`: GST, +SNS, +mix-up, +LST (Table 1);
# - `experiments/tracking/socl_figure7_thresholds.py`: the theta_b and b_p sweeps (Fig. 7);
# - `experiments/tracking/socl_figure8_bce.py`: BCE-Siam on pseudo boxes from TOP maps
#   (Fig. 8);
# - `experiments/tracking/socl_table2_annotation_cost.py`: Box-Siam vs SoCL-Siam at equal
#   annotation time (Table 2, Fig. 9);
# - `experiments/tracking/socl_table4_fees.py`: annotation and training fees (Table 4);
# - `experiments/tracking/socl_table6_noisy_points.py`: points shifted off the centre
#   (Table 6).
#
# The documentation describes the pieces used here in "SoCL: tracking representations
# from points" (docs/library.md), the experiments in docs/socl.md, and the generated
# benchmark and the SiamFC baseline in docs/tracking.md.
