"""The SoCL recipe: the tiny Table 1 config end to end (TOP maps cached, four SoCL arms
trained with the same start, a random backbone, tables, plots) and its resume; the arms
of every experiment; budgets, pseudo boxes and fees; bad settings before training. The
tiny runs of the other experiments are slow tests."""

import json

import numpy as np
import pytest

from ebm_jax.config import ConfigError
from ebm_jax.recipes import run_experiment
from ebm_jax.recipes.tracking import socl as recipe
from tests.recipes.socl_configs import CONFIGS, tiny
from tests.recipes.socl_configs import quiet as _quiet

# a minute or more on 2 CPU cores: in `make test-heavy` (and CI), not `make test`
pytestmark = pytest.mark.heavy

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
        for key in ("target_accuracy", "background_accuracy"):  # the scene shortcut
            assert row[key] is None or 0 <= row[key] <= 1, (label, key)
    check = diag["top_check"]["temperature"]
    assert 0 <= check["target_cells_in_sns_pool"] <= 1
    assert "Diagnostics on" in md and "target cells left in the SNS pool" in md
    assert "GST-only accuracy, background" in md
    # the scores and what says why are two parts a page can include apart
    scores, why = md.split("### Scores\n")[1].split("### Diagnostics\n")
    assert "Paired differences" in scores and "Diagnostics on" not in scores
    assert "Diagnostics on" in why and "TOP maps" in why
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
                                "SoCL-Siam 0.024 h", "random backbone"]
    assert [dict(a.about)["points"] for a in recipe.arms_of(tiny("table6"))] == ["clean",
                                                                           "noisy"]
    assert labels["table4"] == ["Box-Siam", "SoCL-Siam"]
    assert labels["table3"] == ["Box-Siam", "SoCL-Siam", "random backbone", "Init-CF",
                                "Box-CF", "SoCL-CF"]
    cf = {a.label: a for a in recipe.arms_of(tiny("table3"))}
    assert cf["SoCL-CF"].uses == ("SoCL-Siam",) and cf["Init-CF"].uses == ("random backbone",)
    # the no-training arm names its start: MoCo's weights are no random backbone
    moco = ("--config.init=moco", "--config.backbone=resnet18")
    for e in ("table1", "figure8", "table3", "table2"):
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
    from ebm_jax.recipes.tracking.socl_stages import budget_subset

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
    ("--config.scene_group=0", r"--config.scene_group must be an integer in \[1, 64\], "
                               r"got 0"),
    ("--config.scene_group=65", "--config.scene_group"),
    ("--config.scene_path=True", r"--config.scene_path moves a scene group's targets "
                                 r"together: it needs --config.scene_group in \[2, 64\], "
                                 r"got 1"),
    # the range the check really applies: the backbone's most fields within 1024 px
    ("--config.region_fields=-1", r"--config.region_fields must be a number in \[0.0, "
                                  r"11.75\]"),
    ("--config.region_fields=12", r"--config.region_fields must be a number in \[0.0, "
                                  r"11.75\], got 12.0"),
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
    from ebm_jax.recipes.tracking.socl_stages import point_annotations, points_from_boxes

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


@pytest.mark.parametrize("study, base, overrides", [
    ("moco_screen_layer1", "moco_screen", ["freeze=layer1", "lst_variants=paper"]),
    ("moco_screen_layer2", "moco_screen", ["freeze=layer2"]),
    ("moco170_path_calibrated", "moco170_path",
     ["lst_variants=paper,TOP temperature calibrated"]),
])
def test_a_named_study_is_its_base_with_the_overrides_it_replaces(study, base, overrides):
    """A study variant (one command per docs table) resolves to the config, and so the
    stages, of the override command it names; a study may build on another study."""
    from ebm_jax.config import config_identity, load_config

    named = load_config(f"socl_lst_validation:{study}")
    by_hand = load_config(f"socl_lst_validation:{base}", overrides)
    assert config_identity(named) == config_identity(by_hand)
    assert config_identity(named) != config_identity(
        load_config(f"socl_lst_validation:{base}"))
