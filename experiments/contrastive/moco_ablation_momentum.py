"""ebm-jax run experiments/contrastive/moco_ablation_momentum.py:quick

MoCo momentum ablation (He et al. 2020, sec. 4.1, "Ablation: momentum"): key-encoder m.

MoCo with the same queue (K = queue_size) and every key-encoder momentum m of
momentum_values; linear evaluation of each frozen encoder, between the random floor and
the supervised ceiling. The paper's figures (ImageNet, ResNet-50, K = 4096, linear
top-1 %): m = 0 fails to train (the loss oscillates), 0.9: 55.2, 0.99: 57.8,
0.999: 59.0, 0.9999: 58.9. A momentum close to 1 keeps the queue's keys consistent.

Variants: quick (digits on photos, 16x16 RGB, three seeds, ResNet-18 width 16, m in
{0, 0.99}), tiny (a minute or two; the tests), cifar (MoCo's single-device CIFAR-10 recipe;
needs --config.data_root=<folder of cifar-10-batches-py> and a GPU).
"""

from ebm_jax.recipes.contrastive import Config
from ebm_jax.recipes.contrastive_presets import contrastive_config

# each variant's sizes: `ebm_jax.recipes.contrastive_presets` (quick: digits on photos,
# three seeds, the augmentation chosen on the val split: moco_linear_eval:val*)
VARIANTS = ("quick", "tiny", "cifar")

TABLES = ("momentum",)
# the paper's ImageNet linear top-1 (%), by row of the table
REFERENCE = (("m = 0", "fails"), ("m = 0.9", "55.2"), ("m = 0.99", "57.8"),
             ("m = 0.999", "59.0"), ("m = 0.9999", "58.9"))
NOTE = ("paper %: He et al. 2020, sec. 4.1 (ImageNet, ResNet-50, K = 4096, linear "
        "top-1); m = 0 fails to train.")


def get_config(variant: str) -> Config:
    return contrastive_config(variant, dict(main="moco", tables=TABLES, plot="none",
                                            reference=REFERENCE, reference_note=NOTE),
                              {"quick": dict(momentum_values=(0.0, 0.99))})
