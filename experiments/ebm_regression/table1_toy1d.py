"""ebm-jax run experiments/ebm_regression/table1_toy1d.py:quick

Table 1 of "How to Train Your Energy-Based Model for Regression" (sec. 4.1): D_KL of nine EBM training methods on the two 1D datasets.

Every method trains an ensemble of independently initialised 591-parameter networks
(Adam, lr 1e-3, batch 32, 2000 training pairs) and is scored by D_KL to the exact
ground truth on a 2048 x 2048 grid; the table reports the mean of the best top_k models.

Variants: quick (about 5-8 min on 2 CPU cores: 5 models x 20 epochs, M = 256, ML-MCMC
with 8 chains, top-3 of 5), tiny (a minute or two; the tests), paper (the paper's protocol:
20 models x 75 epochs, M = 1024, top-5 of 20; hours on a CPU, ML-MCMC-256 with 1024
chains about 45 min per model and dataset: add --config.mcmc_models=8 or drop it).
Both datasets of a method train with one compiled step (ML-MCMC-1, -16 and -256 of one
ensemble size too: the chain length is a run-time value), and the compilation cache
(--compile-cache, default <workdir>/.jax-cache) keeps every program for a rerun; each
stage's progress line says its seconds compiling, training and evaluating.
"""

from ebm_jax.recipes.regression1d import Config

VARIANTS = ("quick", "tiny", "paper")  # the first is the default

METHODS = ("ml-is", "ml-mcmc-1", "ml-mcmc-16", "ml-mcmc-256", "kld-is", "nce", "sm",
           "dsm", "nce+")

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

# The paper's Table 1: D_KL (the two datasets averaged) and seconds per epoch (its GPU;
# not given for ML-IS and NCE).
REFERENCE_KL = (("ml-is", 0.062), ("ml-mcmc-1", 0.865), ("ml-mcmc-16", 0.449),
                ("ml-mcmc-256", 0.106), ("kld-is", 0.088), ("nce", 0.068), ("sm", 0.781),
                ("dsm", 0.395), ("nce+", 0.066))
REFERENCE_SECONDS_PER_EPOCH = (("ml-mcmc-1", 0.54), ("ml-mcmc-16", 2.41),
                               ("ml-mcmc-256", 30.8), ("kld-is", 0.44), ("sm", 0.60),
                               ("dsm", 0.47), ("nce+", 0.46))


def get_config(variant: str) -> Config:
    reference = dict(reference_kl=REFERENCE_KL,
                     reference_seconds_per_epoch=REFERENCE_SECONDS_PER_EPOCH)
    if variant == "quick":
        return Config(methods=METHODS, datasets=(1, 2), num_models=5, epochs=20,
                      num_samples=256, mcmc_samples=8, top_k=3, **HYPERPARAMETERS,
                      **reference)
    if variant == "tiny":
        return Config(methods=("nce+", "ml-mcmc-2"), datasets=(1, 2),
                      num_models=2, epochs=2, num_samples=4, mcmc_samples=2, top_k=1,
                      num_train=128, grid=64, **HYPERPARAMETERS,
                      **reference)
    if variant == "paper":
        return Config(methods=METHODS, datasets=(1, 2), num_models=20, epochs=75,
                      num_samples=1024, mcmc_samples=1024, top_k=5, **HYPERPARAMETERS,
                      **reference)
    raise ValueError(f"unknown variant {variant!r}")
