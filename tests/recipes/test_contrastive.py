"""The contrastive recipe end to end: every tiny config of experiments/contrastive/
through `run_experiment` in ONE work directory (the random, supervised and default MoCo
stages are shared between the files and train once), resume, and the bad inputs."""

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from ebm_jax.config import ConfigError, load_config
from ebm_jax.data import images as image_data
from ebm_jax.recipes import contrastive as recipe
from ebm_jax.recipes import contrastive_stages as rc
from ebm_jax.recipes import run_experiment
from ebm_jax.train import CheckpointError, load_stage_params
from ebm_jax.train.stages import RunContext

ROOT = Path(__file__).parents[2]
CONFIGS = ROOT / "experiments" / "contrastive"
FILES = ("moco_linear_eval", "instdisc_linear_eval", "moco_ablation_momentum",
         "moco_ablation_mechanism", "moco_ablation_queue")

# a minute or more on 2 CPU cores: in `make test-heavy` (and CI), not `make test`
pytestmark = pytest.mark.heavy


def tiny(name: str, *overrides: str):
    return load_config(f"{CONFIGS / name}.py:tiny", overrides)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """Runs every tiny config once in one work directory; returns (workdir, {file:
    (report, out)})."""
    root = tmp_path_factory.mktemp("contrastive")
    workdir = root / "runs"
    runs = {}
    for name in FILES:
        out = root / "out" / name
        lines = LOGS.setdefault(name, [])
        report = run_experiment(tiny(name), workdir=workdir, out=out, progress=False,
                                log=lines.append)
        runs[name] = (report, out)
    return workdir, runs


LOGS: dict[str, list[str]] = {}  # the `shared` runs' progress lines, per file


def test_each_run_counts_its_stages(shared):
    """"stage i of n": the last pretraining stage of each run is stage n of n (stages
    the run finds finished, trained by an earlier file, count too)."""
    from ebm_jax.recipes import contrastive

    for name in FILES:
        n = contrastive.count_stages(tiny(name))
        places = [ln.rsplit("[", 1)[1] for ln in LOGS[name] if " steps, " in ln
                  and "[stage " in ln]
        assert len(places) == n and places[-1].startswith(f"stage {n} of {n}"), \
            (name, places)


def _stage_dirs(workdir, name):
    """Stage directories of run `name` (`<name>-<8 hex>`)."""
    return sorted(p for p in workdir.iterdir()
                  if p.name.startswith(name + "-") and len(p.name) == len(name) + 9)


def _accuracies_in_range(rows):
    for r in rows:
        for k in ("linear_accuracy", "few_label_accuracy", "knn5_accuracy",
                  "knn10_accuracy"):
            assert 0.0 <= r[k] <= 1.0, (r["name"], k)


def test_moco_linear_eval_writes_tables_and_figure(shared):
    workdir, runs = shared
    report, out = runs["moco_linear_eval"]
    payload = json.loads((out / "results.json").read_text())
    main = payload["tables"]["main"]
    assert [r["name"] for r in main] == ["random", "pixels", "moco-m0.99-k64", "supervised"]
    assert main[0]["method"] == "random" and main[0]["steps"] == 0
    assert main[1]["method"] == "pixels" and main[1]["steps"] == 0
    _accuracies_in_range(main)
    moco = main[2]
    assert moco["steps"] == 3 and np.isfinite(moco["final_loss"])
    assert moco["images_per_second"] is None or moco["images_per_second"] > 0
    md = (out / "results.md").read_text()
    assert "Linear evaluation" in md and "| moco |" in md and "2 labels/class" in md
    assert "| pixels |" in md and "kNN acc. %, k = 5" in md and "kNN acc. %, k = 10" in md
    assert (out / "moco_features.png").stat().st_size > 1000
    assert payload["ebm_jax"]["config"]["main"] == "moco"
    for stage in ("moco-m0.99-k64", "supervised"):
        (d,) = _stage_dirs(workdir, stage)
        assert (d / "checkpoints").is_dir(), stage
    (lin,) = _stage_dirs(workdir, "moco-m0.99-k64-linear")
    assert (lin / "result.json").is_file() and (lin / "classifier.npz").is_file()


def test_instdisc_linear_eval(shared):
    _, runs = shared
    report, out = runs["instdisc_linear_eval"]
    main = report.tables()["main"]
    assert [r["name"] for r in main] == ["random", "pixels", "instdisc", "supervised"]
    _accuracies_in_range(main)
    assert np.isfinite(main[2]["final_loss"])
    assert (out / "instdisc_features.png").stat().st_size > 1000


def test_ablation_tables(shared):
    _, runs = shared
    momentum, out = runs["moco_ablation_momentum"]
    assert list(momentum.tables()) == ["momentum"]
    assert [r["momentum"] for r in momentum.tables()["momentum"]] == [0.0, 0.99]
    md = (out / "results.md").read_text()
    assert "Momentum ablation" in md and "m = 0 " in md and "paper %" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| m = 0.99 |"))
    assert row.rstrip().endswith("| 57.8 |")
    assert "| fails |" in md and "| random |" in md and "| supervised |" in md
    assert not list(out.glob("*.png"))  # plot="none"

    mechanism, out = runs["moco_ablation_mechanism"]
    assert [r["name"] for r in mechanism.tables()["mechanism"]] == [
        "end-to-end", "memory-bank-k64", "moco-m0.99-k64"]
    md = (out / "results.md").read_text()
    for text in ("Mechanism ablation", "end-to-end (K = 31)", "memory-bank (K = 64)"):
        assert text in md, text

    queue, out = runs["moco_ablation_queue"]
    assert [r["queue_size"] for r in queue.tables()["queue"]] == [32, 64]
    assert "K = 32" in (out / "results.md").read_text()
    for rep in (momentum, mechanism, queue):
        for rows in rep.tables().values():
            _accuracies_in_range(rows)


def test_shared_stages_train_once(shared):
    workdir, runs = shared
    for name in ("random-linear", "supervised", "supervised-linear", "moco-m0.99-k64",
                 "moco-m0.99-k64-linear"):
        assert len(_stage_dirs(workdir, name)) == 1, name
    # the same figures wherever the shared run appears
    sup = [rep.payload["ceiling"]["linear_accuracy"] for rep, _ in runs.values()]
    assert len(set(sup)) == 1
    moco = runs["moco_linear_eval"][0].tables()["main"][2]
    assert runs["moco_ablation_queue"][0].tables()["queue"][1] == moco


def test_rerun_resumes_without_training(shared, tmp_path, monkeypatch):
    workdir, runs = shared
    before, _ = runs["moco_linear_eval"]
    metrics = {p: p.read_text() for p in workdir.glob("*/metrics.jsonl")}
    # a copy of the work directory, spelled relatively from another directory
    moved = tmp_path / "moved"
    shutil.copytree(workdir, moved)
    monkeypatch.chdir(tmp_path)
    names = sorted(p.name for p in moved.iterdir())
    again = run_experiment(tiny("moco_linear_eval", "plot=none"), workdir="moved",
                           progress=False, log=lambda s: None)
    assert again.tables() == before.tables()
    assert sorted(p.name for p in moved.iterdir()) == names  # no new stage
    for p, text in metrics.items():  # nothing trained: no step recorded
        assert (moved / p.parent.name / p.name).read_text() == text, p.parent.name


def test_pixels_are_the_images_themselves(shared):
    workdir, runs = shared
    cfg = tiny("moco_linear_eval")
    ctx = RunContext(workdir, seed=cfg.seed, lock=False, progress=False)
    data = rc.load_data(cfg, ctx)
    f = rc.features_of(rc.RunSpec("pixels"), cfg, data, ctx, data.test_images[:3])
    np.testing.assert_array_equal(f, data.test_images[:3].reshape(3, -1))
    assert not _stage_dirs(workdir, "pixels")  # nothing trained: only its evaluation
    assert len(_stage_dirs(workdir, "pixels-linear")) == 1


def test_seeds_give_mean_sd_and_paired_differences(shared, tmp_path):
    workdir, runs = shared
    single = runs["moco_linear_eval"][0].tables()["main"]
    report = run_experiment(tiny("moco_linear_eval", "plot=none", "seeds=0,1"),
                            workdir=workdir, out=tmp_path / "out", progress=False,
                            log=lambda s: None)
    main = report.tables()["main"]
    for one, two in zip(single, main):
        assert [r["seed"] for r in two["seeds"]] == [0, 1]
        # seed 0 of the two-seed run is the one-seed run (the same stages, reused)
        assert two["seeds"][0]["linear_accuracy"] == one["linear_accuracy"]
        accs = [r["linear_accuracy"] for r in two["seeds"]]
        assert two["linear_accuracy"] == pytest.approx(np.mean(accs))
        assert two["sd"]["linear_accuracy"] == pytest.approx(np.std(accs, ddof=1))
    assert len(_stage_dirs(workdir, "moco-m0.99-k64")) == 2  # one per seed
    diffs = {d["name"]: d for d in report.payload["differences"]}
    assert set(diffs) == {"pixels", "moco-m0.99-k64", "supervised"}
    d = diffs["moco-m0.99-k64"]["linear_accuracy"]
    per = [a["linear_accuracy"] - b["linear_accuracy"]
           for a, b in zip(main[2]["seeds"], main[0]["seeds"])]
    assert d["mean"] == pytest.approx(np.mean(per)) and d["n"] == 2
    assert d["se"] == pytest.approx(np.std(per, ddof=1) / np.sqrt(2))
    md = (tmp_path / "out" / "results.md").read_text()
    assert "mean +- sd over seeds 0, 1" in md and "Paired difference from random" in md
    assert " +- " in next(ln for ln in md.splitlines() if ln.startswith("| moco |"))
    with pytest.raises(ConfigError, match="--config.seeds must be distinct integers"):
        tiny("moco_linear_eval", "seeds=1,1")


def test_validation_split_is_held_out_of_training(shared, tmp_path):
    workdir, runs = shared
    test = runs["moco_linear_eval"][0].payload
    cfg = tiny("moco_linear_eval", "plot=none", "eval_split=val")
    report = run_experiment(cfg, workdir=tmp_path / "runs", progress=False,
                            log=lambda s: None)
    assert report.payload["eval_split"] == "val" and "(val)" in report.payload["data"]
    assert test["eval_split"] == "test" and "(val)" not in test["data"]
    # the scored images are training images of the test-split run, never test ones
    ctx = RunContext(workdir, seed=cfg.seed, lock=False, progress=False)
    val = rc.load_data(cfg, ctx)
    full = rc.load_data(tiny("moco_linear_eval"), ctx)
    train_rows = {r.tobytes() for r in image_data.load_image_data(
        "digits", 8, seed=ctx.seed_of("data", "split")).train_images}
    assert all(r.tobytes() in train_rows for r in val.test_images)
    assert not {r.tobytes() for r in val.test_images} & {r.tobytes()
                                                        for r in full.test_images}
    with pytest.raises(ConfigError, match="--config.eval_split must be one of"):
        tiny("moco_linear_eval", "eval_split=train")


def test_checkpoint_of_another_architecture_is_refused(shared):
    workdir, _ = shared
    cfg = tiny("instdisc_linear_eval")
    ctx = RunContext(workdir, seed=cfg.seed, lock=False, progress=False)
    data = rc.load_data(cfg, ctx)
    spec = rc.default_spec("instdisc", cfg)
    assert rc.load_encoder(spec, cfg, data, ctx).width == 4
    wider = dataclasses.replace(cfg, width=8)
    from flax import nnx

    built = rc.build_model(spec, wider, data, ctx)
    _, params, _ = nnx.split(built.model, built.trainable, ...)
    stage = rc.pretrain_stage(spec, cfg, data, ctx).dir(ctx).name
    with pytest.raises(CheckpointError, match="shape"):
        load_stage_params(workdir, stage, params)


# --------------------------------------------------------------------------- bad input


def _refused(tmp_path, cfg, match, **kw):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=match):
        run_experiment(cfg, workdir=tmp_path / "runs", out=out, progress=False,
                       log=lambda s: None, **kw)
    assert not out.exists()
    return tmp_path / "runs"


def test_data_root_must_be_a_directory(tmp_path):
    a_file = tmp_path / "cifar.tar"
    a_file.write_text("not a folder")
    _refused(tmp_path, tiny("moco_linear_eval", "data=cifar10", f"data_root={a_file}"),
             r"--config.data_root must be a directory, got the file .*cifar.tar")
    _refused(tmp_path, tiny("moco_linear_eval", "data=cifar10",
                            f"data_root={tmp_path / 'nowhere'}"),
             r"--config.data_root .*nowhere does not exist")
    _refused(tmp_path, tiny("moco_linear_eval", "data=cifar10"),
             r"--config.data=cifar10 needs --config.data_root")


def test_queue_size_must_be_a_multiple_of_the_batch(tmp_path):
    _refused(tmp_path, tiny("moco_linear_eval", "queue_size=48"),
             r"moco-m0.99-k48: queue size K must be divisible by the batch size 32, "
             r"got 48")
    _refused(tmp_path, tiny("moco_ablation_queue", "queue_values=16,64"),
             r"queue size K must be >= the batch size 32, got 16")


def test_batch_must_divide_over_devices_and_splits(tmp_path):
    _refused(tmp_path, tiny("moco_linear_eval"),
             r"--config.batch_size 32 must be divisible by --devices 3", devices=3)
    _refused(tmp_path, tiny("moco_linear_eval", "num_splits=5"),
             r"divisible by --config.num_splits 5")


def test_sizes_beyond_memory_are_refused_before_loading_data(tmp_path, monkeypatch):
    def no_data(*a, **k):
        raise AssertionError("data loaded before the memory check")

    # the recipe imported load_data by name: patch it there (imported above, so that a
    # first import inside this test cannot bind the stand-in for later tests)
    monkeypatch.setattr(rc, "load_data", no_data)
    monkeypatch.setattr(recipe, "load_data", no_data)
    _refused(tmp_path, tiny("moco_linear_eval", f"queue_size={32 * 2**34}"),
             r"the queue of moco-m0.99-k549755813888 \(K 549755813888 x dim 8\) needs "
             r"about .* GiB, more than")
    _refused(tmp_path, tiny("instdisc_linear_eval", f"dim={2**34}"),
             r"the memory bank of instdisc \(96 training images x dim 17179869184\)")
    _refused(tmp_path, tiny("instdisc_linear_eval", "batch_size=2147483648"),
             r"the activations of a batch of 2147483648")


def test_bad_settings_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"--config.tables must be a non-empty list "
                       r"drawn from \['main', 'momentum', 'mechanism', 'queue'\]"):
        tiny("moco_linear_eval", "tables=main,speed")
    with pytest.raises(ConfigError, match=r"--config.momentum must be a number in"):
        tiny("moco_linear_eval", "momentum=1.5")
    with pytest.raises(ConfigError, match=r"--config.temperature must be a finite"):
        tiny("moco_linear_eval", "temperature=0")
    with pytest.raises(ConfigError, match=r"--config.momentum_values must be numbers"):
        tiny("moco_ablation_momentum", "momentum_values=0.9,2")
    with pytest.raises(ConfigError, match=r"--config.main must be one of"):
        tiny("moco_linear_eval", "main=simclr")
    _refused(tmp_path, tiny("moco_linear_eval", "few_labels=50"),
             r"--config.few_labels 50 exceeds the \d+ training images of class")


def test_knn_k_beyond_the_training_images_is_refused_before_training(tmp_path):
    """k = 5000 with 96 training images was clamped to 96 and reported as k = 5000."""
    runs = _refused(tmp_path, tiny("moco_linear_eval", "knn_ks=5,5000"),
                    r"--config.knn_ks must be integers in \[1, 96\] \(the 96 training "
                    r"images .*\), got \[5, 5000\]")
    assert not any(runs.rglob("checkpoints")), "trained before refusing"


def test_cli_prints_one_line(tmp_path, capsys):
    from ebm_jax.cli import main

    code = main(["run", f"{CONFIGS / 'moco_linear_eval.py'}:tiny", "--config.queue_size=48",
                 "--workdir", str(tmp_path / "w"), "--out", str(tmp_path / "o"),
                 "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert "queue size K must be divisible by the batch size 32" in err
    assert "Traceback" not in err and not (tmp_path / "o").exists()


@pytest.mark.slow
def test_moco_shuffles_batch_norm_across_two_devices(tmp_path):
    """With 2 devices MoCo runs its loss per device (shuffled BN across devices) and
    the run trains, checkpoints and evaluates like the one-device run."""
    report = run_experiment(tiny("moco_linear_eval", "plot=none"), workdir=tmp_path,
                            devices=2, progress=False, log=lambda s: None)
    moco = report.tables()["main"][1]
    assert np.isfinite(moco["final_loss"]) and 0.0 <= moco["linear_accuracy"] <= 1.0
    (d,) = _stage_dirs(tmp_path, "moco-m0.99-k64")
    assert os.path.isdir(d / "checkpoints")
