"""ebm-jax run experiments/tracking/socl_table4_fees.py:quick

SoCL Table 4: annotation and training fees, from our counts and measured times (Wu & Chan, "Learning Tracking Representations from Single Point
Annotations", sec. 4).

Annotation hours and fees of the training split's annotated frames (10.2 s and $0.036 per
box, 2.27 s and $0.005 per point), the measured TOP-map seconds, and the measured
training time of Box-Siam and SoCL-Siam priced at the paper's $0.90 per GPU hour.
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

REFERENCE = (("GOT-10k boxes", "$50.4k, 3,967 h"), ("GOT-10k points", "$7.0k, 883 h"),
             ("training SiamFC / SoCL on a V100", "8 h / 24 h"))


def get_config(variant: str) -> Config:
    return preset(
        variant, experiment="table4",
        quick=dict(reference=REFERENCE),
        paper=dict(reference=REFERENCE))
