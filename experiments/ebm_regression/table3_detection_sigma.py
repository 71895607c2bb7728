"""ebm-jax run experiments/ebm_regression/table3_detection_sigma.py:quick

Table 3 of "How to Train Your Energy-Based Model for Regression" (sec. 4.2): detection AP of NCE with five sets of noise sigmas.

NCE heads at M = 128, each with the noise distribution of one sigma set (the set
0.075, 0.15, 0.3 is Table 2's NCE head, trained once with the same workdir). The
paper's numbers are COCO val AP.

Variants: quick (generated data, 5 heads, about 8 min on 2 CPU cores), tiny (a minute or two;
the tests), paper (the paper's head and schedule on COCO: needs --config.coco_root=DIR
--config.detections=FILE, and a GPU).
"""

from ebm_jax.recipes.detection import Config

VARIANTS = ("quick", "tiny", "paper")  # the first is the default

# The methods' hyperparameters (sec. 4.2): one sigma for the four coordinates of the
# relative box space (cx/w0, cy/h0, log w, log h); M = num_samples = 128.
HYPERPARAMETERS = dict(
    is_sigmas=(0.0375, 0.075, 0.15),
    kld_label_sigma=0.0225,
    mcmc_step_size=1e-5,
    nce_sigmas=(0.075, 0.15, 0.3),
    nce_plus_beta=0.1,
    dsm_sigma=0.075,
    # refinement step lengths (loss, l_c for cx and cy, l_s for log w and log h)
    step_lengths=(("nce+", 8e-4, 3.2e-3), ("ml-is", 4e-4, 1.6e-3),
                  ("kld-is", 4e-4, 1.6e-3), ("nce", 4e-4, 1.6e-3),
                  ("dsm", 2.5e-5, 1e-4), ("ml-mcmc", 2.5e-5, 1e-4)),
)

# Table 3's NCE noise: sigma_k = sigma_1 * (1, 2, 4)
SIGMA_SETS = ((0.0125, 0.025, 0.05), (0.025, 0.05, 0.1), (0.05, 0.1, 0.2),
              (0.075, 0.15, 0.3), (0.1, 0.2, 0.4))
# The paper's Table 3: COCO val AP of NCE per sigma set (sigma_1, sigma_2, sigma_3, AP).
REFERENCE = ((0.0125, 0.025, 0.05, 38.58), (0.025, 0.05, 0.1, 38.95),
             (0.05, 0.1, 0.2, 39.12), (0.075, 0.15, 0.3, 39.17), (0.1, 0.2, 0.4, 39.05))


def get_config(variant: str) -> Config:
    common = dict(tables=("sigma",), sigma_sets=SIGMA_SETS,
                  reference_table3=REFERENCE, **HYPERPARAMETERS)
    if variant == "quick":
        return Config(name="quick", grad_clip=5.0, **common)
    if variant == "tiny":
        return Config(name="tiny", num_train=8, num_val=4, image_size=64, num_classes=2,
                      max_objects=2, min_size=8, widths=(8,), channels=8,
                      backbone_steps=2, backbone_batch=4, hidden=16, pool_size=3,
                      canonical_size=48.0, head_steps=2, boxes_per_batch=4, warmup_steps=1,
                      num_samples=4, refine_steps=2,
                      **{**common, "sigma_sets": ((0.075, 0.15, 0.3), (0.15, 0.3, 0.6))})
    if variant == "paper":
        return Config(name="paper", data="coco", image_size=800, widths=(64, 128, 256, 512),
                      channels=256, backbone_steps=90000, backbone_batch=16,
                      backbone_lr=1e-3, hidden=1024, pool_size=7, canonical_size=224.0,
                      head_steps=60000, boxes_per_batch=128, learning_rate=1e-3,
                      warmup_steps=500, **common)
    raise ValueError(f"unknown variant {variant!r}")
