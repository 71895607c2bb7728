"""`ebm-jax rerun`: a run made again from its results.json's provenance, compared leaf by
leaf with what was stored (ebm_jax.report.rerun)."""

import copy
import json
import math
from pathlib import Path

import pytest

from ebm_jax import cli
from ebm_jax.report import rerun, stored

ROOT = Path(__file__).resolve().parents[2]


def _results(**tables):
    return {"ebm_jax": {"provenance": {"anything": 1}}, "tables": tables}


def test_identical_results_are_reproduced_and_measured_times_are_left_out():
    a = _results(loss=[0.25, 1e-9, float("nan")], label="ML-IS", count=3,
                 training=[{"seconds": 12.5, "final_loss": 0.5, "seconds_per_step": 0.1}],
                 fps=640.0)
    b = copy.deepcopy(a)
    b["tables"]["training"][0].update(seconds=99.0, seconds_per_step=0.2)
    b["tables"]["fps"] = 10.0
    b["tables"]["training"][0]["compile_seconds"] = 1.5  # a time the other did not take
    b["ebm_jax"]["provenance"]["anything"] = 2  # provenance is never compared
    cmp = rerun.compare(a, b)
    assert cmp.bit_for_bit and cmp.as_printed and cmp.measured == 3
    assert cmp.same == 6  # three losses (NaN is NaN), the label, the count, final_loss


def test_a_changed_figure_is_named_with_both_values_and_its_relative_difference():
    a = _results(rows=[{"d_kl": 0.5, "method": "nce"}, {"d_kl": 0.25, "method": "ml-is"}])
    b = copy.deepcopy(a)
    b["tables"]["rows"][1]["d_kl"] = 0.25 * (1 + 2**-20)  # the last bits
    b["tables"]["rows"][0]["method"] = "nce+"
    cmp = rerun.compare(a, b)
    assert not cmp.bit_for_bit
    assert cmp.differ == [("tables.rows[0].method", "nce", "nce+"),
                          ("tables.rows[1].d_kl", 0.25, 0.25 * (1 + 2**-20))]
    rel, path = cmp.largest_relative()
    assert path == "tables.rows[1].d_kl"
    assert math.isclose(rel, 2**-20 / (1 + 2**-20), rel_tol=1e-12)


def test_a_leaf_on_one_side_only_and_a_type_change_are_differences():
    a = _results(x=1, flag=True, gone=2.0)
    b = _results(x=1.0, flag=1, new=[3])
    cmp = rerun.compare(a, b)
    assert cmp.same == 1  # 1 and 1.0 are the same number; True is not 1
    assert cmp.differ == [("tables.flag", True, 1)]
    assert cmp.only_a == ["tables.gone"] and cmp.only_b == ["tables.new[0]"]


def test_a_stored_toy_run_reruns_to_the_last_bit(tmp_path, capsys, toy_repo,
                                                 run_and_store):
    root, cfg = toy_repo()
    target = run_and_store(root, cfg)
    out = tmp_path / "again"
    assert cli.main(["rerun", str(target), "--out", str(out), "--no-progress"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("the stored run took ") and "rerunning in a fresh work" in said
    assert "reproduced to the last bit: " in said and "table lines as printed too" in said
    assert (out / "results.json").is_file()
    assert not list(tmp_path.glob("**/ebm-jax-rerun-*"))  # the fresh work dir is gone

    # a stored figure edited past the printed digits: reproduced as printed, the figure
    # named with both values
    data = json.loads((target / "results.json").read_text())
    paths = [p for p, v, m in rerun._leaves(data) if not p.startswith("ebm_jax")
             and isinstance(v, float) and not m]
    edited = paths[0]
    node, *keys = edited.replace("[", ".").replace("]", "").split(".")
    leaf = data[node]
    for k in keys[:-1]:
        leaf = leaf[int(k)] if isinstance(leaf, list) else leaf[k]
    last = int(keys[-1]) if isinstance(leaf, list) else keys[-1]
    leaf[last] = leaf[last] * (1 + 1e-6)
    (target / "results.json").write_text(json.dumps(data))
    assert cli.main(["rerun", str(target), "--against", str(out)]) == 0
    said = capsys.readouterr().out
    assert "reproduced as printed: the 3 table lines read the same" in said
    assert "1 figure(s) differ past the printed digits" in said and f"  {edited}: " in said
    assert f"largest relative difference 1e-06, at {edited}" in said

    # a printed figure that reads otherwise: not reproduced (exit status 1), the row shown
    md = (target / "results.md").read_text()
    row = next(ln for ln in md.splitlines() if ln.startswith("| 0.") or ln.startswith("| -"))
    cells = row.split("|")
    cells[1] = " 9.9999 "
    (target / "results.md").write_text(md.replace(row, "|".join(cells)))
    assert cli.main(["rerun", str(target), "--against", str(out)]) == 1
    said = capsys.readouterr().out
    assert "not reproduced: 1 table line(s) read otherwise" in said
    assert "  stored | 9.9999|" in said and f"  rerun  | {row.split('|')[1].strip()}|" in said


def test_a_stale_run_and_a_benchmark_report_are_refused_in_one_line(
        capsys, toy_repo, run_and_store):
    root, cfg = toy_repo()
    target = run_and_store(root, cfg)
    cfg.write_text(cfg.read_text().replace("learning_rate=0.1", "learning_rate=0.2"))
    assert cli.main(["rerun", str(target / "results.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "cannot rerun it as it was made: " in err and "(changed: learning_rate)" in err

    data = json.loads((target / "results.json").read_text())
    p = data["ebm_jax"]["provenance"]
    p.pop("config")
    p.update(benchmark={"script": "benchmarks/losses.py", "args": []},
             load_average={"start": [0.1], "end": [0.1]})
    (target / "results.json").write_text(json.dumps(data))
    assert cli.main(["rerun", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert "a benchmark's report" in err and "python benchmarks/losses.py" in err


@pytest.mark.parametrize("name", stored.stored_names(ROOT))
def test_every_stored_run_compares_with_itself(name):
    """The comparison reads every stored run's results (a benchmark's report refused
    only by `rerun`): each is reproduced by itself, with at least one figure."""
    data = stored.read_results(ROOT / stored.RESULTS / name)
    md = (ROOT / stored.RESULTS / name / "results.md").read_text()
    cmp = rerun.compare(data, copy.deepcopy(data), md, md)
    assert cmp.bit_for_bit and cmp.as_printed and cmp.same > 0 and cmp.rows_a, name
