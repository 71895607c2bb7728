"""The SoCL recipe: the tiny Table 1 config end to end (TOP maps cached, four SoCL arms
trained with the same start, a random backbone, tables, plots) and its resume; the arms
of every experiment; budgets, pseudo boxes and fees; bad settings before training. The
tiny runs of the other experiments are slow tests."""

import json
from pathlib import Path

import numpy as np
import pytest

from ebm_jax.config import ConfigError, load_config
from ebm_jax.recipes import run_experiment
from ebm_jax.recipes import socl as recipe

EXPERIMENTS = Path(__file__).parents[2] / "experiments" / "tracking"
CONFIGS = {"table1": "socl_table1_ablation.py", "figure7": "socl_figure7_thresholds.py",
           "figure8": "socl_figure8_bce.py", "table2": "socl_table2_annotation_cost.py",
           "table6": "socl_table6_noisy_points.py", "table4": "socl_table4_fees.py",
           "table3": "socl_table3_cf.py", "table5": "socl_table5_sparse_boxes.py",
           "lst": "socl_lst_validation.py"}


def tiny(experiment="table1", *overrides: str):
    return load_config(f"{EXPERIMENTS / CONFIGS[experiment]}:tiny", overrides)


def _quiet(_):
    pass


@pytest.fixture(scope="module")
def table1_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("socl")
    report = run_experiment(tiny(), workdir=root / "runs", out=root / "out",
                            progress=False, log=TABLE1_LOG.append)
    return root, report


TABLE1_LOG: list[str] = []  # the `table1_run` progress lines


def test_the_run_counts_its_stages(table1_run):
    """"stage i of n": one stage per distinct training of the table's arms, per seed;
    Figure 7's paper values are the plain SoCL-Siam stage (counted once); Table 5
    does not count; the MoCo start once."""
    places = [ln.rsplit("[", 1)[1] for ln in TABLE1_LOG if " steps, " in ln
              and "[stage " in ln]
    assert len(places) == 4 and places[-1].startswith("stage 4 of 4"), places
    assert recipe.count_stages(tiny()) == 4  # GST, +SNS, +mix-up, +LST
    assert recipe.count_stages(tiny("figure7")) == 2  # theta_b=0.8 is b_p=0.6's stage
    assert recipe.count_stages(tiny("lst")) == 5  # as many as its stage directories
    assert recipe.count_stages(tiny("table3")) == 2  # the filters reuse backbones
    assert recipe.count_stages(tiny("table5")) is None
    assert recipe.count_stages(tiny("table1", "--config.seeds=0,1", "--config.init=moco",
                                    "--config.backbone=resnet18")) == 2 * 4 + 1


def test_table1_tiny_writes_every_arm_tables_and_plots(table1_run):
    root, report = table1_run
    out = root / "out"
    payload = json.loads((out / "results.json").read_text())
    arms = payload["tables"]["arms"]
    assert list(arms) == ["GST", "+SNS", "+mix-up", "+LST (SoCL)", "random backbone"]
    for label, rows in arms.items():
        (row,) = rows
        assert 0.0 <= row["auc"] <= 1.0 and len(row["sequence_auc"]) == 2, label
    for label in ("GST", "+SNS", "+mix-up", "+LST (SoCL)"):
        (t,) = payload["training"][label]
        assert t["steps"] == 2 and t["finite"], label
    assert set(payload["paired"]) == {"+SNS - GST", "+mix-up - +SNS", "+LST (SoCL) - +mix-up",
                                      "+LST (SoCL) - GST", "+LST (SoCL) - random backbone"}
    top = payload["top"]
    assert top["seconds_per_frame"]["frames"] > 0
    recall = top["recall"]["clean"]["recall"]
    assert all(0 <= r <= 1 for r in recall) and recall == sorted(recall)
    md = (out / "results.md").read_text()
    assert "Paired differences" in md and "The paper:" in md and "TOP maps" in md
    for name in ("auc.png", "top_recall.png"):
        assert (out / name).stat().st_size > 2000, name
    # the diagnostics of the start and of every trained backbone, on held-out pairs
    # (tiny has no validation split: the test split's)
    diag = payload["diagnostics"]
    assert diag["split"] == "test" and diag["pairs"] > 0 and diag["temperature"] == 1.0
    assert list(diag["rows"]) == ["start", "GST", "+SNS", "+mix-up", "+LST (SoCL)"]
    for label, (row,) in diag["rows"].items():
        assert -1 <= row["uniformity"] <= 1 and 0 <= row["identification"] <= 1, label
        assert -1 <= row["hardest_negative"] <= 1 and row["pairs"] == diag["pairs"], label
    check = diag["top_check"]["temperature"]
    assert 0 <= check["target_cells_in_sns_pool"] <= 1
    assert "Diagnostics on" in md and "target cells left in the SNS pool" in md
    # tiny's AlexNet regions of 127 px against conv5's 87 px field
    assert diag["region_px"] == 127 and diag["receptive_field_px"] == 87
    assert "Context region 127 px, the embedding's receptive field 87 px (1.46x" in md
    # one stage directory per arm (different identities), one TOP cache
    runs = root / "runs"
    assert len([p for p in runs.iterdir() if p.name.startswith("socl-s0-")]) == 4
    (cache,) = [p for p in runs.iterdir() if p.name.startswith("top-clean-")]
    assert len(list(cache.glob("*.npz"))) == 4


def test_rerun_reuses_the_cache_and_the_stages(table1_run, monkeypatch):
    root, first = table1_run
    import ebm_jax.tracking.top_maps as top_maps

    def fail(*a, **k):
        raise AssertionError("the TOP maps were recomputed")

    monkeypatch.setattr(top_maps, "top_boxes", fail)
    again = run_experiment(tiny(), workdir=root / "runs", out=root / "out2",
                           progress=False, log=_quiet)
    for label, rows in first.payload["tables"]["arms"].items():
        assert again.payload["tables"]["arms"][label][0]["auc"] == rows[0]["auc"]


def test_arms_of_every_experiment():
    labels = {e: [a.label for a in recipe.arms_of(tiny(e))] for e in CONFIGS}
    assert labels["figure7"] == ["theta_b=0.5", "theta_b=0.8", "b_p=0.6"]
    assert labels["figure8"] == ["BCE-Siam alpha=0.5", "SoCL-Siam", "random backbone"]
    assert labels["table2"] == ["Box-Siam 0.012 h", "SoCL-Siam 0.012 h", "Box-Siam 0.024 h",
                                "SoCL-Siam 0.024 h"]
    assert [dict(a.about)["points"] for a in recipe.arms_of(tiny("table6"))] == ["clean",
                                                                           "noisy"]
    assert labels["table4"] == ["Box-Siam", "SoCL-Siam"]
    assert labels["table3"] == ["Box-Siam", "SoCL-Siam", "random backbone", "Init-CF",
                                "Box-CF", "SoCL-CF"]
    cf = {a.label: a for a in recipe.arms_of(tiny("table3"))}
    assert cf["SoCL-CF"].uses == ("SoCL-Siam",) and cf["Init-CF"].uses == ("random backbone",)
    # the no-training arm names its start: MoCo's weights are no random backbone
    moco = ("--config.init=moco", "--config.backbone=resnet18")
    for e in ("table1", "figure8", "table3"):
        starts = [a.label for a in recipe.arms_of(tiny(e, *moco)) if a.method == "random"]
        assert starts == ["MoCo start"], e
        assert not any("random backbone" in " ".join(a.compared_with + a.uses)
                       for a in recipe.arms_of(tiny(e, *moco))), e
    assert cf["SoCL-CF"].tracker.name == "dcf" and cf["SoCL-Siam"].tracker.name == "siamfc"
    assert cf["SoCL-CF"].compared_with == ("Init-CF", "Box-CF", "SoCL-Siam")
    assert labels["table5"] == ["SoCL-Siam", "SoCL-CF", "head, all boxes",
                                "head, pseudo boxes T=2", "head, sparse boxes T=2"]
    # the LST study: the start, then pairs; a variant of the LSTs alone shares the
    # paper's +mix-up arm
    start = "start (no SoCL training)"
    assert labels["lst"] == [start, "+mix-up, paper", "+LST, paper", "+LST, b_p 0.9",
                             "+mix-up, own-pair mix-ups", "+LST, own-pair mix-ups"]
    lst = {a.label: a for a in recipe.arms_of(tiny("lst"))}
    assert lst["+LST, b_p 0.9"].compared_with == ("+mix-up, paper", start)
    assert lst["+mix-up, paper"].compared_with == (start,)
    assert lst[start].method == "random"  # the initial weights, not trained
    assert dict(dict(lst["+mix-up, own-pair mix-ups"].about)["socl"]) == {
        "use_lst": False, "mix_scope": "pair"}
    every = recipe.arms_of(tiny("lst", "--config.lst_variants=" + ",".join(
        recipe.arms_lib.LST_VARIANTS)))
    assert len(every) == 2 * len(recipe.arms_lib.LST_VARIANTS) - 1  # start; two b_p
    gst = recipe.arms_of(tiny())[0]
    assert dict(dict(gst.about)["socl"]) == {"use_sns": False, "use_mix": False,
                                             "use_lst": False}


def test_budget_subset_spends_whole_sequences_in_one_order():
    from ebm_jax.recipes.socl_stages import budget_subset

    annotated = [np.arange(n) for n in (4, 4, 2, 4, 0, 4)]
    idx, spent = budget_subset([None] * 6, annotated, 9, seed=0)
    assert spent <= 9 and spent == sum(len(annotated[i]) for i in idx)
    small, _ = budget_subset([None] * 6, annotated, 5, seed=0)
    order = np.random.default_rng(0).permutation(6)
    first = [int(i) for i in order if len(annotated[i])][0]
    assert first in small and set(small) <= set(idx)  # a larger budget extends a smaller
    assert 4 not in budget_subset([None] * 6, annotated, 100, seed=0)[0]


@pytest.mark.parametrize("override, message", [
    ("--config.experiment=table9", "--config.experiment"),
    ("--config.lst_variants=paper,loud", "--config.lst_variants"),
    ("--config.points=fuzzy", "--config.points"),
    ("--config.videos=1", "--config.videos"),
    ("--config.tau=0", "--config.tau"),
    ("--config.theta_b=1.5", "--config.theta_b"),
    ("--config.b_p=0", "--config.b_p"),
    ("--config.alphas=0.5,1.5", "--config.alphas"),
    ("--config.budgets_hours=-1", "--config.budgets_hours"),
    ("--config.mix_scope=video", "--config.mix_scope"),
    ("--config.symmetric=maybe", "--config.symmetric"),
    ("--config.dcf.learning_rate=0", "learning_rate"),
    ("--config.dcf.scale_num=4", "scale_num"),
    ("--config.sparse_every=0", "--config.sparse_every"),
    ("--config.sparse_every_sweep=5,0", "--config.sparse_every_sweep"),
    ("--config.failure_radius=0", "--config.failure_radius"),
    ("--config.top_temperature=0", r"--config.top_temperature must be a finite number > 0 "
                                   r"or 'calibrated', got 0.0"),
    ("--config.top_temperature=-2", "--config.top_temperature"),
    ("--config.top_temperature=warm", "--config.top_temperature.*'warm'"),
    ("--config.freeze=layer2", r"--config.freeze must be 'none' or a level of the alexnet "
                               r"backbone before its embedding \(conv1, conv2, conv3, "
                               r"conv4\), got 'layer2'"),
    ("--config.freeze=conv5", "--config.freeze"),
    ("--config.backbone_lr_scale=0", r"--config.backbone_lr_scale must be a number in "
                                     r"\(0.0, 1.0\]"),
    ("--config.backbone_lr_scale=-0.1", "--config.backbone_lr_scale"),
    ("--config.input_size=95", r"--config.input_size must be >= 127 \(SiamFC's exemplar\)"
                               r".*smaller than the exemplar"),
    ("--config.diagnostic_pairs=-1", "--config.diagnostic_pairs"),
])
def test_bad_settings_name_the_field(override, message):
    with pytest.raises(ConfigError, match=message.replace("+", r"\+")) as error:
        tiny("table1", override)
    assert "\n" not in str(error.value)  # one line


def test_too_few_videos_and_too_large_budgets_fail_before_training(tmp_path):
    with pytest.raises(ValueError, match="videos"):
        run_experiment(tiny("table1", "--config.videos=9"), workdir=tmp_path / "a",
                       progress=False, log=_quiet)
    with pytest.raises(ValueError, match="budgets_hours"):
        run_experiment(tiny("table2", "--config.budgets_hours=0.012,50"),
                       workdir=tmp_path / "b", progress=False, log=_quiet)
    assert not list((tmp_path / "a").glob("socl-*"))


@pytest.mark.slow
@pytest.mark.parametrize("experiment", ["figure7", "figure8", "table2", "table6", "table4"])
def test_other_experiments_run_tiny(experiment, tmp_path):
    report = run_experiment(tiny(experiment), workdir=tmp_path / "runs",
                            out=tmp_path / "out", progress=False, log=_quiet)
    assert (tmp_path / "out" / "results.md").exists()
    for rows in report.payload["tables"]["arms"].values():
        assert 0.0 <= rows[0]["auc"] <= 1.0
    if experiment == "table4":
        fees = report.payload["fees"]
        assert fees["box"]["fee"] > fees["point"]["fee"] > 0


def test_the_lst_study_needs_a_validation_split():
    with pytest.raises(ConfigError, match="--config.validation_sequences must be >= 1"):
        tiny("lst", "--config.validation_sequences=0")


@pytest.mark.slow
def test_the_lst_study_tracks_the_validation_split_alone(tmp_path):
    cfg = tiny("lst", "--config.lst_variants=paper,b_p 0.9,own-pair mix-ups,"
               "TOP temperature 4")
    report = run_experiment(cfg, workdir=tmp_path / "runs", out=tmp_path / "out",
                            progress=False, log=_quiet)
    payload = report.payload
    assert payload["split"] == "validation"
    assert payload["tables"]["static"]["num_sequences"] == 1
    assert "Generated validation split, 1 sequences" in (tmp_path / "out" /
                                                         "results.md").read_text()
    assert "+LST, own-pair mix-ups - +mix-up, own-pair mix-ups" in payload["paired"]
    # the arms trained on the training split less the held-out sequence
    (stage,) = [p for p in (tmp_path / "runs").glob("socl-s0-*")
                if '"mix_scope": "pair"' in (p / "run.json").read_text()
                and '"use_lst": true' in (p / "run.json").read_text()]
    config = json.loads((stage / "run.json").read_text())["config"]
    assert config["data"]["of"]["held_out_last"] == 1
    # one training per arm (b_p 0.9 has no +mix-up arm of its own)
    assert len(list((tmp_path / "runs").glob("socl-s0-*"))) == 7
    # each arm diagnosed with its own TOP maps: the temperature-4 arms at 4
    diag = payload["diagnostics"]
    assert diag["temperature"] == 1.0
    four = diag["arm_temperatures"]
    assert set(four) == {"+mix-up, TOP temperature 4", "+LST, TOP temperature 4"}
    assert all(a["temperature"] == 4.0 and a["top_check"]["temperature"]["temperature"]
               == 4.0 for a in four.values())
    md = (tmp_path / "out" / "results.md").read_text()
    assert ("- +mix-up, TOP temperature 4, +LST, TOP temperature 4: TOP maps at "
            "temperature 4 (set), theta_b 0.8:") in md


@pytest.fixture(scope="module")
def filter_runs(tmp_path_factory):
    """table3 then table5, tiny, in one workdir (table5 reuses SoCL-Siam's stages)."""
    root = tmp_path_factory.mktemp("socl-cf")
    reports = {e: run_experiment(tiny(e), workdir=root / "runs", out=root / f"out-{e}",
                                 progress=False, log=_quiet) for e in ("table3", "table5")}
    return root, reports


def test_table3_tiny_puts_the_filter_on_each_backbone(filter_runs):
    root, reports = filter_runs
    report = reports["table3"]
    md = (root / "out-table3" / "results.md").read_text()
    assert "SoCL-CF - Init-CF" in md and "Tracking speed" in md
    arms = report.payload["tables"]["arms"]
    assert all(0.0 <= rows[0]["auc"] <= 1.0 and rows[0]["fps"] > 0 for rows in arms.values())
    # the filter arms train nothing of their own: no training figures
    assert report.payload["training"]["SoCL-CF"] == [{"seed": 0}]
    assert "seconds" in report.payload["training"]["SoCL-Siam"][0]
    # SoCL-CF tracks with SoCL-Siam's backbone: its evaluation stage names that model
    runs = root / "runs"
    (socl_cf,) = runs.glob("eval-socl-cf-s0-*")
    ident = json.loads((socl_cf / "identity.json").read_text())
    (socl,) = runs.glob("eval-socl-s0-*")
    assert ident["trained"] == json.loads((socl / "identity.json").read_text())["trained"]
    assert ident["tracking"]["learning_rate"] == 0.01


def test_table5_tiny_pseudo_boxes_train_the_head(filter_runs):
    root, reports = filter_runs
    payload = reports["table5"].payload
    out = root / "out-table5"
    assert {"pseudo_box_iou.png", "pseudo_box_strip.png", "auc.png"} <= {
        p.name for p in out.glob("*.png")}
    sweep = payload["sparse_boxes"]["sweep"]
    assert sorted(sweep) == ["2", "4"]
    for rows in sweep.values():
        (row,) = rows
        assert 0.0 < row["mean_iou"] <= 1.0 and row["frames"] > 0
        assert row["annotation_seconds"] > row["tracker_seconds"] > 0
    hours = payload["sparse_boxes"]["annotation"]["hours"]
    assert hours["head, all boxes"] > hours["head, pseudo boxes T=2"] > hours[
        "head, sparse boxes T=2"] > hours["SoCL-Siam"]
    # the SoCL-Siam stage of table3 is reused, not trained again
    assert len(list((root / "runs").glob("socl-s0-*"))) == 1
    heads = sorted(p.name.rsplit("-", 1)[0] for p in (root / "runs").glob("box-head-*"))
    assert heads == ["box-head-nce+-all-s0", "box-head-nce+-pseudo-s0",
                     "box-head-nce+-sparse-s0"]
    # a rerun reads the cached pseudo boxes: the same sweep, bit for bit (T = 4's were
    # computed afresh by the first run, read back from the cache by the second)
    again = run_experiment(tiny("table5"), workdir=root / "runs", out=root / "again",
                           progress=False, log=_quiet)
    assert again.payload["sparse_boxes"]["sweep"] == sweep


def test_dcf_levels_beyond_the_backbone_fail_before_training(tmp_path):
    with pytest.raises(ConfigError, match=r"--config.dcf.levels must be alexnet levels in "
                                          r"\[0, 4\].*conv5.*got \(0, 5\)"):
        run_experiment(tiny("table3", "--config.dcf.levels=0,5",
                            "--config.dcf.level_weights=1,1"),
                       workdir=tmp_path / "a", progress=False, log=_quiet)
    assert not list((tmp_path / "a").glob("socl-*"))


def test_dcf_levels_alone_are_checked_against_the_backbone(tmp_path):
    """`--config.dcf.levels=9` named `DCFSettings.level_weights`, a field the user never
    set, instead of the levels and their range."""
    with pytest.raises(ConfigError, match=r"--config.dcf.levels must be alexnet levels in "
                                          r"\[0, 4\].*got \(9,\)"):
        run_experiment(tiny("table3", "--config.dcf.levels=9"), workdir=tmp_path / "a",
                       progress=False, log=_quiet)
    assert not list((tmp_path / "a").glob("socl-*"))
    assert tiny("table3", "--config.dcf.levels=0,2,4").dcf.levels == (0, 2, 4)


def test_sequences_without_points_fail_or_take_box_centres():
    import dataclasses as dc

    from ebm_jax.data.sequences import Sequence
    from ebm_jax.recipes.socl_stages import point_annotations, points_from_boxes

    boxes = np.array([[11.0, 21.0, 10.0, 6.0], [13.0, 20.0, 8.0, 8.0]])
    seq = Sequence(name="real", frames=("a", "b"), boxes=boxes, image_size=(60, 80),
                   absent=np.zeros(2, bool))
    with pytest.raises(ValueError, match="'real'.*points_from_boxes"):
        point_annotations(seq, "clean")
    with_pts = points_from_boxes(seq, 20.0, seed=0)
    np.testing.assert_allclose(point_annotations(with_pts, "clean"),
                               [[15.5, 23.5], [16.5, 23.5]])
    shift = point_annotations(with_pts, "noisy") - point_annotations(with_pts, "clean")
    np.testing.assert_allclose(np.hypot(*shift.T), 20.0)
    kept = dc.replace(seq, points=boxes[:, :2], noisy_points=boxes[:, :2])
    assert points_from_boxes(kept, 20.0, seed=0) is kept


def test_stages_record_the_later_loss_switches_only_when_set():
    """Stages cached before eq. 10's and the mix-ups' switches existed keep their
    identities: the switches at the values of those stages are not recorded. eq. 10 as
    printed, the default now, is recorded, so that no stage of the old default (the
    symmetrised loss) is reused for it."""
    from ebm_jax.contrastive.socl import SoCLSettings
    from ebm_jax.recipes.socl_stages import settings_identity

    assert SoCLSettings().symmetric is False
    ident = settings_identity(SoCLSettings())
    assert ident["symmetric"] is False and "mix_scope" not in ident
    assert ident["b_p"] == 0.6 and ident["include_positive"] is False
    old_default = settings_identity(SoCLSettings(symmetric=True))
    assert "symmetric" not in old_default and old_default != ident
    assert settings_identity(SoCLSettings(mix_scope="pair"))["mix_scope"] == "pair"


def test_stages_record_the_fine_tuning_options_only_when_set():
    from ebm_jax.recipes.socl_stages import fine_tune_identity

    assert fine_tune_identity(tiny("table1")) == {}
    cfg = tiny("table1", "--config.freeze=conv2", "--config.backbone_lr_scale=0.1",
               "--config.freeze_bn=true")
    assert fine_tune_identity(cfg) == {"freeze": "conv2", "backbone_lr_scale": 0.1,
                                       "freeze_bn": True}
    assert tiny("table1", "--config.backbone=resnet18", "--config.freeze=layer1").freeze == (
        "layer1")
    assert tiny("table1", "--config.top_temperature=calibrated").top_temperature == (
        "calibrated")


def test_the_loss_switches_are_config_fields_that_arms_override():
    """The setting chosen on the validation split can be run on the test split:
    --config.include_positive / symmetric / mix_scope set every arm's loss; an arm's own
    override (the LST study's) still wins."""
    from ebm_jax.recipes.socl_stages import socl_settings

    cfg = tiny("table1", "--config.symmetric=False", "--config.mix_scope=pair",
               "--config.include_positive=True")
    s = socl_settings(cfg)
    assert (s.symmetric, s.mix_scope, s.include_positive) == (False, "pair", True)
    assert socl_settings(cfg, (("symmetric", True),)).symmetric is True
    d = socl_settings(tiny("table1"))  # eq. 10 as printed, for z_i alone, by default
    assert (d.symmetric, d.mix_scope, d.include_positive) == (False, "batch", False)


def test_the_top_temperature_is_calibrated_from_the_proposals_alone():
    """`--config.top_temperature=calibrated`: regions centred on the points, the target's
    cells from the proposals' extent (no true box: the sequence's boxes are NaN)."""
    import dataclasses as dc

    from ebm_jax.data.sequences import Sequence
    from ebm_jax.models.alexnet import SiamFCAlexNet
    from ebm_jax.recipes.socl_stages import calibration_maps, top_temperature
    from ebm_jax.tracking.top_maps import box_cells

    points = np.array([[60.5, 50.5]] * 3)
    seq = Sequence(name="s", frames=("a", "b", "c"), boxes=np.full((3, 4), np.nan),
                   image_size=(96, 128), absent=np.zeros(3, bool), points=points,
                   noisy_points=points)
    boxes = np.array([[[51.0, 41.0, 20.0, 20.0], [41.0, 31.0, 40.0, 40.0]]] * 2)
    tops = {0: {"frames": np.array([0, 2]), "boxes": boxes,
                "scores": np.array([[1.0, 0.0]] * 2)}}
    cfg = tiny("table1", "--config.top_temperature=calibrated")
    grid = SiamFCAlexNet.embedding_grid
    maps, cells = calibration_maps(cfg, [seq], tops, "clean", grid, seed=0)
    assert maps.shape == (2, 6, 6) and np.allclose(maps.sum(axis=(1, 2)), 1.0)
    # the extent is the best proposal's (the other scores 0): 20 px of a 64 px region
    # resampled to 127 px, centred on the region's centre
    side = 20 * 127 / 64
    expected = box_cells([63 - (side - 1) / 2 + 1, 63 - (side - 1) / 2 + 1, side, side],
                         grid(127)).sum()
    assert cells.tolist() == [expected] * 2
    ctx = dc.make_dataclass("Ctx", [])()
    ctx.seed_of = lambda stage, purpose: 0
    t, record = top_temperature(cfg, ctx, [seq], tops, "clean", grid, 0.8)
    assert t in record["candidates"] and record["frames"] == 2
    fixed = tiny("table1", "--config.top_temperature=2.5")
    assert top_temperature(fixed, ctx, [seq], tops, "clean", grid, 0.8) == (2.5, None)


@pytest.mark.parametrize("variant, field, value", [("backbone lr x0.1",
                                                    "backbone_lr_scale", 0.1),
                                                   ("frozen batch norm", "freeze_bn", True)])
def test_the_lst_study_compares_the_fine_tuning_options_on_validation(monkeypatch, variant,
                                                                      field, value):
    """The validation study's fine-tuning variants set the config's option for both of
    their arms (+mix-up and +LST, their own pair), not SoCL's loss settings."""
    from types import SimpleNamespace

    cfg = tiny("lst", f"--config.lst_variants=paper,{variant}")
    arms = {a.label: a for a in recipe.arms_of(cfg)}
    assert arms[f"+LST, {variant}"].compared_with == (f"+mix-up, {variant}",
                                                       "start (no SoCL training)")
    seen = []

    def fake_train(cfg_arm, ctx, sequences, tops, points, ident, socl, seed, **kw):
        seen.append((getattr(cfg_arm, field), dict(socl)))
        return "trained"

    monkeypatch.setattr(recipe.arms_lib.stages, "train_socl", fake_train)
    env = SimpleNamespace(cfg=cfg, ctx=None, plan=None, tops={"clean": {}},
                          data=SimpleNamespace(train=[], identity={"train": {}}))
    for label in (f"+mix-up, {variant}", f"+LST, {variant}", "+LST, paper"):
        arms[label].train(env, 0, {})
    assert [s[0] for s in seen] == [value, value, getattr(cfg, field)]
    assert all(field not in s[1] for s in seen)  # not a SoCLSettings field


def test_arm_temperature_lines_group_the_arms_of_one_temperature():
    from ebm_jax.report.socl import arm_temperature_lines

    def check(t, pool, mass):
        return {"temperature": {"temperature": t, "target_cells_in_sns_pool": pool,
                                "mass_over_target_cells": mass}, "theta_b": 0.8}

    diag = {"arm_temperatures": {
        "+mix-up, T cal": {"temperature": 5.66, "calibration": {"frames": 64},
                           "top_check": check(5.66, 0.03, 1.1)},
        "+LST, T cal": {"temperature": 5.66, "calibration": {"frames": 64},
                        "top_check": check(5.66, 0.03, 1.1)},
        "+LST, T 4": {"temperature": 4.0, "calibration": None,
                      "top_check": check(4.0, 0.2, 0.5)}}}
    assert arm_temperature_lines(diag) == [
        "- +mix-up, T cal, +LST, T cal: TOP maps at temperature 5.66 (calibrated), "
        "theta_b 0.8: 3% of the target cells left in the SNS pool; the theta_b mass "
        "covers 1.10x the target's cells.",
        "- +LST, T 4: TOP maps at temperature 4 (set), theta_b 0.8: 20% of the target "
        "cells left in the SNS pool; the theta_b mass covers 0.50x the target's cells."]
    assert arm_temperature_lines({"arm_temperatures": {}}) == []
