"""The MoCo-pretrained start of the tracking backbones (`--config.init=moco`,
`ebm_jax.recipes.tracking.backbone_pretraining`): bad settings refused by name, the start is the
MoCo stage's query backbone (trained once, then read), the stages' identities record
the MoCo stage, its frames exclude a validation split, and the probe and a tiny run
report it."""

import json

import numpy as np
import pytest

from ebm_jax.config import ConfigError
from ebm_jax.recipes import run_experiment
from tests.recipes.test_backbones import EXPERIMENTS, _quiet, tiny

MOCO = ("--config.backbone=resnet18", "--config.init=moco", "--config.moco.steps=2",
        "--config.moco.batch_size=8", "--config.moco.crops=16",
        "--config.moco.crop_size=32", "--config.moco.input_size=32",
        "--config.moco.queue_size=16", "--config.moco.num_splits=2",
        "--config.moco.probe_size=32", "--config.moco.probe_epochs=2")

# a minute or more on 2 CPU cores: in `make test-heavy` (and CI), not `make test`
pytestmark = pytest.mark.heavy


@pytest.mark.parametrize("overrides, message", [
    (("--config.init=moco",), r"--config.init=moco.*--config.backbone=resnet18"),
    (("--config.init=imagenet",), r"--config.init must be one of"),
    (("--config.backbone=resnet18", "--config.init=moco", "--config.pretrained=/x.pth"),
     r"--config.init=moco and --config.pretrained"),
    (("--config.moco.num_splits=3",), r"--config.moco.num_splits must be a divisor"),
    (("--config.moco.queue_size=100",), r"--config.moco.queue_size must be a multiple"),
    (("--config.moco.input_size=128",), r"--config.moco.input_size must be <= "),
    (("--config.moco.augment=none",), r"--config.moco.augment must be one of"),
    (("--config.moco.temperature=0",), r"--config.moco.temperature must be a number"),
])
def test_bad_start_settings_name_the_field(overrides, message):
    with pytest.raises(ConfigError, match=message):
        tiny(*overrides)


@pytest.fixture(scope="module")
def moco_run(tmp_path_factory):
    from ebm_jax.recipes.tracking import stages as ts
    from ebm_jax.train.stages import RunContext

    root = tmp_path_factory.mktemp("moco")
    cfg = tiny(*MOCO)
    ctx = RunContext(root / "runs", seed=cfg.seed, progress=False, log=_quiet)
    return cfg, ctx, ts.open_data(cfg, ctx)


def test_the_start_is_the_moco_query_backbone_trained_once(moco_run):
    from flax import nnx

    from ebm_jax.recipes.tracking import stages as ts
    from ebm_jax.recipes.tracking.backbone_pretraining import moco_stage, pretrained_backbone

    cfg, ctx, data = moco_run
    a = ts.build_model(cfg, ctx, "box-siam-s0", data)
    (stage_dir,) = ctx.workdir.glob("moco-s0-*")
    steps = sorted(p.name for p in (stage_dir / "checkpoints").iterdir())
    b = ts.build_model(cfg, ctx, "box-siam-s1", data)  # another seed: the same start
    assert sorted(p.name for p in (stage_dir / "checkpoints").iterdir()) == steps
    import jax

    for x, y in zip(jax.tree.leaves(nnx.state(a)), jax.tree.leaves(nnx.state(b))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # every weight and statistic is MoCo's (the head is left behind), none the random start
    moco = pretrained_backbone(cfg, ctx, data)
    np.testing.assert_array_equal(np.asarray(a.adjust.kernel[...]),
                                  np.asarray(moco.adjust.kernel[...]))
    np.testing.assert_array_equal(np.asarray(a.layer2[0].bn1.mean[...]),
                                  np.asarray(moco.layer2[0].bn1.mean[...]))
    assert float(np.abs(np.asarray(moco.layer2[0].bn1.mean[...])).sum()) > 0
    random = ts.build_model(tiny("--config.backbone=resnet18"), ctx, "box-siam-s0")
    assert not np.array_equal(np.asarray(a.conv1.kernel[...]),
                              np.asarray(random.conv1.kernel[...]))
    # the identity names the MoCo stage; without data it cannot be known
    identity = ts.backbone_identity(cfg, data)
    assert identity["moco"] == moco_stage(cfg, ts.held_out(data, cfg)).full_identity
    assert identity["moco"]["moco"]["steps"] == 2
    with pytest.raises(ValueError, match="init='moco'.*needs the run's data"):
        ts.backbone_identity(cfg)


def test_the_key_encoder_is_the_momentum_average_of_the_query_encoder(moco_run):
    """One MoCo step: the optimizer moves the query encoder only, and the key encoder
    becomes m * key + (1 - m) * query of the weights before the step (eq. 2 of He et
    al.), not a random network that weight decay shrinks."""
    import jax
    from flax import nnx

    from ebm_jax.recipes.tracking.backbone_pretraining import moco_training
    from ebm_jax.train import merge_model

    cfg, ctx, data = moco_run
    _, graphdef, state, step, batches = moco_training(cfg, ctx, data)
    before = merge_model(graphdef, state)
    query0, key0 = (jax.tree.map(np.array, nnx.state(e, nnx.Param))
                    for e in (before.query, before.key_encoder))
    # the key encoder starts as a copy of the query encoder: move the query first so
    # that the average is told apart from either
    state = state.replace(params=jax.tree.map(lambda p: p + 0.5, state.params))
    query0 = jax.tree.map(lambda p: p + 0.5, query0)
    state, _ = step(state, batches(0))
    after = merge_model(graphdef, state)
    m = cfg.moco.momentum
    leaves = zip(jax.tree.leaves(nnx.state(after.key_encoder, nnx.Param)),
                 jax.tree.leaves(key0), jax.tree.leaves(query0))
    for k1, k0, q0 in leaves:
        # one multiply-add per weight in float32: a few ulps of the weights' scale
        np.testing.assert_allclose(np.asarray(k1), m * k0 + (1 - m) * q0,
                                   rtol=1e-6, atol=1e-6)
    moved = [not np.array_equal(np.asarray(a), b) for a, b in zip(
        jax.tree.leaves(nnx.state(after.query, nnx.Param)), jax.tree.leaves(query0))]
    assert any(moved)


def test_a_validation_split_is_left_out_of_the_pretraining_frames(moco_run):
    import dataclasses

    from ebm_jax.recipes.tracking import stages as ts
    from ebm_jax.recipes.tracking.backbone_pretraining import moco_stage

    cfg, _, data = moco_run
    held = dataclasses.replace(cfg, validation_sequences=1)
    full, less = moco_stage(cfg, data), moco_stage(held, ts.held_out(data, held))
    assert less.identity["frames"] != full.identity["frames"]
    assert less.identity["frames"]["held_out_last"] == 1
    # data already held out (SoCL's) is not held out twice
    assert moco_stage(held, ts.held_out(ts.held_out(data, held), held)).identity == \
        less.identity
    assert len(ts.training_split(ts.held_out(data, held), held)[0]) == len(data.train) - 1


def test_the_probe_scores_moco_beside_random_and_is_cached(moco_run):
    from ebm_jax.recipes.tracking.backbone_pretraining import probe

    cfg, ctx, data = moco_run
    result = probe(cfg, ctx, data)
    assert result["images"] == [2694, 1800]
    for arm in ("random", "moco"):
        assert 0.0 <= result[arm]["knn"] <= 100.0 and 0.0 <= result[arm]["linear"] <= 100.0
    (cached,) = ctx.workdir.glob("moco-probe-*/result.json")
    assert json.loads(cached.read_text())["result"]["moco"] == result["moco"]


def test_the_probe_on_validation_holds_out_training_digits_and_caches_apart(moco_run):
    from ebm_jax.recipes.tracking.backbone_pretraining import probe

    cfg, ctx, data = moco_run
    test = probe(cfg, ctx, data)
    val = probe(cfg, ctx, data, split="val")
    # 201 of the 1347 training digits (15% of each class, rounded per class) held out,
    # 4 copies each; 2 copies of the other 1146 train
    assert val["split"] == "val" and val["images"] == [2 * 1146, 4 * 201]
    assert len(list(ctx.workdir.glob("moco-probe-*/result.json"))) == 2
    assert probe(cfg, ctx, data) == test
    with pytest.raises(ValueError, match="split must be 'test' or 'val'"):
        probe(cfg, ctx, data, split="train")


@pytest.mark.slow
def test_box_siam_from_the_moco_start_trains_tracks_and_reports_it(tmp_path):
    report = run_experiment(tiny(*MOCO), workdir=tmp_path / "runs", out=tmp_path / "out",
                            progress=False, log=_quiet)
    text = (tmp_path / "out" / "results.md").read_text()
    assert "ResNet-18 (MoCo) width 0.125" in text and "Backbone start: MoCo" in text
    assert set(report.payload["start"]["probe"]) == {"split", "images", "random", "moco"}
    (stage,) = (tmp_path / "runs").glob("box-siam-s0-*")
    config = json.loads((stage / "run.json").read_text())["config"]
    assert config["moco"]["stage"] == "moco-s0"


TRACKING_CONFIGS = sorted(p.name for p in EXPERIMENTS.glob("*.py"))


@pytest.mark.parametrize("config", TRACKING_CONFIGS)
def test_a_tiny_variant_pretrains_a_tiny_moco_stage(config):
    """`--config.init=moco` on a tiny variant ran the quick profile's 1,500-step MoCo
    stage (some 3 minutes): the tiny presets carry a tiny MoCo stage, whose settings
    (all of them, in the stage's or its probe's identity) give it its own stage."""
    import dataclasses

    from ebm_jax.recipes.tracking.backbone_pretraining import MoCoPretraining, moco_stage

    cfg = tiny("--config.backbone=resnet18", "--config.init=moco", config=config)
    m = cfg.moco
    assert m.steps <= 10 and m.crops <= 64 and m.batch_size <= 16, m
    assert m.crop_size <= 32 and m.input_size <= 32 and m.queue_size <= 32, m
    assert m.probe_size <= 32 and m.probe_epochs <= 5, m

    class Data:  # what the stage's identity reads of the run's data
        identity = {"train": {"generated": "tiny"}}

    quick = dataclasses.replace(cfg, moco=MoCoPretraining())
    stage, quick_stage = moco_stage(cfg, Data), moco_stage(quick, Data)
    assert stage.identity != quick_stage.identity and stage.num_steps == m.steps
    recorded = set(stage.identity["moco"]) | {"probe_size", "probe_epochs"}  # the probe's
    assert recorded == {f.name for f in dataclasses.fields(MoCoPretraining)}


def test_the_moco_start_screen_trains_a_stage_per_setting_and_probes_val(tmp_path):
    """socl_table1_ablation:moco_start (`screen`): each setting its own MoCo stage, the
    chosen one the very stage the moco arms start from, probed on the validation split
    only; the table gives every setting's figures beside the random initialisation."""
    import dataclasses

    from ebm_jax.recipes.tracking import stages as ts
    from ebm_jax.recipes.tracking.backbone_pretraining import moco_stage
    from ebm_jax.train.stages import RunContext

    cfg = tiny("--config.backbone=resnet18", "--config.init=moco",
               "--config.experiment=moco_start",
               "--config.moco_screen=chosen,queue as large as the crops",
               config="socl_table1_ablation.py")
    report = run_experiment(cfg, workdir=tmp_path / "runs", out=tmp_path / "out",
                            progress=False, log=_quiet)
    screen = report.payload["tables"]["screen"]
    assert list(screen) == ["chosen", "queue as large as the crops"]
    chosen, large = screen["chosen"], screen["queue as large as the crops"]
    assert chosen["settings"] == dataclasses.asdict(cfg.moco)
    half = cfg.moco.crops // 2
    assert large["settings"]["crops"] == large["settings"]["queue_size"] == half
    for row in screen.values():
        assert row["probe"]["split"] == "val" and np.isfinite(row["final_loss"])
        k = row["settings"]["queue_size"]
        assert row["chance_loss"] == pytest.approx(np.log(k + 1))
        for arm in ("random", "moco"):
            assert 0.0 <= row["probe"][arm]["linear"] <= 100.0
    # one random initialisation (the stages' name and seed), two pretrainings
    for what in ("knn", "linear"):
        assert chosen["probe"]["random"][what] == large["probe"]["random"][what]
    assert len(list((tmp_path / "runs").glob("moco-s0-*"))) == 2
    # the chosen row's stage is the one Table 1's moco arms start from
    ctx = RunContext(tmp_path / "runs", seed=cfg.seed, progress=False, log=_quiet)
    table1 = dataclasses.replace(cfg, experiment="table1")
    data = ts.held_out(ts.open_data(table1, ctx), table1)
    assert moco_stage(table1, data).dir(ctx).exists()
    text = (tmp_path / "out" / "results.md").read_text()
    assert "### Scores" in text and "random initialisation" in text
    assert f"queue {half} over {half} crops" in text
    assert (tmp_path / "out" / "probe.png").is_file()



@pytest.mark.parametrize("overrides, message", [
    (("--config.moco_per_seed=true",),
     r"--config.moco_per_seed=true needs --config.init=moco"),
    (("--config.backbone=resnet18", "--config.init=moco", "--config.moco_per_seed=true",
      "--config.experiment=moco_start"),
     r"moco_per_seed=true does not apply to the moco_start"),
])
def test_a_start_per_seed_needs_the_moco_start_and_trained_arms(overrides, message):
    with pytest.raises(ConfigError, match=message):
        tiny(*overrides, config="socl_table1_ablation.py")


def test_a_moco_start_per_seed_pretrains_one_per_seed_and_trains_each_seeds_arms_on_it(
        tmp_path):
    """`--config.moco_per_seed`: seed s's arms start from MoCo seed moco.seed + s, its own
    stage (`moco-s<s>`), recorded in every SoCL stage's identity; the report gives each
    start's loss and probe. Without it, every seed shares one start and the config's
    identity is what it was before the field (stored runs stay fresh)."""
    import dataclasses

    from flax import nnx

    from ebm_jax.config import config_identity
    from ebm_jax.recipes.tracking import stages as ts
    from ebm_jax.recipes.tracking.socl_arms import seed_config
    from ebm_jax.recipes.tracking.socl_experiments import count_stages
    from ebm_jax.train.stages import RunContext

    cfg = tiny(*MOCO, "--config.moco_per_seed=true", "--config.seeds=0,1",
               "--config.moco.seed=3", config="socl_table1_ablation.py")
    shared = dataclasses.replace(cfg, moco_per_seed=False)
    assert seed_config(shared, 1) is shared
    assert [seed_config(cfg, s).moco.seed for s in (0, 1)] == [3, 4]
    assert config_identity(shared) != config_identity(cfg)
    assert count_stages(cfg) == count_stages(shared) + 1  # two MoCo stages, not one
    report = run_experiment(cfg, workdir=tmp_path / "runs", out=tmp_path / "out",
                            progress=False, log=_quiet)
    runs = tmp_path / "runs"
    assert sorted(p.name.split("-")[1] for p in runs.glob("moco-s*")) == ["s3", "s4"]
    for seed, moco in ((0, "moco-s3"), (1, "moco-s4")):
        stages = sorted(runs.glob(f"socl-s{seed}-*"))
        assert len(stages) == 4, sorted(p.name for p in runs.iterdir())  # GST .. +LST
        for stage in stages:
            recorded = json.loads((stage / "run.json").read_text())["config"]["moco"]
            assert recorded["stage"] == moco, (stage.name, recorded["stage"])
    ctx = RunContext(runs, seed=cfg.seed, progress=False, log=_quiet)
    data = ts.open_data(cfg, ctx)
    a, b = (nnx.state(ts.build_model(seed_config(cfg, s), ctx, f"socl-s{s}", data))
            for s in (0, 1))
    assert any(not np.array_equal(x, y) for x, y in
               zip(jax_leaves(a), jax_leaves(b))), "the seeds' starts are one start"
    per_seed = report.payload["start"]["per_seed"]
    assert [(r["seed"], r["settings"]["seed"]) for r in per_seed] == [(0, 3), (1, 4)]
    assert all(np.isfinite(r["final_loss"]) for r in per_seed)
    assert per_seed[0]["final_loss"] != per_seed[1]["final_loss"]
    assert report.payload["start"]["settings"]["seed"] == 3
    text = (tmp_path / "out" / "results.md").read_text()
    assert "Backbone starts, one per training seed" in text
    assert ", a MoCo start per seed" in text


def jax_leaves(tree):
    import jax

    return [np.asarray(x) for x in jax.tree.leaves(tree)]
