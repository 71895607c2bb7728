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
# # Your own energy in `ebm_jax.energy`, and every loss timed under `jit`
#
# Fredrik K. Gustafsson, Martin Danelljan, Radu Timofte and Thomas B. Schön, "How to
# Train Your Energy-Based Model for Regression". An EBM of p(y | x) is any
# scalar function f(x, y) (sec. 2.1, eq. 1); the paper compares seven ways to train it
# (sec. 2.3: ML-IS eq. 5, KLD-IS eq. 7, ML-MCMC eqs. 9-10, NCE eq. 12, SM eq. 13, DSM
# eq. 14) with its own NCE+ (sec. 3, eqs. 15-16). `ebm_jax.energy` has all seven as pure
# functions of an energy `f(x, y) -> scalar`, so any function of that shape can be
# trained with any of them.
#
# This notebook:
#
# 1. writes an energy as a plain function of its parameters (a small MLP), plugs it into
#    NCE+ by name (`make_loss`) and by function (`nce_plus_loss`), over a batch
#    (`batch_loss`, or `jax.vmap` by hand), and takes `jax.jit(jax.value_and_grad(...))`;
# 2. does the same with a Flax NNX module (`nnx.split` / `nnx.merge`);
# 3. checks SM on a quadratic energy, whose Hessian trace has a closed form, and sweeps
#    the precision of a Gaussian energy to see where SM, DSM and NCE+ put their minimum;
# 4. times every loss with the MLP under `jax.jit(jax.value_and_grad(...))` against the
#    number of samples M: compile time and steady-state time, as a table and a plot.
#
# With the default sizes it runs in about two minutes on 2 CPU cores, most of it XLA
# compiling the 22 timed functions.

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
# One preset sets every size; `EBM_JAX_NOTEBOOK_SIZE` chooses it.

# %%
import time

# "tiny": seconds, for the tests; "default": about two minutes on 2 CPU cores;
# "large": a Colab GPU/TPU runtime.
SIZE = "default"  # @param ["tiny", "default", "large"]
SIZE = os.environ.get("EBM_JAX_NOTEBOOK_SIZE", SIZE)  # scripts and the tests set it
SIZES = {
    "tiny": dict(m_list=(1, 16), k_list=(1,), batch=32, repeats=3, mcmc_steps=16,
                 hidden=32, sweep_n=256, sweep_m=16),
    "default": dict(m_list=(1, 16, 128, 1024), k_list=(1,), batch=32, repeats=5,
                    mcmc_steps=16, hidden=32, sweep_n=1024, sweep_m=128),
    "large": dict(m_list=(1, 16, 128, 1024, 4096), k_list=(1, 4), batch=32, repeats=10,
                  mcmc_steps=16, hidden=32, sweep_n=2048, sweep_m=256),
}
if SIZE not in SIZES:
    raise ValueError(f"SIZE must be one of {sorted(SIZES)}, got {SIZE!r}")
P = SIZES[SIZE]
SEED = 0

M_LIST = P["m_list"]  # numbers of samples M (ML-MCMC: chains) the timing runs over
K_LIST = P["k_list"]  # target dimensions K timed (4: a box, as in detection / tracking)
BATCH = P["batch"]  # examples per batch: the paper's 1D batch size
REPEATS = P["repeats"]  # timed calls per loss and M; the median is reported
MCMC_STEPS = P["mcmc_steps"]  # L of ML-MCMC-L (Table 1 has L = 1, 16, 256)
HIDDEN = P["hidden"]  # width of the MLP energy's two hidden layers
SWEEP_N = P["sweep_n"]  # samples of the Gaussian data in the precision sweep
SWEEP_M = P["sweep_m"]  # M of DSM and NCE+ in the precision sweep
START = time.perf_counter()

# %%
import math
import statistics

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

key = jax.random.key(SEED)
device = jax.devices()[0]
print(f"JAX {jax.__version__} on {device.platform} ({device.device_kind}), "
      f"{os.cpu_count()} CPU cores, size {SIZE!r}")

# %% [markdown]
# ## The losses and their hyperparameters (Table 1, dataset 1)
#
# Every loss is named in `ebm_jax.energy.LOSSES`; `make_loss(name, **hyperparameters)`
# binds one (checking the values before anything is traced) into
# `loss(energy, x, y, key) -> scalar`. The values below are those of the paper's 1D
# experiment for dataset 1 (`HYPERPARAMETERS` in
# `experiments/ebm_regression/table1_toy1d.py`): proposal / noise mixtures with two
# components, KLD-IS's label noise, NCE+'s beta with the authors' "std" convention
# (p_beta's standard deviations are beta sigma_k), the Langevin step and the DSM noise.
# SM samples nothing and takes no hyperparameter.

# %%
from ebm_jax.energy import LOSSES, batch_loss, make_loss


def table1_hyperparameters(name, m):
    """The hyperparameters of loss `name` in Table 1 (dataset 1), with M = m samples."""
    return {
        "ml-is": dict(sigmas=(0.2, 1.6), num_samples=m),
        "kld-is": dict(sigmas=(0.2, 1.6), label_sigma=0.025, num_samples=m),
        "ml-mcmc": dict(num_steps=MCMC_STEPS, step_size=0.05, num_samples=m),
        "nce": dict(sigmas=(0.1, 0.8), num_samples=m),
        "nce+": dict(sigmas=(0.1, 0.8), beta=0.025, beta_scale="std", num_samples=m),
        "sm": dict(),
        "dsm": dict(sigma=0.2, num_samples=m),
    }[name]


NAMES = tuple(LOSSES)  # ml-is, kld-is, ml-mcmc, nce, nce+, sm, dsm
for name in NAMES:
    print(f"{name:8s} {table1_hyperparameters(name, 'M')}")

# %% [markdown]
# ## Your own energy: a plain function of its parameters
#
# f(x, y) for **one** example, x of shape (x_dim,), y of shape (K,), returning a scalar:
# here an MLP on the concatenation [x, y] with two tanh layers, its parameters a list of
# dicts passed first. tanh rather than ReLU because SM (eq. 13) needs the second
# derivative in y, which is zero almost everywhere for a ReLU network. The data are the
# paper's 1D dataset 1 (`ebm_jax.data.toy1d`), x and y of shape (n, 1).

# %%
from functools import partial

from ebm_jax.data import toy1d


@partial(jax.jit, static_argnums=(1, 2, 3))
def init_mlp(key, x_dim, y_dim, hidden):
    """Weights and biases uniform in +-1/sqrt(fan_in), as PyTorch's nn.Linear."""
    sizes = [(x_dim + y_dim, hidden), (hidden, hidden), (hidden, 1)]
    params = []
    for k, (d_in, d_out) in zip(jax.random.split(key, len(sizes)), sizes):
        kw, kb = jax.random.split(k)
        bound = 1.0 / math.sqrt(d_in)
        params.append({"w": jax.random.uniform(kw, (d_in, d_out), minval=-bound,
                                               maxval=bound),
                       "b": jax.random.uniform(kb, (d_out,), minval=-bound, maxval=bound)})
    return params


def mlp_energy(params, x, y):
    """f(x, y) -> scalar for one example."""
    h = jnp.concatenate([x, y])
    for layer in params[:-1]:
        h = jnp.tanh(h @ layer["w"] + layer["b"])
    return (h @ params[-1]["w"] + params[-1]["b"])[0]


params = init_mlp(jax.random.fold_in(key, 0), x_dim=1, y_dim=1, hidden=HIDDEN)  # 0: init
xs, ys = toy1d.sample(jax.random.fold_in(key, 1), dataset=1, num=BATCH)  # 1: data
energy = partial(mlp_energy, params)  # f(x, y): the parameters closed over
n_params = sum(p.size for p in jax.tree.leaves(params))
print(f"{n_params} parameters; x {xs.shape}, y {ys.shape}; f(x_0, y_0) = "
      f"{float(energy(xs[0], ys[0])):.4f}")

# %% [markdown]
# ## One example, a batch, a gradient (NCE+, eq. 16)
#
# The same loss by name (`make_loss`) and as the function itself (`nce_plus_loss` with
# keyword hyperparameters), for one example; then over the batch. `batch_loss` gives
# example i the key `jax.random.split(key, n)[i]` and averages, which is `jax.vmap` over
# (x, y, key) by hand; the vmapped form also gives the per-example losses. All four go
# under one `jax.jit`: the losses are traceable like any JAX function (called outside
# `jit` they also work, op by op, which for shapes this small takes longer than
# compiling). The gradient with respect to the parameters is `jax.value_and_grad` of a
# function of the parameters that builds the energy inside, jitted once.

# %%
from ebm_jax.energy import nce_plus_loss

loss_key = jax.random.fold_in(key, 2)  # 2: the samples of the losses
nce_plus = make_loss("nce+", **table1_hyperparameters("nce+", 16))


@jax.jit
def four_ways(xs, ys, key):
    by_name = nce_plus(energy, xs[0], ys[0], key)
    by_function = nce_plus_loss(energy, xs[0], ys[0], key, sigmas=(0.1, 0.8), beta=0.025,
                                beta_scale="std", num_samples=16)
    batch_mean = batch_loss(nce_plus, energy, xs, ys, key)
    per_example = jax.vmap(lambda x, y, k: nce_plus(energy, x, y, k))(
        xs, ys, jax.random.split(key, xs.shape[0]))
    return by_name, by_function, batch_mean, per_example


one, direct, batch_value, per_example = four_ways(xs, ys, loss_key)
print(f"one example: make_loss {float(one):.6f}, nce_plus_loss {float(direct):.6f}")
print(f"batch: batch_loss {float(batch_value):.6f}, "
      f"mean of vmap {float(per_example.mean()):.6f}; per-example losses "
      f"{per_example.shape}, {float(per_example.min()):.3f} to "
      f"{float(per_example.max()):.3f}")


def objective(params, xs, ys, key):
    return batch_loss(nce_plus, partial(mlp_energy, params), xs, ys, key)


value_and_grad = jax.jit(jax.value_and_grad(objective))
value, grads = value_and_grad(params, xs, ys, loss_key)
grad_norm = float(jnp.sqrt(sum(jnp.sum(g**2) for g in jax.tree.leaves(grads))))
print(f"jit(value_and_grad): loss {float(value):.6f}, gradient norm {grad_norm:.4f}, "
      f"gradient shapes {[{k: v.shape for k, v in g.items()} for g in grads]}")

# %% [markdown]
# ## A Flax NNX module as the energy
#
# An NNX module is made a pure function with `nnx.split` (a static graph definition and
# the parameters as a pytree) and `nnx.merge` inside the energy, which is how
# `ebm_jax.train` handles the 1D network (`ebm_jax.train.ensemble.energy_fn`). The
# gradient comes back as an `nnx.State` of the same structure as the parameters, ready
# for optax.

# %%
from flax import nnx


class SmallEnergy(nnx.Module):
    """f(x, y) -> scalar for one example: one tanh layer on [x, y]."""

    def __init__(self, x_dim, y_dim, hidden, *, rngs):
        self.hidden = nnx.Linear(x_dim + y_dim, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, 1, rngs=rngs)

    def __call__(self, x, y):
        return self.out(jnp.tanh(self.hidden(jnp.concatenate([x, y]))))[0]


model = SmallEnergy(1, 1, HIDDEN, rngs=nnx.Rngs(jax.random.fold_in(key, 3)))  # 3: NNX init
graphdef, nnx_params = nnx.split(model)


def nnx_objective(nnx_params, xs, ys, key):
    def energy(x, y):
        return nnx.merge(graphdef, nnx_params)(x, y)

    return batch_loss(nce_plus, energy, xs, ys, key)


nnx_value_and_grad = jax.jit(jax.value_and_grad(nnx_objective))
nnx_value, nnx_grads = nnx_value_and_grad(nnx_params, xs, ys, loss_key)
print(f"NNX energy, NCE+: loss {float(nnx_value):.6f}; gradient "
      f"{jax.tree.map(jnp.shape, nnx.to_pure_dict(nnx_grads))}")

# %% [markdown]
# ## A closed-form check: SM on a quadratic energy (eq. 13)
#
# For f(x, y) = -1/2 (y - x b)^T A (y - x b) with A symmetric positive definite, the
# Hessian in y is -A, so tr(d^2 f / dy^2) = -tr(A), and grad_y f = -A (y - x b): the
# SM loss is -tr(A) + 1/2 ||A (y - x b)||^2 exactly. `sm_loss` computes the trace
# exactly for any K (K Hessian-vector products, forward over reverse); here K = 3.

# %%
from ebm_jax.energy import exact_hessian_trace, sm_loss

K_QUAD = 3
k_a, k_b, k_xy = jax.random.split(jax.random.fold_in(key, 4), 3)  # 4: the quadratic
root = jax.random.normal(k_a, (K_QUAD, K_QUAD))
A = root @ root.T + jnp.eye(K_QUAD)  # symmetric positive definite
b = jax.random.normal(k_b, (K_QUAD,))


def quadratic_energy(x, y):
    r = y - x[0] * b
    return -0.5 * r @ A @ r


x_q, y_q = jnp.array([0.7]), jax.random.normal(k_xy, (K_QUAD,))
trace = exact_hessian_trace(lambda y: quadratic_energy(x_q, y), y_q)
sm_value = sm_loss(quadratic_energy, x_q, y_q)
sm_closed_form = -jnp.trace(A) + 0.5 * jnp.sum((A @ (y_q - x_q[0] * b)) ** 2)
sm_error = abs(float(sm_value - sm_closed_form)) / abs(float(sm_closed_form))
print(f"Hessian trace {float(trace):.5f}, -tr(A) {float(-jnp.trace(A)):.5f}")
print(f"SM loss {float(sm_value):.5f}, closed form {float(sm_closed_form):.5f} "
      f"(relative difference {sm_error:.1e})")

# %% [markdown]
# ## Where SM, DSM and NCE+ put their minimum
#
# Data y = 0.3 + s eps with s = 0.1 (x plays no part), and the energy
# f_a(y) = -a/2 (y - 0.3)^2: p(y; a) is N(0.3, 1/a), right at a = 1/s^2 = 100. The mean
# SM loss is -a + a^2/2 mean((y - 0.3)^2), minimised exactly at the inverse sample
# variance. DSM (eq. 14) matches the score of the data blurred by its noise
# N(0, sigma^2), so its minimum sits at 1/(s^2 + sigma^2) = 20 with Table 1's
# sigma = 0.2: the fit is as wide as the noise. NCE+ (eq. 16) learns the density of
# y + v, v ~ p_beta: with Table 1's beta = 0.025 (standard deviations 0.0025 and 0.02)
# that is a hair wider than the data, a = 1 / (s^2 + E v^2), about 98. One sample set
# and one key for every a (common random numbers), M = SWEEP_M for DSM and NCE+.

# %%
S_TRUE, MU = 0.1, 0.3
a_grid = jnp.geomspace(5.0, 500.0, 81)
k_data, k_loss = jax.random.split(jax.random.fold_in(key, 5))  # 5: the precision sweep
y_sweep = MU + S_TRUE * jax.random.normal(k_data, (SWEEP_N, 1))
x_sweep = jnp.zeros((SWEEP_N, 1))
sweep_losses = {name: make_loss(name, **table1_hyperparameters(name, SWEEP_M))
                for name in ("sm", "dsm", "nce+")}


@partial(jax.jit, static_argnums=0)
def mean_loss_over_grid(name, a_grid):
    def mean_loss(a):
        def energy(x, y):
            return -0.5 * a * jnp.sum((y - MU) ** 2)

        return batch_loss(sweep_losses[name], energy, x_sweep, y_sweep, k_loss)

    return jax.vmap(mean_loss)(a_grid)


curves = {name: np.asarray(mean_loss_over_grid(name, a_grid)) for name in sweep_losses}
sweep_argmin = {name: float(a_grid[np.argmin(c)]) for name, c in curves.items()}
var = float(jnp.mean((y_sweep - MU) ** 2))
v_var = 0.5 * ((0.025 * 0.1) ** 2 + (0.025 * 0.8) ** 2)  # E v^2 of p_beta, "std" scale
expected = {"sm": 1 / var, "dsm": 1 / (var + 0.2**2), "nce+": 1 / (var + v_var)}
for name in curves:
    print(f"{name:5s} minimum at a = {sweep_argmin[name]:6.1f}  "
          f"(expected {expected[name]:6.1f})")

fig, ax = plt.subplots(figsize=(6.5, 3.5))
for name, c in curves.items():
    line, = ax.plot(a_grid, c - c.min(), label=name)
    ax.axvline(expected[name], color=line.get_color(), linestyle=":", linewidth=1)
ax.set_xscale("log")
ax.set_yscale("symlog", linthresh=1e-2)
ax.set_ylim(bottom=0)
ax.set_xlabel("precision a of the energy -a/2 (y - 0.3)^2")
ax.set_ylabel("mean loss minus its minimum")
ax.set_title(f"data N({MU}, {S_TRUE}^2): true a = {1 / S_TRUE**2:.0f} "
             "(dotted: expected minima)")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Timing every loss under `jit`
#
# For each loss and each M (and each K in `K_LIST`): the MLP energy above, a batch of
# `BATCH` examples, `jax.jit(jax.value_and_grad(objective))` with the loss's Table 1
# hyperparameters. The compile time is `lower(...).compile()` (tracing, lowering and
# XLA's compilation: what the first call of a jitted function pays), the steady-state
# time the median of `REPEATS` calls after one warm-up, each waited for with
# `block_until_ready` and given a new key. SM draws no samples: it is compiled and timed
# once per K and shown at every M. The loss values of the warm-up calls are kept in
# `values`, and every loss is finite at M = 1 (the ranking form of NCE and NCE+ has one
# noise sample against the data sample).
# For K = 4 the targets are random (the time does not depend on the values).

# %%
def time_loss(name, m, k):
    """(compile seconds, steady seconds, loss value) of one loss at M = m, K = k."""
    loss = make_loss(name, **table1_hyperparameters(name, m))
    p = init_mlp(jax.random.fold_in(key, 0), x_dim=1, y_dim=k, hidden=HIDDEN)  # 0: init
    if k == 1:
        x, y = xs, ys
    else:  # 6: random K-dimensional targets
        y = jax.random.normal(jax.random.fold_in(key, 6), (BATCH, k))
        x = xs

    def objective(p, x, y, step_key):
        return batch_loss(loss, partial(mlp_energy, p), x, y, step_key)

    step_key = jax.random.fold_in(key, 7)  # 7: the timed calls' samples
    clock = time.perf_counter()
    compiled = jax.jit(jax.value_and_grad(objective)).lower(p, x, y, step_key).compile()
    compile_s = time.perf_counter() - clock
    value, _ = jax.block_until_ready(compiled(p, x, y, step_key))  # warm-up
    seconds = []
    for r in range(REPEATS):
        clock = time.perf_counter()
        jax.block_until_ready(compiled(p, x, y, jax.random.fold_in(step_key, r + 1)))
        seconds.append(time.perf_counter() - clock)
    return compile_s, statistics.median(seconds), float(value)


timings, values = {}, {}  # keyed by (loss, M, K)
clock = time.perf_counter()
for k in K_LIST:
    for name in NAMES:
        for m in M_LIST:
            if name == "sm" and m != M_LIST[0]:  # no samples: the same function
                timings[name, m, k] = timings[name, M_LIST[0], k]
                values[name, m, k] = values[name, M_LIST[0], k]
                continue
            compile_s, steady_s, value = time_loss(name, m, k)
            timings[name, m, k] = {"compile": compile_s, "steady": steady_s}
            values[name, m, k] = value
print(f"{len(timings)} (loss, M, K) timed in {time.perf_counter() - clock:.0f} s")

# %% [markdown]
# ## The table
#
# Steady-state milliseconds per call (one value and gradient of the batch loss) and
# compile seconds. ML-MCMC runs its L Langevin steps one after the other, each a
# gradient in y over all M chains, so it grows fastest; NCE, NCE+, ML-IS and KLD-IS
# evaluate the energy at M + 1 targets; DSM takes M gradients in y and then the
# gradient of those in the parameters; SM takes K Hessian-vector products.

# %%
def table(field, unit, scale):
    for k in K_LIST:
        print(f"\n{field} {unit}, K = {k}, batch {BATCH}")
        print(f"{'loss':9s}" + "".join(f"{f'M={m}':>11s}" for m in M_LIST))
        for name in NAMES:
            cells = "".join(f"{scale * timings[name, m, k][field]:11.3f}" for m in M_LIST)
            print(f"{name:9s}{cells}")


table("steady", "ms per call", 1e3)
table("compile", "s", 1.0)
print("\nloss values at M = 1:", {name: round(values[name, M_LIST[0], K_LIST[0]], 3)
                                  for name in NAMES})

# %% [markdown]
# ## Time against M
#
# Log-log, one line per loss (dashed: K = 4, where timed). At small M the call is
# dominated by fixed costs (dispatch, the work done once per example of the batch); the
# slope approaches 1 once the M energy evaluations dominate. These are this machine's
# figures only (printed at the top): on a shared CPU they move by tens of percent from
# run to run, and a GPU changes their shape (flat until the device fills up). The full
# suite, `benchmarks/losses.py`, times every loss for M up to 4096 and K in {1, 4}
# against the same losses in eager PyTorch (docs/benchmarks.md).

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
colours = dict(zip(NAMES, plt.cm.tab10.colors))
styles = dict(zip(K_LIST, ("-", "--", ":")))
for k in K_LIST:
    for name in NAMES:
        for ax, field, scale in ((axes[0], "steady", 1e3), (axes[1], "compile", 1.0)):
            ax.plot(M_LIST, [scale * timings[name, m, k][field] for m in M_LIST], styles[k],
                    marker="o", color=colours[name], label=name if k == K_LIST[0] else None)
if len(K_LIST) > 1:  # one legend entry per line style
    for k in K_LIST:
        axes[0].plot([], [], styles[k], color="grey", label=f"K = {k}")
for ax in axes:
    ax.set_xscale("log")
    ax.set_xlabel("M (samples; ML-MCMC: chains)")
axes[0].set_yscale("log")
axes[0].yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))  # 0.1, 1, 10
axes[0].yaxis.set_minor_formatter(plt.NullFormatter())
axes[0].set_ylabel("ms per value_and_grad call")
axes[0].set_title(f"steady state (median of {REPEATS}), batch {BATCH}")
axes[1].set_ylabel("seconds")
axes[1].set_title("compile: trace + lower + XLA")
axes[1].set_ylim(bottom=0)
axes[0].legend(fontsize=8, ncol=2)
fig.suptitle(f"{device.platform} ({device.device_kind}): this machine's figures")
fig.tight_layout()
plt.show()

# %%
print(f"notebook ran in {time.perf_counter() - START:.0f} s")

# %% [markdown]
# ## Further
#
# - The 1D comparison trains every method with these losses (`ebm-jax run
#   table1_toy1d:quick`, Table 1; `figure2_toy1d_m.py`,
#   Figure 2): docs/regression1d.md.
# - The same losses in a box's relative space train the detection energy head
#   (`ebm_jax.energy.boxes.make_detection_loss`): docs/detection.md.
# - docs/library.md lists every function of `ebm_jax.energy` with its equation;
#   docs/benchmarks.md has `benchmarks/losses.py` (this timing at full size, beside
#   eager PyTorch) and `benchmarks/regression1d.py` (whole epochs against PyTorch).
