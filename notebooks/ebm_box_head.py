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
# # An energy-based box head for tracking (the EBM regression paper, sec. 5)
#
# Gustafsson et al., "How to Train Your Energy-Based Model for Regression" (BMVC 2020),
# sec. 5: a tracker localises the target's centre coarsely, then refines the full box by
# gradient ascent on an energy f(x, y) trained with KLD-IS, NCE or NCE+ (the paper's
# DiMP-KLD-IS / DiMP-NCE / DiMP-NCE+). Here the coarse step is SiamFC at one scale (the
# previous size kept) and the box energy is an IoU-Net/ATOM-style head on the backbone's
# conv3 + conv5 features through PrRoIPool.
#
# This notebook:
#
# 1. generates a small tracking benchmark (real-photo backgrounds, textured targets);
# 2. trains the box head with NCE+ for about a minute on pairs of its frames, on a frozen
#    SiamFC backbone (its random initial weights here, to stay short: the experiment
#    trains Box-Siam first);
# 3. updates the tracker on one frame of a test sequence with and without the
#    refinement, and draws the coarse box, the refined box and the true box.
#
# The full comparison (all four losses, three seeds, step lengths chosen on a validation
# split) is `experiments/tracking/ebm_table4_box_head.py` (last cell).

# %%
# Colab: install the package where it is not importable yet, from REPO: the one place to
# say where (the repository's git URL, https://... or ssh://..., or a local checkout's
# path; or set EBM_JAX_REPO). pip is held to the runtime's jax and jaxlib, so Colab's GPU
# or TPU build of JAX stays as it is.
import os

REPO = os.environ.get("EBM_JAX_REPO", "")
EXTRAS = "[data]"  # beyond the core, this notebook needs grain (the training batches)
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
# `SIZE = "default"` trains the head for about a minute on 2 CPU cores; `"tiny"` takes
# seconds (the tests); `"large"` is for a Colab GPU or TPU runtime.

# %%
import json
import tempfile
import time

SIZE = "default"  # @param ["tiny", "default", "large"]
SIZE = os.environ.get("EBM_JAX_NOTEBOOK_SIZE", SIZE)  # scripts and the tests set it
SIZES = {
    "tiny": dict(sequences=2, frames=6, height=96, width=128, alexnet_width=0.125,
                 steps=3, batch=2, num_samples=8, head_width=8, hidden=16),
    "default": dict(sequences=6, frames=40, height=240, width=320, alexnet_width=0.25,
                    steps=150, batch=8, num_samples=128, head_width=32, hidden=64),
    "large": dict(sequences=50, frames=80, height=240, width=320, alexnet_width=1.0,
                  steps=3000, batch=32, num_samples=128, head_width=64, hidden=256),
}
if SIZE not in SIZES:
    raise ValueError(f"SIZE must be one of {sorted(SIZES)}, got {SIZE!r}")
P = SIZES[SIZE]
SEED = 0
START = time.perf_counter()
WORKDIR = tempfile.mkdtemp(prefix="box_head_notebook_")  # data, checkpoints

# %%
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from flax import nnx
from matplotlib.patches import Rectangle

from ebm_jax.data.sequences import read_got10k
from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split
from ebm_jax.models.alexnet import SiamFCAlexNet
from ebm_jax.ops.boxes import box_iou, xywh_to_xyxy
from ebm_jax.recipes.tracking.box_head_stages import train_box_head
from ebm_jax.tracking.box_head import BoxHeadSettings
from ebm_jax.tracking.box_head_tracker import make_box_head_tracker
from ebm_jax.train.stages import RunContext

# the run's context: the work directory, one device, the seed (every stage draws its keys
# as fold_in(fold_in(key(SEED), hash(stage)), hash(purpose)))
ctx = RunContext(WORKDIR, seed=SEED, progress=False, lock=False)
print(f"JAX {jax.__version__} on {jax.devices()[0].platform}; SIZE={SIZE}")

# %% [markdown]
# ## The data
#
# A training split of generated sequences (GOT-10k layout) and one test sequence from
# other photos.

# %%
splits = {}
for split, n in (("train", P["sequences"]), ("test", 1)):
    spec = TrackingSpec(split=split, num_sequences=n, num_frames=P["frames"],
                        height=P["height"], width=P["width"], seed=SEED + (split == "test"))
    splits[split] = read_got10k(generate_tracking_split(f"{WORKDIR}/data/{split}", spec,
                                                        progress=False))
train, (test,) = splits["train"], splits["test"]
print(f"{len(train)} training sequences of {P['frames']} frames at "
      f"{P['width']}x{P['height']}; test sequence {test.name}")

# %% [markdown]
# ## Training the box head with NCE+
#
# Pairs of frames of a training sequence: the reference frame's crop is centred on the
# target, the test frame's is moved and scaled at random. The loss is NCE+ (eq. 16 of
# the paper) in the relative box space (cx/w0, cy/h0, log w, log h): M noise boxes from a
# two-component Gaussian mixture of stds 0.05 and 0.5 around the true box, the true box
# itself perturbed with beta = 0.1 of those stds. The backbone is frozen.

# %%
backbone = SiamFCAlexNet(width=P["alexnet_width"], rngs=nnx.Rngs(SEED))
settings = BoxHeadSettings(method="nce+", steps=P["steps"], batch_size=P["batch"],
                           num_samples=P["num_samples"], width=P["head_width"],
                           hidden=P["hidden"])
t0 = time.perf_counter()
trained = train_box_head(ctx, train, data_identity={"notebook": SIZE},
                         backbone=backbone, backbone_identity={"random": SEED},
                         settings=settings)
metrics = [json.loads(line) for line in
           (ctx.stage_dir(trained.name, trained.identity) / "metrics.jsonl")
           .read_text().splitlines()]
losses = [m["loss"] for m in metrics if "loss" in m]
print(f"{trained.figures.steps} steps in {time.perf_counter() - t0:.0f} s; loss "
      f"{losses[0]:.2f} -> {losses[-1]:.2f}")
fig, ax = plt.subplots(figsize=(4, 2.6))
ax.plot([m["step"] for m in metrics if "loss" in m], losses)
ax.set(xlabel="step", ylabel="NCE+ loss")
plt.show()

# %% [markdown]
# ## Coarse and refined boxes on one frame
#
# One update of the tracker, started from the true box of the frame before: the coarse
# box is SiamFC's centre with the previous size kept (`refine=False`); the refined box is
# the mean of the top 3 of 10 boxes (the estimate and 9 jittered copies) after 10
# gradient-ascent steps on f. With a random backbone and a minute of training the
# refined box need not be the better one (the IoUs are in the legend): whether the head
# beats SiamFC's scale search is what the experiment measures, on a trained backbone,
# with three seeds and standard errors.

# %%
shown = len(test) // 2  # the frame drawn; the tracker starts on the one before
before, frame = test.read_frame(shown - 1), test.read_frame(shown)
results = {}
for refine in (False, True):
    tracker, params = make_box_head_tracker(trained.net.backbone, trained.net.head,
                                            settings, refine=refine)
    state = tracker.init(params, before, test.boxes[shown - 1])
    _, box = tracker.update(params, state, frame)
    results["refined" if refine else "coarse"] = np.asarray(box, np.float64)
coarse_box, refined_box = results["coarse"], results["refined"]
true_box = np.asarray(test.boxes[shown], np.float64)
iou = {k: float(box_iou(xywh_to_xyxy(jnp.asarray(b)[None]),
                        xywh_to_xyxy(jnp.asarray(true_box)[None]))[0, 0])
       for k, b in results.items()}

fig, ax = plt.subplots(figsize=(6, 4.5))
ax.imshow(frame)
for name, box, colour in (("true", true_box, "lime"),
                          (f"coarse (IoU {iou['coarse']:.2f})", coarse_box, "tab:olive"),
                          (f"refined, NCE+ (IoU {iou['refined']:.2f})", refined_box,
                           "tab:orange")):
    # xywh, 1-indexed: the pixel edge is at x - 1.5
    ax.add_patch(Rectangle((box[0] - 1.5, box[1] - 1.5), box[2], box[3], fill=False,
                           edgecolor=colour, linewidth=1.5, label=name))
ax.legend(fontsize=8)
ax.set_title(f"{test.name}, frame {shown + 1}")
ax.axis("off")
plt.show()
print("coarse box", np.round(coarse_box, 1), "refined box", np.round(refined_box, 1),
      "true box", np.round(true_box, 1))
print(f"notebook ran in {time.perf_counter() - START:.0f} s")

# %% [markdown]
# ## The experiment
#
# Box-Siam first, then one head per loss (KLD-IS, NCE, NCE+, ML-IS) on it, step lengths
# chosen on held-out training sequences, against SiamFC's own scale search, three seeds:
#
# ```bash
# pip install 'ebm_jax[experiments]'   # the tracking runs read records through grain
# ebm-jax run ebm_table4_box_head:quick
# ```
