"""ebm-jax run experiments/tracking/socl_lst_validation.py:quick

SoCL's local soft templates (LST) on a validation split: +mix-up against +LST (Table 1's
last step; Wu & Chan, "Learning Tracking Representations from Single Point
Annotations", sec. 3.2.3 and 4.2) under each variant of the choices the paper leaves
open: the TOP maps' softmax temperature (the paper gives none; at 1 the map is very
peaked; 4, or calibrated per feature grid from the proposals' extent), the context
region, b_p (theta_p ~ U[b_p, 1)), the positive in eq. 9's denominator (InfoNCE) or not
(as printed), eq. 10 for z_i alone (as printed, the default this study chose) or
symmetrised over z_i and z_j, mix-ups of the batch's hardest SNS or of the query's own
pair.

Every arm trains on the generated training split less its last 10 sequences and tracks
those 10 alone: the test split is never seen, so the variant chosen here can then be
run once on it. Every arm of a seed starts from the same weights and sees the same
batches, so the +LST - +mix-up difference of each variant is a paired one (seeds and
sequences as error bars).

Variants (the SoCL recipe's presets): quick (40 + 10 sequences of 80 frames at 320x240;
AlexNet width 0.25; three seeds; 2 CPU cores, about 15 SoCL trainings per seed), tiny
(a minute or two; the tests), paper (the published net and schedule; a GPU).

The studies of the docs' SoCL validation and scene-shortcut pages, one command each:
lst_paper (the paper's LST alone: the setting chosen), lst_paper_region2 (the same with a
context region of twice the receptive field), symmetric_screen (eq. 10 symmetrised, seed
0, seven options) and symmetric_three (three of them, three seeds); from the MoCo start
(`ebm_jax.recipes.tracking.socl.MOCO_START`): moco_screen (seed 0, the fine-tuning options
at the full backbone learning rate; moco_screen_layer1 and moco_screen_layer2 freeze the
stem to layer1 or layer2), moco_calibrated (TOP temperature calibrated),
moco_lst (the paper's LST), and on more videos moco170, moco170_groups (targets of a
scene in groups of 4), moco170_path (groups moving on one path: the shortcut removed),
moco1010_path (the same on 1010 videos), moco170_path_calibrated (moco170_path with the
calibrated TOP temperature beside the paper's).
"""

from ebm_jax.recipes.tracking.socl import (MOCO_START, MORE_VIDEOS, SCENE_GROUPS,
                                           SCENE_PATH, Config, preset)

PAPER = ("paper",)
MOCO_LST = dict(lst_variants=PAPER, diagnostic_pairs=256)
STUDIES = {
    "lst_paper": ("quick", dict(lst_variants=PAPER)),
    "lst_paper_region2": ("quick", dict(lst_variants=PAPER, region_fields=2.0)),
    "symmetric_screen": ("quick", dict(
        symmetric=True, seeds=(0,),
        lst_variants=("paper", "TOP temperature 4", "region 216 px", "b_p 0.9", "b_p 0.3",
                      "InfoNCE denominator", "own-pair mix-ups"))),
    "symmetric_three": ("quick", dict(symmetric=True, lst_variants=(
        "paper", "TOP temperature 4", "b_p 0.9"))),
    "moco_screen": ("quick", dict(
        init=MOCO_START["init"], backbone=MOCO_START["backbone"], seeds=(0,),
        lst_variants=("paper", "backbone lr x0.1", "frozen batch norm"))),
    "moco_screen_layer1": ("moco_screen", dict(freeze="layer1", lst_variants=PAPER)),
    "moco_screen_layer2": ("moco_screen", dict(freeze="layer2")),
    "moco_calibrated": ("moco", dict(lst_variants=("paper", "TOP temperature calibrated"))),
    "moco_lst": ("moco", MOCO_LST),
    "moco170": ("moco", dict(MOCO_LST, num_train_sequences=170, **MORE_VIDEOS)),
    "moco170_groups": ("moco", dict(MOCO_LST, num_train_sequences=170, **MORE_VIDEOS,
                                    **SCENE_GROUPS)),
    "moco170_path": ("moco", dict(MOCO_LST, num_train_sequences=170, **MORE_VIDEOS,
                                  **SCENE_PATH)),
    "moco1010_path": ("moco", dict(MOCO_LST, num_train_sequences=1010, **MORE_VIDEOS,
                                   **SCENE_PATH)),
}
STUDIES["moco170_path_calibrated"] = ("moco", dict(
    STUDIES["moco170_path"][1], lst_variants=("paper", "TOP temperature calibrated")))

VARIANTS = ("quick", "tiny", "paper", *STUDIES)

REFERENCE = (("OTB-13 AUC: +mix-up / +LST", "58.1 / 60.9"),
             ("VOT-16 EAO: +mix-up / +LST", "0.231 / 0.244"))


def get_config(variant: str) -> Config:
    return preset(
        variant, experiment="lst", studies=STUDIES,
        quick=dict(validation_sequences=10, reference=REFERENCE),
        tiny=dict(validation_sequences=1, lst_variants=("paper", "b_p 0.9",
                                                        "own-pair mix-ups")),
        paper=dict(validation_sequences=50, reference=REFERENCE))
