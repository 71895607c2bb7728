"""The box head's training stage on a tiny generated split: a few steps change the
head (finite losses) and leave a frozen backbone as it was, `joint` trains both, an
interrupted stage resumes to bit-identical parameters, and the stage's identity holds
the backbone's identity and every setting; the ATOM-like head (`head="atom"`) from the
settings and the experiment's config."""

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from ebm_jax.data.sequences import read_got10k
from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split
from ebm_jax.models.alexnet import SiamFCAlexNet
from ebm_jax.recipes.tracking import box_head_stages
from ebm_jax.recipes.tracking.box_head_stages import train_box_head
from ebm_jax.tracking.box_head import BoxHeadSettings
from ebm_jax.train.stages import RunContext

SETTINGS = BoxHeadSettings(method="nce+", num_samples=8, steps=4, batch_size=2, width=8,
                           hidden=16)

# a minute or more on 2 CPU cores: in `make test-heavy` (and CI), not `make test`
pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    dest = tmp_path_factory.mktemp("data") / "train"
    generate_tracking_split(dest, TrackingSpec(split="train", num_sequences=3,
                                               num_frames=8, height=96, width=128),
                            progress=False)
    return read_got10k(dest)


@pytest.fixture(scope="module")
def backbone():
    return SiamFCAlexNet(width=0.125, rngs=nnx.Rngs(0))


def _train(workdir, split, backbone, settings=SETTINGS, **kw):
    with RunContext(workdir, seed=0, progress=False, log=lambda _: None) as ctx:
        return train_box_head(ctx, split, data_identity={"split": "tiny"},
                              backbone=backbone, backbone_identity={"box-siam": "s0"},
                              settings=settings, save_every=2, **kw)


def _leaves(module, *path):
    state = nnx.state(module, nnx.Param)
    for p in path:
        state = state[p]
    return [np.asarray(x) for x in jax.tree.leaves(state)]


@pytest.fixture(scope="module")  # compiles and runs the train step: ~20 s
def trained(tmp_path_factory, split, backbone):
    return _train(tmp_path_factory.mktemp("runs"), split, backbone)


@pytest.mark.slow
def test_training_changes_the_head_only_and_stays_finite(trained, backbone):
    assert trained.figures.steps == 4 and trained.figures.finite
    assert np.isfinite(trained.figures.final_loss)
    initial = box_head_stages.build_box_head(
        backbone, SETTINGS, RunContext.key_of(0, trained.name, "init"))
    changed = [not np.array_equal(a, b) for a, b in zip(_leaves(trained.net.head),
                                                        _leaves(initial))]
    assert any(changed)
    # the frozen backbone: bit for bit the given one
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(trained.net.backbone),
                                                    _leaves(backbone)))
    assert trained.name == "box-head-nce+-s0"
    ident = trained.identity
    assert ident["backbone"] == {"box-siam": "s0"} and ident["joint"] is False
    # the SiamFC processing and the simple head record the fields they had before the
    # PrDiMP processing and the ATOM head
    from ebm_jax.tracking.box_head import ATOM_FIELDS, PRDIMP_FIELDS, TRACKER_OPTIONS
    assert ident["settings"] == {k: v for k, v in dataclasses.asdict(SETTINGS).items()
                                 if k not in PRDIMP_FIELDS + TRACKER_OPTIONS + ATOM_FIELDS}


@pytest.mark.slow
def test_interrupted_stage_resumes_to_the_same_parameters(tmp_path, split, backbone,
                                                          trained, monkeypatch):
    real = box_head_stages.pair_batches

    def dying(*args, **kwargs):
        batches = real(*args, **kwargs)

        def at(step):
            if step == 3:
                raise KeyboardInterrupt
            return batches(step)

        at.num_sequences, at.num_frames = batches.num_sequences, batches.num_frames
        return at

    monkeypatch.setattr(box_head_stages, "pair_batches", dying)
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path / "w", split, backbone)
    monkeypatch.setattr(box_head_stages, "pair_batches", real)
    resumed = _train(tmp_path / "w", split, backbone)
    # the same program on the same inputs, resumed from step 2: bit for bit
    for a, b in zip(_leaves(resumed.net), _leaves(trained.net)):
        assert np.array_equal(a, b)


def test_a_head_continued_from_a_shorter_stage_equals_one_trained_from_scratch(
        tmp_path, split, backbone, trained):
    """Early stopping's candidate lengths cost one run: the 4-step head continued from
    the finished 2-step stage of the same name ends bitwise equal to the 4-step head
    trained from step 0, and the 2-step stage is its own (a candidate to probe)."""
    short = _train(tmp_path / "w", split, backbone,
                   dataclasses.replace(SETTINGS, steps=2))
    continued = _train(tmp_path / "w", split, backbone, prefix_steps=2)
    assert short.identity["settings"]["steps"] == 2 and short.name == continued.name
    for a, b in zip(_leaves(continued.net), _leaves(trained.net)):
        assert np.array_equal(a, b)
    assert any(not np.array_equal(a, b)
               for a, b in zip(_leaves(short.net), _leaves(trained.net)))


@pytest.mark.slow
def test_joint_training_moves_the_backbone_too(tmp_path, split, backbone):
    joint = _train(tmp_path / "w", split, backbone, dataclasses.replace(SETTINGS, steps=2),
                   joint=True)
    assert joint.name == "box-head-nce+-joint-s0" and joint.figures.finite
    assert any(not np.array_equal(a, b) for a, b in zip(_leaves(joint.net.backbone),
                                                        _leaves(backbone)))


def test_identity_holds_the_backbone_and_every_setting(tmp_path, split, backbone,
                                                       monkeypatch):
    """Two stages that differ in the backbone's identity or in any one setting get two
    directories (nothing trains here: the stage's run is replaced)."""
    seen = []

    def no_run(self, ctx, state, step, batches, **kw):
        seen.append(self.dir(ctx).name)
        return state, None

    monkeypatch.setattr(box_head_stages.TrainStage, "run", no_run)
    with RunContext(tmp_path, seed=0, progress=False, log=lambda _: None) as ctx:
        def stage(settings=SETTINGS, backbone_identity=None, **kw):
            train_box_head(ctx, split, data_identity={"split": "tiny"}, backbone=backbone,
                           backbone_identity=backbone_identity or {"box-siam": "s0"},
                           settings=settings, **kw)
            return seen[-1]

        base = stage()
        assert stage() == base
        assert stage(backbone_identity={"box-siam": "s1"}) != base
        for field, value in (("beta", 0.2), ("sigmas", (0.05, 0.4)), ("lr", 2e-3),
                             ("step_lengths", (1e-3,)), ("center_jitter", 0.3)):
            assert stage(dataclasses.replace(SETTINGS, **{field: value})) != base, field
        # the ATOM head's fields count only where it is used
        assert stage(dataclasses.replace(SETTINGS, atom_pool_sizes=(4, 3))) == base
        atom = stage(dataclasses.replace(SETTINGS, head="atom"))
        assert atom != base
        assert stage(dataclasses.replace(SETTINGS, head="atom",
                                         atom_pool_sizes=(4, 3))) != atom
        with pytest.raises(TypeError, match="settings must be a BoxHeadSettings"):
            stage(settings={"method": "nce"})


@pytest.mark.slow
def test_a_trained_head_refines_jittered_boxes_towards_the_target(tmp_path, backbone):
    """200 steps of NCE+ (M = 32) on 8 generated sequences, a random backbone: on pairs
    of another draw, boxes jittered off the target (10% of its size per coordinate)
    gain energy under the tracker's refinement and move towards the target (mean IoU
    0.75 -> 0.84 when written; asserted: a gain of 0.02)."""
    from ebm_jax.data.tracking_pairs import pair_batches
    from ebm_jax.energy.boxes import ascend_boxes
    from ebm_jax.ops.boxes import box_iou
    from ebm_jax.tracking.box_head_training import box_head_crops

    dest = tmp_path / "train"
    generate_tracking_split(dest, TrackingSpec(split="train", num_sequences=8,
                                               num_frames=20, height=96, width=128),
                            progress=False)
    seqs = read_got10k(dest)
    settings = BoxHeadSettings(method="nce+", num_samples=32, steps=200, batch_size=4,
                               lr=2e-3, width=16, hidden=32)
    with RunContext(tmp_path / "w", seed=0, progress=False, log=lambda _: None) as ctx:
        net = train_box_head(ctx, seqs, data_identity={"split": "sanity"},
                             backbone=backbone, backbone_identity={"random": 0},
                             settings=settings).net
    batch = pair_batches(seqs, batch_size=16, max_gap=100, seed=123)(0)
    ref, ref_boxes, test, test_boxes = box_head_crops(jax.random.key(5), batch, settings)
    ref_levels, test_levels = net.levels(ref), net.levels(test)
    rng = np.random.default_rng(0)
    before, after, gain = [], [], []
    for i in range(16):
        m = net.head.modulation([lv[i] for lv in ref_levels], ref_boxes[i])
        t = net.head.test_features([lv[i] for lv in test_levels])
        target = np.asarray(test_boxes[i])
        w, h = target[2] - target[0], target[3] - target[1]
        start = (target + rng.normal(0, 0.1, 4) * np.array([w, h, w, h]))[None]
        start = start.astype(np.float32)
        f0 = net.head.score(m, t, start)
        out, f, _ = ascend_boxes(lambda x, b, c: net.head.score(x[0], x[1], b), (m, t),
                                 start, num_steps=settings.refine_steps,
                                 step_length=settings.step_lengths,
                                 reject_decreasing=settings.reject_decreasing)
        before.append(float(box_iou(start, target[None])[0, 0]))
        after.append(float(box_iou(out, target[None])[0, 0]))
        gain.append(float(f[0] - f0[0]))
    assert min(gain) >= 0.0 and np.mean(gain) > 0.0
    assert np.mean(after) > np.mean(before) + 0.02


# ----------------------------------------------------------------- the ATOM-like head


def test_settings_and_config_select_the_atom_head(backbone):
    """`--config.box_head.head=atom` (and its pools) reach the settings of the box-head
    experiment's config; `build_box_head` then builds an `AtomBoxHead` with them on the
    backbone's levels; bad values are refused by name."""
    from pathlib import Path

    from ebm_jax.config import ConfigError, load_config
    from ebm_jax.models.box_head import BoxEnergyHead
    from ebm_jax.models.box_head_atom import AtomBoxHead
    from ebm_jax.tracking.box_head import ATOM_FIELDS

    config = (Path(__file__).parents[2] / "experiments" / "tracking"
              / "ebm_table4_box_head.py")
    cfg = load_config(f"{config}:tiny", ["box_head.head=atom",
                                         "box_head.atom_pool_sizes=4,2"])
    settings = cfg.box_head
    assert settings.head == "atom" and settings.atom_pool_sizes == (4, 2)
    assert settings.atom_ref_pool_sizes == (3, 1)  # ATOM's, by default
    head = box_head_stages.build_box_head(backbone, settings, jax.random.key(0))
    assert isinstance(head, AtomBoxHead) and head.training
    assert head.pool_sizes == (4, 2) and head.ref_pool_sizes == (3, 1)
    assert head.strides == (8, 8) and head.offsets == (27.0, 43.0)
    assert isinstance(box_head_stages.build_box_head(backbone, SETTINGS, jax.random.key(0)),
                      BoxEnergyHead)
    # the simple head's identity is the one it had before the ATOM head's fields
    assert not set(ATOM_FIELDS) & set(SETTINGS.identity())
    assert set(ATOM_FIELDS) <= set(settings.identity())
    for override, message in (("box_head.head=iou", "BoxHeadSettings.head must be one of"),
                              ("box_head.atom_pool_sizes=0,3",
                               "BoxHeadSettings.atom_pool_sizes must be one or more "
                               "integers >= 1")):
        with pytest.raises(ConfigError, match=message):
            load_config(f"{config}:tiny", [override])
    # pools that do not fit the backbone's two levels: refused when the head is built
    with pytest.raises(ValueError, match=r"ref_pool_sizes must hold one integer >= 1 "
                                         r"per feature level \(2 levels\)"):
        box_head_stages.build_box_head(
            backbone, dataclasses.replace(settings, atom_ref_pool_sizes=(3,)),
            jax.random.key(0))


def test_the_tracker_runs_an_atom_head_in_train_mode_on_running_statistics(split,
                                                                           backbone):
    """The tracker takes the head's per-frame parts, which use the running statistics
    whatever the head's mode: a head fresh from `build_box_head` (train mode) tracks a
    sequence to finite boxes and its statistics stay as they were."""
    from ebm_jax.models.box_head import BoxHeadNet

    settings = dataclasses.replace(SETTINGS, head="atom", num_candidates=3, top_k=2,
                                   refine_steps=2)
    head = box_head_stages.build_box_head(backbone, settings, jax.random.key(0))
    net = BoxHeadNet(backbone, head)
    stats = [np.asarray(x) for x in jax.tree.leaves(nnx.state(net.head, nnx.BatchStat))]
    boxes, _ = box_head_stages.box_head_runner(net, settings)(split[0])
    assert np.asarray(boxes).shape == (len(split[0].boxes), 4)
    assert np.all(np.isfinite(np.asarray(boxes)))
    assert all(np.array_equal(a, np.asarray(b)) for a, b in zip(
        stats, jax.tree.leaves(nnx.state(net.head, nnx.BatchStat))))


def test_a_tiny_stage_trains_the_atom_head(tmp_path, split, backbone):
    """Two steps of the stage with `head="atom"`: finite, the head's parameters and
    batch-norm statistics moved; the trained net then tracks (eval statistics)."""
    settings = dataclasses.replace(SETTINGS, head="atom", steps=2)
    trained = _train(tmp_path / "w", split, backbone, settings)
    assert trained.figures.steps == 2 and trained.figures.finite
    initial = box_head_stages.build_box_head(
        backbone, settings, RunContext.key_of(0, trained.name, "init"))
    assert any(not np.array_equal(a, b) for a, b in zip(_leaves(trained.net.head),
                                                        _leaves(initial)))
    stats = lambda m: [np.asarray(x) for x in  # noqa: E731
                       jax.tree.leaves(nnx.state(m, nnx.BatchStat))]
    assert all(not np.array_equal(a, b) for a, b in zip(stats(trained.net.head),
                                                        stats(initial)))
    boxes, _ = box_head_stages.box_head_runner(trained.net, settings)(split[0])
    assert np.all(np.isfinite(np.asarray(boxes)))
