"""Fixtures of the stored-run tests: a small repository with a toy config, and a run of
it stored there."""

import sys
from pathlib import Path

import pytest

from ebm_jax import cli
from ebm_jax.report import stored

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def toy_repo(tmp_path, monkeypatch):
    """A function making a repository with README.md, docs/ and a toy config file
    (its learning rate given); it returns (root, the config file)."""
    def make(learning_rate="0.1"):
        monkeypatch.syspath_prepend(str(ROOT / "tests" / "train"))
        sys.modules.pop("toy_recipe", None)
        root = tmp_path / "repo"
        (root / "docs").mkdir(parents=True)
        (root / "experiments").mkdir()
        cfg = root / "experiments" / "toy.py"
        cfg.write_text(f'"""ebm-jax run {cfg}:small\n\nA toy."""\nfrom toy_recipe import '
                       'Config\nVARIANTS = ("small",)\n\n\ndef get_config(v):\n'
                       f'    return Config(num_steps=10, learning_rate={learning_rate})\n')
        (root / "README.md").write_text("# toy\n")
        (root / "docs" / "claims.toml").write_text(
            '[[claim]]\npaper = "Toy"\nclaim = "It learns"\nnumber = "loss < 1"\n'
            f'status = "holds"\nours = "it does"\nrun = "{cfg}:small"\npage = "toy.md"\n')
        return root, cfg

    return make


@pytest.fixture
def run_and_store(tmp_path, capsys):
    """A function running the toy config and storing the run as toy-small; it returns
    the stored folder."""
    def run(root, cfg):
        out = tmp_path / "out"
        assert cli.main(["run", f"{cfg}:small", "--workdir", str(tmp_path / "w"), "--out",
                         str(out), "--no-progress"]) == 0
        capsys.readouterr()
        return stored.store(root, out, "toy-small")

    return run
