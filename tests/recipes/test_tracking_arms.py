"""Arms as values and the one runner of the tracking and SoCL recipes: an arm's training
sees the earlier arms of its seed, its tracker is a value whose settings key the
evaluation, pairs come from the table; the per-item cache honours --restart; config
files start from the recipes' presets and name the variants on a bad one."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from ebm_jax.config import ConfigError, load_config
from ebm_jax.recipes import tracking
from ebm_jax.recipes.tracking import socl, socl_stages
from ebm_jax.recipes.tracking.arms import (
    Arm,
    Tracker,
    Trained,
    pairs_of,
    run_arms,
    training_order,
)
from ebm_jax.train.stages import RunContext
from tests.recipes.small_sequences import small_sequences

EXPERIMENTS = Path(__file__).parents[2] / "experiments" / "tracking"


@dataclasses.dataclass(frozen=True)
class Shift:
    dx: float


def _shifting_run(model, settings):
    """A tracker that moves the first box by model + settings.dx px per frame."""
    def run(seq):
        t = np.arange(len(seq))[:, None]
        boxes = np.asarray(seq.boxes[:1], float) + (model + settings.dx) * t * [1, 0, 0, 0]
        return boxes, np.full(len(seq), 0.01)
    return run


def test_run_arms_passes_earlier_models_and_keys_evaluations_by_tracker(tmp_path):
    seqs = small_sequences(tmp_path / "data")
    seen = []

    def base(env, seed, earlier):
        seen.append(("base", seed, sorted(earlier)))
        return Trained(0.0, {"trained": {"seed": seed}}, None, f"base-s{seed}")

    def on_top(env, seed, earlier):
        seen.append(("on-top", seed, sorted(earlier)))
        return Trained(earlier["base"].model + 1.0, {"on": earlier["base"].identity})

    arms = [Arm("on top", "on-top", on_top, tracker=Tracker("shift", Shift(2.0),
                                                              _shifting_run),
                uses=("base",), compared_with=("base", "static")),
            Arm("base", "base", base, tracker=Tracker("shift", Shift(0.0), _shifting_run))]
    ctx = RunContext(tmp_path / "w", lock=False, progress=False, log=lambda _: None)
    res = run_arms(None, ctx, arms, (0, 1), {"test": ({"set": 1}, seqs)})
    assert seen == [("base", 0, []), ("on-top", 0, ["base"]), ("base", 1, []),
                    ("on-top", 1, ["base"])]
    assert [r["seed"] for r in res.rows["test"]["on top"]] == [0, 1]
    assert list(res.rows["test"]) == ["on top", "base"]  # the table's order
    boxes = np.asarray(res.records["test"]["on top"][0][0]["boxes"])
    np.testing.assert_array_equal(boxes[:, 0], seqs[0].boxes[0][0] + 3.0 * np.arange(3))
    assert res.static["test"]["num_sequences"] == 2
    assert pairs_of(arms) == [("on top", "base"), ("on top", "static")]
    # one evaluation stage per arm and seed, plus the static tracker's
    names = sorted(p.name.rsplit("-", 1)[0] for p in (tmp_path / "w").glob("eval-*"))
    assert names == ["eval-base-s0", "eval-base-s1", "eval-on-top-s0", "eval-on-top-s1",
                     "eval-static"]


def test_pairs_and_uses_name_arms_of_the_table():
    arm = Arm("a", "a", lambda *a: None, compared_with=("nope",))
    with pytest.raises(ValueError, match="'nope'"):
        pairs_of([arm])
    with pytest.raises(ValueError, match="uses 'nope'"):
        training_order([Arm("a", "a", lambda *a: None, uses=("nope",))])
    circle = [Arm("a", "a", lambda *a: None, uses=("b",)),
              Arm("b", "b", lambda *a: None, uses=("a",))]
    with pytest.raises(ValueError, match="circle"):
        training_order(circle)


def test_figure7_pairs_compare_each_value_with_the_configured_one():
    cfg = load_config(f"{EXPERIMENTS / 'socl_figure7_thresholds.py'}:quick",
                      ["--config.theta_b=0.95"])
    pairs = pairs_of(socl.arms_of(cfg))
    assert ("theta_b=0.5", "theta_b=0.95") in pairs
    assert ("theta_b=0.8", "theta_b=0.95") in pairs
    assert ("b_p=0.2", "b_p=0.6") in pairs and len(pairs) == 4


def test_the_top_cache_is_computed_again_on_restart(tmp_path, monkeypatch):
    from ebm_jax.tracking import top_maps

    calls = []

    def fake_top_boxes(frame, point, settings, seed):
        calls.append(seed)
        return np.tile([[1.0, 1.0, 5.0, 5.0]], (2, 1)), np.array([0.9, 0.5])

    monkeypatch.setattr(top_maps, "top_boxes", fake_top_boxes)
    seqs = small_sequences(tmp_path / "data")
    ctx = RunContext(tmp_path / "w", lock=False, progress=False, log=lambda _: None)
    socl_stages.top_cache(ctx, seqs, {"d": 1}, "clean", 1)
    socl_stages.top_cache(ctx, seqs, {"d": 1}, "clean", 1)
    assert len(calls) == 6  # the second time from the cache
    again = RunContext(tmp_path / "w", lock=False, progress=False, restart=True,
                       log=lambda _: None)
    socl_stages.top_cache(again, seqs, {"d": 1}, "clean", 1)
    assert len(calls) == 12


CONFIGS = sorted(EXPERIMENTS.glob("*.py"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_config_names_its_variants_on_an_unknown_one(path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(ConfigError, match=r"quick.*tiny.*paper.*'huge'"):
        module.get_config("huge")
    for variant in module.VARIANTS:
        cfg = module.get_config(variant)
        assert isinstance(cfg, tracking.Config)


def test_config_defaults_are_the_quick_preset_of_every_config():
    quick = tracking.Config()
    for path in CONFIGS:
        cfg = load_config(f"{path}:quick")
        for field in ("num_test_sequences", "frame_height", "frame_width", "width",
                      "steps", "batch_size", "seeds"):
            assert getattr(cfg, field) == getattr(quick, field), (path.name, field)
    assert (quick.num_train_sequences, quick.num_frames) == (50, 80)
    # configs that share stages share their tiny sizes too
    tiny = {p.stem: load_config(f"{p}:tiny") for p in CONFIGS if p.stem.startswith("socl")}
    assert len({(c.width, c.steps, c.socl_steps, c.num_frames) for c in tiny.values()}) == 1


def test_socl_settings_defaults_live_in_one_place():
    from ebm_jax.contrastive.socl import SoCLSettings

    cfg = socl.Config()
    base = SoCLSettings()
    assert (cfg.tau, cfg.theta_b, cfg.b_p) == (base.tau, base.theta_b, base.b_p)
    assert socl_stages.socl_settings(cfg) == base


def test_an_unknown_experiment_names_the_field():
    with pytest.raises(ConfigError, match="--config.experiment"):
        load_config(f"{EXPERIMENTS / 'siamfc_box.py'}:tiny", ["--config.experiment=nope"])
    assert [a.label for a in tracking.EXPERIMENTS["box-siam"].arms(tracking.Config())] == [
        "random", "box-siam"]
