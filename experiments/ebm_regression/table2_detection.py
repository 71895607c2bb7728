"""ebm-jax run experiments/ebm_regression/table2_detection.py:quick

Table 2 of "How to Train Your Energy-Based Model for Regression" (sec. 4.2): AP of detector boxes refined by gradient ascent on an energy head trained with eight methods.

A feature-pyramid backbone is trained once (stage `backbone`), then one energy head per
method on its frozen features (stages `head-<method>-m<M>`); the detector's boxes are
scored by the COCO evaluator before and after guided NMS and T = 10 refinement steps.
Without COCO the benchmark is generated (drawn shapes on textured backgrounds, noisy
training boxes, a simulated detector's per-class boxes before NMS); the quick variant is
scored on a held-out test split (80 images), apart from the val split on which the step
lengths and the sweeps of Figures 3-5 and Table 3 are chosen.

Variants: quick (three seeds, each with its own data, detector, backbone and heads;
six of the eight methods, without ML-MCMC-4 and -8; generated data, the head's learning
rate 10x the paper's for a 200x shorter schedule, gradient-norm clip 5 so that DSM does
not diverge at that rate), tiny (a minute or two; the tests), paper (the paper's head and schedule on
COCO: needs --config.coco_root=DIR --config.detections=FILE, and a GPU).
"""

from ebm_jax.recipes.detection import Config
from ebm_jax.recipes.detection_presets import detection_config

VARIANTS = ("quick", "tiny", "paper")  # the first is the default

METHODS = ("ml-is", "ml-mcmc-1", "ml-mcmc-4", "ml-mcmc-8", "kld-is", "nce", "dsm", "nce+")
# quick: without ML-MCMC-4 and -8. At this size ML-MCMC-1, -4 and -8 all leave AP at the
# detector's (their chains barely leave the ground truth at the paper's step 1e-5), while
# -4 and -8 cost 5x and 7x ML-IS's step: about half of a seed's time
QUICK_METHODS = ("ml-is", "ml-mcmc-1", "kld-is", "nce", "dsm", "nce+")

# The methods' hyperparameters (sec. 4.2; M = num_samples = 128) are the Config's
# defaults; each variant's sizes come from `ebm_jax.recipes.detection_presets`.

# The paper's Table 2 on COCO val2017 (Faster R-CNN R50-FPN detections): AP, AP50, AP75.
REFERENCE = (("ml-is", 39.4, 58.6, 42.1), ("ml-mcmc-1", 36.4, 57.9, 38.8),
             ("ml-mcmc-4", 36.4, 57.9, 39.0), ("ml-mcmc-8", 36.4, 58.0, 39.0),
             ("kld-is", 39.6, 58.6, 42.6), ("nce", 39.5, 58.6, 42.4),
             ("dsm", 36.3, 57.9, 38.9), ("nce+", 39.7, 58.7, 42.7))


def get_config(variant: str) -> Config:
    # quick: scored on the held-out test split; the step lengths and the sweeps
    # (Figures 3-5, Table 3) are chosen and scored on val
    return detection_config(
        variant, dict(tables=("table2",), methods=METHODS, reference_table2=REFERENCE),
        {"quick": dict(eval_split="test", seeds=(0, 1, 2), methods=QUICK_METHODS),
         "tiny": dict(methods=("nce", "nce+"))})
