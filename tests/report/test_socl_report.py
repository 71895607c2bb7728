"""The SoCL report names the data its arms trained on (ebm_jax.report.socl)."""

from pathlib import Path

import pytest

from ebm_jax.config import load_config
from ebm_jax.recipes.tracking import socl as recipe
from ebm_jax.report.socl import METRICS, socl_report

CONFIG = (Path(__file__).parents[2] / "experiments" / "tracking"
          / "socl_table1_ablation.py")


@pytest.mark.parametrize("train_data, name, groups, path", [
    ("generated", "generated", 1, False), ("generated", "generated", 2, False),
    ("generated", "generated", 2, True), ("got10k", "GOT-10k", 1, False)])
def test_the_title_names_the_training_data(tmp_path, train_data, name, groups, path):
    cfg = load_config(f"{CONFIG}:tiny", [f"--config.train_data={train_data}",
                                         f"--config.got10k_root={tmp_path}",
                                         f"--config.scene_group={groups}",
                                         f"--config.scene_path={path}"])
    arms = recipe.arms_of(cfg)
    row = {**{k: 0.5 for k, _ in METRICS}, "fps": 10.0, "sequence_auc": [0.5, 0.5]}
    rows = {a.label: [{"seed": s, **row} for s in cfg.seeds] for a in arms}
    training = {a.label: [{"seed": s} for s in cfg.seeds] for a in arms}
    static = {**{k: 0.4 for k, _ in METRICS}, "num_sequences": 2, "num_frames": 8}
    report = socl_report(cfg, arms, rows, training, static, pairs=[], paper="-",
                         tops={}, train=["s1", "s2", "s3"], budget=None)
    title = report.markdown.splitlines()[0]
    assert f"3 {name} training sequences" in title, title
    assert title.endswith("in scene groups of 2" + " (targets on one path)" * path) == (
        groups == 2), title
    if train_data == "got10k":
        assert "generated" not in title


@pytest.mark.parametrize("experiment", ["figure8", "table2"])
def test_the_sweep_figures_draw_the_start_as_a_level(experiment):
    """Figure 8 and Figure 9 draw the start every arm trains from as a level line
    (with Figure 8's SoCL-Siam), so that a plot says whether training kept it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = {"figure8": "socl_figure8_bce.py",
              "table2": "socl_table2_annotation_cost.py"}[experiment]
    cfg = load_config(f"{CONFIG.parent / config}:tiny", [])
    arms = recipe.arms_of(cfg)
    rows = {a.label: [{"seed": s, **{k: 0.3 + 0.01 * s for k, _ in METRICS},
                       "fps": 10.0, "sequence_auc": [0.5, 0.5]} for s in cfg.seeds]
            for a in arms}
    training = {a.label: [{"seed": s} for s in cfg.seeds] for a in arms}
    static = {**{k: 0.1 for k, _ in METRICS}, "num_sequences": 2, "num_frames": 8}
    report = socl_report(cfg, arms, rows, training, static, pairs=[], paper="-",
                         tops={}, train=["s1", "s2"], budget=None)
    fig = report.figures["sweeps.png"]()
    labels = [t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()]
    start = next(a.label for a in arms if a.method == "random")
    assert f"{start} (mean +- sd)" in labels, labels
    if experiment == "figure8":
        assert "SoCL-Siam (mean +- sd)" in labels, labels
    plt.close(fig)


def test_the_within_scene_columns_appear_only_with_scene_groups():
    from ebm_jax.report.socl import diagnostics_markdown

    check = {"temperature": 1.0, "target_cells_in_sns_pool": 0.9,
             "mass_over_target_cells": 0.1}
    row = {"seed": 0, "pairs": 8, "uniformity": 0.5, "contrast": 1.2,
           "identification": 0.7, "positive": 0.8, "hardest_negative": 0.9,
           "pair_accuracy": 0.4, "target_accuracy": 0.75, "background_accuracy": 0.85}
    diag = {"split": "validation", "sequences": 4, "pairs": 8, "region_px": 159,
            "receptive_field_px": 227, "temperature": 1.0, "theta_b": 0.8,
            "calibration": None, "arm_temperatures": {},
            "top_check": {"temperature": check, "at_1": check, "median_target_cells": 25.0,
                          "theta_b": 0.8},
            "rows": {"start": [row]}}
    plain = "\n".join(diagnostics_markdown(diag))
    assert "within its scene" not in plain.lower()
    scened = {**row, "target_within_scene_accuracy": 0.8,
              "background_within_scene_accuracy": 0.6}
    md = "\n".join(diagnostics_markdown({**diag, "rows": {"start": [scened]}}))
    assert "| within its scene, TOP map | within its scene, background |" in md
    assert md.splitlines()[-1] == ("| start | 0.50 | 1.20 | 70 | 0.80 | 0.90 | 40 | 75 | 85 | 80 "
                                   "| 60 |")
    assert "- Within its scene:" in md


def test_the_scores_and_the_diagnostics_are_parts_a_page_can_include():
    """The table and its paired differences under "Scores", what says why under
    "Diagnostics" (where there is any), so that a page includes the scores alone."""
    from ebm_jax.report.stored_runs import markdown_sections

    cfg = load_config(f"{CONFIG}:tiny")
    arms = recipe.arms_of(cfg)
    row = {**{k: 0.5 for k, _ in METRICS}, "fps": 10.0, "sequence_auc": [0.5, 0.5]}
    rows = {a.label: [{"seed": s, **row} for s in cfg.seeds] for a in arms}
    training = {a.label: [{"seed": s} for s in cfg.seeds] for a in arms}
    static = {**{k: 0.4 for k, _ in METRICS}, "num_sequences": 2, "num_frames": 8}
    pairs = [(arms[1].label, arms[0].label)]
    bare = socl_report(cfg, arms, rows, training, static, pairs=pairs, paper="-", tops={},
                       train=["s1"], budget=None).markdown
    assert [t for t, _, _ in markdown_sections(bare)][1:] == ["Scores"]
    scores = bare.split("### Scores")[1]
    assert "| arm |" in scores and "Paired differences" in scores
