"""ebm-jax run experiments/ebm_regression/figure3_detection_m.py:quick

Figures 3 and 4 of "How to Train Your Energy-Based Model for Regression" (sec. 4.2): detection AP after refinement against the number of samples M, and ML-IS training cost against M.

ML-IS, KLD-IS, NCE and NCE+ heads are trained at each M on the frozen features of the
shared `backbone` stage (the heads at M = 128 are those of Table 2: with the same
workdir they are trained once). The figure is figure3_4_m.png.

Variants: quick (generated data, 32 heads, about 40 min on 2 CPU cores; add
--config.m_values=1,4,16,128 for a shorter sweep), tiny (a minute or two; the tests), paper (the
paper's head and schedule on COCO: needs --config.coco_root=DIR
--config.detections=FILE, and a GPU).
"""

from ebm_jax.recipes.detection import Config
from ebm_jax.recipes.detection_presets import detection_config

VARIANTS = ("quick", "tiny", "paper")  # the first is the default

# The methods' hyperparameters (sec. 4.2; M = num_samples = 128) are the Config's
# defaults; each variant's sizes come from `ebm_jax.recipes.detection_presets`.

def get_config(variant: str) -> Config:
    return detection_config(
        variant, dict(tables=("m",), m_methods=("ml-is", "kld-is", "nce", "nce+"),
                      m_values=(1, 2, 4, 8, 16, 32, 64, 128)),
        {"tiny": dict(m_methods=("nce",), m_values=(2, 4))})
