"""The plan of a 1D regression run (`ebm_jax.recipes.regression1d`): each method's loss
and hyperparameters on a dataset, which Langevin chain ML-MCMC takes on this backend,
and the training stages, in the order they train."""

from __future__ import annotations

import dataclasses
import functools
import math
import jax

from ebm_jax.data import toy1d
from ebm_jax.energy.methods import mcmc_steps
from ebm_jax.train.stages import TrainStage

# `cfg` below is a `ebm_jax.recipes.regression1d.Config` (not imported: that module
# imports this one)
METHODS = ("ml-is", "ml-mcmc-1", "ml-mcmc-16", "ml-mcmc-256", "kld-is", "nce", "sm",
           "dsm", "nce+")  # Table 1's order; any ml-mcmc-L (L >= 1) is accepted


def method_loss(cfg: "Config", method: str, dataset: int,
                num_samples: int | None = None) -> tuple[str, dict]:
    """(loss name for `make_loss`, hyperparameters) of a Table 1 method on a dataset;
    `num_samples` replaces the config's M (Figure 2)."""
    toy1d.check_dataset(dataset)
    m = cfg.num_samples if num_samples is None else num_samples
    i = dataset - 1
    if method == "ml-is":
        return "ml-is", dict(sigmas=cfg.is_sigmas, num_samples=m)
    if method == "kld-is":
        return "kld-is", dict(sigmas=cfg.is_sigmas, label_sigma=cfg.kld_label_sigma,
                              num_samples=m)
    if method == "nce":
        return "nce", dict(sigmas=cfg.nce_sigmas, num_samples=m)
    if method == "nce+":
        return "nce+", dict(sigmas=cfg.nce_sigmas, beta=cfg.nce_plus_beta,
                            beta_scale=cfg.nce_plus_beta_scale, num_samples=m)
    if method == "sm":
        return "sm", {}
    if method == "dsm":
        return "dsm", dict(sigma=cfg.dsm_sigma[i], num_samples=m)
    if mcmc_steps(method):
        chains = cfg.mcmc_samples if num_samples is None else num_samples
        hp = dict(num_steps=mcmc_steps(method), step_size=cfg.langevin_step[i],
                  num_samples=chains)
        if langevin_path(cfg)[0] == "fused":  # only then: the reference stages keep
            hp["fused"] = True                # their identities
        return "ml-mcmc", hp
    raise ValueError(f"method must be one of {list(METHODS)} (or ml-mcmc-L), "
                     f"got {method!r}")


def langevin_path(cfg: "Config") -> tuple[str, str]:
    """("fused" or "reference", why) for ML-MCMC's chains on this backend: `langevin`
    as set, or for "auto" the fused kernel on a GPU where it compiles there."""
    if cfg.langevin != "auto":
        return cfg.langevin, "as set (--config.langevin)"
    backend = jax.default_backend()
    if backend != "gpu":
        return "reference", f"auto: the fused kernel is for a GPU, this backend is {backend}"
    error = _fused_compile_error()
    if error:
        return "reference", f"auto: the fused kernel does not compile on this GPU ({error})"
    return "fused", "auto: a GPU, where the fused kernel compiles"


@functools.cache
def _fused_compile_error() -> str | None:
    """None where the fused chain compiles and runs on the default device (a tiny
    chain, once per process), else the first line of why not."""
    import jax.numpy as jnp

    from ebm_jax.energy.langevin_fused import fused_langevin_chains
    from ebm_jax.models import ToyEnergyMLP
    from flax import nnx

    try:
        weights = ToyEnergyMLP(rngs=nnx.Rngs(0)).chain_weights()
        out = fused_langevin_chains(weights, jnp.zeros((1, 1)), jnp.zeros((1, 8)),
                                    jnp.zeros((2, 1, 8)), step_size=0.1)
        jax.block_until_ready(out)
    except Exception as e:  # noqa: BLE001 - any failure means: use the reference chain
        return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    return None


@dataclasses.dataclass(frozen=True)
class Job:
    """One method on one dataset (at one M): its loss and its training stage."""

    method: str
    dataset: int
    loss: str
    hyperparameters: dict
    num_models: int
    stage: TrainStage

    @property
    def num_samples(self) -> int | None:
        return self.hyperparameters.get("num_samples")

    @property
    def family(self) -> str:
        """The name its keys derive from (the same for every M)."""
        return f"{self.method}-d{self.dataset}"


def plan(cfg: "Config") -> list[Job]:
    """Every stage of the run, in the order they train."""
    steps = math.ceil(cfg.num_train / cfg.batch_size)
    jobs = []
    sweep = cfg.sweep_m or (None,)
    for m in sweep:
        for d in cfg.datasets:
            for method in cfg.methods:
                loss, hp = method_loss(cfg, method, d, m)
                n = cfg.models_for(method)
                name = f"{method}-d{d}" + (f"-M{hp['num_samples']}" if hp else "")
                identity = {"experiment": "regression1d", "method": method, "dataset": d,
                            "loss": loss, "hyperparameters": hp,
                            "num_samples": hp.get("num_samples"), "num_models": n,
                            "epochs": cfg.epochs, "batch_size": cfg.batch_size,
                            "learning_rate": cfg.learning_rate,
                            "num_train": cfg.num_train, "seed": cfg.seed}
                stage = TrainStage(name, identity, num_steps=cfg.epochs * steps,
                                   log_every=steps, save_every=cfg.save_every_epochs * steps,
                                   global_batches=False)  # each process: its rows
                jobs.append(Job(method, d, loss, hp, n, stage))
    return jobs
