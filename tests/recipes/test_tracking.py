"""The tracking recipe end to end: the tiny Box-Siam config through `run_experiment`
(generate, train, evaluate three trackers, write tables and plots), resume of training
and of a stopped evaluation, and the bad inputs caught before training."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from ebm_jax.config import ConfigError, load_config
from ebm_jax.recipes import run_experiment

# a minute or more on 2 CPU cores: in `make test-heavy` (and CI), not `make test`
pytestmark = pytest.mark.heavy

CONFIG = Path(__file__).parents[2] / "experiments" / "tracking" / "siamfc_box.py"


def tiny(*overrides: str):
    return load_config(f"{CONFIG}:tiny", overrides)


def _quiet(_):
    pass


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tracking")
    report = run_experiment(tiny(), workdir=root / "runs", out=root / "out",
                            progress=False, log=_quiet)
    return root, report


def test_tiny_run_writes_tables_plots_and_strips(tiny_run):
    root, report = tiny_run
    out = root / "out"
    payload = json.loads((out / "results.json").read_text())
    rows = payload["tables"]["generated-test"]
    assert set(rows) == {"static", "random", "box-siam"}
    for tracker, runs in rows.items():
        for r in runs:
            for k in ("auc", "precision", "ao", "sr50"):
                assert 0.0 <= r[k] <= 1.0, (tracker, k)
            assert len(r["success_curve"]) == 21 and len(r["precision_curve"]) == 51
            assert len(r["sequence_auc"]) == 2
    # the static tracker's first frame is the ground truth: AUC >= 1/21 of a frame share
    assert rows["box-siam"][0]["fps"] > 0
    assert payload["training"]["box-siam-s0"]["steps"] == 4
    assert np.isfinite(payload["training"]["box-siam-s0"]["final_loss"])
    md = (out / "results.md").read_text()
    assert "Box-Siam (SiamFC on boxes)" in md and "never moves" in md and "AUC" in md
    for name in ("generated-test_success.png", "generated-test_precision.png",
                 "strips.png"):
        assert (out / name).stat().st_size > 2000, name


def test_rerun_resumes_training_and_evaluation(tiny_run):
    root, first = tiny_run
    workdir = root / "runs"
    (stage,) = [p for p in workdir.iterdir() if p.name.startswith("box-siam-s0-")]
    evals = sorted(p for p in workdir.iterdir() if p.name.startswith("eval-box-siam-s0-"))
    assert len(evals) == 1
    seq_files = sorted((evals[0] / "generated-test").glob("*.json"))
    assert len(seq_files) == 2
    # a stopped evaluation: one sequence's result is missing, the other is kept as is
    kept = seq_files[0]
    os.utime(kept, (1, 1))
    seq_files[1].unlink()
    ckpt_mtime = max(p.stat().st_mtime for p in (stage / "checkpoints").rglob("*"))
    again = run_experiment(tiny(), workdir=workdir, out=root / "out2", progress=False,
                           log=_quiet)
    assert kept.stat().st_mtime == 1  # not recomputed
    assert seq_files[1].is_file()  # recomputed
    assert max(p.stat().st_mtime for p in (stage / "checkpoints").rglob("*")) == ckpt_mtime
    a = first.payload["tables"]["generated-test"]["box-siam"][0]
    b = again.payload["tables"]["generated-test"]["box-siam"][0]
    assert a["auc"] == pytest.approx(b["auc"], abs=1e-6)  # deterministic tracking


def _rerun(tiny_run, override: str, out: str):
    """The tiny run again with `override` in its work directory: (its work directory,
    the report, the names of the directories it added)."""
    root, _ = tiny_run
    workdir = root / "runs"
    before = {p.name for p in workdir.iterdir()}
    report = run_experiment(tiny(override), workdir=workdir, out=root / out,
                            progress=False, log=_quiet)
    return workdir, report, {p.name for p in workdir.iterdir()} - before


def test_the_rounded_tracker_crop_reuses_training_and_tracks_anew(tiny_run):
    """`tracker_crop=rounded`: the same Box-Siam stage (training crops are unchanged),
    its own evaluation, whose identity records the crop."""
    workdir, report, new = _rerun(tiny_run, "--config.tracker_crop=rounded", "out-rounded")
    assert new and all(n.startswith("eval-") for n in new), new
    (box,) = [n for n in new if n.startswith("eval-box-siam-s0-")]
    identity = json.loads((workdir / box / "identity.json").read_text())
    assert identity["tracking"]["crop"] == "rounded"
    rows = report.payload["tables"]["generated-test"]["box-siam"]
    assert all(0.0 <= r["auc"] <= 1.0 for r in rows)


def test_the_port_training_preset_trains_its_own_stage(tiny_run):
    """`siamfc_training=port`: a new Box-Siam stage whose identity records the port's
    crops and pair sampler; the project's stage is untouched."""
    workdir, report, new = _rerun(tiny_run, "--config.siamfc_training=port", "out-port")
    (stage,) = [n for n in new if n.startswith("box-siam-s0-")]
    identity = json.loads((workdir / stage / "run.json").read_text())["config"]
    assert identity["settings"]["train_search_size"] == 239
    assert identity["settings"]["labels"] == "centred"
    assert identity["pairs"]["order"] == "forward"
    rows = report.payload["tables"]["generated-test"]["box-siam"]
    assert all(0.0 <= r["auc"] <= 1.0 for r in rows)


@pytest.mark.parametrize("override, message", [
    ("siamfc_training=paper", "--config.siamfc_training"),
    ("steps=0", "--config.steps"),
    ("width=0.01", "--config.width"),
    ("seeds=1,1", "--config.seeds"),
    ("lr_end=1.0", "--config.lr_end"),
    ("train_data=got10k", "--config.got10k_root"),
    ("num_frames=1", "--config.num_frames"),
])
def test_bad_settings_name_the_field(override, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        tiny(override)


def test_missing_root_and_bad_batch_fail_before_training(tmp_path):
    with pytest.raises(ValueError, match="otb_root"):
        run_experiment(tiny(f"otb_root={tmp_path / 'nope'}"), workdir=tmp_path / "w",
                       progress=False, log=_quiet)
    with pytest.raises(ValueError, match="batch_size 3 must be divisible by --devices 2"):
        run_experiment(tiny("batch_size=3"), workdir=tmp_path / "w", devices=2,
                       progress=False, log=_quiet)
    assert not any(p.name.startswith("box-siam") for p in (tmp_path / "w").iterdir())


@pytest.mark.parametrize("config", ["siamfc_box.py", "ebm_table4_box_head.py",
                                    "socl_table1_ablation.py",
                                    "socl_table5_sparse_boxes.py"])
@pytest.mark.parametrize("root", ["otb_root", "got10k_root"])
def test_real_roots_are_read_before_the_benchmark_is_generated(tmp_path, config, root):
    """A GOT-10k or OTB root that holds no sequences was refused only after the
    generated benchmark was made: in every recipe it is read first."""
    empty = tmp_path / "empty"
    empty.mkdir()
    cfg = load_config(f"{CONFIG.parent / config}:tiny", [f"--config.{root}={empty}"])
    with pytest.raises(ValueError, match=str(empty)):
        run_experiment(cfg, workdir=tmp_path / "w", progress=False, log=_quiet)
    assert not list((tmp_path / "w").rglob("*-*/groundtruth.txt"))  # nothing generated
    assert not list((tmp_path / "w").glob("data/*-*"))
