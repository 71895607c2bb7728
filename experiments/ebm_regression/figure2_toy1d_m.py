"""ebm-jax run experiments/ebm_regression/figure2_toy1d_m.py:quick

Figure 2 of "How to Train Your Energy-Based Model for Regression" (sec. 4.1): D_KL of ML-IS, KLD-IS, NCE and NCE+ against the number of samples M.

Each method x M trains an ensemble as in Table 1 (table1_toy1d.py); the figure plots
the mean D_KL of the best top_k models, the two datasets averaged. All M of one method
start from the same initialisations and batch orders. Stages equal to Table 1's (same
method, M and sizes) are shared through the common work directory runs/regression1d.

Variants: quick (5 models x 20 epochs, M in 1, 4, 16, 64, 256, 1024, top-3 of 5; its
M = 256 stages are those of table1_toy1d.py:quick), tiny (a minute or two; the tests), paper
(20 models x 75 epochs, M = 1, 2, 4, ..., 1024, top-5 of 20).
"""

from ebm_jax.recipes.regression1d import Config

VARIANTS = ("quick", "tiny", "paper")  # the first is the default

METHODS = ("ml-is", "kld-is", "nce", "nce+")

# Table 1 hyperparameters (sec. 4.1); pairs are (dataset 1, dataset 2).
HYPERPARAMETERS = dict(
    is_sigmas=(0.2, 1.6),
    kld_label_sigma=0.025,
    nce_sigmas=(0.1, 0.8),
    nce_plus_beta=0.025,
    nce_plus_beta_scale="std",  # p_beta's std is beta * sigma_k, as in the authors' 1D code
    langevin_step=(0.05, 0.0125),
    dsm_sigma=(0.2, 0.075),
)


def get_config(variant: str) -> Config:
    if variant == "quick":
        return Config(methods=METHODS, datasets=(1, 2), num_models=5, epochs=20,
                      num_samples=256, mcmc_samples=8, top_k=3,
                      sweep_m=(1, 4, 16, 64, 256, 1024), **HYPERPARAMETERS)
    if variant == "tiny":
        return Config(methods=("nce+",), datasets=(1,), num_models=2, epochs=2,
                      num_samples=4, mcmc_samples=2, top_k=1, num_train=128, grid=64,
                      sweep_m=(1, 4), **HYPERPARAMETERS)
    if variant == "paper":
        return Config(methods=METHODS, datasets=(1, 2), num_models=20, epochs=75,
                      num_samples=1024, mcmc_samples=1024, top_k=5,
                      sweep_m=tuple(2**i for i in range(11)), **HYPERPARAMETERS)
    raise ValueError(f"unknown variant {variant!r}")
