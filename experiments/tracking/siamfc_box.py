"""ebm-jax run experiments/tracking/siamfc_box.py:quick

Box-Siam: SiamFC trained on ground-truth boxes (Bertinetto et al. 2016; SoCL, seed 003, Table 2).

SiamFC's AlexNet is trained on pairs of frames (fewer than 100 apart) of the generated
train split and tracks the test split (disjoint photos), scored with the OTB success and
precision plots and GOT-10k's AO and SR; beside it, a tracker that never moves and SiamFC
with its random initial backbone. With --config.otb_root / --config.got10k_root (local
folders; nothing is downloaded) it is also evaluated on OTB / GOT-10k val, and with
--config.train_data=got10k it trains on GOT-10k's train split.
The paper's figures: SiamFC OTB-2015 AUC 57.8, GOT-10k AO 35.5; SoCL's Box-Siam
51.7-57.0 OTB-2015 AUC at 110-880 annotation hours.

Variants: quick (AlexNet width 0.25, 50 train / 30 test sequences of 80 frames at
320x240, 600 steps, three training seeds; about 35-40 min on 2 CPU cores), tiny
(seconds; the tests), paper (the published net and schedule: width 1.0, 50 epochs of
6650 pairs; GPU).
"""

from ebm_jax.recipes.tracking import Config

VARIANTS = ("quick", "tiny", "paper")

REFERENCE = (("SiamFC OTB-2015 AUC", "57.8"), ("SiamFC GOT-10k AO", "35.5"),
             ("SoCL Box-Siam OTB-2015 AUC (110 / 880 h)", "51.7 / 57.0"))


def get_config(variant: str) -> Config:
    if variant == "tiny":
        return Config(num_train_sequences=3, num_test_sequences=2, num_frames=8,
                      frame_height=96, frame_width=128, width=0.125, steps=4,
                      batch_size=4, seeds=(0,), strip_sequences=1, strip_frames=3)
    if variant == "paper":
        # SiamFC: 50 epochs of 6650 pairs (GOT-10k's port), batch 8: 41,560 steps
        return Config(num_train_sequences=500, num_test_sequences=100, num_frames=150,
                      frame_height=360, frame_width=480, width=1.0, steps=41_560,
                      batch_size=8, seeds=(0, 1, 2), reference=REFERENCE)
    return Config(num_train_sequences=50, num_test_sequences=30, num_frames=80,
                  width=0.25, steps=600, seeds=(0, 1, 2), reference=REFERENCE)
