"""The EBM regression paper as pure functions: proposals, losses, Langevin chains, Hessian traces and
gradient-ascent prediction. Nothing here knows about Flax, optimisers or devices."""

from ebm_jax.energy.hessian import (
    exact_hessian_trace,
    grad_and_hessian_trace,
    hutchinson_hessian_trace,
)
from ebm_jax.energy.langevin import langevin_chains
from ebm_jax.energy.losses import (
    LOSSES,
    RUNTIME_HYPERPARAMETERS,
    BatchedEnergy,
    batch_loss,
    dsm_loss,
    energies,
    kld_is_loss,
    log_partition_is,
    make_loss,
    ml_is_loss,
    ml_mcmc_loss,
    nce_loss,
    nce_plus_loss,
    scores,
    sm_loss,
    uses_many,
)
from ebm_jax.energy.predict import gradient_ascent, make_predictor
from ebm_jax.energy.proposals import (
    BETA_SCALES,
    GaussianMixture,
    gaussian_mixture,
    isotropic_gaussian,
)

__all__ = [
    "BETA_SCALES",
    "LOSSES",
    "RUNTIME_HYPERPARAMETERS",
    "BatchedEnergy",
    "GaussianMixture",
    "batch_loss",
    "dsm_loss",
    "energies",
    "exact_hessian_trace",
    "gaussian_mixture",
    "grad_and_hessian_trace",
    "gradient_ascent",
    "hutchinson_hessian_trace",
    "isotropic_gaussian",
    "kld_is_loss",
    "langevin_chains",
    "log_partition_is",
    "make_loss",
    "make_predictor",
    "ml_is_loss",
    "ml_mcmc_loss",
    "nce_loss",
    "nce_plus_loss",
    "scores",
    "sm_loss",
    "uses_many",
]
