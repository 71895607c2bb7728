"""The tracking recipes' backbone choice (`--config.backbone`, `--config.pretrained`):
bad settings and a pretrained file that does not fit refused before training, and the
tiny Box-Siam config on ResNet-18 from a torchvision-layout file (written here, no
torch): its weights are the start, the stage records the file's content and not its
path, and the SoCL feature grid of the padded backbone."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from ebm_jax.config import ConfigError, load_config
from ebm_jax.recipes import run_experiment
from tests.models.torch_files import random_resnet18_state, write_torch_zip

EXPERIMENTS = Path(__file__).parents[2] / "experiments" / "tracking"


def tiny(*overrides: str, config="siamfc_box.py"):
    return load_config(f"{EXPERIMENTS / config}:tiny", overrides)


def _quiet(_):
    pass


@pytest.mark.parametrize("overrides, message", [
    (("--config.backbone=vgg",), r"--config.backbone.*alexnet.*resnet18"),
    (("--config.pretrained=/x/resnet18.pth",), r"--config.pretrained.*"
                                                r"--config.backbone=resnet18"),
])
def test_bad_backbone_settings_name_the_field(overrides, message):
    with pytest.raises(ConfigError, match=message):
        tiny(*overrides)


def test_a_pretrained_file_that_does_not_fit_fails_before_training(tmp_path):
    path = tmp_path / "resnet18-w0125.pth"
    write_torch_zip(path, random_resnet18_state(np.random.default_rng(0), (8, 8, 16, 32)))
    with pytest.raises(ValueError, match="--config.pretrained.*does not exist"):
        run_experiment(tiny("--config.backbone=resnet18",
                            f"--config.pretrained={tmp_path / 'missing.pth'}"),
                       workdir=tmp_path / "a", progress=False, log=_quiet)
    # width 0.25 needs conv1 of 16 channels: the file has 8
    with pytest.raises(ConfigError, match=r"resnet18-w0125.pth.*conv1.weight"):
        run_experiment(tiny("--config.backbone=resnet18", "--config.width=0.25",
                            f"--config.pretrained={path}"),
                       workdir=tmp_path / "b", progress=False, log=_quiet)
    assert not list((tmp_path / "b").glob("box-siam-*"))


def test_an_empty_pretrained_path_is_refused_not_read_as_no_file():
    with pytest.raises(ConfigError, match=r"--config.pretrained is empty"):
        tiny("--config.backbone=resnet18", "--config.pretrained=")
    assert tiny("--config.backbone=resnet18", "--config.pretrained=none").pretrained is None


@pytest.mark.parametrize("case", ["nan", "payload"])
def test_a_bad_pretrained_file_is_refused_first_and_fast(tmp_path, monkeypatch, case):
    """A file with a NaN weight, or one whose pickle would run code: refused naming the
    file (and the first non-finite tensor) before the generated data or any model is
    built."""
    import os as os_module

    from ebm_jax.recipes.tracking import stages as tracking_stages
    from tests.models.torch_files import write_torch_legacy

    state = random_resnet18_state(np.random.default_rng(0), (8, 8, 16, 32))
    path = tmp_path / f"{case}.pth"
    marker = tmp_path / "RAN"
    if case == "nan":
        state["layer1.0.conv1.weight"][0, 0, 0, 0] = np.nan
        write_torch_legacy(path, state)
    else:
        class Call:
            def __reduce__(self):
                return os_module.system, (f"touch {marker}",)

        write_torch_legacy(path, state, parts={2: Call()})

    def built_too_early(*_, **__):
        raise AssertionError("the generated data was made before the file was read")

    monkeypatch.setattr(tracking_stages, "generated_specs", built_too_early)
    message = "layer1.0.conv1.weight holds 1 non-finite" if case == "nan" else "refused"
    with pytest.raises(ConfigError, match=rf"--config.pretrained=.*{case}.pth.*{message}"):
        run_experiment(tiny("--config.backbone=resnet18", f"--config.pretrained={path}"),
                       workdir=tmp_path / "run", progress=False, log=_quiet)
    assert not marker.exists()
    assert not list((tmp_path / "run").glob("box-siam-*"))


def _pretrained_file(tmp_path):
    state = random_resnet18_state(np.random.default_rng(1), (8, 8, 16, 32))
    path = tmp_path / "weights" / "resnet18-test.pth"
    path.parent.mkdir()
    write_torch_zip(path, state)
    return state, path


def test_the_start_is_the_file_and_the_identity_its_content(tmp_path):
    from ebm_jax.recipes.tracking.stages import backbone_identity, build_model
    from ebm_jax.train.stages import RunContext

    state, path = _pretrained_file(tmp_path)
    cfg = tiny("--config.backbone=resnet18", f"--config.pretrained={path}")
    assert cfg.width == 0.125
    model = build_model(cfg, RunContext(tmp_path / "runs", seed=cfg.seed), "box-siam-s0")
    np.testing.assert_array_equal(np.asarray(model.conv1.kernel[...]),
                                  state["conv1.weight"].transpose(2, 3, 1, 0))
    np.testing.assert_array_equal(np.asarray(model.layer3[1].bn2.mean[...]),
                                  state["layer3.1.bn2.running_mean"])
    identity = backbone_identity(cfg)
    assert identity["backbone"] == "resnet18" and len(identity["pretrained"]) == 64
    assert str(path) not in json.dumps(identity)
    # the same file by another path: the same identity; another file: another
    os.symlink(path.parent, tmp_path / "elsewhere")
    other = tmp_path / "elsewhere" / ".." / "weights" / path.name
    assert backbone_identity(tiny("--config.backbone=resnet18",
                                  f"--config.pretrained={other}")) == identity
    state["conv1.weight"][0, 0, 0, 0] += 1.0
    write_torch_zip(tmp_path / "changed.pth", state)
    assert backbone_identity(tiny("--config.backbone=resnet18",
                                  f"--config.pretrained={tmp_path / 'changed.pth'}")
                             )["pretrained"] != identity["pretrained"]
    # SiamFC's AlexNet from random weights adds nothing: the identities stages had
    assert backbone_identity(tiny()) == {}
    assert backbone_identity(tiny("--config.backbone=resnet18")) == {
        "backbone": "resnet18", "pretrained": None}


@pytest.mark.slow
def test_resnet18_from_a_pretrained_file_trains_and_tracks(tmp_path):
    _, path = _pretrained_file(tmp_path)
    cfg = tiny("--config.backbone=resnet18", f"--config.pretrained={path}")
    report = run_experiment(cfg, workdir=tmp_path / "runs", out=tmp_path / "out",
                            progress=False, log=_quiet)
    assert "ResNet-18 (ImageNet) width 0.125" in (tmp_path / "out" / "results.md").read_text()
    rows = report.payload["tables"]["generated-test"]
    assert set(rows) == {"static", "random", "box-siam"}
    assert all(0.0 <= r[0]["auc"] <= 1.0 for r in rows.values())
    (stage,) = (tmp_path / "runs").glob("box-siam-s0-*")
    assert json.loads((stage / "run.json").read_text())["config"]["backbone"] == "resnet18"


@pytest.mark.slow
def test_socl_table3_on_resnet18_uses_its_grid_and_filter_levels(tmp_path):
    """SoCL's TOP maps lie on the padded backbone's 16 x 16 grid of a 127 region (the
    loss refuses a map off the feature grid), and the filter takes conv1 + layer3."""
    cfg = tiny("--config.backbone=resnet18", config="socl_table3_cf.py")
    report = run_experiment(cfg, workdir=tmp_path / "runs", out=tmp_path / "out",
                            progress=False, log=_quiet)
    arms = report.payload["tables"]["arms"]
    assert all(0.0 <= rows[0]["auc"] <= 1.0 for rows in arms.values())
    (socl_cf,) = (tmp_path / "runs").glob("eval-socl-cf-s0-*")
    tracking = json.loads((socl_cf / "identity.json").read_text())["tracking"]
    assert tuple(tracking["levels"]) == (0, 3)
