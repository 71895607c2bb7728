"""The box heads' refinement probe (`experiments/tracking/box_head_probe.py`): the heads
trained apart and jointly with DiMP's classifier, probed on the validation, test and
outside splits, in the tracking recipe's work directory."""

import json

import pytest

from ebm_jax import cli
from ebm_jax.config import load_config
from ebm_jax.recipes import default_workdir


def test_the_probe_reads_the_tracking_recipes_stages_by_default():
    assert default_workdir(load_config("box_head_probe:tiny")) == "runs/tracking"
    assert default_workdir(load_config("ebm_table4_dimp:tiny")) == "runs/tracking"


def test_the_quick1_heads_are_the_table4_configs_heads():
    """Stage reuse: the probe's quick1 trains the same Box-Siam, apart heads and joint
    heads as ebm_table4_dimp:quick1 and ebm_table4_dimp_joint:quick1 (the fields their
    stages are identified by)."""
    probe = load_config("box_head_probe:quick1")
    apart, joint = load_config("ebm_table4_dimp:quick1"), load_config(
        "ebm_table4_dimp_joint:quick1")
    for other in (apart, joint):
        for field in ("num_train_sequences", "num_test_sequences", "num_frames", "steps",
                      "width", "backbone", "seeds", "validation_sequences", "box_head",
                      "box_head_methods", "batch_size", "lr_start", "lr_end"):
            assert getattr(probe, field) == getattr(other, field), field
    assert probe.dimp == joint.dimp


@pytest.mark.parametrize("override, message", [
    ("--config.probe_pairs=5", "--config.probe_pairs (5) must be a multiple of "
                               "--config.probe_batch (2)"),
    ("--config.heads=apart,other", "--config.heads must be a non-empty list drawn from"),
    ("--config.outside_draws=1", "--config.outside_draws must be an integer in [2, 100]"),
    ("--config.validation_sequences=0", "--config.validation_sequences must be an integer "
                                        "in [1, 3]"),
])
def test_bad_probe_settings_are_refused_before_anything_is_made(tmp_path, capsys, override,
                                                                message):
    runs = tmp_path / "runs"
    assert cli.main(["run", "box_head_probe:tiny", "--workdir", str(runs), "--out",
                     str(tmp_path / "out"), "--no-progress", override]) != 0
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists() and not any(runs.glob("*/"))


@pytest.mark.heavy
@pytest.mark.slow
def test_the_tiny_probe_reports_every_head_on_every_set(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["run", "box_head_probe:tiny", "--workdir", str(tmp_path / "runs"),
                     "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    data = json.loads((out / "results.json").read_text())
    heads = {(k, m) for k in ("apart", "joint") for m in ("kld-is", "nce")}
    sets = {"validation", "test", "outside-0", "outside-1"}
    assert {(r["heads"], r["loss"], r["set"]) for r in data["probes"]} == {
        (k, m, s) for k, m in heads for s in sets}
    for r in data["probes"]:
        assert r["pairs"] == 4 and set(r["from_starts"]) == {"0.5", "0.7", "0.8"}
        assert r["draw"] == (int(r["set"][-1]) if r["set"].startswith("outside") else None)
    assert set(data["summary"]) == {"validation", "test", "outside"}
    outside = data["summary"]["outside"]["joint nce"]["0.7"]["gain"]
    assert set(outside["se"]) == {"pairs", "draws"}  # one seed: no se over seeds
    assert data["sets"]["outside-0"]["split"] == "outside"
    assert data["sets"]["outside-0"]["seed"] != data["sets"]["outside-1"]["seed"]
    md = (out / "results.md").read_text()
    assert "### Outside minus test" in md and (out / "refined_iou.png").is_file()
    # Box-Siam's own tracker on every set, one row per seed and set
    tracked = data["box_siam_tracking"]
    assert {(r["seed"], r["set"]) for r in tracked} == {(0, s) for s in sets}
    for r in tracked:
        assert 0 <= r["auc"] <= 1 and 0 <= r["static_auc"] <= 1
        assert r["draw"] == (int(r["set"][-1]) if r["set"].startswith("outside") else None)
    assert set(data["box_siam_summary"]) == {"validation", "test", "outside"}
    assert "### Box-Siam's own tracker on the probe's sets" in md and "outside - test" in md
