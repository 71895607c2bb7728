"""ebm-jax run experiments/tracking/box_head_probe.py:quick1

The sharper refinement probe of the energy-based box heads (the EBM regression paper,
sec. 5): how far the heads raise the IoU of boxes around targets they never saw, from
which starts, with the tracker's own procedure, and how much they use their target's
reference.

Per loss (KLD-IS, NCE, NCE+, ML-IS), the head trained apart on the frozen Box-Siam
backbone (the heads of `ebm_table4_dimp.py`) and the head trained jointly with DiMP's
classifier (Bhat et al. 2019, "Learning Discriminative Model Prediction for Tracking";
the heads of `ebm_table4_dimp_joint.py`) are probed on 256 pairs of the validation
split, of the test split and of three draws of the outside split, whose photos are
procedural (appearance from neither photo pool). From starts of IoU 0.5, 0.7 and 0.8:
the gain of one ascent and of the tracker's procedure, and the pair's own reference
against another target's; standard errors over pairs, seeds and draws. Run in the
tracking recipe's work directory (the default), it reuses those configs' stages.

Variants: quick1 (the quick data and heads of `ebm_table4_dimp.py:quick1` and
`ebm_table4_dimp_joint.py:quick1`, seed 0), quick (three seeds), tiny (the tests).
"""

from ebm_jax.recipes.tracking import BoxHeadSettings
from ebm_jax.recipes.tracking.box_head_probe import preset
from ebm_jax.recipes.tracking.dimp_joint_stages import DiMPJointTraining

VARIANTS = ("quick1", "quick", "tiny")

QUICK = dict(validation_sequences=10, box_head=BoxHeadSettings(steps=600),
             dimp=DiMPJointTraining(steps=600))


def get_config(variant: str):
    if variant == "quick1":
        return preset("quick", quick=dict(QUICK, seeds=(0,)))
    return preset(
        variant, quick=QUICK,
        tiny=dict(validation_sequences=1, num_train_sequences=4,
                  box_head_methods=("kld-is", "nce"),
                  box_head=BoxHeadSettings(steps=3, batch_size=2, num_samples=16,
                                           width=8, hidden=16),
                  dimp=DiMPJointTraining(steps=3, batch_size=2, channels=8, num_iter=2,
                                         max_gap=8),
                  probe_pairs=4, probe_batch=2, outside_sequences=2, outside_draws=2))
