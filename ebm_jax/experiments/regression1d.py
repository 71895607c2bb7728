"""The 1D regression comparison of seed 000 (sec. 4.1): Table 1 and Figure 2.

Each method variant trains an ensemble of N independently initialised models of the
591-parameter network as one vmapped computation; one jitted call runs a whole epoch
(`lax.scan` over its 63 steps) for all N models. Models are scored by D_KL to the exact
ground truth on a 2048 x 2048 grid (REFERENCE.md sec. 1); the table reports the mean of
the 5 best.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ebm_jax.data import toy1d
from ebm_jax.energy import batch_loss, checks, make_loss
from ebm_jax.models import ToyEnergyMLP

# Paper's Table 1 D_KL (one figure per method, the two datasets averaged) and its
# seconds per epoch on the authors' GPU.
PAPER_KL = {
    "ml-is": 0.062, "ml-mcmc-1": 0.865, "ml-mcmc-16": 0.449, "ml-mcmc-256": 0.106,
    "kld-is": 0.088, "nce": 0.068, "sm": 0.781, "dsm": 0.395, "nce+": 0.066,
}
PAPER_SECONDS_PER_EPOCH = {
    "ml-mcmc-1": 0.54, "ml-mcmc-16": 2.41, "ml-mcmc-256": 30.8, "kld-is": 0.44,
    "sm": 0.60, "dsm": 0.47, "nce+": 0.46,
}
METHODS = tuple(PAPER_KL)  # table order
SWEEP_METHODS = ("ml-is", "kld-is", "nce", "nce+")
SWEEP_M = tuple(2**i for i in range(11))  # 1 ... 1024

LANGEVIN_STEP = {1: 0.05, 2: 0.0125}
DSM_SIGMA = {1: 0.2, 2: 0.075}


@dataclasses.dataclass(frozen=True)
class Profile:
    """How much work one method x dataset run does."""

    num_models: int
    epochs: int
    num_samples: int  # M for ML-IS, KLD-IS, NCE, NCE+, DSM
    mcmc_samples: int  # M (number of chains) for ML-MCMC
    top_k: int = 5
    num_train: int = 2000
    batch_size: int = 32
    learning_rate: float = 1e-3
    grid: int = 2048  # evaluation grid, grid x grid


PROFILES = {
    # The paper's protocol: 20 models x 75 epochs, M = 1024, top-5 of 20.
    "paper": Profile(num_models=20, epochs=75, num_samples=1024, mcmc_samples=1024),
    # About five minutes on 2 CPU cores for all nine variants on both datasets.
    "quick": Profile(num_models=5, epochs=20, num_samples=256, mcmc_samples=8, top_k=3),
}


def method_hyperparameters(method: str, dataset: int, profile: Profile, num_samples=None):
    """(loss name, hyperparameters) of a Table 1 variant on a dataset (REFERENCE.md)."""
    toy1d.check_dataset(dataset)
    m = profile.num_samples if num_samples is None else num_samples
    if method == "ml-is":
        return "ml-is", dict(sigmas=(0.2, 1.6), num_samples=m)
    if method == "kld-is":
        return "kld-is", dict(sigmas=(0.2, 1.6), label_sigma=0.025, num_samples=m)
    if method == "nce":
        return "nce", dict(sigmas=(0.1, 0.8), num_samples=m)
    if method == "nce+":
        # std scaling of p_beta, as in the authors' 1D code (see nce_plus_loss)
        return "nce+", dict(sigmas=(0.1, 0.8), beta=0.025, beta_scale="std", num_samples=m)
    if method == "sm":
        return "sm", {}
    if method == "dsm":
        return "dsm", dict(sigma=DSM_SIGMA[dataset], num_samples=m)
    if method.startswith("ml-mcmc-"):
        steps = int(method.removeprefix("ml-mcmc-"))
        chains = profile.mcmc_samples if num_samples is None else num_samples
        return "ml-mcmc", dict(
            num_steps=steps, step_size=LANGEVIN_STEP[dataset], num_samples=chains
        )
    raise ValueError(f"method must be one of {list(METHODS)} (or ml-mcmc-L), got {method!r}")


def check_method(method: str) -> str:
    if method in METHODS:
        return method
    if method.startswith("ml-mcmc-"):
        tail = method.removeprefix("ml-mcmc-")
        if tail.isdigit() and int(tail) >= 1:
            return method
        raise ValueError(f"method {method!r}: L in ml-mcmc-L must be an integer >= 1")
    raise ValueError(f"method must be one of {list(METHODS)} (or ml-mcmc-L), got {method!r}")


# --------------------------------------------------------------------------- training


def init_ensemble(key: jax.Array, num_models: int):
    """(graphdef, stacked parameters) of `num_models` independently initialised nets."""
    checks.int_at_least("num_models", num_models, 1)
    graphdef, _ = nnx.split(ToyEnergyMLP(rngs=nnx.Rngs(0)))

    def init(k):
        return nnx.state(ToyEnergyMLP(rngs=nnx.Rngs(params=k)), nnx.Param)

    return graphdef, jax.vmap(init)(jax.random.split(key, num_models))


def energy_fn(graphdef) -> Callable:
    """energy(params, x, y) -> f(x, y) for the network of `graphdef`."""

    def energy(params, x, y):
        return nnx.merge(graphdef, params)(x, y)

    return energy


def make_ensemble_epoch(energy: Callable, loss: Callable, optimizer, num_train: int,
                        batch_size: int) -> Callable:
    """Jitted `epoch(params, opt_state, keys, x, y) -> (params, opt_state, mean_loss)`,
    vmapped over the ensemble (leading axis of params, opt_state and keys).

    One epoch visits a fresh permutation of the data in ceil(n / batch) steps; the last
    batch is padded and its padding rows weigh 0. Step s of model j uses
    `fold_in(keys[j], s)`.
    """
    steps = math.ceil(num_train / batch_size)
    pad = steps * batch_size - num_train

    def one_model(params, opt_state, key, x, y):
        k_perm, k_steps = jax.random.split(key)
        perm = jax.random.permutation(k_perm, num_train)
        idx = jnp.concatenate([perm, perm[:pad]]).reshape(steps, batch_size)
        weights = (jnp.arange(steps * batch_size) < num_train).astype(x.dtype)
        weights = weights.reshape(steps, batch_size)

        def step(carry, inputs):
            params, opt_state = carry
            s, idx_s, w_s = inputs

            def objective(p):
                return batch_loss(
                    loss, partial(energy, p), x[idx_s], y[idx_s],
                    jax.random.fold_in(k_steps, s), w_s,
                )

            value, grads = jax.value_and_grad(objective)(params)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), value

        (params, opt_state), losses = jax.lax.scan(
            step, (params, opt_state), (jnp.arange(steps), idx, weights)
        )
        return params, opt_state, jnp.mean(losses)

    return jax.jit(
        jax.vmap(one_model, in_axes=(0, 0, 0, None, None)), donate_argnums=(0, 1)
    )


def make_grid_scores(energy: Callable, grid: int, chunk: int = 64) -> Callable:
    """Jitted `scores(params) -> f(x, y)` on the grid x grid evaluation grid (one model),
    computed `chunk` x values at a time."""
    xs, ys = toy1d.eval_grid(grid, grid)
    if grid % chunk:
        chunk = math.gcd(grid, chunk)
    xs = jnp.asarray(xs).reshape(-1, chunk)
    ys = jnp.asarray(ys)[:, None]

    @jax.jit
    def scores(params):
        def rows(x_chunk):
            def row(x):
                return jax.vmap(lambda yy: energy(params, x[None], yy))(ys)

            return jax.vmap(row)(x_chunk)

        return jax.lax.map(rows, xs).reshape(grid, grid)

    return scores


@dataclasses.dataclass
class RunResult:
    method: str
    dataset: int
    num_models: int
    epochs: int
    num_samples: int | None
    kl: list[float]
    final_losses: list[float]
    seconds_per_epoch: float  # wall seconds per epoch per model (ensemble time / N)
    compile_seconds: float
    best_scores: np.ndarray | None = None  # grid scores of the best model, for plots

    def record(self, top_k: int) -> dict:
        kl = np.asarray(self.kl, np.float64)
        finite = np.where(np.isfinite(kl), kl, np.inf)
        top = np.sort(finite)[: min(top_k, kl.size)]
        return {
            "method": self.method,
            "dataset": self.dataset,
            "num_models": self.num_models,
            "epochs": self.epochs,
            "num_samples": self.num_samples,
            "kl_mean": float(np.mean(kl)),
            "kl_std": float(np.std(kl)),
            "kl_top5": float(np.mean(top)),
            "top_k": int(top.size),
            "kl_all": [float(v) for v in kl],
            "seconds_per_epoch": self.seconds_per_epoch,
            "compile_seconds": self.compile_seconds,
        }


def train_ensemble(
    x,
    y,
    loss: Callable,
    *,
    key: jax.Array,
    num_models: int,
    epochs: int,
    batch_size: int = 32,
    learning_rate: float = 1e-3,
    progress: Callable | None = None,
):
    """Trains `num_models` nets with Adam on (x, y) with a bound per-example loss.

    Returns (graphdef, params stacked over models, final epoch losses (N,),
    seconds per epoch per model, compile seconds).
    """
    x = jnp.asarray(checks.finite_array("x", x), jnp.float32)
    y = jnp.asarray(checks.finite_array("y", y), jnp.float32)
    checks.same_batch("x", x, "y", y)
    if x.ndim != 2 or y.ndim != 2:
        raise ValueError(f"x and y must have shape (n, d), got {x.shape} and {y.shape}")
    num_models = checks.int_at_least("num_models", num_models, 1)
    epochs = checks.int_at_least("epochs", epochs, 1)
    batch_size = checks.int_at_least("batch_size", batch_size, 1)
    checks.positive("learning_rate", learning_rate)

    k_init, k_train = jax.random.split(key)
    graphdef, params = init_ensemble(k_init, num_models)
    energy = energy_fn(graphdef)
    optimizer = optax.adam(learning_rate)
    opt_state = jax.vmap(optimizer.init)(params)
    epoch_fn = make_ensemble_epoch(energy, loss, optimizer, x.shape[0], batch_size)
    model_keys = jax.random.split(k_train, num_models)

    def keys_for(e):
        return jax.vmap(lambda k: jax.random.fold_in(k, e))(model_keys)

    t0 = time.perf_counter()
    compiled = epoch_fn.lower(params, opt_state, keys_for(0), x, y).compile()
    compile_seconds = time.perf_counter() - t0

    t0 = time.perf_counter()
    mean_loss = None
    for e in range(epochs):
        params, opt_state, mean_loss = compiled(params, opt_state, keys_for(e), x, y)
        if progress is not None:
            progress(e, mean_loss)
    jax.block_until_ready(params)
    elapsed = time.perf_counter() - t0
    return (
        graphdef, params, np.asarray(mean_loss), elapsed / epochs / num_models,
        compile_seconds,
    )


def evaluate_kl(graphdef, params, dataset: int, grid: int = 2048):
    """D_KL of each model of the ensemble; returns (kl (N,), scores of the best model)."""
    energy = energy_fn(graphdef)
    scores_fn = make_grid_scores(energy, grid)
    p_true = toy1d.ground_truth_grid(dataset, grid, grid)
    num_models = jax.tree.leaves(params)[0].shape[0]
    kls, best, best_scores = [], np.inf, None
    for j in range(num_models):
        s = scores_fn(jax.tree.map(lambda a: a[j], params))
        kl = float(toy1d.kl_from_log_scores(p_true, s))
        kls.append(kl)
        if np.isfinite(kl) and kl < best:
            best, best_scores = kl, np.asarray(s)
    return kls, best_scores


def run_one(
    method: str,
    dataset: int,
    profile: Profile,
    *,
    seed: int,
    num_samples: int | None = None,
    progress_factory: Callable | None = None,
) -> RunResult:
    """Trains and evaluates one method variant on one dataset."""
    loss_name, hp = method_hyperparameters(method, dataset, profile, num_samples)
    loss = make_loss(loss_name, **hp)
    key = jax.random.key(seed)
    x, y = toy1d.sample(jax.random.fold_in(key, dataset), dataset, profile.num_train)
    run_key = jax.random.fold_in(jax.random.fold_in(key, 1000 + dataset), _stable_hash(method))
    progress, close = (None, None)
    if progress_factory is not None:
        progress, close = progress_factory(method, dataset)
    try:
        graphdef, params, final_losses, spe, compile_s = train_ensemble(
            x, y, loss, key=run_key, num_models=profile.num_models, epochs=profile.epochs,
            batch_size=profile.batch_size, learning_rate=profile.learning_rate,
            progress=progress,
        )
    finally:
        if close is not None:
            close()
    kls, best_scores = evaluate_kl(graphdef, params, dataset, profile.grid)
    return RunResult(
        method=method, dataset=dataset, num_models=profile.num_models, epochs=profile.epochs,
        num_samples=hp.get("num_samples"), kl=kls, final_losses=final_losses.tolist(),
        seconds_per_epoch=spe, compile_seconds=compile_s, best_scores=best_scores,
    )


def _stable_hash(name: str) -> int:
    return int.from_bytes(name.encode(), "little") % (2**31 - 1)


# --------------------------------------------------------------------------- reports


def table_markdown(records: Sequence[dict], datasets: Sequence[int]) -> str:
    """Table 1 as Markdown: D_KL (top-k mean) per dataset, their mean, the paper's
    figure and seconds per epoch."""
    by = {(r["method"], r["dataset"]): r for r in records}
    methods = [m for m in dict.fromkeys(r["method"] for r in records)]
    top_k = max((r["top_k"] for r in records), default=5)
    cols = [f"D_KL d{d} (top-{top_k})" for d in datasets]
    head = ["method", *cols, "D_KL mean", "paper D_KL", "s/epoch/model", "models x epochs"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in methods:
        rs = [by.get((m, d)) for d in datasets]
        vals = [r["kl_top5"] if r else float("nan") for r in rs]
        present = [r for r in rs if r]
        spe = np.mean([r["seconds_per_epoch"] for r in present]) if present else float("nan")
        size = f"{present[0]['num_models']} x {present[0]['epochs']}" if present else ""
        lines.append(
            "| " + " | ".join([
                m, *[f"{v:.3f}" for v in vals], f"{np.nanmean(vals):.3f}",
                f"{PAPER_KL.get(m, float('nan')):.3f}", f"{spe:.3f}", size,
            ]) + " |"
        )
    return "\n".join(lines) + "\n"


def sweep_markdown(records: Sequence[dict]) -> str:
    ms = sorted({r["num_samples"] for r in records})
    methods = list(dict.fromkeys(r["method"] for r in records))
    head = ["method", *[f"M={m}" for m in ms]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for meth in methods:
        row = [meth]
        for m in ms:
            vals = [r["kl_top5"] for r in records if r["method"] == meth and r["num_samples"] == m]
            row.append(f"{np.mean(vals):.3f}" if vals else "")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
