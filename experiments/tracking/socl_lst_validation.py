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
"""

from ebm_jax.recipes.tracking.socl import Config, preset

VARIANTS = ("quick", "tiny", "paper")

REFERENCE = (("OTB-13 AUC: +mix-up / +LST", "58.1 / 60.9"),
             ("VOT-16 EAO: +mix-up / +LST", "0.231 / 0.244"))


def get_config(variant: str) -> Config:
    return preset(
        variant, experiment="lst",
        quick=dict(validation_sequences=10, reference=REFERENCE),
        tiny=dict(validation_sequences=1, lst_variants=("paper", "b_p 0.9",
                                                        "own-pair mix-ups")),
        paper=dict(validation_sequences=50, reference=REFERENCE))
