"""The SoCL configs' tiny variants, for the SoCL recipe's tests."""

from pathlib import Path

from ebm_jax.config import load_config

EXPERIMENTS = Path(__file__).parents[2] / "experiments" / "tracking"
CONFIGS = {"table1": "socl_table1_ablation.py", "figure7": "socl_figure7_thresholds.py",
           "figure8": "socl_figure8_bce.py", "table2": "socl_table2_annotation_cost.py",
           "table6": "socl_table6_noisy_points.py", "table4": "socl_table4_fees.py",
           "table3": "socl_table3_cf.py", "table5": "socl_table5_sparse_boxes.py",
           "lst": "socl_lst_validation.py"}


def tiny(experiment="table1", *overrides: str):
    """The Config of `experiment`'s tiny variant with `overrides` (--config.F=V)."""
    return load_config(f"{EXPERIMENTS / CONFIGS[experiment]}:tiny", overrides)


def quiet(_):
    """A log that drops every line."""
