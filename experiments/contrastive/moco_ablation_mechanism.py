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

# quick: digits on photos (MNIST-M style), three seeds; the augmentation was chosen
# on the val split (--config.eval_split=val, seed 0: see the README)
QUICK = dict(data="digits-on-photos", augment="digits-color", seeds=(0, 1, 2))

VARIANTS = ("quick", "tiny", "cifar")

TABLES = ("mechanism",)


def get_config(variant: str) -> Config:
    if variant == "tiny":
        return Config(
            main="moco", tables=TABLES, data="digits", num_train=96, num_test=40,
            arch="resnet4", image_size=8, width=4, dim=8, batch_size=32, epochs=1, queue_size=64,
            instdisc_noise=16, linear_epochs=3, knn_ks=(5, 10), few_labels=2, plot="none",
            momentum_values=(0.0, 0.99), queue_values=(32, 64))
    if variant == "cifar":
        return Config(
            main="moco", tables=TABLES, data="cifar10", image_size=32, width=64,
            dim=128, batch_size=512, epochs=200, learning_rate=0.06, weight_decay=5e-4,
            temperature=0.1, momentum=0.99, queue_size=4096, num_splits=8,
            augment="cifar", instdisc_noise=4096, bank_init="random", few_labels=100,
            momentum_values=(0.0, 0.9, 0.99, 0.999), queue_values=(512, 4096, 16384),
            plot="none")
    return Config(**QUICK, main="moco", tables=TABLES, plot="none")
