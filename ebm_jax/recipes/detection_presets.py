"""The named sizes the detection experiments' config files start from (Table 2,
Figures 3-5 and Table 3 of "How to Train Your Energy-Based Model for Regression",
sec. 4.2). They share the backbone stage and the heads at M = 128 through one work
directory, so they take their sizes from here and cannot drift apart.

"quick" is the Config's defaults (generated data; the methods' hyperparameters of
sec. 4.2 are the Config's defaults too) with the gradient-norm clip that keeps DSM
from diverging at the quick schedule's learning rate; "tiny" runs in seconds (the
tests); "paper" is the paper's head and schedule on COCO.
"""

from __future__ import annotations

from ebm_jax.config import config_from_preset
from ebm_jax.recipes.detection import Config

PRESETS = {
    "quick": dict(grad_clip=5.0),
    "tiny": dict(num_train=8, num_val=4, image_size=64, num_classes=2, max_objects=2,
                 min_size=8, widths=(8,), channels=8, backbone_steps=2, backbone_batch=4,
                 hidden=16, pool_size=3, canonical_size=48.0, head_steps=2,
                 boxes_per_batch=4, warmup_steps=1, num_samples=4, refine_steps=2),
    "paper": dict(data="coco", image_size=800, widths=(64, 128, 256, 512), channels=256,
                  backbone_steps=90000, backbone_batch=16, backbone_lr=1e-3, hidden=1024,
                  pool_size=7, canonical_size=224.0, head_steps=60000,
                  boxes_per_batch=128, learning_rate=1e-3, warmup_steps=500),
}


def detection_config(variant: str, fields: dict, per_variant: dict | None = None) -> Config:
    """The detection Config of preset `variant`, named after it, then `fields`, then
    `per_variant[variant]` (`ebm_jax.config.config_from_preset`)."""
    return config_from_preset(Config, PRESETS, variant, {"name": variant, **fields},
                              per_variant or {})
