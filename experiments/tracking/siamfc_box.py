"""ebm-jax run experiments/tracking/siamfc_box.py:quick

Box-Siam: SiamFC trained on ground-truth boxes (Bertinetto et al. 2016; SoCL, Wu & Chan, Table 2).

SiamFC's AlexNet is trained on pairs of frames (fewer than 100 apart) of the generated
train split and tracks the test split (disjoint photos), scored with the OTB success and
precision plots and GOT-10k's AO and SR; beside it, a tracker that never moves and SiamFC
with its random initial backbone. With --config.otb_root / --config.got10k_root (local
folders; nothing is downloaded) it is also evaluated on OTB / GOT-10k val, and with
--config.train_data=got10k it trains on GOT-10k's train split.
The paper's figures: SiamFC OTB-2015 AUC 57.8, GOT-10k AO 35.5; SoCL's Box-Siam
51.7-57.0 OTB-2015 AUC at 110-880 annotation hours.

Variants (the tracking recipe's presets, `ebm_jax.recipes.tracking.PRESETS`): quick
(AlexNet width 0.25, 50 train / 30 test sequences of 80 frames at 320x240, 600 steps,
three training seeds; about 35-40 min on 2 CPU cores), tiny (a minute or two; the tests), paper
(the published net and schedule: width 1.0, 50 epochs of 6650 pairs; GPU), port (quick
with the training pairs made as a public PyTorch port of SiamFC makes them; the docs'
"The project's pairs against a port's").
"""

import dataclasses

from ebm_jax.recipes.tracking import Config, preset

VARIANTS = ("quick", "tiny", "paper", "port")

REFERENCE = (("SiamFC OTB-2015 AUC", "57.8"), ("SiamFC GOT-10k AO", "35.5"),
             ("SoCL Box-Siam OTB-2015 AUC (110 / 880 h)", "51.7 / 57.0"))


def get_config(variant: str) -> Config:
    if variant == "port":
        return dataclasses.replace(get_config("quick"), siamfc_training="port")
    return preset(variant, quick=dict(reference=REFERENCE), paper=dict(reference=REFERENCE))
