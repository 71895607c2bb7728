"""ebm-jax run experiments/tracking/socl_table6_noisy_points.py:quick

SoCL Table 6: SoCL-Siam on points shifted 20 px in a random direction vs clean points (Wu & Chan, "Learning Tracking Representations from Single Point
Annotations", sec. 4).

The clean point is the box centre; the noisy one is moved `point_shift` px in a uniformly
random direction (written by the generator beside the clean one).
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

REFERENCE = (("OTB AUC cost of 20 px shifts", "0.2 - 0.8 points"),)


def get_config(variant: str) -> Config:
    return preset(
        variant, experiment="table6",
        quick=dict(reference=REFERENCE),
        paper=dict(reference=REFERENCE))
