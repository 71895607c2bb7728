"""ebm-jax run experiments/tracking/socl_figure7_thresholds.py:quick

SoCL Figure 7: the thresholds theta_b (SNS) and b_p (LST, theta_p ~ U[b_p, 1)) (Wu & Chan, "Learning Tracking Representations from Single Point
Annotations", sec. 4).

Each value is one SoCL-Siam arm, the others at the paper's values (theta_b = 0.8,
b_p = 0.6).
SiamFC's AlexNet is trained from scratch on the generated train split and tracks the
generated test split (disjoint photos) with the SiamFC tracker; AUC, precision, AO and
SR as mean +- sd over three training seeds.

Variants: quick (50 train sequences of 80 frames at 320x240, 30 test sequences; AlexNet width 0.25;
batches of 12 videos x 2 context regions of 159 px; three seeds; 2 CPU cores), tiny
(seconds; the tests), paper (the published net and schedule: width 1.0, batch 192 =
96 videos; a GPU; on GOT-10k with --config.train_data=got10k --config.got10k_root=DIR).
"""

from ebm_jax.recipes.socl import Config

VARIANTS = ("quick", "tiny", "paper")

REFERENCE = (("OTB-13 AUC", "small theta_b or theta_p hurt; 0.8 and 0.6 chosen"),)


def get_config(variant: str) -> Config:
    if variant == "tiny":
        return Config(experiment="figure7", num_train_sequences=4, num_test_sequences=2, num_frames=8,
                      frame_height=96, frame_width=128, width=0.125, steps=2, batch_size=2,
                      socl_steps=2, videos=2, input_size=95, context_side=64.0,
                      annotate_every=2, seeds=(0,), strip_sequences=0,
                      theta_b_sweep=(0.5, 0.8), b_p_sweep=(0.6,), alphas=(0.5,))
    if variant == "paper":
        # GOT-10k train: 1000 epochs of 9335 videos / 96 per batch, lr x 0.1 at 500
        return Config(experiment="figure7", num_train_sequences=500,
                      num_test_sequences=100, num_frames=150, frame_height=360,
                      frame_width=480, width=1.0, steps=41_560, batch_size=8,
                      socl_steps=97_240, videos=96, input_size=255, context_side=255.0,
                      annotate_every=1, points_from_boxes=True, seeds=(0, 1, 2),
                      reference=REFERENCE)
    # three points per sweep on 2 CPU cores; the middle ones are the paper's values, whose
    # stage is the SoCL-Siam of the other experiments (trained once)
    return Config(experiment="figure7", theta_b_sweep=(0.5, 0.8, 0.95),
                  b_p_sweep=(0.2, 0.6, 0.9), reference=REFERENCE)
