"""ebm-jax run experiments/tracking/dimp_centre.py:quick

DiMP's centre against SiamFC's and the DCF's (Bhat et al. 2019, "Learning Discriminative Model Prediction for Tracking"; the centre of the EBM regression paper's tracker, sec. 5).

Per seed, Box-Siam (SiamFC's AlexNet trained on boxes) is trained on the generated training
split less its last `validation_sequences`; on its frozen backbone DiMP's classifier
(classification features on conv5, the model predictor with its learned residual,
`ebm_jax.tracking.dimp`) is trained on DiMP's samples (3 training and 3 test frames
within a gap). Three centres are then tracked, each keeping the first frame's size:
SiamFC at one scale, the correlation filter on the same backbone, and DiMP's tracker
(online model, memory, updates). On the validation split (a diagnostic: nothing is chosen
on it) and the test split: precision at 20 px, normalised precision, AUC, with paired
differences over seeds and sequences. Not the paper's Table 4: the box branch that sizes
the box in DiMP is not composed with this centre yet.

Variants: quick (AlexNet width 0.25, 50 training sequences of which 10 validate, 30
test sequences; Box-Siam 600 steps, the classifier 300 steps of 4 samples; three seeds;
2 CPU cores), tiny (the tests: a minute or two).
"""

from ebm_jax.recipes.tracking.dimp_stages import DiMPTraining
from ebm_jax.recipes.tracking import preset

VARIANTS = ("quick", "tiny")


def get_config(variant: str):
    return preset(
        variant, experiment="dimp-centre",
        quick=dict(validation_sequences=10),
        tiny=dict(validation_sequences=1, num_train_sequences=4,
                  dimp=DiMPTraining(steps=3, batch_size=2, channels=8, num_iter=2,
                                    max_gap=8)))
