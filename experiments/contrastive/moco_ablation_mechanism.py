"""ebm-jax run experiments/contrastive/moco_ablation_mechanism.py:quick

MoCo mechanism ablation (He et al. 2020, sec. 4.1, Fig. 3): end-to-end vs. memory bank vs. MoCo.

Three contrastive mechanisms with the same encoder, loss temperature and schedule:
end-to-end (keys from the current batch, K = batch - 1), a memory bank (InfoNCE over
K sampled bank entries) and MoCo (queue of K keys, momentum encoder); linear
evaluation of each frozen encoder between the random floor and the supervised ceiling.
In the paper (ImageNet) MoCo matches end-to-end where both fit and beats the memory
bank at every K.

Variants: quick (digits on photos, 16x16 RGB, three seeds, ResNet-18 width 16), tiny
(a minute or two; the tests), cifar (MoCo's single-device CIFAR-10 recipe; needs
--config.data_root=<folder of cifar-10-batches-py> and a GPU).
"""

from ebm_jax.recipes.contrastive import Config
from ebm_jax.recipes.contrastive_presets import contrastive_config

# each variant's sizes: `ebm_jax.recipes.contrastive_presets` (quick: digits on photos,
# three seeds, the augmentation chosen on the val split: moco_linear_eval:val*)
VARIANTS = ("quick", "tiny", "cifar")

TABLES = ("mechanism",)


def get_config(variant: str) -> Config:
    return contrastive_config(variant, dict(main="moco", tables=TABLES, plot="none"))
