"""The detection experiment: backbone, COCO-format loading with letterboxing, the head
schedule, prediction round trips and a smoke run of `ebm-jax detection`."""

import json

import jax
import numpy as np
import pytest
from flax import nnx
from PIL import Image

from ebm_jax.cli import main
from ebm_jax.data.detection import load_detection_set
from ebm_jax.experiments import detection as d
from ebm_jax.models.fpn import DenseBoxModel, FeaturePyramid, dense_loss, dense_targets


def test_feature_pyramid_levels_and_errors():
    fpn = FeaturePyramid(widths=(8, 16, 16), channels=8, rngs=nnx.Rngs(0))
    levels = fpn(np.zeros((2, 64, 32, 3), np.float32))
    assert fpn.strides == (4, 8, 16)
    assert [lv.shape for lv in levels] == [(2, 16, 8, 8), (2, 8, 4, 8), (2, 4, 2, 8)]
    with pytest.raises(ValueError, match="multiples of the top stride 16"):
        fpn(np.zeros((1, 40, 32, 3), np.float32))
    with pytest.raises(ValueError, match=r"shape \(N, H, W, 3\)"):
        fpn(np.zeros((1, 64, 64, 1), np.float32))


def test_dense_targets_hand_case_and_loss_is_finite():
    boxes = np.array([[0, 0, 16, 16], [4, 4, 12, 12]], np.float32)
    cls, dist = dense_targets(boxes, np.array([1, 2]), np.array([True, True]), 16, 16, 4)
    # the inner box is smaller, so it owns the centre positions (cells 1 and 2)
    assert cls.tolist() == [[1, 1, 1, 1], [1, 2, 2, 1], [1, 2, 2, 1], [1, 1, 1, 1]]
    # cell (0, 0) has centre (2, 2): sides 2, 2, 14, 14 of the big box, in strides
    np.testing.assert_allclose(dist[0, 0], np.log(np.array([2, 2, 14, 14]) / 4), rtol=1e-6)
    np.testing.assert_allclose(dist[1, 1], np.log(np.array([2, 2, 6, 6]) / 4), rtol=1e-6)
    model = DenseBoxModel(FeaturePyramid(widths=(8,), channels=8, rngs=nnx.Rngs(0)), 2,
                          rngs=nnx.Rngs(1))
    loss, metrics = dense_loss(model, (np.zeros((1, 16, 16, 3), np.float32),
                                       ((cls[None], dist[None]),)))
    assert np.isfinite(float(loss)) and set(metrics) == {"ce_0", "l1_0"}


def test_head_schedule_warms_up_and_steps():
    p = d.Profile("t", head_steps=60, learning_rate=0.3, warmup_steps=6)
    lr = d.lr_schedule(p)
    np.testing.assert_allclose(float(lr(0)), 0.1, rtol=1e-6)
    np.testing.assert_allclose(float(lr(3)), 0.2, rtol=1e-6)
    np.testing.assert_allclose(float(lr(6)), 0.3, rtol=1e-6)
    np.testing.assert_allclose(float(lr(39)), 0.3, rtol=1e-6)
    np.testing.assert_allclose(float(lr(41)), 0.03, rtol=1e-5)
    np.testing.assert_allclose(float(lr(51)), 0.003, rtol=1e-5)


def test_paper_profile_is_the_papers_head_and_schedule():
    p = d.PROFILES["paper"]
    lr = d.lr_schedule(p)
    np.testing.assert_allclose([float(lr(s)) for s in (0, 500, 39999, 40000, 50000)],
                               [1e-3 / 3, 1e-3, 1e-3, 1e-4, 1e-5], rtol=1e-5)
    head = d.build_head(p, 80, (4, 8, 16, 32))
    assert head.fc1.kernel.shape == (7 * 7 * 256, 1024)
    assert head.out.kernel.shape == (1024, 81) and p.grad_clip is None
    assert p.num_samples == 128 and p.refine_steps == 10


def test_head_spec_names_drop_paper_values():
    assert d.HeadSpec.make("nce+", 128, beta=0.1) == d.HeadSpec.make("nce+", 128)
    assert d.HeadSpec.make("nce+", 128).name == "head-nce+-m128"
    assert d.HeadSpec.make("nce+", 8, beta=0.3).name == "head-nce+-m8-beta0.3"
    assert (d.HeadSpec.make("nce", 128, sigmas=[0.05, 0.1, 0.2]).name
            == "head-nce-m128-sigmas0.05_0.1_0.2")
    with pytest.raises(ValueError, match="nce has no hyperparameter"):
        d.HeadSpec.make("nce", 128, beta=0.2)
    with pytest.raises(ValueError, match="method must be one of"):
        d.HeadSpec.make("sm", 128)


def _coco(tmp_path, annotations, sizes=((40, 20),)):
    (tmp_path / "img").mkdir()
    images = []
    for i, (w, h) in enumerate(sizes, 1):
        Image.fromarray(np.full((h, w, 3), 255, np.uint8)).save(
            tmp_path / "img" / f"{i}.png")
        images.append({"id": i, "file_name": f"{i}.png", "width": w, "height": h})
    path = tmp_path / "ann.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations,
                                "categories": [{"id": 3, "name": "a"},
                                               {"id": 7, "name": "b"}]}))
    return path


def test_letterboxed_coco_set(tmp_path):
    anns = [{"id": 1, "image_id": 1, "category_id": 7, "bbox": [4, 2, 10, 8], "iscrowd": 0},
            {"id": 2, "image_id": 1, "category_id": 3, "bbox": [0, 0, 5, 5], "iscrowd": 1}]
    path = _coco(tmp_path, anns, sizes=((40, 20), (16, 32)))
    ds = load_detection_set(path, tmp_path / "img", image_size=80)
    np.testing.assert_allclose(ds.scales, [2.0, 2.5])
    assert ds.num_classes == 2 and ds.category_ids == [3, 7]
    # the crowd box is left out; image 2 has no box (a documented skip in training)
    assert ds.valid.tolist() == [[True], [False]]
    np.testing.assert_allclose(ds.boxes[0, 0], [8, 4, 28, 20])
    assert ds.classes[0, 0] == 2
    imgs = ds.images([0, 1])
    assert imgs.shape == (2, 80, 80, 3)
    assert imgs[0, :40].min() == 1.0 and imgs[0, 40:].max() == 0.0  # padded below
    assert imgs[1, :, :40].min() == 1.0 and imgs[1, :, 40:].max() == 0.0  # at the right


def test_a_set_without_boxes_is_an_error_before_training(tmp_path):
    path = _coco(tmp_path, [])
    ds = load_detection_set(path, tmp_path / "img", image_size=64)
    assert not ds.valid.any()
    with pytest.raises(ValueError, match="no image has a .* box to train on"):
        d._box_index(ds)


@pytest.mark.parametrize("bbox, message", [([1, 1, 0, 3], "width or height <= 0"),
                                           ([1, float("nan"), 2, 3], "4 finite numbers")])
def test_bad_annotation_names_its_id(tmp_path, bbox, message):
    anns = [{"id": 42, "image_id": 1, "category_id": 3, "bbox": bbox, "iscrowd": 0}]
    path = _coco(tmp_path, anns)
    with pytest.raises(ValueError, match=f"annotation 42: .*{message}"):
        load_detection_set(path, tmp_path / "img", image_size=64)


def test_features_without_the_cache_equal_the_cached_ones(tmp_path):
    anns = [{"id": 1, "image_id": 1, "category_id": 7, "bbox": [4, 2, 10, 8], "iscrowd": 0}]
    path = _coco(tmp_path, anns, sizes=((40, 20), (16, 32), (30, 30)))
    ds = load_detection_set(path, tmp_path / "img", image_size=32)
    backbone = FeaturePyramid(widths=(4, 8), channels=4, rngs=nnx.Rngs(0))
    cached = d.FeatureSource(backbone, ds, batch=2)
    direct = d.FeatureSource(backbone, ds, batch=2, cache_bytes=0)
    assert cached.cache is not None and direct.cache is None
    for a, b in zip(cached.levels([2, 0, 2]), direct.levels([2, 0, 2])):
        assert a.shape == b.shape == (3,) + a.shape[1:]
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_refine_detections_maps_boxes_back_to_image_pixels(tmp_path):
    anns = [{"id": 1, "image_id": 1, "category_id": 7, "bbox": [4, 2, 10, 8], "iscrowd": 0}]
    path = _coco(tmp_path, anns, sizes=((40, 20),))
    ds = load_detection_set(path, tmp_path / "img", image_size=64, preload=True)
    profile = d.PROFILES["tiny"]
    backbone = FeaturePyramid(widths=profile.widths, channels=profile.channels,
                              rngs=nnx.Rngs(0))
    feats = d.FeatureSource(backbone, ds)
    head = d.build_head(profile, ds.num_classes, backbone.strides)
    dets = [{"image_id": 1, "category_id": 7, "bbox": [5.0, 3.0, 9.0, 7.0], "score": 0.9},
            {"image_id": 1, "category_id": 3, "bbox": [20.0, 5.0, 6.0, 9.0], "score": 0.5},
            {"image_id": 1, "category_id": 3, "bbox": [1.0, 1.0, 3.0, 3.0], "score": 0.01}]
    out = d.refine_detections(head, "nce+", ds, feats, dets, profile)
    assert len(out["initial"]) == 2  # the box below the score threshold is dropped
    for got, want in zip(out["initial"], dets[:2]):
        np.testing.assert_allclose(got["bbox"], want["bbox"], rtol=1e-5)
        assert got["category_id"] == want["category_id"]
    assert len(out["nms"]) == len(out["refined"]) == 2
    for r in out["refined"]:
        assert np.all(np.isfinite(r["bbox"])) and r["bbox"][2] > 0 and r["bbox"][3] > 0


def test_detection_smoke_run_writes_tables_and_resumes(tmp_path):
    out, runs = tmp_path / "out", tmp_path / "runs"
    argv = ["detection", "--profile", "tiny", "--methods", "nce", "ml-is", "--sweep-m",
            "--m-values", "4", "--out", str(out), "--run-dir", str(runs), "--no-progress",
            "--devices", "2"]
    assert main(argv) == 0
    md = (out / "detection.md").read_text()
    assert "## Table 2" in md and "| NCE | 4 |" in md and "Figure 3" in md
    payload = json.loads((out / "detection.json").read_text())
    rows = payload["tables"]["table2"]
    assert [r["method"] for r in rows] == ["nce", "ml-is"]
    for r in rows:
        assert r["finite"] and 0.0 <= r["refined"]["AP"] <= 1.0
        assert set(r["initial"]) == {"AP", "AP50", "AP75"}
    assert (out / "detection_sweep_m.png").stat().st_size > 0
    assert (runs / "backbone").is_dir() and (runs / "head-nce-m4" / "eval.json").is_file()
    # a rerun resumes every stage and reuses the evaluations
    mtime = (runs / "head-nce-m4" / "eval.json").stat().st_mtime
    assert main(argv) == 0
    assert (runs / "head-nce-m4" / "eval.json").stat().st_mtime == mtime
    again = json.loads((out / "detection.json").read_text())
    assert again["tables"]["table2"] == rows


def _row(method, m=128, ap=0.5, **extra):
    res = {"AP": ap, "AP50": 0.9, "AP75": 0.4}
    return {"stage": "x", "method": method, "num_samples": m, "finite": True,
            "seconds_per_iteration": 0.1, "initial": {**res, "AP": 0.4}, "nms": res,
            "refined": res, **extra}


def test_report_and_plots_of_the_sweeps(tmp_path):
    tables = {
        "sweep_beta": [_row("nce", ap=0.5)] + [_row("nce+", ap=0.5 + b, beta=b)
                                               for b in d.BETAS],
        "sweep_sigma": [_row("nce", ap=0.4, sigmas=list(s)) for s in d.SIGMA_SETS],
        "sweep_m": [_row(x, m) for x in d.SWEEP_M_METHODS for m in (1, 2)]
        + [{**_row("ml-is", 4), "finite": False}],
    }
    meta = {"profile": {**d.PROFILES["quick"].__dict__}, "data": {
        "name": "gen", "num_train": 1, "num_val": 1, "image_size": 64},
        "wall_seconds": 1.0, "devices": ["cpu"], "jax": jax.__version__}
    md = d.report_markdown(tables, meta)
    assert "| NCE+ | 0.5 | 100.0 |" in md
    assert "| 0.0125, 0.025, 0.05 | 40.0 | 90.0 | 40.0 | 38.58 |" in md
    assert "NaN" in md  # a run whose loss was not finite
    written = d.plot_tables(tables, tmp_path)
    assert sorted(written.values()) == ["detection_sweep_beta.png", "detection_sweep_m.png"]
    assert all((tmp_path / f).stat().st_size > 0 for f in written.values())


def test_detection_cli_errors(tmp_path, capsys):
    assert main(["detection", "--detections", str(tmp_path / "d.json"), "--run-dir",
                 str(tmp_path)]) == 2
    assert "--detections needs --coco-root" in capsys.readouterr().err
    assert main(["detection", "--coco-root", str(tmp_path / "none"), "--detections",
                 str(tmp_path / "d.json"), "--run-dir", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["detection", "--profile", "tiny", "--devices", "3", "--run-dir",
                 str(tmp_path)]) == 2
    assert "must divide" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["detection", "--step-scale", "-1"])
    assert jax.device_count() >= 2


def test_coco_root_path_runs_on_a_coco_layout(tmp_path):
    """--coco-root/--detections: the layout of COCO (annotations/instances_<split>.json,
    <split>/ images) with the detector's results read from a file."""
    from ebm_jax.data.detection import generate_dataset, simulate_detections

    root = tmp_path / "coco"
    (root / "annotations").mkdir(parents=True)
    for split, n, seed in (("train2017", 6, 1), ("val2017", 3, 2)):
        paths = generate_dataset(tmp_path / split, num_images=n, image_size=48,
                                 num_classes=2, max_objects=2, min_size=8, seed=seed)
        paths.image_dir.rename(root / split)
        paths.annotations.rename(root / "annotations" / f"instances_{split}.json")
    dets = simulate_detections(root / "annotations" / "instances_val2017.json", seed=0)
    (tmp_path / "dets.json").write_text(json.dumps(dets))
    out = tmp_path / "out"
    argv = ["detection", "--profile", "tiny", "--methods", "nce+", "--coco-root", str(root),
            "--detections", str(tmp_path / "dets.json"), "--out", str(out), "--run-dir",
            str(tmp_path / "runs"), "--no-progress"]
    assert main(argv) == 0
    payload = json.loads((out / "detection.json").read_text())
    assert payload["data"]["name"].startswith("coco:")
    assert payload["data"]["num_train"] == 6 and payload["data"]["num_val"] == 3
    row = payload["tables"]["table2"][0]
    assert row["num_boxes"] >= 1 and 0.0 <= row["refined"]["AP"] <= 1.0
    # a detection whose category is unknown is named
    (tmp_path / "bad.json").write_text(json.dumps([{**dets[0], "category_id": 99}]))
    argv[argv.index(str(tmp_path / "dets.json"))] = str(tmp_path / "bad.json")
    assert main(argv) == 2
