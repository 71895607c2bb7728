"""`ebm-jax compare`: two contrastive runs, paired by seed."""

import json

import pytest

from ebm_jax.cli import main
from ebm_jax.report.contrastive import compare_results


def _results(runs, data="digits-on-photos", seeds=(0, 1, 2)):
    """A contrastive results.json with `runs` ({name: [linear accuracy per seed]})."""
    rows = [{"name": name, "linear_accuracy": sum(acc) / len(acc),
             "knn20_accuracy": 0.5, "linear_train_accuracy": 0.9,
             "seeds": [{"seed": s, "linear_accuracy": a, "knn20_accuracy": 0.5 + 0.01 * s,
                        "linear_train_accuracy": 0.9} for s, a in zip(seeds, acc)]}
            for name, acc in runs.items()]
    return {"data": data, "eval_split": "test", "num_train": 10, "num_test": 5,
            "seeds": list(seeds), "tables": {"main": rows}}


def test_paired_by_seed_with_standard_error():
    a = _results({"moco": [0.30, 0.35, 0.40]})
    b = _results({"instdisc": [0.20, 0.30, 0.28]})  # differences 10, 5, 12 points
    md = compare_results(a, "moco", b, "instdisc")
    # mean 9.0, sd 3.606, se 2.082: beyond 2 se; kNN differs by 0 in every seed
    assert "| linear | +9.0 +- 2.1 * |" in md
    assert "| knn20 | +0.0 +- 0.0 |" in md
    assert "linear train" not in md


def test_refuses_runs_of_other_data_or_seeds_and_names_missing_runs():
    a = _results({"moco": [0.3, 0.3, 0.3]})
    with pytest.raises(ValueError, match="differ in data"):
        compare_results(a, "moco", _results({"x": [0.1] * 3}, data="digits"), "x")
    with pytest.raises(ValueError, match="differ in seeds"):
        compare_results(a, "moco", _results({"x": [0.1] * 2}, seeds=(0, 1)), "x")
    with pytest.raises(ValueError, match=r"B: no run 'mocoo' \(its runs: moco\)"):
        compare_results(a, "moco", a, "mocoo", names=("A", "B"))
    one = _results({"moco": [0.3]}, seeds=(0,))
    with pytest.raises(ValueError, match="at least 2 seeds"):
        compare_results(one, "moco", one, "moco")


def test_cli(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_results({"moco": [0.30, 0.35, 0.40]})))
    b.write_text(json.dumps(_results({"random": [0.30, 0.35, 0.40]})))
    assert main(["compare", str(a), "moco", str(b), "random"]) == 0
    assert "| linear | +0.0 +- 0.0 |" in capsys.readouterr().out
    assert main(["compare", str(a), "moco", str(tmp_path / "none.json"), "x"]) == 2
    assert "none.json" in capsys.readouterr().err
