"""ebm-jax run experiments/tracking/socl_figure7_thresholds.py:quick

SoCL Figure 7: the thresholds theta_b (SNS) and b_p (LST, theta_p ~ U[b_p, 1)) (Wu & Chan, "Learning Tracking Representations from Single Point
Annotations", sec. 4).

Each value is one SoCL-Siam arm, the others at the paper's values (theta_b = 0.8,
b_p = 0.6).
SiamFC's AlexNet is trained from scratch on the generated train split and tracks the
generated test split (disjoint photos) with the SiamFC tracker; AUC, precision, AO and
SR as mean +- sd over three training seeds.

Variants (the SoCL recipe's presets, `ebm_jax.recipes.tracking.socl.PRESETS`): quick (50 train sequences of 80 frames at 320x240, 30 test sequences; AlexNet width 0.25;
batches of 12 videos x 2 context regions of 159 px; three seeds; 2 CPU cores), tiny
(a minute or two; the tests), paper (the published net and schedule: width 1.0, batch 192 =
96 videos; a GPU; on GOT-10k with --config.train_data=got10k --config.got10k_root=DIR).
"""

from ebm_jax.recipes.tracking.socl import Config, preset

VARIANTS = ("quick", "tiny", "paper")

REFERENCE = (("OTB-13 AUC", "small theta_b or theta_p hurt; 0.8 and 0.6 chosen"),)


def get_config(variant: str) -> Config:
    return preset(
        variant, experiment="figure7",
        # three points per sweep on 2 CPU cores; the middle ones are the paper's values,
        # whose stage is the SoCL-Siam of the other experiments (trained once)
        quick=dict(theta_b_sweep=(0.5, 0.8, 0.95), b_p_sweep=(0.2, 0.6, 0.9),
                   reference=REFERENCE),
        paper=dict(reference=REFERENCE))
