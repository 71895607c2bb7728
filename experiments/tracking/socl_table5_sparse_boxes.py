"""ebm-jax run experiments/tracking/socl_table5_sparse_boxes.py:quick

SoCL Table 5's scheme: pseudo boxes from a box every T frames and a point in every
other frame train a box-regression tracker (Wu & Chan, "Learning Tracking
Representations from Single Point Annotations", sec. 3.4 and 4.6).

SoCL-CF (the correlation filter tracker on SoCL-Siam's backbone, `--config.dcf.*`)
tracks each snippet of the training sequences from its box; where its centre is more
than 20 px (`--config.failure_radius`) from the frame's point, the frame is a failure,
the point becomes the box's centre and the tracker is moved there. The regressor is the
energy-based box head of the EBM regression paper (NCE+, `--config.box_head.*`) on SoCL-Siam's frozen
backbone (the paper trains TransT), trained on (a) every true box, (b) the pseudo boxes
at T = 10 (`--config.sparse_every`), (c) the sparse boxes alone; the same seeds and the
same tracker (SiamFC's centre refined by the head). Also SoCL-Siam and SoCL-CF. The
pseudo boxes' IoU with the hidden true boxes, failures per 100 frames and the
annotation cost per frame (measured tracker seconds) for T in 5, 10, 20
(`--config.sparse_every_sweep`); annotation hours per arm; three seeds; generated test
split.

Variants (the SoCL recipe's presets, `ebm_jax.recipes.tracking.socl.PRESETS`): quick (50 train
sequences of 80 frames at 320x240, 30 test sequences; AlexNet width 0.25; box heads of
600 steps; three seeds; 2 CPU cores; shares SoCL-Siam stages with the other SoCL
configs), tiny (a minute or two; the tests), paper (the published net and schedule; a GPU;
GOT-10k with --config.train_data=got10k --config.got10k_root=DIR).

moco: the quick profile from the project's MoCo-pretrained ResNet-18 (pretrained on the
training frames; no ImageNet weights offline), fine-tuned with the backbone learning
rate x0.1 chosen on validation (`ebm_jax.recipes.tracking.socl.MOCO_START`).
"""

from ebm_jax.recipes.tracking.socl import BoxHeadSettings, Config, preset

VARIANTS = ("quick", "tiny", "paper", "moco")

REFERENCE = (("TransT on every GOT-10k box (4.0K h) AO / SR0.5", "67.1 / 76.8"),
             ("SoCL-TransT on pseudo boxes, T = 10 (1.2K h)", "62.2 / 72.4"))


def get_config(variant: str) -> Config:
    return preset(
        variant, experiment="table5",
        quick=dict(reference=REFERENCE, box_head=BoxHeadSettings(steps=600)),
        tiny=dict(sparse_every=2, sparse_every_sweep=(2, 4),
                  box_head=BoxHeadSettings(steps=3, batch_size=2, num_samples=16, width=8,
                                           hidden=16)),
        paper=dict(reference=REFERENCE, box_head=BoxHeadSettings(steps=40_000)))
