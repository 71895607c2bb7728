"""ebm-jax run experiments/tracking/socl_table2_annotation_cost.py:quick

SoCL Table 2 / Figure 9: Box-Siam vs SoCL-Siam at equal annotation time (Wu & Chan, "Learning Tracking Representations from Single Point
Annotations", sec. 4).

A box costs 10.2 s, a point 2.27 s (with its TOP map): each budget buys whole training
sequences in one fixed random order (the same for both), box-annotated or
point-annotated on the same frames (every second one).
SiamFC's AlexNet is trained from scratch on the generated train split and tracks the
generated test split (disjoint photos) with the SiamFC tracker; AUC, precision, AO and
SR as mean +- sd over three training seeds.

Variants: quick (110 train sequences of 40 frames (2080 annotated frames) at 320x240, 30 test sequences; AlexNet width 0.25;
batches of 12 videos x 2 context regions of 159 px; three seeds; 2 CPU cores), tiny
(seconds; the tests), paper (the published net and schedule: width 1.0, batch 192 =
96 videos; a GPU; on GOT-10k with --config.train_data=got10k --config.got10k_root=DIR).
"""

from ebm_jax.recipes.socl import Config

VARIANTS = ("quick", "tiny", "paper")

REFERENCE = (("OTB-15 AUC, Box-Siam at 110/220/440/880 h", "51.7 / 54.0 / 55.2 / 57.0"),
             ("OTB-15 AUC, SoCL-Siam", "53.3 / 54.9 / 56.5 / 57.8"))


def get_config(variant: str) -> Config:
    if variant == "tiny":
        return Config(experiment="table2", num_train_sequences=12, num_test_sequences=2, num_frames=8,
                      frame_height=96, frame_width=128, width=0.125, steps=2, batch_size=2,
                      socl_steps=2, videos=2, input_size=95, context_side=64.0,
                      annotate_every=2, seeds=(0,), strip_sequences=0,
                      theta_b_sweep=(0.5, 0.8), b_p_sweep=(0.6,), alphas=(0.5,), budgets_hours=(0.012, 0.024))
    if variant == "paper":
        # GOT-10k train: 1000 epochs of 9335 videos / 96 per batch, lr x 0.1 at 500
        return Config(experiment="table2", num_train_sequences=500,
                      num_test_sequences=100, num_frames=150, frame_height=360,
                      frame_width=480, width=1.0, steps=41_560, batch_size=8,
                      socl_steps=97_240, videos=96, input_size=255, context_side=255.0,
                      annotate_every=1, points_from_boxes=True, seeds=(0, 1, 2),
                      reference=REFERENCE)
    # 110 sequences: the top budget (1.26 h, 8x the lowest as in the paper) buys about
    # 2000 points, more than 100 sequences annotate
    return Config(experiment="table2", num_train_sequences=110, num_frames=40,
                  budgets_hours=(0.16, 0.32, 0.63, 1.26), reference=REFERENCE)
