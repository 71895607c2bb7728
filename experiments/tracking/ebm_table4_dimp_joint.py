"""ebm-jax run experiments/tracking/ebm_table4_dimp_joint.py:quick1

The EBM regression paper, sec. 5 and Table 4, with DiMP's two branches trained jointly
as the paper trains them: per loss (KLD-IS, NCE, NCE+, ML-IS), DiMP's classifier (Bhat
et al. 2019, "Learning Discriminative Model Prediction for Tracking") and the
energy-based box head trained on one batch of DiMP's samples (3 training and 3 test
crops of a sequence; the head's pairs are the first training crop with each test crop),
loss = classifier + box_weight x box head, from the same seed's Box-Siam backbone.

Rows: Box-Siam's scale search; per loss, the joint tracker (DiMP's centre, its found
boxes refined by the head, "DiMP-<loss> joint") and the same model's centre alone
("... centre"). Paired differences: refinement inside the joint tracker, the losses
against each other (NCE+ - KLD-IS, NCE+ - NCE, NCE - KLD-IS), each tracker against
Box-Siam. The validation split is tracked too (a diagnostic) and the test split once.
`ebm_table4_dimp.py` trains the branches apart on the frozen backbone; run both in one
work directory and their Box-Siam stages are shared.

Variants: quick1 (AlexNet width 0.25, 50 training sequences of which 10 validate, 30
test sequences; Box-Siam 600 steps; joint stages 600 steps of 4 samples, the backbone
frozen; seed 0), quick1_backbone (quick1 with the backbone trained by both losses at
2e-4, a tenth of the classifier's rate, as DiMP trains its last block), quick (quick1 on
three seeds), tiny (the tests).
"""

from ebm_jax.recipes.tracking import BoxHeadSettings, preset
from ebm_jax.recipes.tracking.box_head import TABLE4_REFERENCE
from ebm_jax.recipes.tracking.dimp_joint_stages import DiMPJointTraining

VARIANTS = ("quick1", "quick1_backbone", "quick", "tiny")

REFERENCE = TABLE4_REFERENCE  # the paper's Table 4, AUC (Success on TrackingNet) %
NOTE = ("The paper's trackers are DiMP (ResNet-50) with the box head trained jointly, "
        "on real benchmarks; NCE+ > KLD-IS > NCE on all five.")
COMMON = dict(experiment="dimp-joint", reference=REFERENCE, reference_note=NOTE)

QUICK = dict(validation_sequences=10, box_head=BoxHeadSettings(steps=600),
             dimp=DiMPJointTraining(steps=600))


def get_config(variant: str):
    if variant == "quick1":
        return preset("quick", **COMMON, quick=dict(QUICK, seeds=(0,)))
    if variant == "quick1_backbone":
        return preset("quick", **COMMON, quick=dict(
            QUICK, seeds=(0,), dimp=DiMPJointTraining(steps=600, backbone_lr=2e-4)))
    return preset(
        variant, **COMMON,
        quick=QUICK,
        tiny=dict(validation_sequences=1, num_train_sequences=4,
                  box_head_methods=("kld-is", "nce"),
                  box_head=BoxHeadSettings(num_samples=16, width=8, hidden=16),
                  dimp=DiMPJointTraining(steps=3, batch_size=2, channels=8, num_iter=2,
                                         max_gap=8, backbone_lr=1e-4)))
