"""ebm-jax run experiments/ebm_regression/figure3_detection_m.py:quick

Figures 3 and 4 of "How to Train Your Energy-Based Model for Regression" (sec. 4.2): detection AP after refinement against the number of samples M, and ML-IS training cost against M.

ML-IS, KLD-IS, NCE and NCE+ heads are trained at each M on the frozen features of the
shared `backbone` stage (the heads at M = 128 are those of Table 2: with the same
workdir they are trained once). The figure is figure3_4_m.png.

Variants: quick (generated data, 32 heads, about 40 min on 2 CPU cores; add
--config.m_values=1,4,16,128 for a shorter sweep), tiny (a minute or two; the tests), paper (the
paper's head and schedule on COCO: needs --config.coco_root=DIR
--config.detections=FILE, and a GPU).
"""

from ebm_jax.recipes.detection import Config

VARIANTS = ("quick", "tiny", "paper")  # the first is the default

# The methods' hyperparameters (sec. 4.2): one sigma for the four coordinates of the
# relative box space (cx/w0, cy/h0, log w, log h); M = num_samples = 128.
HYPERPARAMETERS = dict(
    is_sigmas=(0.0375, 0.075, 0.15),
    kld_label_sigma=0.0225,
    mcmc_step_size=1e-5,
    nce_sigmas=(0.075, 0.15, 0.3),
    nce_plus_beta=0.1,
    dsm_sigma=0.075,
    # refinement step lengths (loss, l_c for cx and cy, l_s for log w and log h)
    step_lengths=(("nce+", 8e-4, 3.2e-3), ("ml-is", 4e-4, 1.6e-3),
                  ("kld-is", 4e-4, 1.6e-3), ("nce", 4e-4, 1.6e-3),
                  ("dsm", 2.5e-5, 1e-4), ("ml-mcmc", 2.5e-5, 1e-4)),
)


def get_config(variant: str) -> Config:
    common = dict(tables=("m",), m_methods=("ml-is", "kld-is", "nce", "nce+"),
                  m_values=(1, 2, 4, 8, 16, 32, 64, 128), **HYPERPARAMETERS)
    if variant == "quick":
        return Config(name="quick", grad_clip=5.0, **common)
    if variant == "tiny":
        return Config(name="tiny", num_train=8, num_val=4, image_size=64, num_classes=2,
                      max_objects=2, min_size=8, widths=(8,), channels=8,
                      backbone_steps=2, backbone_batch=4, hidden=16, pool_size=3,
                      canonical_size=48.0, head_steps=2, boxes_per_batch=4, warmup_steps=1,
                      num_samples=4, refine_steps=2,
                      **{**common, "m_methods": ("nce",), "m_values": (2, 4)})
    if variant == "paper":
        return Config(name="paper", data="coco", image_size=800, widths=(64, 128, 256, 512),
                      channels=256, backbone_steps=90000, backbone_batch=16,
                      backbone_lr=1e-3, hidden=1024, pool_size=7, canonical_size=224.0,
                      head_steps=60000, boxes_per_batch=128, learning_rate=1e-3,
                      warmup_steps=500, **common)
    raise ValueError(f"unknown variant {variant!r}")
