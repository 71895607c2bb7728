"""ebm-jax run experiments/tracking/socl_table3_cf.py:quick

SoCL Table 3: a correlation filter tracker on the backbone SoCL trains (SoCL-CF) against
the same tracker on the backbone before that training (Wu & Chan, "Learning Tracking
Representations from Single Point Annotations", sec. 3.4 and 4.4).

The tracker (`ebm_jax.tracking.dcf`, settings `--config.dcf.*`): a multi-channel
correlation filter in the Fourier domain on two levels of the backbone (AlexNet conv1 and
conv5; the paper: ResNet-18 conv1 and layer3), fused in the continuous domain as ECO
does, a running-average model (learning rate 0.01) and a 5-scale search; ECO's
factorised convolution and conjugate-gradient solver are left out. Arms, each with
three training seeds: Init-CF (the tracker on the random initial weights SoCL-Siam
starts from: there is no ImageNet backbone offline, so this stands in for the paper's
Res18-CF), SoCL-CF (on SoCL-Siam's backbone), Box-CF (on Box-Siam's), and SoCL-Siam,
Box-Siam and the random backbone with the SiamFC tracker. Generated test split; AUC,
precision, AO, SR and FPS; paired differences with standard errors over seeds and
sequences.

Variants (the SoCL recipe's presets, `ebm_jax.recipes.tracking.socl.PRESETS`): quick (50 train
sequences of 80 frames at 320x240, 30 test sequences; AlexNet width 0.25; three seeds;
2 CPU cores; shares Box-Siam and SoCL-Siam stages with the other SoCL configs), tiny
(a minute or two; the tests), paper (the published net and schedule; a GPU; GOT-10k with
--config.train_data=got10k --config.got10k_root=DIR).

moco: the quick profile from the project's MoCo-pretrained ResNet-18 (pretrained on the
training frames; no ImageNet weights offline), fine-tuned with the backbone learning
rate x0.1 chosen on validation (`ebm_jax.recipes.tracking.socl.MOCO_START`).
"""

from ebm_jax.recipes.tracking.socl import Config, preset

VARIANTS = ("quick", "tiny", "paper", "moco")

REFERENCE = (("Res18-CF OTB-15 DPR/AUC", "87.8 / 65.9"),
             ("SoCL-CF OTB-15 DPR/AUC", "89.7 / 67.1"))


def get_config(variant: str) -> Config:
    return preset(variant, experiment="table3",
                  quick=dict(reference=REFERENCE), paper=dict(reference=REFERENCE))
