"""SoCL's table of experiments (`--config.experiment` of the SoCL recipe): each paper
table or figure's arms (`socl_arms`) with the paper's figures they are set beside, and
the run's training stages for its progress.
"""

from __future__ import annotations

from ebm_jax.recipes.tracking import socl_arms as arms_lib
from ebm_jax.recipes.tracking import sparse_boxes
from ebm_jax.recipes.tracking.arms import Arm, Experiment


def _no_arms(cfg) -> list[Arm]:
    """moco_start trains and tracks no arm: it screens the MoCo start's settings."""
    return []


EXPERIMENTS = {
    "table1": Experiment(arms_lib.table1, "OTB-13 AUC: GST 55.1, +SNS 57.8, +mix-up 58.1, +LST "
                                  "60.9 (each step helps)"),
    "figure7": Experiment(arms_lib.figure7, "small theta_b or theta_p hurt; theta_b = 0.8, b_p = "
                                    "0.6 chosen"),
    "figure8": Experiment(arms_lib.figure8, "BCE-Siam on pseudo boxes is below SoCL-Siam at every "
                                    "alpha"),
    "table2": Experiment(arms_lib.table2, "OTB-15 AUC at 110/220/440/880 h: Box-Siam "
                                  "51.7/54.0/55.2/57.0, SoCL-Siam 53.3/54.9/56.5/57.8 "
                                  "(SoCL ahead at every budget)"),
    "table3": Experiment(arms_lib.table3, "DPR/AUC Res18-CF -> SoCL-CF: OTB-13 91.3/68.5 -> "
                                  "92.7/69.6, OTB-15 87.8/65.9 -> 89.7/67.1, UAV123 "
                                  "70.1/51.8 -> 72.3/52.6; VOT18 EAO 0.207 -> 0.216; LaSOT "
                                  "AUC 31.0 -> 32.2 (SoCL-CF ahead on all five, by 0.8-2.2 "
                                  "AUC points; Res18-CF on an ImageNet ResNet-18)"),
    "table5": Experiment(arms_lib.table5, "GOT-10k AO / SR0.5: TransT on every box (4.0K h) 67.1 / "
                                  "76.8, SoCL-TransT on pseudo boxes at T = 10 (1.2K h) "
                                  "62.2 / 72.4: 92.7% / 94.3% of it at 30% of the "
                                  "annotation cost (3.16 s per frame against 10.2)",
                         after=sparse_boxes.pseudo_box_sweep),
    "table6": Experiment(arms_lib.table6, "points shifted 20 px cost 0.2-0.8 AUC points"),
    "lst": Experiment(arms_lib.lst_study, "+mix-up -> +LST: OTB-13 AUC 58.1 -> 60.9, VOT-16 EAO "
                               "0.231 -> 0.244 (Table 1); no TOP temperature, no "
                               "denominator or symmetrisation choice stated"),
    "table4": Experiment(arms_lib.table4, "GOT-10k (1.4M frames): boxes $50.4k and 3,967 h; points "
                                  "$7.0k and 883 h; training SiamFC 8 h, SoCL 24 h on a "
                                  "V100 at $0.90/h"),
    "moco_start": Experiment(_no_arms, "no screen: the paper starts from the ImageNet "
                                       "ResNet-18 (sec. 4.1), which this stand-in replaces"),
}


def arms_of(cfg) -> list[Arm]:
    """The rows of `cfg.experiment`'s table."""
    return EXPERIMENTS[cfg.experiment].arms(cfg)


def count_stages(cfg) -> int | None:
    """The run's training stages, for "stage i of n" and the run's ETA: per seed one
    per distinct training of the table's arms (`socl_arms.training_key`), the MoCo
    start once (once per seed with `moco_per_seed`); None for Table 5 (its box-head
    arms train stages of their own)."""
    if cfg.experiment == "table5":
        return None
    if cfg.experiment == "moco_start":  # one MoCo stage per setting screened
        return len(cfg.moco_screen)
    keys = {arms_lib.training_key(cfg, a) for a in arms_of(cfg) if a.method in arms_lib.TRAINED}
    starts = len(cfg.seeds) if getattr(cfg, "moco_per_seed", False) else 1
    return len(cfg.seeds) * len(keys) + (cfg.init == "moco") * starts


__all__ = ["EXPERIMENTS", "arms_of", "count_stages"]
