"""ebm-jax run experiments/tracking/socl_figure8_bce.py:quick

SoCL Figure 8: BCE-Siam on pseudo boxes from TOP maps (threshold alpha) vs SoCL-Siam (Wu & Chan, "Learning Tracking Representations from Single Point
Annotations", sec. 4).

BCE-Siam is SiamFC trained with its BCE loss on the box thresholded from each annotated
frame's TOP map at alpha x its peak, around the point (the same frames and points as
SoCL-Siam).
SiamFC's AlexNet is trained from scratch on the generated train split and tracks the
generated test split (disjoint photos) with the SiamFC tracker; AUC, precision, AO and
SR as mean +- sd over three training seeds.

Variants (the SoCL recipe's presets, `ebm_jax.recipes.tracking.socl.PRESETS`): quick (50 train sequences of 80 frames at 320x240, 30 test sequences; AlexNet width 0.25;
batches of 12 videos x 2 context regions of 159 px; three seeds; 2 CPU cores), tiny
(a minute or two; the tests), paper (the published net and schedule: width 1.0, batch 192 =
96 videos; a GPU; on GOT-10k with --config.train_data=got10k --config.got10k_root=DIR).

moco: the quick profile from the project's MoCo-pretrained ResNet-18 (pretrained on the
training frames; no ImageNet weights offline), fine-tuned with the backbone learning
rate x0.1 chosen on validation (`ebm_jax.recipes.tracking.socl.MOCO_START`).
moco160 and moco160_path: the same on Table 1's 160 training videos (`socl_table1_ablation`'s
variants of these names, whose SoCL-Siam and MoCo start they share), with and without
the scene shortcut; moco40: a control of 40 independent videos (as many scenes as
the grouped data), alpha 0.5 alone.
"""

from ebm_jax.recipes.tracking.socl import MOCO160, MORE_VIDEOS, Config, preset

STUDIES = {**MOCO160, "moco40": ("moco", dict(num_train_sequences=40, alphas=(0.5,),
                                              **MORE_VIDEOS))}
VARIANTS = ("quick", "tiny", "paper", "moco", *STUDIES)

REFERENCE = (("OTB-13 AUC", "BCE-Siam below SoCL-Siam at every alpha"),)


def get_config(variant: str) -> Config:
    return preset(
        variant, experiment="figure8", studies=STUDIES,
        quick=dict(reference=REFERENCE),
        paper=dict(reference=REFERENCE))
