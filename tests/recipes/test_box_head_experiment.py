"""The box-head experiment (the EBM regression paper, sec. 5, Table 4) of the tracking recipe: its arms
and pairs, the validation split and choice, the report's verdicts, the bad settings
refused before training, the docs page's commands, and the tiny config end to end (slow)."""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from ebm_jax.cli import main
from ebm_jax.config import ConfigError, load_config
from ebm_jax.recipes.tracking import box_head as experiment
from ebm_jax.recipes import run_experiment
from ebm_jax.recipes import tracking as recipe
from ebm_jax.recipes.tracking import stages as stages
from ebm_jax.recipes.tracking.arms import pairs_of, training_order
from ebm_jax.report import box_head as box_head_report
from ebm_jax.report import tracking as report

ROOT = Path(__file__).parents[2]
CONFIG = ROOT / "experiments" / "tracking" / "ebm_table4_box_head.py"
HEADS = ["box-head-kld-is", "box-head-nce", "box-head-nce+", "box-head-ml-is"]


def tiny(*overrides: str):
    return load_config(f"{CONFIG}:tiny", overrides)


def _quiet(_):
    pass


def test_arms_table_and_pairs():
    cfg = tiny()
    arms = recipe.EXPERIMENTS["box-head"].arms(cfg)
    assert [a.label for a in arms] == ["box-siam"] + HEADS
    assert arms[0].tracker.name == "siamfc"  # SiamFC's own scale search
    for a in arms[1:]:
        assert a.tracker.name == "box-head" and a.uses == ("box-siam",)
        assert a.tracker.settings.method == a.label.removeprefix("box-head-")
        assert a.tracker.settings.num_samples == cfg.box_head.num_samples
    assert [a.label for a in training_order(arms)][0] == "box-siam"
    assert pairs_of(arms) == [
        ("box-head-kld-is", "box-siam"), ("box-head-nce", "box-siam"),
        ("box-head-nce", "box-head-kld-is"), ("box-head-nce+", "box-siam"),
        ("box-head-nce+", "box-head-kld-is"), ("box-head-nce+", "box-head-nce"),
        ("box-head-ml-is", "box-siam")]
    # only the pairs whose both losses are compared
    two = experiment.box_head_arms(tiny("--config.box_head_methods=nce+,nce"))
    assert pairs_of(two) == [("box-head-nce+", "box-siam"), ("box-head-nce+", "box-head-nce"),
                             ("box-head-nce", "box-siam")]


def test_chosen_settings_reach_training_and_tracker():
    cfg = tiny()
    chosen = {"nce": recipe.dataclasses.replace(cfg.box_head, method="nce",
                                                step_lengths=(0.01,) * 4)}
    arms = {a.label: a for a in experiment.box_head_arms(cfg, chosen)}
    assert arms["box-head-nce"].tracker.settings.step_lengths == (0.01,) * 4
    assert arms["box-head-nce"].train.keywords["settings"] is chosen["nce"]
    assert arms["box-head-kld-is"].tracker.settings.step_lengths == cfg.box_head.step_lengths


def test_best_candidate_by_mean_over_seeds():
    scores = {"x1": [0.50, 0.70], "x2": [0.65, 0.60], "x4": [0.90, 0.20]}
    assert experiment.best_candidate(scores) == "x2"  # mean 0.625 beats 0.60 and 0.55
    assert experiment.best_candidate({"a": [0.5], "b": [0.5]}) == "a"  # a tie: the first
    assert experiment.best_candidate({"b": [0.5], "a": [0.5]}) == "b"
    with pytest.raises(ValueError, match="no candidates"):
        experiment.best_candidate({})


def test_validation_split_is_held_out_of_training():
    cfg = tiny()
    seqs = [f"train_{i}" for i in range(cfg.num_train_sequences)]
    data = stages.TrackingData(train=seqs, eval_sets={}, identity={"train": {"t": 1}})
    train, train_id = stages.training_split(data, cfg)
    val, val_id = stages.validation_split(data, cfg)
    assert len(val) == cfg.validation_sequences >= 1
    assert train + val == seqs and not set(train) & set(val)
    assert train_id != data.identity["train"] and val_id != train_id
    # the Box-Siam experiment trains on all of it, with its identity unchanged
    base = load_config(f"{ROOT / 'experiments/tracking/siamfc_box.py'}:tiny")
    assert stages.training_split(data, base) == (seqs, {"t": 1})


def _paired(mean, se_seeds, se_sequences):
    real = se_seeds is not None and abs(mean) > 2 * max(se_seeds, se_sequences)
    return {"mean": mean, "se_seeds": se_seeds, "se_sequences": se_sequences,
            "per_seed": [mean] * 3, "real": real, "seeds": [0, 1, 2]}


def test_verdicts_only_beyond_two_standard_errors():
    rows = {"box-head-nce+ vs box-siam": _paired(0.10, 0.02, 0.03),
            "box-head-nce+ vs box-head-kld-is": _paired(-0.05, 0.01, 0.03),
            "box-head-nce vs box-head-kld-is": _paired(-0.05, 0.01, 0.02),
            "box-head-ml-is vs box-siam": _paired(0.05, None, 0.01)}
    pairs = [tuple(k.split(" vs ")) for k in rows]
    lines = box_head_report.box_head_verdicts(rows, pairs)
    assert "above SiamFC's scale search (Box-Siam) by 10.0 AUC points" in lines[0]
    assert "is below box head, KLD-IS by 5.0" in lines[1]
    # 5 points, but the sequences' se is 3: named once among the pairs not separated
    assert lines[2] == ("- Not separated (within 2 standard errors): box head, NCE+ and "
                        "box head, KLD-IS.")
    assert lines[3].startswith("- One seed, no verdict: ") and len(lines) == 4
    text = report.paired_table(pairs, rows)
    assert "| box head, NCE+ - Box-Siam (SiamFC on boxes) | +10.0 | 2.0 | 3.0 | **yes** |" \
        in text
    assert "| -5.0 | 1.0 | 3.0 | no |" in text and "| - | 1.0 | one seed: no verdict |" in text


@pytest.mark.parametrize("override, setting", [
    ("--config.box_head.num_samples=0", "--config.box_head: BoxHeadSettings.num_samples"),
    ("--config.box_head.sigmas=0,0.5", "--config.box_head: BoxHeadSettings.sigmas"),
    ("--config.validation_sequences=0", "validation_sequences"),
    ("--config.box_head_methods=nce,kld", "box_head_methods"),
    ("--config.step_scales=0", "step_scales"),
    ("--config.sigma_grid=0.05,-1", "sigma_grid"),
    ("--config.box_head_lengths=3", "box_head_lengths"),
    ("--config.box_head_lengths=0", "box_head_lengths"),
])
def test_bad_settings_fail_before_training(tmp_path, capsys, override, setting):
    code = main(["run", f"{CONFIG}:tiny", override, "--workdir", str(tmp_path / "w"),
                 "--out", str(tmp_path / "o"), "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and setting in lines[0], err
    assert "Traceback" not in err and not (tmp_path / "o").exists()
    assert not list(tmp_path.rglob("checkpoints"))


def test_validation_must_leave_training_sequences():
    with pytest.raises(ConfigError, match="validation_sequences"):
        tiny("--config.validation_sequences=4")  # num_train_sequences is 4


def test_variants_and_shared_data_with_box_siam():
    for variant in ("tiny", "quick", "paper"):
        cfg = load_config(f"{CONFIG}:{variant}")
        assert cfg.experiment == "box-head" and cfg.validation_sequences >= 1
        assert dict(cfg.reference)["TrackingNet"] == "78.1 / 77.1 / 78.7"
    cfg = load_config(f"{CONFIG}:quick")
    box = load_config(f"{ROOT / 'experiments/tracking/siamfc_box.py'}:quick")

    class Ctx:  # the data seed of a run with seed 0
        @staticmethod
        def seed_of(stage, purpose):
            return len(f"{stage}/{purpose}")

    assert stages.generated_specs(cfg, Ctx) == stages.generated_specs(box, Ctx)
    paper = load_config(f"{CONFIG}:paper", ["--config.train_data=got10k",
                                            f"--config.got10k_root={ROOT}"])
    assert paper.train_data == "got10k"


def test_the_docs_commands_are_real_configs():
    section = (ROOT / "docs" / "ebm_box_head.md").read_text()
    # by path or by the shipped config's short name (`ebm-jax run NAME:VARIANT`)
    commands = re.findall(r"ebm-jax run (\S+?):(\w+)", section)
    assert commands, "the section has no command"
    for spec, variant in commands:
        path = ROOT / spec if spec.endswith(".py") else spec
        cfg = load_config(f"{path}:{variant}")
        assert cfg.experiment == "box-head"
    first = CONFIG.read_text().split('"""')[1].splitlines()[0]
    assert first == "ebm-jax run experiments/tracking/ebm_table4_box_head.py:quick"


@pytest.mark.slow
def test_tiny_run_end_to_end(tmp_path):
    run_experiment(tiny(), workdir=tmp_path / "w", out=tmp_path / "o", progress=False,
                   log=_quiet)
    payload = json.loads((tmp_path / "o" / "results.json").read_text())
    rows = payload["tables"]["generated-test"]
    assert list(rows) == ["static", "box-siam", "coarse"] + HEADS
    for label in HEADS:
        (row,) = rows[label]
        assert row["fps"] > 0 and row["coarse_fps"] > 0
        assert 0.0 <= row["auc"] <= 1.0 and len(row["sequence_auc"]) == 2
        assert row["coarse_fps"] == rows["coarse"][0]["fps"]  # the frozen backbone's
    val = payload["validation"]
    assert set(val["choice"]) == {"kld-is", "nce", "nce+", "ml-is"}
    assert val["sequences"] == ["train_00004"]  # the last training sequence
    for m, choice in val["choice"].items():
        assert set(val["score"][m]) == {  # early stopping: 2 or 3 steps
            f"sigmas 0.05/0.5, centre steps x{c}, size steps x{z}, {n} steps"
            for c in (1, 4) for z in (1, 4) for n in (2, 3)}
        assert choice["steps"] in (2, 3)
        assert choice["candidate"] == experiment.best_candidate(val["score"][m])
        for split in ("validation", "test"):
            (row,) = val["refinement"][split][m]
            assert 0 <= row["iou_start"] <= 1 and 0 <= row["outranks"] <= 1
            assert row["control_iou_refined"] > 0.95  # the control reaches the truth
    assert "Box refinement on the test split" in \
        (tmp_path / "o" / "results.md").read_text()
    assert [a["label"] for a in payload["arms"]] == ["box-siam"] + HEADS
    training = payload["training"]
    assert {"box-siam-s0"} | {f"{h}-s0" for h in HEADS} == set(training)
    # the test split's heads are the stages validation chose among (4 losses x 2
    # lengths), whatever step lengths they were chosen to refine with
    assert len(list((tmp_path / "w").glob("box-head-*"))) == 8
    summary = payload["summary"]["generated-test"]
    assert summary["box-head-nce+ vs box-head-kld-is"]["seeds"] == [0]
    # each refined head is also compared with its own coarse centre
    assert {f"{h} vs coarse" for h in HEADS} <= set(summary)
    md = (tmp_path / "o" / "results.md").read_text()
    assert "DiMP-NCE+" in md and "Paired differences" in md and "validation split" in md
    for name in ("generated-test_auc.png", "strips.png", "generated-test_success.png"):
        assert (tmp_path / "o" / name).stat().st_size > 2000, name
    # a rerun resumes every stage and every cached evaluation: the same figures
    again = run_experiment(tiny(), workdir=tmp_path / "w", out=tmp_path / "o2",
                           progress=False, log=_quiet)
    assert again.payload["validation"] == val
    assert again.payload["tables"]["generated-test"]["box-head-nce"][0]["auc"] == \
        rows["box-head-nce"][0]["auc"]


def test_report_has_paper_table_validation_choice_and_both_standard_errors():
    score = {k: {"mean": 0.5, "sd": 0.01} for k in ("auc", "precision", "norm_precision",
                                                     "ao", "sr50", "sr75", "fps")}
    summary = {"generated-test": {"box-siam": score, "box-head-nce+": score,
                                  "box-head-nce+ vs box-siam": _paired(0.10, 0.02, 0.03)}}
    probe = [{"iou_start": 0.7, "iou_refined": r, "outranks": 0.3, "chance_outranks": 0.1,
              "rank_correlation": 0.5, "control_iou_refined": 1.0} for r in (0.8, 0.82)]
    flat = [dict(r, iou_refined=r["iou_start"] + d) for r, d in zip(probe, (0.01, -0.01))]
    validation = {"sequences": ["train_00009"], "score": {
        "nce+": {"steps x1": [0.4, 0.5], "steps x2": [0.6, 0.5]}},
        "choice": {"nce+": {"candidate": "steps x2"}},
        "refinement": {"validation": {"nce+": probe, "nce": flat}}}
    cfg = load_config(f"{CONFIG}:quick")
    md = box_head_report.box_head_markdown(
        summary, [("box-head-nce+", "box-siam")], validation, title="t", seeds=(0, 1, 2),
        reference=cfg.reference, reference_note=cfg.reference_note)
    assert "| box head, NCE+ | 50.0 +- 1.0 |" in md
    assert "| steps x1 | 45.0 |" in md and "| steps x2 | 55.0 * |" in md
    assert "| TrackingNet | 78.1 | 77.1 | 78.7 |" in md and "different scale" in md
    assert "| se over 3 seeds | se over sequences |" in md and "| 2.0 | 3.0 |" in md
    assert "NCE+ > KLD-IS > NCE" in md  # the paper's order, from the config's note
    assert "box head, NCE+ vs box-siam" not in md  # pairs are not rows of the table
    # the refinement probe: the control row, a head that raises IoU beyond 2 se (+11.0,
    # se 1.0) and one that does not (+0.0, se 1.0)
    assert "| Gaussian energy on the truth (control) | 70.0 +- 0.0 | 100.0 +- 0.0 |" in md
    assert "| box head, NCE+ | 70.0 +- 0.0 | 81.0 +- 1.4 | +11.0 (1.0) | 30 +- 0 | 10 |" \
        " 0.50 +- 0.00 | raises IoU (beyond 2 se over seeds) |" in md
    assert "+0.0 (1.0)" in md and "does not raise IoU: not worth tracking with" in md
    # one seed: the verdict rests on the spread over its pairs
    one = [dict(probe[0], gain_se_pairs=0.02)]
    md1 = box_head_report.refinement_table({"nce+": one,
                                            "nce": [dict(one[0], gain_se_pairs=0.06)]})
    assert "| +10.0 (2.0) |" in md1 and "raises IoU (beyond 2 se over pairs)" in md1
    assert "| +10.0 (6.0) |" in md1 and "not worth tracking with" in md1


def test_choice_on_the_validation_split_only(monkeypatch):
    """choose_box_head_settings with training and the probe replaced by fakes: every
    head (sigmas) of every method and seed is probed on the last training sequences
    with every centre x size step-length candidate, the choice is the best mean over
    seeds, and only then are the chosen heads probed on the test split."""
    cfg = tiny("--config.sigma_grid=0.05,0.5;0.1,1.0", "--config.step_scales=1,2",
               "--config.seeds=0,1", "--config.box_head_methods=nce+,kld-is",
               "--config.box_head_lengths=")  # one length (box_head.steps)
    seqs = [SimpleNamespace(name=f"train_{i}") for i in range(cfg.num_train_sequences)]
    test = [SimpleNamespace(name="test_0")]
    data = stages.TrackingData(train=seqs, eval_sets={"generated-test": test},
                               identity={"train": {"t": 1}})
    trained, probed = [], []
    base = cfg.box_head.step_lengths * (4 // len(cfg.box_head.step_lengths))

    class Log:  # the run context: its log and pair seeds are used
        log = staticmethod(_quiet)

        @staticmethod
        def seed_of(stage, purpose):
            return 0

    def fake_head(env, seed, used, *, settings, prefix_steps=None):
        trained.append((seed, settings.method, settings.sigmas))
        return stages.Trained(settings, {"trained": {"seed": seed}})

    def fake_probe(model, sequences, settings, siamfc, *, seed, candidates=None):
        probed.append(([q.name for q in sequences], candidates is not None))
        # the best: NCE+ with sigmas (0.1, 1.0), centre x2 and size x1; KLD-IS with
        # (0.05, 0.5), centre x1 and size x2
        good = {"nce+": ((0.1, 1.0), (2.0, 1.0)), "kld-is": ((0.05, 0.5), (1.0, 2.0))}
        sigmas, (c, z) = good[model.method]
        want = (c * base[0], c * base[1], z * base[2], z * base[3])
        cands = [0.6 if model.sigmas == sigmas and tuple(x) == pytest.approx(want) else 0.4
                 for x in (candidates or [])]
        measures = {"iou_start": 0.5, "iou_refined": 0.55, "outranks": 0.2,
                    "chance_outranks": 0.1, "rank_correlation": 0.3}
        return {"head": measures, "control": dict(measures, iou_refined=1.0),
                "candidates": cands, "pairs": 64, "head_se": {"gain": 0.01},
                "candidates_gain_se": [0.02] * len(cands)}

    monkeypatch.setattr(experiment, "box_siam_arm", lambda env, seed, used: "backbone")
    monkeypatch.setattr(experiment, "train_box_head_arm", fake_head)
    monkeypatch.setattr(experiment, "probe_box_head", fake_probe)
    options = []

    def fake_options(env, seeds, chosen, heads):
        options.append((dict(chosen), sorted(heads)))
        return chosen, {"choice": "recorded"}

    monkeypatch.setattr(experiment, "choose_tracker_options", fake_options)
    chosen, record = experiment.choose_box_head_settings(
        stages.TrackingRun(cfg, Log(), data), cfg.seeds)
    # then the tracker options, on the chosen step lengths and sigmas' heads
    assert options == [(chosen, [("kld-is", 0), ("kld-is", 1), ("nce+", 0), ("nce+", 1)])]
    assert record["tracker"] == {"choice": "recorded"}
    assert len(trained) == 2 * 2 * 2  # seeds x methods x sigmas: heads trained
    val_names = [q.name for q in seqs[-cfg.validation_sequences:]]
    assert probed[:8] == [(val_names, True)] * 8  # every head on validation, first
    assert probed[8:] == [(["test_0"], False)] * 4  # then the chosen ones on test
    assert chosen["nce+"].sigmas == (0.1, 1.0)
    assert chosen["nce+"].step_lengths == pytest.approx((2 * base[0], 2 * base[1],
                                                        base[2], base[3]))
    assert chosen["kld-is"].sigmas == (0.05, 0.5)
    assert chosen["kld-is"].step_lengths == pytest.approx((base[0], base[1],
                                                          2 * base[2], 2 * base[3]))
    label = "sigmas 0.1/1, centre steps x2, size steps x1"
    assert record["choice"]["nce+"]["candidate"] == label
    assert record["score"]["nce+"][label] == [0.6, 0.6]
    assert record["refinement"]["validation"]["nce+"][0]["iou_refined"] == 0.6
    assert record["refinement"]["test"]["kld-is"][1]["control_iou_refined"] == 1.0
    assert record["refinement"]["validation"]["nce+"][0]["gain_se_pairs"] == 0.02
    assert record["refinement"]["test"]["nce+"][0]["gain_se_pairs"] == 0.01
    assert record["sequences"] == [q.name for q in seqs[-cfg.validation_sequences:]]


def test_the_training_length_is_chosen_on_validation_from_one_run(monkeypatch):
    """With box_head_lengths, each head is trained once through its lengths (each
    stage continuing the shorter one), every length is probed on validation, and the
    chosen length's head is the one probed on the test split and tracked."""
    cfg = tiny("--config.box_head_lengths=2,1", "--config.step_scales=1",
               "--config.box_head_methods=nce+")
    assert cfg.box_head.steps == 3
    seqs = [SimpleNamespace(name=f"train_{i}") for i in range(cfg.num_train_sequences)]
    data = stages.TrackingData(train=seqs, eval_sets={"generated-test": [
        SimpleNamespace(name="test_0")]}, identity={"train": {"t": 1}})
    trained, probed = [], []

    class Log:
        log = staticmethod(_quiet)

        @staticmethod
        def seed_of(stage, purpose):
            return 0

    def fake_head(env, seed, used, *, settings, prefix_steps=None):
        trained.append((settings.steps, prefix_steps))
        return stages.Trained(settings, {"trained": {"steps": settings.steps}})

    def fake_probe(model, sequences, settings, siamfc, *, seed, candidates=None):
        probed.append((sequences[0].name, model.steps))
        score = {1: 0.5, 2: 0.7, 3: 0.6}[model.steps]  # stopping at 2 steps is best
        measures = {"iou_start": 0.5, "iou_refined": score, "outranks": 0.2,
                    "chance_outranks": 0.1, "rank_correlation": 0.3}
        return {"head": measures, "control": dict(measures, iou_refined=1.0),
                "candidates": [score] * len(candidates if candidates is not None else []),
                "pairs": 64, "head_se": {"gain": 0.01}, "candidates_gain_se": [0.02]}

    monkeypatch.setattr(experiment, "box_siam_arm", lambda env, seed, used: "backbone")
    monkeypatch.setattr(experiment, "train_box_head_arm", fake_head)
    monkeypatch.setattr(experiment, "probe_box_head", fake_probe)
    heads = []
    monkeypatch.setattr(experiment, "choose_tracker_options",
                        lambda env, seeds, chosen, h: (heads.append(h), (chosen, {}))[1])
    chosen, record = experiment.choose_box_head_settings(
        stages.TrackingRun(cfg, Log(), data), cfg.seeds)
    assert trained == [(1, None), (2, 1), (3, 2)]  # one run, through the lengths
    val = seqs[-1].name
    assert probed == [(val, 1), (val, 2), (val, 3), ("test_0", 2)]
    assert chosen["nce+"].steps == 2 and record["choice"]["nce+"]["steps"] == 2
    assert record["choice"]["nce+"]["candidate"].endswith(", 2 steps")
    assert [h.model.steps for h in heads[0].values()] == [2]


def test_tracker_options_are_chosen_by_validation_auc(monkeypatch):
    """choose_tracker_options with tracking replaced by a fake: every option of every
    method and seed is tracked on the validation split only, the coarse tracker once
    per seed, the choice is the best mean AUC over seeds, and the record says whether
    it beats the coarse tracker."""
    cfg = tiny("--config.seeds=0,1", "--config.box_head_methods=nce+,kld-is",
               "--config.tracker_choices=centre+size,size-only")
    seqs = [SimpleNamespace(name=f"train_{i}") for i in range(cfg.num_train_sequences)]
    data = stages.TrackingData(train=seqs, eval_sets={}, identity={"train": {"t": 1}})
    tracked = []
    auc = {("nce+", False): 0.40, ("nce+", True): 0.30, ("kld-is", True): 0.20,
           ("kld-is", False): 0.10}

    def fake_runner(model, settings, refine=True):
        return (model, settings.refine_center if refine else None)

    def fake_evaluate(ctx, name, identity, eval_set, sequences, run, *, progress_desc):
        method, centre = run
        tracked.append((name, eval_set, [q.name for q in sequences], centre))
        return [{"auc": 0.35 if centre is None else auc[(method, centre)]}]

    class Log:
        log = staticmethod(_quiet)

    monkeypatch.setattr(experiment, "box_head_runner", fake_runner)
    monkeypatch.setattr(stages, "evaluate", fake_evaluate)
    monkeypatch.setattr(stages, "scores", lambda recs, seqs: {"auc": recs[0]["auc"]})
    chosen = {m: recipe.dataclasses.replace(cfg.box_head, method=m)
              for m in ("nce+", "kld-is")}
    heads = {(m, s): stages.Trained(m, {"trained": {"backbone": {"b": s}, "m": m}})
             for m in chosen for s in (0, 1)}
    out, record = experiment.choose_tracker_options(
        stages.TrackingRun(cfg, Log(), data), (0, 1), chosen, heads)
    val = [q.name for q in seqs[-cfg.validation_sequences:]]
    assert {(t[1], tuple(t[2])) for t in tracked} == {("validation", tuple(val))}
    assert sum(t[3] is None for t in tracked) == 2  # the coarse tracker, once a seed
    assert len(tracked) == 2 + 2 * 2 * 2  # + seeds x methods x options
    assert out["nce+"].refine_center is False and out["kld-is"].refine_center is True
    assert out["nce+"].step_lengths == chosen["nce+"].step_lengths
    assert record["choice"] == {"nce+": "size-only", "kld-is": "centre+size"}
    assert record["auc"]["nce+"]["size-only"] == [0.40, 0.40]
    assert record["beats_coarse"] == {"nce+": True, "kld-is": False}
    md = box_head_report.tracker_table(record)
    assert "| size-only | 40.0 * | 10.0 |" in md
    assert "| coarse (no refinement) | 35.0 | 35.0 |" in md
    assert "| refined beats coarse | yes | no: not worth tracking with |" in md


def test_unknown_tracker_choices_are_refused():
    with pytest.raises(ConfigError, match="tracker_choices"):
        tiny("--config.tracker_choices=size-only,centre-only")


def test_the_run_counts_its_training_stages():
    """"stage i of n": per seed a Box-Siam and a head per loss, training sigmas and
    training length (tiny: 2 lengths); the MoCo start once; other experiments None."""
    assert recipe.count_stages(tiny()) == 1 + 4 * 2
    assert recipe.count_stages(tiny("--config.seeds=0,1", "--config.sigma_grid="
                                    "0.05,0.5;0.1,1.0")) == 2 * (1 + 4 * 2 * 2)
    assert recipe.count_stages(tiny("--config.init=moco", "--config.backbone=resnet18")
                               ) == 1 + 4 * 2 + 1
    box_siam = load_config(f"{ROOT / 'experiments/tracking/siamfc_box.py'}:tiny")
    assert recipe.count_stages(box_siam) == len(box_siam.seeds)


def test_a_one_seed_report_gives_each_difference_once_and_no_verdict():
    score = {k: {"mean": 0.5, "sd": None} for k in ("auc", "precision", "norm_precision",
                                                     "ao", "sr50", "sr75", "fps")}
    one = dict(_paired(-0.044, None, 0.024), per_seed=[-0.044], seeds=[0])
    summary = {"generated-test": {"box-siam": score, "box-head-nce+": score,
                                  "box-head-nce+ vs box-siam": one}}
    md = box_head_report.box_head_markdown(
        summary, [("box-head-nce+", "box-siam")], {"sequences": ["train_00009"], "score": {
            "nce+": {"steps x1": [0.4]}}, "choice": {"nce+": {"candidate": "steps x1"}}},
        title="t", seeds=(0,))
    assert "one seed, so the standard error is over the test sequences alone" in md
    assert "- box head, NCE+ - Box-Siam (SiamFC on boxes): -4.4 (se 2.4)" in md
    assert "no verdict" in md and md.count("no verdict") == 1  # said once, not per pair
    assert "What holds here" not in md
