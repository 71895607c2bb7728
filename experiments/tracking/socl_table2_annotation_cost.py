"""ebm-jax run experiments/tracking/socl_table2_annotation_cost.py:quick

SoCL Table 2 / Figure 9: Box-Siam vs SoCL-Siam at equal annotation time (Wu & Chan, "Learning Tracking Representations from Single Point
Annotations", sec. 4).

A box costs 10.2 s, a point 2.27 s (with its TOP map): each budget buys whole training
sequences in one fixed random order (the same for both), box-annotated or
point-annotated on the same frames (every second one).
SiamFC's AlexNet is trained from scratch on the generated train split and tracks the
generated test split (disjoint photos) with the SiamFC tracker; AUC, precision, AO and
SR as mean +- sd over three training seeds.

Variants (the SoCL recipe's presets, `ebm_jax.recipes.tracking.socl.PRESETS`): quick (110 train sequences of 40 frames (2080 annotated frames) at 320x240, 30 test sequences; AlexNet width 0.25;
batches of 12 videos x 2 context regions of 159 px; three seeds; 2 CPU cores), tiny
(a minute or two; the tests), paper (the published net and schedule: width 1.0, batch 192 =
96 videos; a GPU; on GOT-10k with --config.train_data=got10k --config.got10k_root=DIR).

moco: the quick profile from the project's MoCo-pretrained ResNet-18 (pretrained on the
training frames; no ImageNet weights offline), fine-tuned with the backbone learning
rate x0.1 chosen on validation (`ebm_jax.recipes.tracking.socl.MOCO_START`),
on the training split without the scene shortcut (`scene_group=4`, `scene_path=true`).
"""

from ebm_jax.recipes.tracking.socl import Config, preset

VARIANTS = ("quick", "tiny", "paper", "moco")

REFERENCE = (("OTB-15 AUC, Box-Siam at 110/220/440/880 h", "51.7 / 54.0 / 55.2 / 57.0"),
             ("OTB-15 AUC, SoCL-Siam", "53.3 / 54.9 / 56.5 / 57.8"))


def get_config(variant: str) -> Config:
    return preset(
        variant, moco=dict(scene_group=4, scene_path=True), experiment="table2",
        tiny=dict(num_train_sequences=12, budgets_hours=(0.012, 0.024)),
        # 110 sequences: the top budget (1.26 h, 8x the lowest as in the paper) buys about
        # 2000 points, more than 100 sequences annotate
        quick=dict(num_train_sequences=110, num_frames=40,
                   budgets_hours=(0.16, 0.32, 0.63, 1.26), reference=REFERENCE),
        paper=dict(reference=REFERENCE))
