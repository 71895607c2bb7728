"""The wheel: the configs ship with the package, so an installed user runs a table by
name outside a clone (`ebm-jax run socl_table1_ablation:quick`)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ebm_jax import __version__

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.heavy
def test_an_installed_wheel_lists_shows_and_runs_configs_by_name(tmp_path):
    src = tmp_path / "src"  # a copy, so that the build leaves nothing in the clone
    shutil.copytree(ROOT / "ebm_jax", src / "ebm_jax",
                    ignore=shutil.ignore_patterns("__pycache__"))  # the link's files too
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copyfile(ROOT / name, src / name)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("ebm_jax-*.whl")
    target = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
         str(target), str(wheel)], capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": str(target), "JAX_PLATFORMS": "cpu"}
    away = tmp_path / "elsewhere"  # no experiments/ here: only the shipped configs
    away.mkdir()

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "ebm_jax.cli", *args], cwd=away,
                              env=env, capture_output=True, text=True, timeout=600)

    version = cli("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"ebm-jax {__version__}"
    listed = cli("list")
    assert listed.returncode == 0, listed.stderr
    assert "tracking/socl_table1_ablation.py" in listed.stdout
    assert "ebm_regression/table1_toy1d.py" in listed.stdout
    shown = cli("show", "socl_table1_ablation:quick")
    assert shown.returncode == 0 and str(target) in shown.stdout, shown.stderr
    run = cli("run", "table1_toy1d:tiny", "--config.methods=nce", "--workdir", "w",
              "--out", "o", "--no-progress")
    assert run.returncode == 0, run.stderr[-2000:]
    footer = (away / "o" / "results.md").read_text().strip().splitlines()[-1]
    assert f"ebm_jax {__version__} (no git commit)" in footer
    assert "`ebm_regression/table1_toy1d.py:tiny --config.methods=nce`" in footer
