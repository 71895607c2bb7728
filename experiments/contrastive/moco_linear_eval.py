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

# quick: digits on photos (MNIST-M style), three seeds; the augmentation was chosen
# on the val split (--config.eval_split=val, seed 0: see the README)
QUICK = dict(data="digits-on-photos", augment="digits-color", seeds=(0, 1, 2))

# the settings tried on the val split, seed 0
VALIDATION = {"val": {}, "val_digits": dict(augment="digits"),
              "val_mlp": dict(head="mlp", temperature=0.2)}
VARIANTS = ("quick", "tiny", "cifar", *VALIDATION)


def get_config(variant: str) -> Config:
    if variant == "tiny":
        return Config(
            main="moco", tables=("main",), data="digits", num_train=96, num_test=40,
            arch="resnet4", image_size=8, width=4, dim=8, batch_size=32, epochs=1, queue_size=64,
            instdisc_noise=16, linear_epochs=3, knn_ks=(5, 10), few_labels=2, plot="pca",
            momentum_values=(0.0, 0.99), queue_values=(32, 64))
    if variant == "cifar":
        return Config(
            main="moco", tables=("main",), data="cifar10", image_size=32, width=64,
            dim=128, batch_size=512, epochs=200, learning_rate=0.06, weight_decay=5e-4,
            temperature=0.1, momentum=0.99, queue_size=4096, num_splits=8,
            augment="cifar", instdisc_noise=4096, bank_init="random", few_labels=100,
            momentum_values=(0.0, 0.9, 0.99, 0.999), queue_values=(512, 4096, 16384))
    if variant in VALIDATION:
        return Config(**{**QUICK, "eval_split": "val", "seeds": (0,), **VALIDATION[variant]},
                      main="moco", tables=("main",))
    return Config(**QUICK, main="moco", tables=("main",))
