"""The named sizes the contrastive experiments' config files start from (InstDisc,
MoCo and MoCo's ablations): runs of one work directory share the encoders they train,
so the files take their sizes from here and cannot drift apart.

"quick" is digits on photos (MNIST-M style) on three seeds, with the augmentation
chosen on the val split (`moco_linear_eval:val`, `:val_digits`, `:val_mlp`); "tiny"
runs in seconds (the tests); "cifar" is CIFAR-10 at the MoCo paper's CIFAR settings
(needs `--config.data_root`).
"""

from __future__ import annotations

from ebm_jax.config import config_from_preset
from ebm_jax.recipes.contrastive import Config

PRESETS = {
    "quick": dict(data="digits-on-photos", augment="digits-color", seeds=(0, 1, 2)),
    "tiny": dict(data="digits", num_train=96, num_test=40, arch="resnet4", image_size=8,
                 width=4, dim=8, batch_size=32, epochs=1, queue_size=64, instdisc_noise=16,
                 linear_epochs=3, knn_ks=(5, 10), few_labels=2, plot="pca",
                 momentum_values=(0.0, 0.99), queue_values=(32, 64)),
    "cifar": dict(data="cifar10", image_size=32, width=64, dim=128, batch_size=512,
                  epochs=200, learning_rate=0.06, weight_decay=5e-4, temperature=0.1,
                  momentum=0.99, queue_size=4096, num_splits=8, augment="cifar",
                  instdisc_noise=4096, bank_init="random", few_labels=100,
                  momentum_values=(0.0, 0.9, 0.99, 0.999),
                  queue_values=(512, 4096, 16384)),
}


def contrastive_config(variant: str, fields: dict,
                       per_variant: dict | None = None) -> Config:
    """The contrastive Config of preset `variant`, then `fields`, then
    `per_variant[variant]` (`ebm_jax.config.config_from_preset`)."""
    return config_from_preset(Config, PRESETS, variant, fields, per_variant or {})
