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
# # Energy-based models for 1D regression: seven losses, NCE+ and ML-IS
#
# Fredrik K. Gustafsson, Martin Danelljan, Radu Timofte and Thomas B. Schön, "How to
# Train Your Energy-Based Model for Regression" (BMVC 2020). An EBM models
# p(y|x; theta) = exp(f_theta(x, y)) / Z(x, theta) (eq. 1) with a network f_theta; the
# paper compares seven ways to train it without computing Z (sec. 2.3 and 3: ML-IS,
# KLD-IS, ML-MCMC, NCE, SM, DSM and its own NCE+, eqs. 4-16) on two 1D datasets whose
# true p(y|x) is known, scored by D_KL to the ground truth (sec. 4.1, Table 1).
#
# This notebook:
#
# 1. puts the seven losses on one page and evaluates each, value and gradient, on one
#    batch of the 1D data with an untrained energy network;
# 2. draws the two 1D datasets over their ground-truth densities;
# 3. trains NCE+ (eq. 16) and ML-IS (eq. 5) on both datasets, each as a small ensemble
#    of the paper's 591-parameter network, with the functions the Table 1 recipe uses;
# 4. shows the learned p(y|x) beside the ground truth, as maps and at a few x, and the
#    D_KL of each method and dataset in a Table 1 layout.
#
# With the default sizes it runs in about two minutes on 2 CPU cores: 3 models x 20
# epochs per method and dataset with M = 256 samples, far less than the paper's 20 x 75
# with M = 1024 (the `large` size), so its D_KL are higher than Table 1's.

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
# One size preset: `tiny` for the tests, `default` for 2 CPU cores, `large` for a Colab
# GPU/TPU runtime (the paper's protocol with 10 models in place of 20). The method
# hyperparameters below them are Table 1's (sec. 4.1), the values of
# `experiments/ebm_regression/table1_toy1d.py`.

# %%
import time

START = time.perf_counter()

# "tiny": seconds, for the tests; "default": about two minutes on 2 CPU cores;
# "large": a Colab GPU/TPU runtime.
SIZE = "default"  # @param ["tiny", "default", "large"]
SIZE = os.environ.get("EBM_JAX_NOTEBOOK_SIZE", SIZE)  # scripts and the tests set it
SIZES = {
    "tiny": dict(num_models=2, epochs=2, num_samples=8, mcmc_samples=2, top_k=1,
                 num_train=128, grid=64, plot_grid=64),
    "default": dict(num_models=3, epochs=20, num_samples=256, mcmc_samples=8, top_k=2,
                    num_train=2000, grid=512, plot_grid=512),
    "large": dict(num_models=10, epochs=75, num_samples=1024, mcmc_samples=1024, top_k=5,
                  num_train=2000, grid=2048, plot_grid=512),
}
if SIZE not in SIZES:
    raise ValueError(f"SIZE must be one of {sorted(SIZES)}, got {SIZE!r}")
P = SIZES[SIZE]
SEED = 0

NUM_MODELS = P["num_models"]  # independently initialised networks per method x dataset
EPOCHS = P["epochs"]  # passes over the training set (the paper: 75)
NUM_SAMPLES = P["num_samples"]  # M: samples per example (the paper: 1024)
MCMC_SAMPLES = P["mcmc_samples"]  # Langevin chains per example (ML-MCMC; loss demo)
TOP_K = P["top_k"]  # D_KL: the mean of the TOP_K best models (the paper: 5 of 20)
NUM_TRAIN = P["num_train"]  # training pairs per dataset (the paper: 2000)
GRID = P["grid"]  # D_KL on a GRID x GRID grid over [-3, 3]^2 (the paper: 2048)
PLOT_GRID = P["plot_grid"]  # resolution of the density plots
BATCH_SIZE = 32  # the paper's
LEARNING_RATE = 1e-3  # Adam, the paper's
METHODS = ("ml-is", "nce+")  # the two methods trained in step 3
DATASETS = (1, 2)

# Table 1's hyperparameters (sec. 4.1); pairs are (dataset 1, dataset 2).
HYPERPARAMETERS = dict(
    is_sigmas=(0.2, 1.6),  # ML-IS, KLD-IS: proposal q(y|y_i), eq. 4
    kld_label_sigma=0.025,  # KLD-IS: label density p(y|y_i) = N(y_i, 0.025^2)
    nce_sigmas=(0.1, 0.8),  # NCE, NCE+: noise p_N(y|y_i), eq. 11
    nce_plus_beta=0.025,  # NCE+: p_beta, eq. 15
    nce_plus_beta_scale="std",  # p_beta's std is beta * sigma_k, as the authors' code
    langevin_step=(0.05, 0.0125),  # ML-MCMC: alpha in eq. 9
    dsm_sigma=(0.2, 0.075),  # DSM: noise std in eq. 14
)
PAPER_KL = {"ml-is": 0.062, "nce+": 0.066}  # Table 1, the two datasets averaged

# %%
from functools import partial

import jax
import matplotlib.pyplot as plt
import numpy as np
import optax
from flax import nnx

from ebm_jax.data import toy1d
from ebm_jax.recipes.regression1d import Config, method_loss

cfg = Config(methods=METHODS, datasets=DATASETS, num_models=NUM_MODELS, epochs=EPOCHS,
             num_samples=NUM_SAMPLES, mcmc_samples=MCMC_SAMPLES, top_k=TOP_K,
             num_train=NUM_TRAIN, batch_size=BATCH_SIZE, learning_rate=LEARNING_RATE,
             grid=GRID, seed=SEED, **HYPERPARAMETERS)  # checks every value
key = jax.random.key(SEED)
print(f"JAX {jax.__version__} on {jax.devices()[0].platform}; size {SIZE!r}")

# %% [markdown]
# ## The two datasets (sec. 4.1)
#
# x ~ U(-3, 3). Dataset 1: for x < 0 a two-component mixture, 0.8 N(sin x, 0.075^2) +
# 0.2 N(-sin x, 0.075^2); for x >= 0, y + 1 ~ LogNormal(0, 0.25), skewed. Dataset 2:
# N(sin x, s(x)^2) with a noise level s(x) = 0.15 / (1 + exp(-x)) growing with x. Both
# densities are exact (`toy1d.density`), so D_KL to them can be computed on a grid.

# %%
data = {d: toy1d.sample(jax.random.fold_in(jax.random.fold_in(key, 0), d), d, NUM_TRAIN)
        for d in DATASETS}  # purpose 0: the training pairs of dataset d
p_true = {d: toy1d.ground_truth_grid(d, PLOT_GRID, PLOT_GRID) for d in DATASETS}
xs_grid, ys_grid = toy1d.eval_grid(PLOT_GRID, PLOT_GRID)
dy = float(ys_grid[1] - ys_grid[0])  # a row / dy is a density in y
extent = (-3.0, 3.0, -3.0, 3.0)

fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
for ax, d in zip(axes, DATASETS):
    ax.imshow(p_true[d].T / dy, origin="lower", extent=extent, aspect="auto",
              cmap="viridis", vmax=np.quantile(p_true[d] / dy, 0.999))
    x, y = np.asarray(data[d][0][:, 0]), np.asarray(data[d][1][:, 0])
    ax.scatter(x, y, s=2, color="white", alpha=0.5, linewidths=0)
    ax.set_title(f"dataset {d}: p(y|x) and {NUM_TRAIN} training pairs")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## The seven losses on one page (sec. 2.3 and 3)
#
# Each loss is a pure function of an energy f(x, y) for one example
# (`ebm_jax.energy`), averaged over the batch; none needs Z. Hyperparameters are
# Table 1's.
#
# | method | eq. | the loss of one example (x_i, y_i) |
# |---|---|---|
# | ML-IS | 5 | -log p(y_i\|x_i), log Z by importance sampling from q(y\|y_i) (eq. 4) |
# | KLD-IS | 7 | KL of N(y_i, sigma^2) to p(y\|x_i), its integrals sampled from q (eq. 6) |
# | ML-MCMC | 10 | f at M ends of L Langevin steps (eq. 9) from y_i, minus f(x_i, y_i) |
# | NCE | 12 | ranking NCE: find y_i among it and M samples of p_N(y\|y_i) (eq. 11) |
# | SM | 13 | score matching: Hessian trace of f in y + half the squared score |
# | DSM | 14 | denoising SM: the score at M noisy y~ against (y_i - y~) / sigma^2 |
# | NCE+ | 16 | NCE with y_i + v in place of y_i, v ~ p_beta (eq. 15) |
#
# Below each one is evaluated, with its gradient, on one batch of 32 pairs of dataset 1
# with an untrained network, under `jax.jit(jax.value_and_grad(...))` (ML-MCMC with
# L = 16). NCE+'s p_beta scales the standard deviations of p_N by beta, as the authors'
# 1D code does (`beta_scale="std"`); eq. 15 as printed scales the variances.

# %%
from ebm_jax.energy import batch_loss, make_loss
from ebm_jax.models import ToyEnergyMLP, count_parameters
from ebm_jax.train.ensemble import energy_fn

model = ToyEnergyMLP(rngs=nnx.Rngs(params=jax.random.fold_in(key, 1)))  # purpose 1: init
graphdef, params = nnx.split(model)
energy = energy_fn(graphdef)  # energy(params, x, y) -> f(x, y), one example
xb, yb = data[1][0][:BATCH_SIZE], data[1][1][:BATCH_SIZE]
batch_key = jax.random.fold_in(key, 2)  # purpose 2: the losses' samples
print(f"energy network: {count_parameters(model)} parameters; batch x {xb.shape}, "
      f"y {yb.shape}")

SEVEN = ("ml-is", "kld-is", "ml-mcmc-16", "nce", "sm", "dsm", "nce+")
EQUATION = {"ml-is": 5, "kld-is": 7, "ml-mcmc-16": 10, "nce": 12, "sm": 13, "dsm": 14,
            "nce+": 16}
loss_values, grad_norms, ms_per_call = {}, {}, {}
print(f"{'method':11s} {'eq.':>4s} {'loss':>9s} {'|grad|':>9s} {'ms/call':>8s}  "
      "hyperparameters")
for method in SEVEN:
    name, hp = method_loss(cfg, method, dataset=1)  # the recipe's Table 1 settings
    loss = make_loss(name, **hp)
    value_and_grad = jax.jit(jax.value_and_grad(
        lambda p, loss=loss: batch_loss(loss, partial(energy, p), xb, yb, batch_key)))
    value, grads = jax.block_until_ready(value_and_grad(params))  # compiles
    clock = time.perf_counter()
    for _ in range(3):
        jax.block_until_ready(value_and_grad(params))
    ms_per_call[method] = 1e3 * (time.perf_counter() - clock) / 3
    loss_values[method] = float(value)
    grad_norms[method] = float(optax.global_norm(grads))
    print(f"{method:11s} {EQUATION[method]:4d} {loss_values[method]:9.4f} "
          f"{grad_norms[method]:9.4f} {ms_per_call[method]:8.2f}  {hp}")

# %% [markdown]
# The values are not comparable across methods (each estimates a different objective up
# to a constant), but all are finite with finite gradients. SM needs the second
# derivative in y (`exact_hessian_trace`), ML-MCMC L sequential gradient steps per
# sample; the importance-sampling and NCE losses only evaluate f at M + 1 points.
#
# ## Training NCE+ and ML-IS (sec. 4.1)
#
# As the Table 1 recipe (`ebm_jax.recipes.regression1d`) does, each method x dataset is
# an ensemble of `NUM_MODELS` independently initialised networks held as one train
# state, their parameters stacked over the models (`ebm_jax.train.ensemble`): one jitted
# call trains all of them for a whole epoch (a `lax.scan` over its batches of 32), with
# Adam at 1e-3. The recipe wraps the same step in checkpointed, resumable stages; here a
# plain loop calls it once per epoch. The first epoch of each method compiles the step.

# %%
from ebm_jax.train import replicate, shard_batch
from ebm_jax.train.ensemble import ensemble_training


def stage_key(method, dataset, purpose):
    """A key per method, dataset and purpose (0: init, 1: train, 2: batch order)."""
    k = jax.random.fold_in(key, 3)  # purpose 3: the training runs
    k = jax.random.fold_in(k, 10 * dataset + METHODS.index(method))
    return jax.random.fold_in(k, purpose)


trained, history, seconds_per_epoch, step_fns = {}, {}, {}, {}
for d in DATASETS:
    x, y = data[d]
    for method in METHODS:
        name, hp = method_loss(cfg, method, d)
        setup = ensemble_training(
            x, y, make_loss(name, **hp), num_models=NUM_MODELS,
            init_key=stage_key(method, d, 0), train_key=stage_key(method, d, 1),
            batch_key=stage_key(method, d, 2), batch_size=BATCH_SIZE,
            learning_rate=LEARNING_RATE)
        # the step takes the data as its batch, so a loss with the same settings on
        # both datasets (ML-IS's and NCE+'s are) reuses one compiled step
        step_fn = step_fns.setdefault((name, repr(hp)), setup.step_fn)
        mesh = step_fn.mesh  # one device
        state = replicate(setup.state, mesh)
        curve, times = [], []
        for epoch in range(EPOCHS):
            clock = time.perf_counter()
            batches = shard_batch(setup.batches(epoch * setup.steps_per_epoch), mesh,
                                  stacked=True, is_global=True)
            state, metrics = step_fn(state, batches)  # the epoch's steps, scanned
            curve.append(float(np.mean(metrics["mean_model_loss"])))
            times.append(time.perf_counter() - clock)  # the first one compiles
        trained[method, d] = (setup.graphdef, jax.device_get(state.params))
        history[method, d] = curve
        steady = float(np.median(times[1:])) if EPOCHS > 1 else None
        seconds_per_epoch[method, d] = steady and steady / NUM_MODELS
        print(f"{method:5s} dataset {d}: {EPOCHS} epochs x {setup.steps_per_epoch} steps, "
              f"{NUM_MODELS} models, final mean loss {curve[-1]:.4f}; first epoch "
              f"{times[0]:.2f} s, then {steady or float('nan'):.2f} s each")

fig, axes = plt.subplots(1, len(METHODS), figsize=(10, 3.2))
for ax, method in zip(axes, METHODS):
    for d in DATASETS:
        ax.plot(np.arange(1, EPOCHS + 1), history[method, d], marker=".",
                label=f"dataset {d}")
    ax.set_title(f"{method}: mean loss over the models (eq. "
                 f"{EQUATION[method]})", fontsize=10)
    ax.set_xlabel("epoch")
    ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## D_KL to the ground truth (Table 1)
#
# Each model's p(y|x; theta) is exp f on the grid, normalised over y for each x; D_KL is
# the mean over the grid's x of KL(p(y|x) || p(y|x; theta)) (`ebm_jax.eval.density`).
# As in the paper, a method's figure is the mean over its `TOP_K` best models. The
# recipe's Table 1 formatter prints it beside the paper's values (its table averages the
# two datasets; its seconds per epoch are on the authors' GPU).

# %%
from ebm_jax.eval.density import conditional_density, evaluate_kl, top_k_summary
from ebm_jax.report.regression1d import table1_markdown

kl, kl_all, best_model, records = {}, {}, {}, []
for (method, d), (gdef, stacked) in trained.items():
    kls, best = evaluate_kl(energy_fn(gdef), stacked, d, GRID)
    summary = top_k_summary(kls, TOP_K)
    kl[method, d] = summary["kl_top_k"]
    kl_all[method, d] = kls
    best_model[method, d] = best
    records.append({"method": method, "dataset": d, "num_models": NUM_MODELS,
                    "epochs": EPOCHS, "num_samples": NUM_SAMPLES, "top_k": TOP_K,
                    "seconds_per_epoch": seconds_per_epoch[method, d], **summary})
    print(f"{method:5s} dataset {d}: D_KL per model "
          + ", ".join(f"{v:.3f}" for v in kls)
          + f"  (top-{TOP_K} mean {kl[method, d]:.3f})")
print()
print(f"D_KL on a {GRID} x {GRID} grid, M = {NUM_SAMPLES}, {NUM_MODELS} models x "
      f"{EPOCHS} epochs (the paper: 20 x 75, M = 1024, 2048 x 2048, top-5 of 20):\n")
print(table1_markdown(records, DATASETS, PAPER_KL))

# %% [markdown]
# ## Learned densities beside the ground truth
#
# The best model of each ensemble: p(y|x; theta) over the whole grid (one colour scale
# per dataset), then at a few x, the ground truth in black. On dataset 1 the mixture
# (x < 0) and the skewed log-normal (x >= 0) need a flexible density; on dataset 2 the
# width must follow s(x). After the default size's 20 epochs the models have the main
# mode and the skew, but hardly the small mode of dataset 1 (weight 0.2, at -sin x) nor
# the narrow end of dataset 2 (x near -3); Table 1's D_KL of about 0.06 is after 75
# epochs with M = 1024.

# %%
densities = {}
for (method, d), (gdef, stacked) in trained.items():
    best = jax.tree.map(lambda a: a[best_model[method, d]], stacked)
    densities[method, d] = conditional_density(energy_fn(gdef), best, PLOT_GRID)

fig, axes = plt.subplots(len(DATASETS), 1 + len(METHODS),
                         figsize=(4 * (1 + len(METHODS)), 3.3 * len(DATASETS)),
                         squeeze=False)
for row, d in zip(axes, DATASETS):
    vmax = np.quantile(p_true[d] / dy, 0.999)
    panels = [("ground truth", p_true[d])] + [
        (f"{m} (best model, D_KL {kl_all[m, d][best_model[m, d]]:.3f})", densities[m, d])
        for m in METHODS]
    for ax, (title, dens) in zip(row, panels):
        ax.imshow(dens.T / dy, origin="lower", extent=extent, aspect="auto",
                  cmap="viridis", vmin=0, vmax=vmax)
        ax.set_title(f"dataset {d}: {title}", fontsize=9)
        ax.set_xlabel("x")
        ax.set_ylabel("y")
fig.tight_layout()
plt.show()

X_SLICES = (-2.0, -0.5, 0.5, 2.0)
fig, axes = plt.subplots(len(DATASETS), len(X_SLICES), figsize=(13, 5.6), squeeze=False)
for row, d in zip(axes, DATASETS):
    for ax, x0 in zip(row, X_SLICES):
        i = int(np.argmin(np.abs(xs_grid - x0)))  # the grid's x nearest x0
        ax.plot(ys_grid, p_true[d][i] / dy, color="black", lw=2, label="ground truth")
        for m in METHODS:
            ax.plot(ys_grid, densities[m, d][i] / dy, lw=1.2, label=m)
        support = ys_grid[p_true[d][i] > 1e-3 * p_true[d][i].max()]
        ax.set_xlim(support.min() - 0.5, support.max() + 0.5)
        ax.set_title(f"dataset {d}, p(y | x = {xs_grid[i]:.2f})", fontsize=9)
        ax.set_xlabel("y")
axes[0, 0].legend(fontsize=8)
fig.tight_layout()
plt.show()
print(f"notebook ran in {time.perf_counter() - START:.0f} s")

# %% [markdown]
# ## Further
#
# - `experiments/ebm_regression/table1_toy1d.py`: all of Table 1 (the nine method
#   variants, both datasets) as one config: `ebm-jax run
#   table1_toy1d:quick` (`make run`, minutes on 2 CPU
#   cores) or `:paper` (20 models x 75 epochs, M = 1024; hours on a CPU), with
#   checkpointed, resumable stages and the density figures.
# - `experiments/ebm_regression/figure2_toy1d_m.py`: Figure 2, D_KL of ML-IS, KLD-IS,
#   NCE and NCE+ against M.
# - From Python: `load_config(...)` and `run_experiment(cfg, workdir=..., out=...)`
#   (README, "Quickstart"); the losses and their equations: docs/library.md; the
#   protocol and the results: docs/regression1d.md.
