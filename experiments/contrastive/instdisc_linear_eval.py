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

# quick: digits on photos (MNIST-M style), three seeds; the augmentation was chosen
# on the val split (--config.eval_split=val, seed 0: see the README)
QUICK = dict(data="digits-on-photos", augment="digits-color", seeds=(0, 1, 2))

VARIANTS = ("quick", "tiny", "cifar")


def get_config(variant: str) -> Config:
    if variant == "tiny":
        return Config(
            main="instdisc", tables=("main",), data="digits", num_train=96, num_test=40,
            arch="resnet4", image_size=8, width=4, dim=8, batch_size=32, epochs=1, queue_size=64,
            instdisc_noise=16, linear_epochs=3, knn_ks=(5, 10), few_labels=2, plot="pca",
            momentum_values=(0.0, 0.99), queue_values=(32, 64))
    if variant == "cifar":
        return Config(
            main="instdisc", tables=("main",), data="cifar10", image_size=32, width=64,
            dim=128, batch_size=512, epochs=200, learning_rate=0.06, weight_decay=5e-4,
            temperature=0.1, momentum=0.99, queue_size=4096, num_splits=8,
            augment="cifar", instdisc_noise=4096, bank_init="random", few_labels=100,
            momentum_values=(0.0, 0.9, 0.99, 0.999), queue_values=(512, 4096, 16384))
    return Config(**QUICK, main="instdisc", tables=("main",))
