"""The SoCL recipe's settings: the LST study on its validation split, the loss switches
and fine-tuning options a stage records, the TOP temperature's calibration and the
diagnostics of each arm's own TOP maps."""

import json

import numpy as np
import pytest

from ebm_jax.config import ConfigError
from ebm_jax.recipes import run_experiment
from ebm_jax.recipes.tracking import socl as recipe
from tests.recipes.socl_configs import quiet as _quiet
from tests.recipes.socl_configs import tiny


def test_the_lst_study_needs_a_validation_split():
    with pytest.raises(ConfigError, match="--config.validation_sequences must be >= 1"):
        tiny("lst", "--config.validation_sequences=0")


def test_the_moco_start_screen_needs_the_moco_start_and_known_settings():
    with pytest.raises(ConfigError, match="--config.init must be 'moco' for the moco_start"):
        tiny("table1", "--config.experiment=moco_start")
    with pytest.raises(ConfigError, match="--config.moco_screen must be a non-empty list "
                                          r"drawn from \['queue as large as the crops'"):
        tiny("table1", "--config.experiment=moco_start", "--config.backbone=resnet18", "--config.init=moco",
             "--config.moco_screen=bigger")


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


def test_stages_record_the_later_loss_switches_only_when_set():
    """Stages cached before eq. 10's and the mix-ups' switches existed keep their
    identities: the switches at the values of those stages are not recorded. eq. 10 as
    printed, the default now, is recorded, so that no stage of the old default (the
    symmetrised loss) is reused for it."""
    from ebm_jax.contrastive.socl import SoCLSettings
    from ebm_jax.recipes.tracking.socl_stages import settings_identity

    assert SoCLSettings().symmetric is False
    ident = settings_identity(SoCLSettings())
    assert ident["symmetric"] is False and "mix_scope" not in ident
    assert ident["b_p"] == 0.6 and ident["include_positive"] is False
    old_default = settings_identity(SoCLSettings(symmetric=True))
    assert "symmetric" not in old_default and old_default != ident
    assert settings_identity(SoCLSettings(mix_scope="pair"))["mix_scope"] == "pair"


def test_stages_record_the_fine_tuning_options_only_when_set():
    from ebm_jax.recipes.tracking.socl_stages import fine_tune_identity

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
    from ebm_jax.recipes.tracking.socl_stages import socl_settings

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
    from ebm_jax.recipes.tracking.socl_stages import calibration_maps, top_temperature
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


@pytest.mark.parametrize("backbone", ["alexnet", "resnet18"])
def test_region_fields_grow_the_region_to_whole_receptive_fields(backbone):
    """`--config.region_fields=2`: the region at least twice one embedding cell's field,
    on the same grid alignment (input_size's residue modulo the stride), the frame's
    scale kept; idempotent, and a region already that large is left alone."""
    import dataclasses as dc

    from ebm_jax.models.tracking_backbones import backbone_class

    net = backbone_class(backbone)
    field, stride = net.receptive_field(), net.embedding_grid(159)[1]
    base = recipe.Config(backbone=backbone)
    grown = recipe.Config(backbone=backbone, region_fields=2.0)
    assert base.input_size == 159 and base.region_fields == 0.0
    assert 2 * field <= grown.input_size < 2 * field + stride
    assert (grown.input_size - 159) % stride == 0
    assert grown.input_size == {"alexnet": 175, "resnet18": 455}[backbone]
    # frame px per input px as before: the target keeps its size in input pixels
    assert grown.context_side / grown.input_size == pytest.approx(144.0 / 159, rel=1e-12)
    if backbone == "alexnet":  # VALID convolutions: the region fills the grid exactly
        g = net.embedding_grid(grown.input_size)[0]
        assert grown.input_size == field + stride * (g - 1)
    assert dc.replace(grown) == grown
    wide = recipe.Config(backbone=backbone, input_size=1023, region_fields=2.0)
    assert (wide.input_size, wide.context_side) == (1023, 144.0)


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


def test_scene_groups_reach_the_training_split_and_the_socl_batches(monkeypatch, tmp_path):
    from ebm_jax.data import socl_pairs
    from ebm_jax.recipes.tracking.data import generated_specs

    class Ctx:
        @staticmethod
        def seed_of(stage, purpose):
            return len(f"{stage}/{purpose}")

    cfg = tiny("table1", "--config.scene_group=2")
    specs = generated_specs(cfg, Ctx)
    assert specs["train"].scene_group == 2 and specs["test"].scene_group == 1
    assert not specs["train"].scene_path
    specs = generated_specs(tiny("table1", "--config.scene_group=2",
                                 "--config.scene_path=True"), Ctx)
    assert specs["train"].scene_path and not specs["test"].scene_path
    assert specs["test"].scene_group == 1
    assert generated_specs(tiny("table1"), Ctx)["train"].scene_group == 1
    with pytest.raises(ConfigError, match="--config.scene_group groups the generated "
                                          "training split's sequences: it needs "
                                          "--config.train_data=generated"):
        tiny("table1", "--config.scene_group=2", "--config.train_data=got10k")

    class Seen(Exception):
        pass

    def seen(sequences, *args, groups=None, **kwargs):
        raise Seen([s.name for s in sequences], groups)

    monkeypatch.setattr(socl_pairs, "context_batches", seen)
    with pytest.raises(Seen) as batches:
        run_experiment(cfg, workdir=tmp_path / "runs", progress=False, log=_quiet)
    names, groups = batches.value.args
    assert len(names) >= 2 and groups == [(int(n.rpartition("_")[2]) - 1) // 2
                                          for n in names]
