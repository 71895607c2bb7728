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
from ebm_jax.recipes.detection_presets import detection_config

VARIANTS = ("quick", "tiny", "paper")  # the first is the default

# The methods' hyperparameters (sec. 4.2; M = num_samples = 128) are the Config's
# defaults; each variant's sizes come from `ebm_jax.recipes.detection_presets`.

# Table 3's NCE noise: sigma_k = sigma_1 * (1, 2, 4)
SIGMA_SETS = ((0.0125, 0.025, 0.05), (0.025, 0.05, 0.1), (0.05, 0.1, 0.2),
              (0.075, 0.15, 0.3), (0.1, 0.2, 0.4))
# The paper's Table 3: COCO val AP of NCE per sigma set (sigma_1, sigma_2, sigma_3, AP).
REFERENCE = ((0.0125, 0.025, 0.05, 38.58), (0.025, 0.05, 0.1, 38.95),
             (0.05, 0.1, 0.2, 39.12), (0.075, 0.15, 0.3, 39.17), (0.1, 0.2, 0.4, 39.05))


def get_config(variant: str) -> Config:
    return detection_config(
        variant, dict(tables=("sigma",), sigma_sets=SIGMA_SETS, reference_table3=REFERENCE),
        {"tiny": dict(sigma_sets=((0.075, 0.15, 0.3), (0.15, 0.3, 0.6)))})
