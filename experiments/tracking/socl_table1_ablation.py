"""ebm-jax run experiments/tracking/socl_table1_ablation.py:quick

SoCL Table 1: the steps of soft contrastive learning, GST, +SNS, +mix-up, +LST (Wu & Chan, "Learning Tracking Representations from Single Point
Annotations", sec. 4).

Each row adds one way of making samples to the one above; every row of a seed starts from
the same weights and sees the same batches, so rows compare in pairs.
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
moco160: the same on 160 training videos, each annotated every 8th frame; moco160_path:
the same with the scene shortcut removed (targets in groups of 4 on one path; the
docs' "SoCL from the MoCo start"). moco160_path_starts: moco160_path with a MoCo start
per seed (each seed pretrains its own; `--config.moco_per_seed`), so that the sd over
seeds holds the start's variation.
"""

from ebm_jax.recipes.tracking.socl import MOCO160, Config, preset

STUDIES = {**MOCO160, "moco160_path_starts": ("moco160_path", dict(moco_per_seed=True)),
           "moco_start": ("moco", dict(experiment="moco_start"))}
VARIANTS = ("quick", "tiny", "paper", "moco", *STUDIES)

REFERENCE = (("OTB-13 AUC: GST / +SNS / +mix-up / +LST", "55.1 / 57.8 / 58.1 / 60.9"),
             ("VOT-16 EAO", "0.215 / 0.228 / 0.231 / 0.244"))


def get_config(variant: str) -> Config:
    return preset(
        variant, experiment="table1", studies=STUDIES,
        quick=dict(reference=REFERENCE),
        paper=dict(reference=REFERENCE))
