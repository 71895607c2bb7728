"""`ebm-jax compare` on tracking and SoCL results: one arm minus another, paired by seed
and by test sequence, on every evaluation set both runs have."""

import json

import numpy as np
import pytest

from ebm_jax.cli import main
from ebm_jax.report.tracking import compare_results


def _results(arms, *, recipe="tracking", num_frames=80):
    """A results.json with `arms` ({label: per seed, a list of per-sequence AUCs})."""
    rows = {label: [{"seed": s, "auc": float(np.mean(seq)), "sequence_auc": list(seq)}
                    for s, seq in enumerate(per_seed)] for label, per_seed in arms.items()}
    # the layouts of the two recipes: tracking {set: {arm: rows}}, SoCL {"arms": {arm:
    # rows}, "static": {figure: value}} (the tracker that never moves)
    tables = ({"generated-test": rows} if recipe == "tracking"
              else {"arms": rows, "static": {"auc": 0.1, "precision": 0.1}})
    return {"ebm_jax": {"recipe": recipe, "config": {"num_frames": num_frames, "seed": 0}},
            "tables": tables, **({"split": "test"} if recipe == "socl" else {})}


A = {"Box-Siam": [[0.5, 0.3], [0.6, 0.2], [0.4, 0.2]]}
B = {"Box-Siam": [[0.4, 0.3], [0.4, 0.2], [0.4, 0.3]], "random": [[0.05, 0.05]] * 3}


def test_the_difference_and_both_standard_errors_by_hand():
    table = compare_results(_results(A), "Box-Siam", _results(B), "Box-Siam")
    # per seed: mean(a) - mean(b) = 0.05, 0.1, -0.05; se sd/sqrt(3)
    per_seed = np.array([0.05, 0.1, -0.05])
    se_seeds = per_seed.std(ddof=1) / np.sqrt(3)
    # per sequence (seeds averaged first): 0.5 - 0.4 = 0.1, 0.2333 - 0.2667
    per_seq = np.array([0.1, np.mean([0.3, 0.2, 0.2]) - np.mean([0.3, 0.2, 0.3])])
    se_seq = per_seq.std(ddof=1) / np.sqrt(2)
    line = [x for x in table.splitlines() if x.startswith("| generated-test")][0]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1] == f"{100 * per_seed.mean():+.1f}"  # not beyond 2 x the larger se
    assert cells[2] == f"{100 * se_seeds:.1f}" and cells[3] == f"{100 * se_seq:.1f}"
    assert cells[4] == "+5.0 +10.0 -5.0"
    assert "static" not in table


def test_a_clear_difference_is_starred_and_the_cli_reads_folders(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, arms in ((a, A), (b, B)):
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps(_results(arms, recipe="socl")))
    assert main(["compare", str(a), "Box-Siam", str(b), "random"]) == 0
    out = capsys.readouterr().out
    assert "| Box-Siam - random |" in out and "| generated-test | +31.7 *" in out


def test_a_socl_arm_pairs_with_the_tracking_recipes_box_siam():
    # SoCL's one evaluation set is the tracking recipe's generated-<split>
    mixed = compare_results(_results(A, recipe="socl"), "Box-Siam", _results(B), "Box-Siam")
    assert mixed == compare_results(_results(A), "Box-Siam", _results(B), "Box-Siam")
    validation = {**_results(A, recipe="socl"), "split": "validation"}
    with pytest.raises(ValueError, match="share no evaluation set"):
        compare_results(validation, "Box-Siam", _results(B), "Box-Siam")


def test_mismatches_are_one_line_errors():
    with pytest.raises(ValueError, match="differ in num_frames"):
        compare_results(_results(A), "Box-Siam", _results(B, num_frames=40), "Box-Siam")
    with pytest.raises(ValueError, match="no arm 'SoCL-Siam' on generated-test "
                                         r"\(its arms: Box-Siam, random\)"):
        compare_results(_results(A), "Box-Siam", _results(B), "SoCL-Siam")
    one = {"Box-Siam": [[0.5, 0.3]]}
    with pytest.raises(ValueError, match="at least 2 seeds"):
        compare_results(_results(one), "Box-Siam", _results(B), "Box-Siam")
    with pytest.raises(ValueError, match="not a tracking or SoCL results.json"):
        compare_results({"ebm_jax": {"recipe": "contrastive"}, "tables": {}}, "a",
                        _results(B), "Box-Siam")


def test_an_arm_with_nothing_to_pair_is_one_clear_line(tmp_path, capsys):
    """`box-siam` against `static` (tracked once, with no training seed) was a TypeError
    traceback after a NumPy warning."""
    import warnings

    results = _results(A)
    results["tables"]["generated-test"]["static"] = [
        {"seed": None, "auc": 0.1, "sequence_auc": [0.1, 0.1]}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "mean of empty slice" on the way
        with pytest.raises(ValueError, match=r"nothing to pair on generated-test: .*"
                                             r"'static'.*no training seed"):
            compare_results(results, "Box-Siam", results, "static")
        other = _results({"Box-Siam": [[0.1, 0.1]]})
        other["tables"]["generated-test"]["Box-Siam"][0]["seed"] = 5
        with pytest.raises(ValueError, match=r"nothing to pair on generated-test: .*"
                                             r"seeds \[0, 1, 2\].*seeds \[5\]"):
            compare_results(results, "Box-Siam", other, "Box-Siam")
    (tmp_path / "results.json").write_text(json.dumps(results))
    capsys.readouterr()
    assert main(["compare", str(tmp_path), "Box-Siam", str(tmp_path), "static"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ebm-jax compare: error: nothing to "
                                                   "pair on generated-test")
