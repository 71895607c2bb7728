"""The probe report's statistics (`ebm_jax.report.box_head_probe`) on hand-built probes
whose figures are known."""

import math

import numpy as np

from ebm_jax.report.box_head_probe import probe_markdown, probe_summary


def _probe(heads, loss, seed, set_name, gain, se, draw=None):
    level = {"iou_start": 0.5, "iou_refined": 0.5 + gain, "gain": gain, "gain_se": se,
             "iou_procedure": 0.5 + gain / 2, "procedure_gain": gain / 2,
             "procedure_gain_se": se, "iou_refined_other_reference": 0.5,
             "own_minus_other": gain, "own_minus_other_se": se}
    return {"heads": heads, "loss": loss, "seed": seed, "set": set_name, "draw": draw,
            "from_starts": {"0.5": level}}


def test_the_three_standard_errors_of_a_figure():
    """Two seeds x two draws: the mean over the four probes; over pairs the root sum
    of squares / 4; over seeds the sd of the two seeds' means / sqrt 2; over draws the
    sd of the two draws' means / sqrt 2."""
    gains = {(0, 0): 0.10, (0, 1): 0.14, (1, 0): 0.20, (1, 1): 0.22}
    ses = {(0, 0): 0.01, (0, 1): 0.02, (1, 0): 0.03, (1, 1): 0.04}
    rows = [_probe("apart", "nce", s, f"outside-{d}", gains[s, d], ses[s, d], draw=d)
            for (s, d) in gains]
    f = probe_summary(rows, ["0.5"])["outside"]["apart nce"]["0.5"]["gain"]
    assert math.isclose(f["mean"], 0.165, rel_tol=1e-12)
    assert math.isclose(f["se"]["pairs"], math.sqrt(0.01**2 + 0.02**2 + 0.03**2 + 0.04**2) / 4,
                        rel_tol=1e-12)
    seed_means, draw_means = [0.12, 0.21], [0.15, 0.18]
    assert math.isclose(f["se"]["seeds"], np.std(seed_means, ddof=1) / math.sqrt(2),
                        rel_tol=1e-12)
    assert math.isclose(f["se"]["draws"], np.std(draw_means, ddof=1) / math.sqrt(2),
                        rel_tol=1e-12)
    # beyond: 0.165 > 2 x the largest (the seeds' 0.045)
    assert f["beyond_2se"] and max(f["se"].values()) == f["se"]["seeds"]


def test_a_figure_within_its_largest_error_is_not_claimed():
    rows = [_probe("joint", "kld-is", s, "test", g, 0.001) for s, g in ((0, 0.05), (1, -0.03))]
    f = probe_summary(rows, ["0.5"])["test"]["joint kld-is"]["0.5"]["gain"]
    assert "draws" not in f["se"] and not f["beyond_2se"]  # se over seeds 0.04 > 0.01
    one = probe_summary(rows[:1], ["0.5"])["test"]["joint kld-is"]["0.5"]["gain"]
    assert set(one["se"]) == {"pairs"} and one["beyond_2se"]  # 0.05 > 2 x 0.001


def test_the_markdown_has_a_table_per_group_and_outside_minus_test():
    rows = [_probe("apart", "nce", 0, "validation", 0.1, 0.01),
            _probe("apart", "nce", 0, "test", 0.1, 0.01),
            *(_probe("apart", "nce", 0, f"outside-{d}", 0.04, 0.01, draw=d) for d in (0, 1))]
    text = probe_markdown(probe_summary(rows, ["0.5"]), ["0.5"], outside_draws=2, seeds=[0])
    for title in ("### Validation split", "### Test split", "### Outside split",
                  "### Outside minus test"):
        assert title in text
    # outside - test: -6.0 points, se hypot(pairs se of the test, of outside)
    se = math.hypot(0.01, math.sqrt(2 * 0.01**2) / 2)
    assert f"| apart | nce | -6.0 ({100 * se:.1f}) * |" in text


def test_box_siams_tracking_per_set_and_the_outside_minus_test_row():
    """Box-Siam's AUC per group over seeds (and draws), its standard error over each
    set's sequences as the root sum of squares over the rows, and outside - test with
    the root sum of the two groups' largest standard errors."""
    from ebm_jax.report.box_head_probe import tracking_markdown, tracking_summary

    rows = [{"seed": s, "set": "test", "draw": None, "auc": auc, "auc_se": 0.03,
             "static_auc": 0.1} for s, auc in ((0, 0.40), (1, 0.44))]
    rows += [{"seed": s, "set": f"outside-{d}", "draw": d, "auc": auc, "auc_se": 0.04,
              "static_auc": 0.12}
             for (s, d), auc in {(0, 0): 0.36, (0, 1): 0.30, (1, 0): 0.38,
                                 (1, 1): 0.32}.items()]
    summary = tracking_summary(rows)
    test, outside = summary["test"]["box_siam"], summary["outside"]["box_siam"]
    assert math.isclose(test["mean"], 0.42, rel_tol=1e-12)
    assert math.isclose(test["se"]["sequences"], math.sqrt(2 * 0.03**2) / 2, rel_tol=1e-12)
    assert math.isclose(test["se"]["seeds"], np.std([0.40, 0.44], ddof=1) / math.sqrt(2),
                        rel_tol=1e-12)
    assert math.isclose(outside["mean"], 0.34, rel_tol=1e-12)
    assert math.isclose(outside["se"]["draws"], np.std([0.37, 0.31], ddof=1) / math.sqrt(2),
                        rel_tol=1e-12)
    assert math.isclose(summary["outside"]["never_moves"], 0.12, rel_tol=1e-12)
    md = tracking_markdown(summary)
    largest_t, largest_o = max(test["se"].values()), max(outside["se"].values())
    se = 100 * math.hypot(largest_t, largest_o)
    assert f"| outside - test | -8.0 ({se:.1f}) * |" in md  # 8.0 > 2 x 3.7
    assert "| test | 42.0 (" in md and "| 10.0 |" in md
