"""The 1D regression comparison of seed 000 (sec. 4.1): Table 1 and Figure 2.

Each method variant trains an ensemble of N independently initialised models of the
591-parameter network as one vmapped computation; one jitted call runs a whole epoch
(`lax.scan` over its 63 steps) for all N models. Models are scored by D_KL to the exact
ground truth on a 2048 x 2048 grid (REFERENCE.md sec. 1); the table reports the mean of
the 5 best.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ebm_jax.data import toy1d
from ebm_jax.energy import batch_loss, checks, make_loss
from ebm_jax.models import ToyEnergyMLP
from ebm_jax.train import fit, init_train_state, make_mesh, make_train_step, read_metrics

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


def make_ensemble_loss(graphdef, loss: Callable) -> Callable:
    """`loss_fn(model, batch, key)` for `ebm_jax.train`: the model holds parameters
    stacked over the ensemble, the batch is (x, y, w) of shape (B, N, 1), (B, N, 1),
    (B, N) (example-major, so that examples shard over devices), w weighs padding 0.

    The objective is the sum of the N models' batch losses: the models share no
    parameter, so each gets exactly its own gradient, and Adam, being element-wise,
    trains them independently. Model j's key is `fold_in(step key, j)`.
    """
    energy = energy_fn(graphdef)

    def loss_fn(model, batch, key):
        params = nnx.state(model, nnx.Param)
        x, y, w = batch
        n = w.shape[1]
        keys = jax.vmap(lambda j: jax.random.fold_in(key, j))(jnp.arange(n))

        def one(p, xm, ym, wm, k):
            return batch_loss(loss, partial(energy, p), xm, ym, k, wm)

        losses = jax.vmap(one, in_axes=(0, 1, 1, 1, 0))(params, x, y, w, keys)
        return jnp.sum(losses), {"mean_model_loss": jnp.mean(losses),
                                 "max_model_loss": jnp.max(losses)}

    return loss_fn


def make_epoch_batches(x, y, key: jax.Array, num_models: int, batch_size: int):
    """`batches(step)` for `fit`: the whole epoch that starts at `step` (a multiple of
    the steps per epoch), stacked as (steps, B, N, ...). Model j visits the data in the
    order `permutation(fold_in(fold_in(key, epoch), j))`; the last batch is padded with
    rows of weight 0."""
    x, y = np.asarray(x), np.asarray(y)
    n = x.shape[0]
    steps = math.ceil(n / batch_size)
    pad = steps * batch_size - n

    @jax.jit
    def order(epoch):
        k = jax.random.fold_in(key, epoch)
        perms = jax.vmap(lambda j: jax.random.permutation(jax.random.fold_in(k, j), n))(
            jnp.arange(num_models))
        return jnp.concatenate([perms, perms[:, :pad]], axis=1)  # (N, steps * B)

    w = (np.arange(steps * batch_size) < n).astype(np.float32)
    w = np.broadcast_to(w.reshape(steps, batch_size, 1), (steps, batch_size, num_models))

    def batches(step: int):
        if step % steps:
            raise ValueError(f"step must start an epoch (multiple of {steps}), got {step}")
        idx = np.asarray(order(step // steps)).reshape(num_models, steps, batch_size)
        idx = idx.transpose(1, 2, 0)  # (steps, B, N)
        return x[idx], y[idx], np.ascontiguousarray(w)

    return batches, steps


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
    stage_dir=None,
    config: dict | None = None,
    restart: bool = False,
    save_every_epochs: int = 5,
    mesh=None,
    progress: bool = False,
    description: str = "train",
):
    """Trains `num_models` nets with Adam on (x, y) with a bound per-example loss,
    through `ebm_jax.train.fit`: one jitted call per epoch (a scan over its steps), the
    batch sharded over the devices of `mesh` (default: one device), checkpoints in
    `stage_dir` every `save_every_epochs` epochs, and resuming from them when rerun
    (`restart` starts over). Without `stage_dir` the checkpoints go to a temporary
    directory that is removed afterwards.

    Returns (graphdef, params stacked over models, the last epoch's loss averaged over
    steps and models, seconds per epoch per model (median epoch), seconds of the first
    epoch beyond the median (compilation)).
    """
    x = jnp.asarray(checks.finite_array("x", x), jnp.float32)
    y = jnp.asarray(checks.finite_array("y", y), jnp.float32)
    checks.same_batch("x", x, "y", y)
    if x.ndim != 2 or y.ndim != 2:
        raise ValueError(f"x and y must have shape (n, d), got {x.shape} and {y.shape}")
    num_models = checks.int_at_least("num_models", num_models, 1)
    epochs = checks.int_at_least("epochs", epochs, 1)
    batch_size = checks.int_at_least("batch_size", batch_size, 1)
    save_every_epochs = checks.int_at_least("save_every_epochs", save_every_epochs, 1)
    checks.positive("learning_rate", learning_rate)

    k_init, k_train, k_data = jax.random.split(key, 3)
    graphdef, params = init_ensemble(k_init, num_models)
    single_graphdef, _, rest = nnx.split(ToyEnergyMLP(rngs=nnx.Rngs(0)), nnx.Param, ...)
    optimizer = optax.adam(learning_rate)
    state = init_train_state(params, rest, optimizer, k_train)
    batches, steps = make_epoch_batches(x, y, k_data, num_models, batch_size)
    mesh = make_mesh(1) if mesh is None else mesh
    step_fn = make_train_step(single_graphdef, make_ensemble_loss(graphdef, loss),
                              optimizer, mesh, steps_per_call=steps, stacked=True)
    config = dict(config or {}, num_models=num_models, epochs=epochs,
                  batch_size=batch_size, learning_rate=learning_rate,
                  num_train=int(x.shape[0]))
    with contextlib.ExitStack() as stack:
        if stage_dir is None:
            stage_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="ebm-jax-"))
        state = fit(
            stage_dir, state, step_fn, batches, num_steps=epochs * steps, config=config,
            save_every=save_every_epochs * steps, keep=2, log_every=steps,
            restart=restart, progress=progress, description=description,
            global_batches=True,  # every process builds the same (small) epoch
        )
        rows = read_metrics(stage_dir)
        params = jax.device_get(state.params)
    final = float(rows[-1]["mean_model_loss"]) if rows else float("nan")
    rates = np.array([r["steps_per_second"] for r in rows if r["step"] % steps == 0])
    epoch_seconds = steps / rates if rates.size else np.array([np.nan])
    spe = float(np.median(epoch_seconds)) / num_models
    compile_s = max(0.0, float(epoch_seconds[0] - np.median(epoch_seconds)))
    return graphdef, params, final, spe, compile_s


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
    final_loss: float  # last epoch's training loss, averaged over steps and models
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
            "final_loss": self.final_loss,
            "seconds_per_epoch": self.seconds_per_epoch,
            "compile_seconds": self.compile_seconds,
        }


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


def stage_name(method: str, dataset: int, num_samples: int | None = None) -> str:
    """Directory name of one method x dataset training stage under the run directory."""
    return f"{method}-d{dataset}" + ("" if num_samples is None else f"-M{num_samples}")


def run_one(
    method: str,
    dataset: int,
    profile: Profile,
    *,
    seed: int,
    num_samples: int | None = None,
    run_dir=None,
    restart: bool = False,
    save_every_epochs: int = 5,
    mesh=None,
    progress: bool = False,
) -> RunResult:
    """Trains (or resumes) and evaluates one method variant on one dataset. With
    `run_dir`, the stage's checkpoints and records go to `run_dir/stage_name(...)`."""
    loss_name, hp = method_hyperparameters(method, dataset, profile, num_samples)
    loss = make_loss(loss_name, **hp)
    key = jax.random.key(seed)
    x, y = toy1d.sample(jax.random.fold_in(key, dataset), dataset, profile.num_train)
    run_key = jax.random.fold_in(jax.random.fold_in(key, 1000 + dataset), _stable_hash(method))
    stage_dir = None
    if run_dir is not None:
        stage_dir = Path(run_dir) / stage_name(method, dataset, num_samples)
    config = {"experiment": "regression1d", "method": method, "dataset": dataset,
              "loss": loss_name, "hyperparameters": hp, "seed": seed}
    extra = "" if num_samples is None else f" M={num_samples}"
    graphdef, params, final_loss, spe, compile_s = train_ensemble(
        x, y, loss, key=run_key, num_models=profile.num_models, epochs=profile.epochs,
        batch_size=profile.batch_size, learning_rate=profile.learning_rate,
        stage_dir=stage_dir, config=config, restart=restart,
        save_every_epochs=save_every_epochs, mesh=mesh, progress=progress,
        description=f"{method} d{dataset}{extra}",
    )
    kls, best_scores = evaluate_kl(graphdef, params, dataset, profile.grid)
    return RunResult(
        method=method, dataset=dataset, num_models=profile.num_models, epochs=profile.epochs,
        num_samples=hp.get("num_samples"), kl=kls, final_loss=final_loss,
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
