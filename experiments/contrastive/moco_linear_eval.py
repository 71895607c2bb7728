"""ebm-jax run experiments/contrastive/moco_linear_eval.py:quick

MoCo linear evaluation (He et al. 2020, sec. 4.1): frozen features between random and supervised.

A MoCo v1 encoder (queue, momentum encoder, shuffled batch norm) is pretrained without
labels; a linear classifier on its frozen features (all labels, and `few_labels` per
class) and a kNN classifier measure it, between the floor (a random encoder of the same
architecture) and the ceiling (the same encoder trained with labels).
The paper's figure (ImageNet, ResNet-50, linear top-1): MoCo 60.6 %.

Variants: quick (digits on photos, 16x16 RGB, three seeds, ResNet-18 width 16), tiny
(a minute or two; the tests), cifar (MoCo's single-device CIFAR-10 recipe: ResNet-18, batch
512, K 4096, 200 epochs; needs --config.data_root=<folder of cifar-10-batches-py> and a
GPU).
The choice of settings on the val split (seed 0, 804 held-out training images; the
docs' "Settings, chosen on validation"): val (the kept `digits-color` augmentation),
val_digits (the `digits` augmentation), val_mlp (MoCo v2's MLP head and T = 0.2).
"""

from ebm_jax.recipes.contrastive import Config
from ebm_jax.recipes.contrastive_presets import contrastive_config

# each variant's sizes: `ebm_jax.recipes.contrastive_presets` (quick: digits on photos,
# three seeds, the augmentation chosen on the val split: moco_linear_eval:val*)
# the settings tried on the val split, seed 0
VALIDATION = {"val": {}, "val_digits": dict(augment="digits"),
              "val_mlp": dict(head="mlp", temperature=0.2)}
VARIANTS = ("quick", "tiny", "cifar", *VALIDATION)


def get_config(variant: str) -> Config:
    if variant in VALIDATION:  # the quick data on the val split, seed 0
        return contrastive_config(
            "quick", dict(main="moco", tables=("main",), eval_split="val", seeds=(0,),
                          **VALIDATION[variant]))
    return contrastive_config(variant, dict(main="moco", tables=("main",)))
