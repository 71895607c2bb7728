"""ebm-jax run experiments/contrastive/instdisc_linear_eval.py:quick

InstDisc linear evaluation (Wu et al. 2018, sec. 4.1): memory bank + NCE, frozen features.

An encoder is pretrained by instance discrimination: a memory bank of every training
image's feature and the NCE loss with uniform noise (sec. 3.2), Z fixed from the first
batch. Its frozen features are measured as in the MoCo table (linear classifier on all
labels and on `few_labels` per class, weighted kNN of sec. 3.4). The random and
supervised encoders are the same stages as in moco_linear_eval.py (trained once in a
shared work directory).

Variants: quick (digits on photos, 16x16 RGB, three seeds, ResNet-18 width 16), tiny
(a minute or two; the tests), cifar (CIFAR-10, ResNet-18 width 64, 4096 noise samples; needs
--config.data_root=<folder of cifar-10-batches-py> and a GPU).
"""

from ebm_jax.recipes.contrastive import Config
from ebm_jax.recipes.contrastive_presets import contrastive_config

# each variant's sizes: `ebm_jax.recipes.contrastive_presets` (quick: digits on photos,
# three seeds, the augmentation chosen on the val split: moco_linear_eval:val*)
VARIANTS = ("quick", "tiny", "cifar")


def get_config(variant: str) -> Config:
    return contrastive_config(variant, dict(main="instdisc", tables=("main",)))
