"""ebm-jax run experiments/ebm_regression/figure5_detection_beta.py:quick

Figure 5 of "How to Train Your Energy-Based Model for Regression" (sec. 4.2): detection AP of NCE+ against its beta, beside NCE.

NCE and NCE+ heads at M = 128 (beta = 0.1 is Table 2's NCE+ head, trained once with the
same workdir). The figure is figure5_beta.png.

Variants: quick (generated data, 7 heads, about 10 min on 2 CPU cores), tiny (a minute or two;
the tests), paper (the paper's head and schedule on COCO: needs
--config.coco_root=DIR --config.detections=FILE, and a GPU).
"""

from ebm_jax.recipes.detection import Config
from ebm_jax.recipes.detection_presets import detection_config

VARIANTS = ("quick", "tiny", "paper")  # the first is the default

# The methods' hyperparameters (sec. 4.2; M = num_samples = 128) are the Config's
# defaults; each variant's sizes come from `ebm_jax.recipes.detection_presets`.

def get_config(variant: str) -> Config:
    return detection_config(
        variant, dict(tables=("beta",), betas=(0.025, 0.05, 0.1, 0.2, 0.3, 0.5)),
        {"tiny": dict(betas=(0.1,))})
