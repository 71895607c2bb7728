"""The detection recipe end to end: the tiny Table 2, Figure 3/4, Figure 5 and Table 3
configs through `run_experiment` in one shared work directory (the backbone and the
common heads are trained once), resume after moving the work directory, the COCO-layout
path, and every bad input refused before training with its message."""

import json
import shutil
from pathlib import Path

import jax
import pytest

from ebm_jax.config import ConfigError, load_config
from ebm_jax.recipes import run_experiment
from ebm_jax.recipes.detection import head_spec, plan
from tests.data.coco_files import write_coco

# a minute or more on 2 CPU cores: in `make test-heavy` (and CI), not `make test`
pytestmark = pytest.mark.heavy

ROOT = Path(__file__).parents[2]
EXP = ROOT / "experiments/ebm_regression"
CONFIGS = {"table2": EXP / "table2_detection.py", "figure3": EXP / "figure3_detection_m.py",
           "figure5": EXP / "figure5_detection_beta.py",
           "table3": EXP / "table3_detection_sigma.py"}


def _run(spec, workdir, out=None, overrides=(), log=lambda s: None, **kw):
    cfg = load_config(str(spec), list(overrides))
    return run_experiment(cfg, workdir=workdir, out=out, progress=False, log=log, **kw)


LOGS: dict[str, list[str]] = {}  # the `runs` fixture's progress lines, per config


def _tables(out):
    return json.loads((Path(out) / "results.json").read_text())["tables"]


def _stages(workdir):
    return sorted(p.name.rsplit("-", 1)[0] for p in Path(workdir).iterdir()
                  if p.name not in ("data", ".lock"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The four tiny configs in one work directory (Table 2 on 2 devices)."""
    tmp = tmp_path_factory.mktemp("det")
    for name, path in CONFIGS.items():
        _run(f"{path}:tiny", tmp / "runs", tmp / name,
             devices=2 if name == "table2" else 1, log=LOGS.setdefault(name, []).append)
    return tmp


def test_each_run_counts_its_stages(runs):
    """"stage i of n": per seed the backbone and each distinct head; the last stage of
    each run is stage n of n (stages an earlier config trained count too)."""
    from ebm_jax.recipes import detection

    for name, path in CONFIGS.items():
        n = detection.count_stages(load_config(f"{path}:tiny"))
        places = [ln.rsplit("[", 1)[1] for ln in LOGS[name] if " steps, " in ln
                  and "[stage " in ln]
        assert len(places) == n and places[-1].startswith(f"stage {n} of {n}"), \
            (name, places)


@pytest.fixture
def no_training(monkeypatch):
    """Fails the test if a training step or an evaluation runs."""
    from ebm_jax.eval import coco
    from ebm_jax.train.step import TrainStep

    def refuse(*a, **k):
        raise AssertionError("a stage was retrained or re-evaluated")

    monkeypatch.setattr(TrainStep, "__call__", refuse)
    monkeypatch.setattr(coco, "evaluate_refinement", refuse)


def _check_row(r):
    assert r["finite"] and r["steps"] == 2 and r["final_loss"] is not None
    assert set(r["initial"]) == {"AP", "AP50", "AP75"}
    for which in ("initial", "nms", "refined"):
        assert 0.0 <= r[which]["AP"] <= 1.0
    assert r["num_boxes"] >= 1


def test_table2_tiny_end_to_end(runs):
    assert jax.device_count() >= 2
    rows = _tables(runs / "table2")["table2"]
    assert [(r["method"], r["num_samples"]) for r in rows] == [("nce", 4), ("nce+", 4)]
    for r in rows:
        _check_row(r)
    assert rows[1]["hyperparameters"] == {"sigmas": [0.075, 0.15, 0.3], "beta": 0.1}
    md = (runs / "table2" / "results.md").read_text()
    assert "## Table 2" in md and "| NCE | 4 |" in md and "39.5 / 58.6 / 42.4" in md
    assert (runs / "table2" / "table2_methods.png").stat().st_size > 0
    payload = json.loads((runs / "table2" / "results.json").read_text())
    assert payload["data"]["data"] == "generated" and payload["data"]["num_train"] == 8
    assert str(runs) not in json.dumps(payload["data"]["identity"])  # no path in it
    assert payload["reference"]["table2"][0] == ["ml-is", 39.4, 58.6, 42.1]
    assert payload["ebm_jax"]["config"]["methods"] == ["nce", "nce+"]


def test_figure_configs_end_to_end(runs):
    rows = _tables(runs / "figure3")["m"]
    assert [(r["method"], r["num_samples"]) for r in rows] == [("nce", 2), ("nce", 4)]
    assert "M=2" in (runs / "figure3" / "results.md").read_text()
    assert (runs / "figure3" / "figure3_4_m.png").stat().st_size > 0
    rows = _tables(runs / "figure5")["beta"]
    assert [(r["method"], r["hyperparameters"].get("beta")) for r in rows] == [
        ("nce", None), ("nce+", 0.1)]
    assert (runs / "figure5" / "figure5_beta.png").stat().st_size > 0
    rows = _tables(runs / "table3")["sigma"]
    assert [r["hyperparameters"]["sigmas"] for r in rows] == [[0.075, 0.15, 0.3],
                                                              [0.15, 0.3, 0.6]]
    md = (runs / "table3" / "results.md").read_text()
    assert "| 0.075, 0.15, 0.3 |" in md and "39.17 |" in md  # the paper's AP of that set
    assert (runs / "table3" / "table3_sigmas.png").stat().st_size > 0
    for name in CONFIGS:
        for rows in _tables(runs / name).values():
            for r in rows:
                _check_row(r)


def test_figures_share_the_backbone_and_the_common_heads(runs):
    assert _stages(runs / "runs") == sorted([
        "backbone", "head-nce-m4", "head-nce+-m4", "head-nce-m2",
        "head-nce-m4-sigmas0.15_0.3_0.6"])
    # head-nce-m4 is one stage in four tables: trained once, the same row everywhere
    rows = [r for name in CONFIGS for rs in _tables(runs / name).values() for r in rs
            if r["stage"] == "head-nce-m4"]
    assert len(rows) == 4 and all(r == rows[0] for r in rows)


def test_rerun_after_moving_the_workdir_resumes_without_retraining(runs, no_training,
                                                                   monkeypatch):
    moved = runs / "elsewhere" / "moved"
    shutil.copytree(runs / "runs", moved)
    monkeypatch.chdir(runs / "elsewhere")  # a relative path, from another directory
    _run(f"{CONFIGS['table2']}:tiny", "moved", runs / "again")
    assert _tables(runs / "again") == _tables(runs / "table2")
    assert _stages(moved) == _stages(runs / "runs")  # no new stage
    # and in place, spelled as an absolute path, on one device
    _run(f"{CONFIGS['figure5']}:tiny", (runs / "runs").resolve(), runs / "figure5")
    assert _tables(runs / "figure5")["beta"][0]["stage"] == "head-nce-m4"


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    """A COCO-layout folder (annotations/instances_<split>.json, <split>/ images) and
    the detector's results on val in a file."""
    return write_coco(tmp_path_factory.mktemp("coco"), train=6, val=3, image_size=64)


def _coco_overrides(root, dets, **more):
    return [f"{k}={v}" for k, v in {"data": "coco", "coco_root": root, "detections": dets,
                                     "methods": "nce", **more}.items()]


def test_coco_layout_runs_and_resumes_after_moving_it(coco, tmp_path, monkeypatch):
    spec = f"{CONFIGS['table2']}:tiny"
    over = _coco_overrides(coco / "coco", coco / "dets.json")
    _run(spec, tmp_path / "runs", tmp_path / "out", over)
    payload = json.loads((tmp_path / "out" / "results.json").read_text())
    assert payload["data"]["data"] == "coco"
    assert payload["data"]["num_train"] == 6 and payload["data"]["num_val"] == 3
    (row,) = payload["tables"]["table2"]
    _check_row(row)
    assert str(coco) not in json.dumps(payload["data"]["identity"])
    # the same files elsewhere are the same data: nothing is retrained
    shutil.copytree(coco / "coco", tmp_path / "copy")
    shutil.copy(coco / "dets.json", tmp_path / "d.json")
    from ebm_jax.train.step import TrainStep

    monkeypatch.setattr(TrainStep, "__call__", lambda *a: pytest.fail("retrained"))
    _run(spec, tmp_path / "runs", tmp_path / "out2",
         _coco_overrides(tmp_path / "copy", tmp_path / "d.json"))
    assert _tables(tmp_path / "out2") == payload["tables"]


def _coco_copy(coco, tmp_path):
    root = tmp_path / "coco"
    shutil.copytree(coco / "coco", root)
    shutil.copy(coco / "dets.json", tmp_path / "dets.json")
    return root, tmp_path / "dets.json"


@pytest.mark.parametrize("case, message", [
    ("annotations", r"COCO annotation file .*instances_train2017.json is not valid JSON"),
    ("detections", r"detections file .*dets.json is not valid JSON"),
    ("category", r"detections file .*dets.json: detections\[0\]: category_id 99 is not"),
    ("image", r"image .*train2017/000002.png \(image id 3 of .*instances_train2017.json\) "
              "cannot be read"),
    ("post-nms", r"--config.detections .*dets.json: only 0.0% of its \d+ boxes overlap .*"
                 r"look like boxes after NMS.*--config.guided_nms=false"),
])
def test_corrupt_coco_inputs_are_named_before_training(coco, tmp_path, case, message):
    root, dets = _coco_copy(coco, tmp_path)
    if case == "annotations":
        ann = root / "annotations" / "instances_train2017.json"
        ann.write_text(ann.read_text()[:-10])
    elif case == "detections":
        dets.write_text(dets.read_text()[:-3])
    elif case == "category":
        d = json.loads(dets.read_text())
        dets.write_text(json.dumps([{**d[0], "category_id": 99}] + d[1:]))
    elif case == "post-nms":  # one box per image and class: what NMS leaves
        d = json.loads(dets.read_text())
        dets.write_text(json.dumps(list({(e["image_id"], e["category_id"]): e
                                         for e in d}.values())))
    else:
        (root / "train2017" / "000002.png").write_bytes(b"\x89PNG truncated")
    with pytest.raises(ValueError, match=message):
        _run(f"{CONFIGS['table2']}:tiny", tmp_path / "runs",
             overrides=_coco_overrides(root, dets))
    assert _stages(tmp_path / "runs") == []  # nothing was trained


def test_post_nms_detections_run_without_guided_nms(coco, tmp_path):
    root, dets = _coco_copy(coco, tmp_path)
    d = json.loads(dets.read_text())
    dets.write_text(json.dumps(list({(e["image_id"], e["category_id"]): e
                                     for e in d}.values())))
    _run(f"{CONFIGS['table2']}:tiny", tmp_path / "runs", tmp_path / "out",
         _coco_overrides(root, dets, guided_nms="false"))
    payload = json.loads((tmp_path / "out" / "results.json").read_text())
    assert payload["data"]["guided_nms"] is False
    (row,) = payload["tables"]["table2"]
    assert row["nms"] == row["initial"]  # no NMS: the boxes as they came
    assert "no guided NMS" in (tmp_path / "out" / "results.md").read_text()


def test_seeds_give_mean_sd_and_paired_gains(runs, tmp_path):
    out = tmp_path / "seeds"
    _run(f"{CONFIGS['table2']}:tiny", runs / "runs", out, ["seeds=0,1"])
    payload = json.loads(out.joinpath("results.json").read_text())
    one = {r["method"]: r for r in _tables(runs / "table2")["table2"]}
    for r in payload["tables"]["table2"]:
        assert [p["seed"] for p in r["per_seed"]] == [0, 1]
        # seed 0 is the one-seed run's head and evaluation, reused
        assert r["per_seed"][0]["refined"] == one[r["method"]]["refined"]
        aps = [p["refined"]["AP"] for p in r["per_seed"]]
        assert r["refined"]["AP"] == pytest.approx(sum(aps) / 2)
        gains = [p["refined"]["AP"] - p["initial"]["AP"] for p in r["per_seed"]]
        assert r["gain"]["mean"] == pytest.approx(sum(gains) / 2) and r["gain"]["n"] == 2
        steps = [p["refined"]["AP"] - p["nms"]["AP"] for p in r["per_seed"]]
        assert r["refine_gain"]["mean"] == pytest.approx(sum(steps) / 2)
    ids = payload["data"]["identities"]
    assert ids[0]["val"] != ids[1]["val"]  # each seed its own data
    md = out.joinpath("results.md").read_text()
    assert "mean +- sd over seeds 0, 1" in md and "Refined AP minus NCE's" in md
    assert "AP - after NMS (refinement), mean +- se" in md
    assert "| NCE+ | " in md and " +- " in md
    with pytest.raises(ConfigError, match="--config.seeds must be distinct integers"):
        load_config(f"{CONFIGS['table2']}:tiny", ["seeds=2,2"])


def test_held_out_test_split_is_scored_apart_from_val(runs, tmp_path):
    out = tmp_path / "test"
    _run(f"{CONFIGS['table2']}:tiny", runs / "runs", out, ["eval_split=test", "num_test=3"])
    payload = json.loads(out.joinpath("results.json").read_text())
    val = json.loads((runs / "table2" / "results.json").read_text())
    assert payload["data"]["eval_split"] == "test" and payload["data"]["num_val"] == 3
    ident, val_ident = payload["data"]["identity"], val["data"]["identity"]
    assert ident["train"] == val_ident["train"]  # the same training data and backbone
    assert ident["val"]["generated"]["split"] == "test"
    assert ident["val"]["generated"]["seed"] != val_ident["val"]["generated"]["seed"]
    assert ident["detections"] != val_ident["detections"]
    assert payload["backbone"] == val["backbone"]
    with pytest.raises(ConfigError, match="--config.eval_split=test with --config.data=coco "
                       "needs --config.test_split"):
        load_config(f"{CONFIGS['table2']}:tiny", ["data=coco", "eval_split=test"])


def test_bad_settings_are_refused_before_anything_runs(coco, tmp_path):
    tiny = f"{CONFIGS['table2']}:tiny"
    work = tmp_path / "runs"
    with pytest.raises(ConfigError, match="--config.methods: method must be one of"):
        load_config(tiny, ["methods=nce,sm"])
    with pytest.raises(ConfigError, match="--config.step_scale must be a finite number > 0"):
        load_config(tiny, ["step_scale=-1"])
    with pytest.raises(ConfigError, match="need --config.data=coco"):
        load_config(tiny, [f"detections={coco / 'dets.json'}"])
    with pytest.raises(ConfigError, match="--config.image_size must be a multiple of"):
        load_config(tiny, ["image_size=66"])
    with pytest.raises(ValueError, match="--config.coco_root is needed"):
        _run(tiny, work, overrides=["data=coco"])
    with pytest.raises(ValueError, match=r"--config.coco_root .*none does not exist"):
        _run(tiny, work, overrides=_coco_overrides(tmp_path / "none", coco / "dets.json"))
    with pytest.raises(ValueError, match=r"--config.detections .*d.json does not exist"):
        _run(tiny, work, overrides=_coco_overrides(coco / "coco", tmp_path / "d.json"))
    with pytest.raises(ValueError, match=r"--config.data_root .*gen does not exist"):
        _run(tiny, work, overrides=[f"data_root={tmp_path / 'gen'}"])
    with pytest.raises(ValueError, match="--devices 3 must divide --config.boxes_per_batch"):
        _run(tiny, work, devices=3)
    with pytest.raises(ValueError, match=r"a head batch .* needs about .* GiB"):
        _run(tiny, work, overrides=["num_samples=100000000"])
    assert _stages(work) == []


def test_paper_variant_is_the_papers_head_schedule_and_methods(tmp_path):
    cfg = load_config(f"{CONFIGS['table2']}:paper")
    assert (cfg.hidden, cfg.pool_size, cfg.channels, cfg.head_steps) == (1024, 7, 256, 60000)
    assert (cfg.learning_rate, cfg.boxes_per_batch, cfg.grad_clip) == (1e-3, 128, None)
    assert cfg.num_samples == 128 and cfg.refine_steps == 10 and cfg.data == "coco"
    assert len(plan(cfg)["table2"]) == 8
    with pytest.raises(ValueError, match="--config.coco_root is needed"):
        run_experiment(cfg, workdir=tmp_path, progress=False)
    for name, path in CONFIGS.items():
        doc = path.read_text().split('"""')[1]
        assert doc.splitlines()[0] == (f"ebm-jax run experiments/ebm_regression/"
                                       f"{path.name}:quick")
        for variant in ("quick", "tiny", "paper"):
            load_config(f"{path}:{variant}")


def test_head_stage_names_drop_the_configs_values():
    cfg = load_config(f"{CONFIGS['figure5']}:quick")
    assert head_spec(cfg, "nce+", 128, beta=0.1) == head_spec(cfg, "nce+", 128)
    assert head_spec(cfg, "nce+", 128).name == "head-nce+-m128"
    assert head_spec(cfg, "nce+", 8, beta=0.3).name == "head-nce+-m8-beta0.3"
    assert (head_spec(cfg, "nce", 128, sigmas=[0.05, 0.1, 0.2]).name
            == "head-nce-m128-sigmas0.05_0.1_0.2")
    assert head_spec(cfg, "ml-mcmc-4", 128).hp == {"step_size": 1e-5, "num_steps": 4}
    with pytest.raises(ValueError, match="nce has no hyperparameter"):
        head_spec(cfg, "nce", 128, beta=0.2)
    assert [s.name for s in plan(cfg)["beta"]][:3] == [
        "head-nce-m128", "head-nce+-m128-beta0.025", "head-nce+-m128-beta0.05"]
