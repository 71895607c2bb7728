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


def _of_recipe(recipe, tables):
    return {"ebm_jax": {"recipe": recipe}, "tables": tables}


# the shapes of the other recipes' results.json (their tables as the recipes write them)
OTHERS = {
    "regression1d": _of_recipe("regression1d", {"table1": [
        {"method": "nce+", "dataset": 1, "kl_top_k": 0.1}]}),
    "detection": _of_recipe("detection", {"table2": [
        {"method": "nce+", "ap": 0.5, "seeds": [{"seed": 0, "ap": 0.5}]}]}),
    "tracking": _of_recipe("tracking", [{"tracker": "box-siam", "auc": 0.4}]),
    "socl": _of_recipe("socl", {"table1": [{"arm": "socl", "auc": 0.3}]}),
}


@pytest.mark.parametrize("recipe", sorted(OTHERS))
def test_other_recipes_results_are_refused_in_one_line(tmp_path, capsys, recipe):
    """Two 1D or detection results gave KeyError: 'name', tracking ones a TypeError,
    regression against contrastive "differ in data". Tracking and SoCL results go to
    their own comparison, which refuses these malformed ones."""
    other = tmp_path / f"{recipe}.json"
    other.write_text(json.dumps(OTHERS[recipe]))
    contrastive = tmp_path / "c.json"
    contrastive.write_text(json.dumps({"ebm_jax": {"recipe": "contrastive"},
                                       **_results({"moco": [0.3, 0.3, 0.3]})}))
    for argv, which in ((["compare", str(other), "a", str(other), "b"], "RESULTS_A"),
                        (["compare", str(contrastive), "moco", str(other), "b"],
                         "RESULTS_B")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        if recipe in ("tracking", "socl") and which == "RESULTS_A":
            assert err == (f"ebm-jax compare: error: RESULTS_A {other} is not a tracking "
                           f"or SoCL results.json (recipe '{recipe}'; tables of arms with "
                           "rows per seed)\n")
        else:
            assert err == ("ebm-jax compare: error: compare supports contrastive results "
                           f"(recipe contrastive); {which} {other} is a {recipe} result\n")


def test_a_folder_a_list_and_other_json_are_one_line(tmp_path, capsys):
    folder = tmp_path / "out"
    folder.mkdir()
    assert main(["compare", str(folder), "a", str(folder), "b"]) == 2
    assert capsys.readouterr().err == (f"ebm-jax compare: error: RESULTS_A {folder} is a "
                                       "directory without a results.json; give a "
                                       "results.json\n")
    (folder / "results.json").write_text(json.dumps(_results({"moco": [0.3, 0.35, 0.4]})))
    assert main(["compare", str(folder), "moco", str(folder), "moco"]) == 0  # its results
    assert "| linear | +0.0 +- 0.0 |" in capsys.readouterr().out
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    assert main(["compare", str(listed), "a", str(folder), "moco"]) == 2
    assert capsys.readouterr().err == (
        "ebm-jax compare: error: compare supports contrastive results (recipe "
        f"contrastive); RESULTS_A {listed} is not a results.json (a JSON list, not an "
        "object)\n")
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"tables": {"main": [{"run": "x"}]}}))
    assert main(["compare", str(folder), "moco", str(odd), "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"RESULTS_B {odd} is not one" in err
