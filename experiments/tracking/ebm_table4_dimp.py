"""ebm-jax run experiments/tracking/ebm_table4_dimp.py:quick

The EBM regression paper, sec. 5 and Table 4, as the paper builds its tracker: DiMP's
learned discriminative centre (Bhat et al. 2019, "Learning Discriminative Model
Prediction for Tracking") refined by the energy-based box head of each loss
(DiMP-KLD-IS, DiMP-NCE, DiMP-NCE+, DiMP-ML-IS).

Per seed, Box-Siam (SiamFC's AlexNet trained on boxes) is trained on the generated
training split less its last `validation_sequences`; on its frozen backbone DiMP's
classifier (`dimp_centre.py`) and one box head per loss (`ebm_table4_box_head.py`'s
heads, `box_head` settings as given: not chosen on validation here) are trained. Rows:
Box-Siam's scale search, DiMP's centre alone (the first frame's size), DiMP's centre
sized by SiamFC's scale search (what a box branch must beat), each head on SiamFC's
centre and each head on DiMP's centre, which sizes the box as the tracker goes and whose
refined box joins DiMP's sample memory. The validation split is tracked too (a
diagnostic) and the test split once. Paired differences: each DiMP-<loss> against
DiMP's centre alone, with the scale search, and against the same head on SiamFC's
centre, and the losses against each other (NCE+ - KLD-IS, NCE+ - NCE, NCE - KLD-IS).

Variants: quick (AlexNet width 0.25, 50 training sequences of which 10 validate, 30
test sequences; Box-Siam 600 steps, DiMP's classifier 300 steps of 4 samples, heads 600
steps; three seeds; 2 CPU cores), tiny (the tests), quick1 (quick's first seed alone:
the first measurement, stored on the DiMP page); quick_chosen, quick1_chosen and
tiny_chosen: the same with each head's refinement step lengths (centre and size, x0.5
to x4 of PrDiMP's) chosen on the validation split by the refinement probe, never on
the test split, before the test split is tracked.
"""

import dataclasses

from ebm_jax.recipes.tracking import BoxHeadSettings, preset
from ebm_jax.recipes.tracking.box_head import TABLE4_REFERENCE
from ebm_jax.recipes.tracking.dimp_stages import DiMPTraining

VARIANTS = ("quick", "tiny", "quick1", "quick_chosen", "quick1_chosen", "tiny_chosen")

REFERENCE = TABLE4_REFERENCE  # the paper's Table 4, AUC (Success on TrackingNet) %
NOTE = ("The paper's trackers are DiMP (ResNet-50) with the box head trained jointly, "
        "on real benchmarks; NCE+ > KLD-IS > NCE on all five.")
COMMON = dict(experiment="dimp-box-head", reference=REFERENCE, reference_note=NOTE)


QUICK = dict(validation_sequences=10, box_head=BoxHeadSettings(steps=600))


# the heads' settings chosen on validation (no SiamFC tracker options: DiMP's centre)
CHOSEN = dict(experiment="dimp-box-head-chosen", tracker_choices=())


def get_config(variant: str):
    if variant == "quick1":  # quick's first seed alone
        return preset("quick", **COMMON, quick=dict(QUICK, seeds=(0,)))
    if variant.endswith("_chosen"):
        base = get_config(variant.removesuffix("_chosen"))
        return dataclasses.replace(base, **CHOSEN)
    return preset(
        variant, **COMMON,
        quick=QUICK,
        tiny=dict(validation_sequences=1, num_train_sequences=4,
                  box_head_methods=("kld-is", "nce"),
                  box_head=BoxHeadSettings(steps=3, batch_size=2, num_samples=16,
                                           width=8, hidden=16),
                  dimp=DiMPTraining(steps=3, batch_size=2, channels=8, num_iter=2,
                                    max_gap=8)))
