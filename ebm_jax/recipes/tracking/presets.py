"""The named presets the tracking recipes' config files start from (`preset` of
`ebm_jax.recipes.tracking` and of its SoCL recipe): configs that share stages take their
sizes from here, so that they cannot drift apart. "quick" is the Config defaults.
"""

from __future__ import annotations

from ebm_jax.config import config_from_preset  # noqa: F401 (re-exported)
from ebm_jax.recipes.tracking.backbone_pretraining import MoCoPretraining

# the MoCo stage of `--config.init=moco` on a tiny variant: seconds, as the rest of it
TINY_MOCO = MoCoPretraining(steps=4, batch_size=8, crops=16, crop_size=32, input_size=32,
                            queue_size=16, num_splits=2, probe_size=32, probe_epochs=2)
TINY_DATA = dict(num_test_sequences=2, num_frames=8, frame_height=96, frame_width=128,
                 width=0.125, seeds=(0,), moco=TINY_MOCO)  # seconds; the tests
PAPER_DATA = dict(  # the published net and SiamFC's schedule: 50 epochs of 6650 pairs
    num_train_sequences=500, num_test_sequences=100, num_frames=150, frame_height=360,
    frame_width=480, width=1.0, steps=41_560, batch_size=8, seeds=(0, 1, 2))
PRESETS = {
    "quick": {},
    "tiny": dict(TINY_DATA, num_train_sequences=3, steps=4, batch_size=4,
                 strip_sequences=1, strip_frames=3),
    "paper": PAPER_DATA,
}


__all__ = ["PAPER_DATA", "PRESETS", "TINY_DATA", "TINY_MOCO", "config_from_preset"]
