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
# # MoCo: momentum contrast on digits on photos
#
# Kaiming He, Haoqi Fan, Yuxin Wu, Saining Xie and Ross Girshick, "Momentum Contrast for
# Unsupervised Visual Representation Learning" (MoCo, CVPR 2020), which builds on Zhirong
# Wu et al., "Unsupervised Feature Learning via Non-Parametric Instance Discrimination"
# (InstDisc, CVPR 2018). An encoder learns without labels to tell each image's second
# augmented view (its key) from a *queue* of K keys of earlier batches, with the InfoNCE
# loss (eq. 1). The keys come from a *momentum encoder*, a moving average of the query
# encoder (eq. 2), and pass it with *shuffled batch norm* (sec. 3.3). The frozen encoder
# is then scored by a linear classifier (sec. 4.1, "Linear Classification Protocol") and
# by InstDisc's weighted kNN (InstDisc sec. 3.4).
#
# This notebook walks through it on the library's small offline benchmark:
#
# 1. the benchmark, digits on photos, and two augmented views of a few images;
# 2. the MoCo loss on one batch: queries, shuffled-BN keys, the queue (eq. 1), the
#    momentum update (eq. 2), the enqueue;
# 3. a short MoCo pretraining with the library's loss and train step, and its loss curve;
# 4. kNN and linear-probe accuracy of the trained encoder, of a randomly initialised
#    encoder of the same shape and of the raw pixels (on this small benchmark MoCo with
#    a large queue is at the random encoder's level, as the docs report);
# 5. a t-SNE of the test features, coloured by class.
#
# With the default sizes it runs in about two minutes on 2 idle CPU cores, most of it
# compiling and training. The experiments behind the docs' contrastive tables are the
# configs `experiments/contrastive/*.py` (last cell).

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
# Three sizes, chosen by the environment variable `EBM_JAX_NOTEBOOK_SIZE`. `default` is a
# short run (3 epochs, K = 256) of the tables' encoder: ResNet-18 with the small-image
# stem at width 16, on 16 x 16 RGB. `large`, for a GPU runtime, has the settings of the
# quick config, for one seed: K = 1024 and 15 epochs (630 steps). `tiny` only
# checks that every cell runs.

# %%
import time

START = time.perf_counter()

# "tiny": seconds, for the tests; "default": about two minutes on 2 CPU cores;
# "large": a Colab GPU/TPU runtime.
SIZE = "default"  # @param ["tiny", "default", "large"]
SIZE = os.environ.get("EBM_JAX_NOTEBOOK_SIZE", SIZE)  # scripts and the tests set it
SIZES = {
    "tiny": dict(num_train=256, num_test=128, arch="resnet4", width=4, dim=16,
                 batch=32, queue=64, epochs=1, linear_epochs=5, knn_k=20, tsne_points=100),
    "default": dict(num_train=None, num_test=None, arch="resnet18", width=16, dim=64,
                    batch=64, queue=256, epochs=3, linear_epochs=100, knn_k=20,
                    tsne_points=600),
    "large": dict(num_train=None, num_test=None, arch="resnet18", width=16, dim=64,
                  batch=64, queue=1024, epochs=15, linear_epochs=100, knn_k=20,
                  tsne_points=1800),
}
if SIZE not in SIZES:
    raise ValueError(f"SIZE must be one of {sorted(SIZES)}, got {SIZE!r}")
P = SIZES[SIZE]
SEED = 0

NUM_TRAIN = P["num_train"]  # training images kept (None: all 2694)
NUM_TEST = P["num_test"]  # test images kept (None: all 1800)
ARCH = P["arch"]  # ResNet depth (resnet4: stem + one block, the tests' net)
WIDTH = P["width"]  # ResNet base width (64 in the published nets)
DIM = P["dim"]  # the embedding the loss sees (the linear head's output)
BATCH = P["batch"]  # N, images per batch
QUEUE = P["queue"]  # K, keys in the queue (a multiple of the batch)
EPOCHS = P["epochs"]  # pretraining epochs
LINEAR_EPOCHS = P["linear_epochs"]  # epochs of the linear probe on frozen features
KNN_K = P["knn_k"]  # neighbours of the weighted kNN
TSNE_POINTS = P["tsne_points"]  # test images in the t-SNE
IMAGE_SIZE = 16  # the benchmark's side in pixels (the quick configs')
MOMENTUM = 0.99  # m of eq. 2
TEMPERATURE = 0.1  # tau of eq. 1
LR = 0.06  # SGD with momentum 0.9, cosine decay, weight decay 5e-4 (the recipe's)
WEIGHT_DECAY = 5e-4
NUM_SPLITS = 4  # batch-norm groups of the batch (shuffled BN on one device)
AUGMENT = "digits-color"  # the augmentation chosen on the val split

# %%
import jax
import matplotlib.pyplot as plt
import numpy as np
from flax import nnx

print(f"JAX {jax.__version__} on {jax.devices()[0].platform}; size {SIZE!r}")
root_key = jax.random.key(SEED)

# %% [markdown]
# ## The data: digits on photos
#
# `ebm_jax.data.digits_on_photos` (MNIST-M style, nothing downloaded): scikit-learn's
# 8 x 8 handwritten digits, each blended at a random scale and place onto a random patch
# of a real photo, the photo's colours inverted under the stroke. Training images use one
# pool of photos (each digit twice), test images a disjoint pool and disjoint digits
# (each four times). On the plain digits raw pixels already score over 90 %; here the
# background is most of every image, which leaves room for a representation to matter.

# %%
from ebm_jax.data.digits_on_photos import load_digits_on_photos

data = load_digits_on_photos(IMAGE_SIZE, seed=SEED)
if NUM_TRAIN or NUM_TEST:
    data = data.subset(NUM_TRAIN, NUM_TEST)
print(f"{data.name}: train {data.train_images.shape}, test {data.test_images.shape}, "
      f"{data.num_classes} classes")

fig, axes = plt.subplots(4, 10, figsize=(11, 4.8))
for row, (split, images, labels) in enumerate(
        (("train", data.train_images, data.train_labels),) * 2
        + (("test", data.test_images, data.test_labels),) * 2):
    for c in range(10):
        ax = axes[row, c]
        ax.imshow(images[np.flatnonzero(labels == c)[row % 2]], interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"{split} {c}", fontsize=8)
fig.suptitle(f"digits on photos, {IMAGE_SIZE} x {IMAGE_SIZE}: two training and two test "
             "images of each class")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Two augmented views
#
# MoCo's pretext task is instance discrimination: two random augmentations of one image
# are a positive pair, views of other images are negatives. The `digits-color`
# augmentation (`ebm_jax.ops.augment`) is a resized crop (30-100 % of the area), MoCo
# v1's colour jitter (brightness, contrast, saturation and hue 0.4, p 0.8), grayscale
# (p 0.2) and a light blur, with no flip (a mirrored digit is another symbol). Two views
# of one image share their background photo; without the hue and saturation jitter the
# photo's colours alone would tell the instances apart. `augment_batch` draws one key per
# image, inside `jit`.

# %%
from ebm_jax.ops.augment import augment_batch, get_augment

augment = get_augment(AUGMENT)
# jitted once for a batch of BATCH images; the loss below draws its views the same way
augment_views = jax.jit(lambda key, x: augment_batch(augment, key, x, size=IMAGE_SIZE))
key_views = jax.random.fold_in(root_key, 1)  # purpose 1: the views shown here
views = [augment_views(k, data.train_images[:BATCH])
         for k in jax.random.split(key_views, 2)]

shown = 8
fig, axes = plt.subplots(3, shown, figsize=(1.4 * shown, 4.6))
for j in range(shown):
    panels = ((data.train_images[j], "image"), (views[0][j], "view 1"),
              (views[1][j], "view 2"))
    for row, (image, title) in enumerate(panels):
        ax = axes[row, j]
        ax.imshow(np.asarray(image), interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        if j == 0:
            ax.set_ylabel(title)
fig.suptitle(f"two {AUGMENT} views of each image: query and key of a positive pair")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## The model and its train step
#
# The model (`ebm_jax.models.contrastive.MoCo`) holds a query encoder f_q, a key encoder
# f_k that starts as a copy of it, and the queue: K unit vectors (random before any key
# is written) and a pointer. Each encoder is the configs' `ResNetEncoder` (small-image
# stem) with a linear head whose output is L2-normalised; batch norm works in
# `NUM_SPLITS` groups of the batch (`SplitBatchNorm`), for shuffled BN on one device.
#
# Training is the recipe's pretraining stage
# (`ebm_jax.recipes.contrastive_stages.pretrain`) with a plain loop in place of its
# checkpointing one: the same loss (`make_moco_loss`) and optimizer (SGD with momentum
# 0.9, lr 0.06 with cosine decay, weight decay 5e-4), one jitted, donated step per batch
# (`ebm_jax.train.make_train_step`) and a fresh permutation of the training images each
# epoch. The optimizer updates only the query encoder (`QUERY_PARAMS`); the key encoder
# follows it by eq. 2 inside the loss, and the queue and its pointer travel in the
# state beside the parameters.

# %%
import optax

from ebm_jax.contrastive import make_moco_loss
from ebm_jax.models.contrastive import QUERY_PARAMS, MoCo
from ebm_jax.models.resnet import ResNetEncoder
from ebm_jax.train import (create_train_state, make_mesh, make_train_step, merge_model,
                           replicate, shard_batch)

key_init = jax.random.fold_in(root_key, 0)  # purpose 0: the encoders' initialisation
key_train = jax.random.fold_in(root_key, 2)  # purpose 2: the steps' views and shuffles


def make_encoder(rngs):
    return ResNetEncoder(ARCH, in_channels=3, small_images=True, head="linear", dim=DIM,
                         num_splits=NUM_SPLITS, width=WIDTH, rngs=rngs)


def new_moco():
    """MoCo with the weights of `key_init` (every call the same weights, in fresh
    buffers: the train step donates its own)."""
    return MoCo(make_encoder, queue_size=QUEUE, dim=DIM, rngs=nnx.Rngs(key_init))


n_train = len(data.train_images)
steps_per_epoch = n_train // BATCH
num_steps = EPOCHS * steps_per_epoch


def batch_of(step):
    """The images of a step: a permutation of the training set per epoch."""
    epoch, i = divmod(step, steps_per_epoch)
    order = np.random.default_rng([SEED, epoch]).permutation(n_train)
    return data.train_images[order[i * BATCH:(i + 1) * BATCH]]


moco_loss = make_moco_loss(momentum=MOMENTUM, temperature=TEMPERATURE, augment=augment,
                           image_size=IMAGE_SIZE, shuffle="batch")
optimizer = optax.chain(optax.add_decayed_weights(WEIGHT_DECAY),
                        optax.sgd(optax.cosine_decay_schedule(LR, num_steps), momentum=0.9))
mesh = make_mesh(1)  # one device: shuffled BN within the batch (shuffle="batch")
graphdef, state = create_train_state(new_moco(), optimizer, key_train,
                                     trainable=QUERY_PARAMS)
train_step = make_train_step(graphdef, moco_loss, optimizer, mesh, trainable=QUERY_PARAMS)
state = replicate(state, mesh)
model = merge_model(graphdef, state)
print(f"{ARCH} width {WIDTH}: {model.query.feature_dim}-d features, {DIM}-d head; "
      f"queue {model.queue[...].shape}; "
      f"{num_steps} steps of N = {BATCH} ({EPOCHS} epochs)")

# %% [markdown]
# ## The MoCo loss on one batch: the first step (eqs. 1-2)
#
# One step of `make_moco_loss`, in the order of the paper's Algorithm 1:
#
# 1. momentum update of the key encoder, theta_k <- m theta_k + (1 - m) theta_q (eq. 2;
#    a no-op at the first step, where theta_k = theta_q);
# 2. queries q = f_q(view 1); keys k = f_k(view 2) with *shuffled BN* (sec. 3.3): the
#    key encoder sees the batch permuted (`shuffled_forward`), so a query and its key
#    are normalised among different images and cannot match through the batch
#    statistics; no gradient flows through the keys;
# 3. InfoNCE (eq. 1): L_q = -log exp(q.k+ / tau) / sum_{i=0..K} exp(q.k_i / tau), the
#    positive k+ against the K keys of the queue: logits (N, 1 + K), label 0;
# 4. the keys are enqueued after use, over the oldest batch, and the pointer advances.
#
# Below, eq. 1 is first computed from its pieces (`infonce_logits`, `infonce_loss`) on
# the views the step draws from its key (`state.rng()` split in three, as the loss
# does), then the train step runs on the same batch, its loss is compared, and the
# queue is read back from the new state. Note how close a query is to its key: two
# views of one image are alike even through random weights, while the initial queue
# holds random unit vectors, easy negatives. The task gets hard once the queue holds
# real keys, after K / N steps.

# %%
from ebm_jax.contrastive import infonce_logits, infonce_loss, shuffled_forward

batch = batch_of(0)
k_q, k_k, k_perm = jax.random.split(state.rng(), 3)  # as make_moco_loss splits its key
encode = nnx.jit(lambda m, x_q, x_k: (m.query(x_q),
                                      shuffled_forward(m.key_encoder, x_k, k_perm)))
q, k = encode(model, augment_views(k_q, batch), augment_views(k_k, batch))
queue = model.queue[...]
logits = infonce_logits(q, k, queue, TEMPERATURE)
by_hand = float(infonce_loss(q, k, queue, TEMPERATURE))
print(f"q {q.shape} and k {k.shape} (unit vectors, mean |q| "
      f"{float(np.linalg.norm(q, axis=1).mean()):.3f}), queue {queue.shape}, logits "
      f"{logits.shape} (column 0: the positive)")
print(f"mean q.k+ {float(np.mean(np.sum(q * k, 1))):.3f}, mean q.queue "
      f"{float(np.mean(q @ queue.T)):.3f}")

pointer_before = int(model.pointer[...])
state, step_metrics = train_step(state, shard_batch(batch, mesh))  # step 0 of training
after = merge_model(graphdef, state)
print(f"InfoNCE (eq. 1): {by_hand:.4f} from its pieces, {float(step_metrics['loss']):.4f} "
      f"from the train step; log(1 + K) = {np.log(1 + QUEUE):.4f} is a uniform guess")
print(f"the positive is the top logit for {100 * float(step_metrics['accuracy']):.0f} % "
      "of the queries")
print(f"queue pointer {pointer_before} -> {int(after.pointer[...])}; the batch's keys are "
      f"now rows 0..{BATCH - 1} of the queue: "
      f"{bool(np.allclose(after.queue[...][:BATCH], k, atol=1e-4))}")

# %% [markdown]
# ## A short MoCo pretraining
#
# The remaining steps, and the loss curve. The loss first rises from its start, as the
# random vectors of the queue are replaced by real keys, and then falls as the encoder
# learns to tell the instances apart; the loss of a uniform guess among the 1 + K
# candidates is log(1 + K).

# %%
losses = [float(step_metrics["loss"])]
accuracies = [float(step_metrics["accuracy"])]
clock = time.perf_counter()
for step in range(1, num_steps):
    state, step_metrics = train_step(state, shard_batch(batch_of(step), mesh))
    losses.append(float(step_metrics["loss"]))
    accuracies.append(float(step_metrics["accuracy"]))
    if (step + 1) % steps_per_epoch == 0:
        print(f"epoch {(step + 1) // steps_per_epoch:2d}  step {step + 1:4d}  loss "
              f"{np.mean(losses[-steps_per_epoch:]):.4f}  positive ranked first "
              f"{np.mean(accuracies[-steps_per_epoch:]):.2f}")
print(f"{num_steps - 1} steps in {time.perf_counter() - clock:.1f} s")
trained = merge_model(graphdef, state)

# eq. 2 at work: the key encoder trails the query encoder
theta_q = jax.tree.leaves(nnx.state(trained.query, nnx.Param))
theta_k = jax.tree.leaves(nnx.state(trained.key_encoder, nnx.Param))
lag = np.sqrt(sum(float(np.sum((a - b) ** 2)) for a, b in zip(theta_q, theta_k))
              / sum(float(np.sum(a ** 2)) for a in theta_q))
print(f"|theta_k - theta_q| / |theta_q| = {lag:.4f} after training (0 at the start)")

fig, ax = plt.subplots(figsize=(6.5, 3.4))
window = max(1, steps_per_epoch // 4)
ax.plot(losses, alpha=0.35, label="loss (eq. 1), per step")
if num_steps >= window:
    ax.plot(np.arange(window - 1, num_steps),
            np.convolve(losses, np.ones(window) / window, "valid"),
            label=f"mean of {window} steps")
ax.axhline(np.log(1 + QUEUE), color="grey", linestyle=":", label="log(1 + K)")
ax.set_xlabel("step")
ax.set_ylabel("InfoNCE loss")
ax2 = ax.twinx()
ax2.plot(accuracies, color="tab:green", alpha=0.4)
ax2.set_ylabel("positive ranked first", color="tab:green")
ax.set_title(f"MoCo pretraining: K = {QUEUE}, m = {MOMENTUM}, tau = {TEMPERATURE}")
ax.legend(loc="center right", fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Frozen features: kNN and linear probe (sec. 4.1)
#
# The encoder is frozen (batch norm in inference mode) and its pooled backbone features
# (before the head) are extracted once, without augmentation (`extract_features`). Two
# scores on the test split:
#
# - *kNN*: InstDisc's weighted kNN (`knn_accuracy`): each test feature votes with its k
#   most cosine-similar training features, each vote weighted exp(sim / 0.1);
# - *linear*: a softmax classifier trained on the frozen training features with every
#   label (`train_linear_classifier`: SGD, cosine schedule, standardised features).
#
# Beside MoCo, the two floors of the contrastive tables: the encoder MoCo started from
# (random weights, the same architecture), and the raw pixels.
#
# **Do not over-read one short run.** On this small benchmark, MoCo with a large queue is
# at the random encoder's level. The docs' three-seed results (quick config, K = 1024,
# 15 epochs) give MoCo minus the random encoder +4.2 +- 3.4 points of linear accuracy, a
# tie, and -4.5 +- 2.2 at kNN (k = 20). Raw pixels are the best of the three at kNN and
# the worst at linear accuracy. A difference of a few points between the rows below is
# within the spread over seeds. (MoCo at K = 64, and end-to-end, do beat the random
# encoder there: see the queue and mechanism ablations in the docs.)

# %%
from ebm_jax.contrastive import normalise
from ebm_jax.eval.knn import knn_accuracy
from ebm_jax.eval.linear_probe import (classifier_accuracy, extract_features,
                                       train_linear_classifier)

encoders = {"MoCo": trained.query, "random": new_moco().query}
features = {name: tuple(np.asarray(extract_features(enc, x))
                        for x in (data.train_images, data.test_images))
            for name, enc in encoders.items()}
features["pixels"] = tuple(x.reshape(len(x), -1)
                           for x in (data.train_images, data.test_images))
key_linear = jax.random.fold_in(root_key, 4)  # purpose 4: the linear probe's batches
results = {}
for name, (f_train, f_test) in features.items():
    w, b, _ = train_linear_classifier(f_train, data.train_labels, data.num_classes,
                                      key=key_linear, epochs=LINEAR_EPOCHS,
                                      learning_rate=0.1)  # the recipe's
    results[name] = {
        "knn": knn_accuracy(normalise(f_test), data.test_labels, normalise(f_train),
                            data.train_labels, data.num_classes, k=KNN_K),
        "linear": classifier_accuracy(w, b, f_test, data.test_labels),
    }

print(f"{len(data.train_images)} training / {len(data.test_images)} test images, "
      f"chance 10 %")
print(f"{'encoder':8s} {'features':>8s} {f'kNN k={KNN_K}':>10s} {'linear':>8s}")
for name, r in results.items():
    print(f"{name:8s} {features[name][0].shape[1]:8d} {100 * r['knn']:9.1f}% "
          f"{100 * r['linear']:7.1f}%")
gap = {s: 100 * (results["MoCo"][s] - results["random"][s]) for s in ("knn", "linear")}
print(f"MoCo - random: kNN {gap['knn']:+.1f}, linear {gap['linear']:+.1f} points (docs, "
      "3 seeds at K = 1024: kNN -4.5 +- 2.2, linear +4.2 +- 3.4)")

# %% [markdown]
# ## t-SNE of the test features
#
# A 2-D t-SNE (scikit-learn) of the frozen test features of a subset of the test
# images, coloured by the digit they show (never seen by MoCo), for the MoCo encoder and
# the random one. As for the docs' figure (`docs/moco_features.png`, made by
# `ebm_jax.report.contrastive.embedding_figure` on all 1800 test images), the features
# are standardised and reduced to their first 50 principal components first.
# Well-separated clusters of one colour would mean features that separate the digits; on
# this benchmark the colours stay mixed, as the accuracies above say.

# %%
from sklearn.decomposition import PCA
from sklearn.manifold import TSNE
from threadpoolctl import threadpool_limits

n_shown = min(TSNE_POINTS, len(data.test_images))
labels_shown = data.test_labels[:n_shown]
embeddings = {}
for name in ("MoCo", "random"):
    f = features[name][1][:n_shown]
    f = (f - f.mean(0)) / (f.std(0) + 1e-6)
    f = PCA(min(50, *f.shape), random_state=SEED).fit_transform(f)
    with threadpool_limits(1):  # OpenMP threads spin-wait badly on a busy 2-core host
        embeddings[name] = TSNE(2, init="pca", perplexity=min(30.0, (n_shown - 1) / 3),
                                random_state=SEED).fit_transform(f)
embedding = embeddings["MoCo"]

fig, axes = plt.subplots(1, len(embeddings), figsize=(5 * len(embeddings), 4.6))
for ax, (name, xy) in zip(axes, embeddings.items()):
    sc = ax.scatter(xy[:, 0], xy[:, 1], c=labels_shown, cmap="tab10", vmin=-0.5,
                    vmax=9.5, s=8)
    ax.set_title(f"{name}: kNN {100 * results[name]['knn']:.1f} %, "
                 f"linear {100 * results[name]['linear']:.1f} %")
    ax.set_xticks([])
    ax.set_yticks([])
fig.colorbar(sc, ax=list(axes), ticks=range(10), label="digit")
fig.suptitle(f"t-SNE of {n_shown} frozen test features")
plt.show()
print(f"notebook ran in {time.perf_counter() - START:.0f} s")

# %% [markdown]
# ## Further
#
# The contrastive experiments (docs/contrastive.md) are configs of one recipe
# (`ebm_jax/recipes/contrastive.py`), each run by the command in its docstring, e.g.
# `ebm-jax run moco_linear_eval:quick`; the five files share
# one work directory, so the random, pixels and supervised rows train once:
#
# - `experiments/contrastive/moco_linear_eval.py`: MoCo between the random encoder and
#   the supervised ceiling, three seeds, with linear, 10-labels-per-class and kNN
#   (k = 20, 200) scores and the t-SNE figure; `:cifar` is MoCo's single-device CIFAR-10
#   recipe (ResNet-18, K = 4096, 200 epochs) for a GPU and a local copy of CIFAR-10;
# - `experiments/contrastive/instdisc_linear_eval.py`: InstDisc (memory bank + NCE);
# - `experiments/contrastive/moco_ablation_momentum.py`: m in {0, 0.99};
# - `experiments/contrastive/moco_ablation_mechanism.py`: end-to-end, memory bank, MoCo;
# - `experiments/contrastive/moco_ablation_queue.py`: K in {64, 1024}.
#
# The pieces used here: docs/library.md, "Contrastive learning"; the results, with the
# choices made on the val split: docs/contrastive.md.
