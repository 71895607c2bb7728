"""The dimp-centre experiment (`experiments/tracking/dimp_centre.py`): DiMP's classifier
trained on the frozen Box-Siam backbone, its centre tracked beside SiamFC's and the
DCF's on the validation and test splits, with the paired differences."""

import json

import pytest

from ebm_jax import cli

# a minute or more on 2 CPU cores: in `make test-heavy` (and CI), not `make test`
pytestmark = pytest.mark.heavy


def test_the_tiny_run_tracks_the_three_centres_on_both_splits(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["run", "dimp_centre:tiny", "--workdir", str(tmp_path / "runs"),
                     "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    data = json.loads((out / "results.json").read_text())
    for split in ("generated-val", "generated-test"):
        rows = data["tables"][split]
        assert {"SiamFC centre", "DCF centre", "DiMP centre"} <= set(rows)
        assert 0.0 <= rows["DiMP centre"][0]["precision"] <= 1.0
        assert "DiMP centre vs SiamFC centre" in data["summary"][split]
        assert "DiMP centre vs DCF centre" in data["summary"][split]
    (stage,) = [k for k in data["training"] if k.startswith("dimp-")]
    assert data["training"][stage]["identity_hash"].startswith("dimp-s0-")
    md = (out / "results.md").read_text()
    assert "### generated-val" in md and "DiMP centre" in md


def test_a_filter_larger_than_the_crops_grid_is_refused_before_training(tmp_path, capsys):
    runs = tmp_path / "runs"
    assert cli.main(["run", "dimp_centre:tiny", "--workdir", str(runs), "--out",
                     str(tmp_path / "out"), "--no-progress",
                     "--config.dimp.filter_size=23"]) != 0
    err = capsys.readouterr().err
    assert "DiMPTraining.filter_size 23 is larger than the feature grid (22 x 22 cells" \
        in err and "allowed: 1 to 22" in err
    assert not (tmp_path / "out").exists()
    assert not any(runs.glob("box-siam-*"))  # nothing trained


def test_the_tiny_table4_run_tracks_dimp_refined_by_each_head(tmp_path, capsys):
    """The EBM regression paper's Table 4 as the paper builds it: DiMP's centre refined
    by the box head of each loss, beside DiMP alone and the heads on SiamFC's centre."""
    out = tmp_path / "out"
    assert cli.main(["run", "ebm_table4_dimp:tiny", "--workdir", str(tmp_path / "runs"),
                     "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    data = json.loads((out / "results.json").read_text())
    rows = data["tables"]["generated-test"]
    assert {"box-siam", "DiMP centre", "DiMP scale search", "box-head-kld-is",
            "box-head-nce", "DiMP-kld-is", "DiMP-nce"} <= set(rows)
    summary = data["summary"]["generated-test"]
    for pair in ("DiMP-kld-is vs DiMP centre", "DiMP-kld-is vs box-head-kld-is",
                 "DiMP-kld-is vs DiMP scale search", "DiMP scale search vs DiMP centre",
                 "DiMP-nce vs DiMP centre", "DiMP-nce vs DiMP-kld-is"):
        assert pair in summary
    # the refined tracker reports boxes of other sizes than the first frame's
    sizes = {tuple(b[2:]) for r in rows["DiMP-kld-is"] for b in r.get("boxes", [])}
    assert "generated-val" in data["tables"]
    stages = [k for k in data["training"]]
    assert sum(k.startswith("box-head-") for k in stages) == 2
    assert sum(k.startswith("dimp-") for k in stages) == 1
    del sizes


@pytest.mark.slow
def test_the_tiny_joint_run_tracks_each_joint_tracker_and_its_centre(tmp_path, capsys):
    """DiMP's classifier and the box head trained on one batch (the backbone trained by
    both in the tiny variant): per loss the refined tracker and its centre alone."""
    out, runs = tmp_path / "out", tmp_path / "runs"
    assert cli.main(["run", "ebm_table4_dimp_joint:tiny", "--workdir", str(runs),
                     "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    data = json.loads((out / "results.json").read_text())
    rows = data["tables"]["generated-test"]
    assert {"box-siam", "DiMP-kld-is joint", "DiMP-kld-is joint centre", "DiMP-nce joint",
            "DiMP-nce joint centre"} <= set(rows)
    summary = data["summary"]["generated-test"]
    for pair in ("DiMP-kld-is joint vs DiMP-kld-is joint centre",
                 "DiMP-nce joint vs DiMP-kld-is joint", "DiMP-nce joint vs box-siam"):
        assert pair in summary
    stages = sorted(k for k in data["training"] if k.startswith("dimp-joint-"))
    assert stages == ["dimp-joint-kld-is-s0", "dimp-joint-nce-s0"]


@pytest.mark.parametrize("override, message", [
    ("--config.dimp.box_weight=0", "DiMPJointTraining.box_weight must be a number in (0, 1000]"),
    ("--config.dimp.backbone_lr=-1", "DiMPJointTraining.backbone_lr must be a number in [0, 1]"),
    ("--config.dimp.crop_size=191", "DiMPJointTraining.crop_size must be 255"),
])
def test_bad_joint_settings_are_refused_before_training(tmp_path, capsys, override, message):
    runs = tmp_path / "runs"
    assert cli.main(["run", "ebm_table4_dimp_joint:tiny", "--workdir", str(runs), "--out",
                     str(tmp_path / "out"), "--no-progress", override]) != 0
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()
    assert not any(runs.glob("box-siam-*"))


def test_the_chosen_settings_go_to_both_trackers_of_each_head():
    """`dimp_box_head_arms` with settings chosen on validation: each loss's head is
    tracked with its chosen settings on SiamFC's centre and on DiMP's."""
    import dataclasses

    from ebm_jax.config import load_config
    from ebm_jax.recipes.tracking.dimp_stages import dimp_box_head_arms

    cfg = load_config("ebm_table4_dimp:tiny_chosen")
    chosen = {m: dataclasses.replace(cfg.box_head, method=m,
                                     step_lengths=(0.01 * (i + 1),) * 4)
              for i, m in enumerate(cfg.box_head_methods)}
    arms = {a.label: a for a in dimp_box_head_arms(cfg, chosen)}
    for m, settings in chosen.items():
        assert arms[f"box-head-{m}"].tracker.settings == settings
        assert arms[f"DiMP-{m}"].tracker.settings.box_head == settings
    plain = {a.label: a for a in dimp_box_head_arms(cfg)}
    assert plain["DiMP-nce"].tracker.settings.box_head.step_lengths == cfg.box_head.step_lengths


@pytest.mark.parametrize("override, message", [
    ("--config.tracker_choices=size-only", "--config.tracker_choices must be empty for the "
                                           "dimp-box-head-chosen experiment"),
    ("--config.validation_sequences=0", "--config.validation_sequences must be >= 1 for "
                                        "the dimp-box-head-chosen experiment"),
])
def test_choosing_on_validation_needs_a_validation_split_and_no_siamfc_options(
        tmp_path, capsys, override, message):
    runs = tmp_path / "runs"
    assert cli.main(["run", "ebm_table4_dimp:tiny_chosen", "--workdir", str(runs),
                     "--out", str(tmp_path / "out"), "--no-progress", override]) != 0
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists() and not any(runs.glob("box-siam-*"))


@pytest.mark.slow
def test_the_tiny_chosen_run_chooses_on_validation_then_tracks_the_test_split(tmp_path,
                                                                            capsys):
    out = tmp_path / "out"
    assert cli.main(["run", "ebm_table4_dimp:tiny_chosen", "--workdir",
                     str(tmp_path / "runs"), "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    data = json.loads((out / "results.json").read_text())
    validation = data["validation"]
    assert set(validation["choice"]) == {"kld-is", "nce"}
    for m, choice in validation["choice"].items():
        assert len(choice["step_lengths"]) == 4 and choice["candidate"] in validation[
            "score"][m]
        assert validation["refinement"]["test"][m]  # probed on the test split after
    rows = data["tables"]["generated-test"]
    assert {"DiMP centre", "DiMP scale search", "DiMP-kld-is", "DiMP-nce"} <= set(rows)
    assert "DiMP-nce vs DiMP-kld-is" in data["summary"]["generated-test"]
    assert "Chosen on the validation split" in (out / "results.md").read_text()
