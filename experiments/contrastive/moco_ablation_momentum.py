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

# quick: digits on photos (MNIST-M style), three seeds; the augmentation was chosen
# on the val split (--config.eval_split=val, seed 0: see the README)
QUICK = dict(data="digits-on-photos", augment="digits-color", seeds=(0, 1, 2))

VARIANTS = ("quick", "tiny", "cifar")

TABLES = ("momentum",)
# the paper's ImageNet linear top-1 (%), by row of the table
REFERENCE = (("m = 0", "fails"), ("m = 0.9", "55.2"), ("m = 0.99", "57.8"),
             ("m = 0.999", "59.0"), ("m = 0.9999", "58.9"))
NOTE = ("paper %: He et al. 2020, sec. 4.1 (ImageNet, ResNet-50, K = 4096, linear "
        "top-1); m = 0 fails to train.")


def get_config(variant: str) -> Config:
    if variant == "tiny":
        return Config(
            main="moco", tables=TABLES, data="digits", num_train=96, num_test=40,
            arch="resnet4", image_size=8, width=4, dim=8, batch_size=32, epochs=1, queue_size=64,
            instdisc_noise=16, linear_epochs=3, knn_ks=(5, 10), few_labels=2, plot="none",
            momentum_values=(0.0, 0.99), queue_values=(32, 64),
            reference=REFERENCE, reference_note=NOTE)
    if variant == "cifar":
        return Config(
            main="moco", tables=TABLES, data="cifar10", image_size=32, width=64,
            dim=128, batch_size=512, epochs=200, learning_rate=0.06, weight_decay=5e-4,
            temperature=0.1, momentum=0.99, queue_size=4096, num_splits=8,
            augment="cifar", instdisc_noise=4096, bank_init="random", few_labels=100,
            momentum_values=(0.0, 0.9, 0.99, 0.999), queue_values=(512, 4096, 16384),
            plot="none",
            reference=REFERENCE, reference_note=NOTE)
    return Config(**QUICK, momentum_values=(0.0, 0.99), main="moco", tables=TABLES,
                  plot="none", reference=REFERENCE,
                  reference_note=NOTE)
