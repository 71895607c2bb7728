"""ebm-jax run experiments/contrastive/moco_ablation_queue.py:quick

MoCo queue-size ablation (He et al. 2020, sec. 4.1, Fig. 3, MoCo curve): dictionary size K.

MoCo with momentum m and every queue size K of queue_values; linear evaluation of each
frozen encoder between the random floor and the supervised ceiling. In the paper
(ImageNet, ResNet-50, Fig. 3) MoCo's accuracy grows with K up to K = 65536.

Variants: quick (digits on photos, 16x16 RGB, three seeds, ResNet-18 width 16, K in
{64, 1024}), tiny (a minute or two; the tests), cifar (MoCo's single-device CIFAR-10 recipe;
needs --config.data_root=<folder of cifar-10-batches-py> and a GPU).
"""

from ebm_jax.recipes.contrastive import Config
from ebm_jax.recipes.contrastive_presets import contrastive_config

# each variant's sizes: `ebm_jax.recipes.contrastive_presets` (quick: digits on photos,
# three seeds, the augmentation chosen on the val split: moco_linear_eval:val*)
VARIANTS = ("quick", "tiny", "cifar")

TABLES = ("queue",)


def get_config(variant: str) -> Config:
    return contrastive_config(variant, dict(main="moco", tables=TABLES, plot="none"),
                              {"quick": dict(queue_values=(64, 1024))})
