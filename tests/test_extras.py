"""The package's optional extras: `ebm_jax.checks.EXTRAS` names the modules of each extra
of pyproject.toml, the core install carries none of them, every recipe that needs one
says so, and a run without it stops before any work with one line naming the extra and
the install command."""

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ebm_jax import checks
from ebm_jax.config import load_config
from ebm_jax.recipes.runner import recipe_of

ROOT = Path(__file__).parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _distribution(requirement: str) -> str:
    """The distribution name of a requirement string ("grain>=0.2.12" -> "grain")."""
    for stop in "<>=!~[; ":
        requirement = requirement.split(stop, 1)[0]
    return requirement.strip().lower().replace("_", "-")


def _modules_of(distribution: str) -> set[str]:
    """The top-level modules an installed distribution provides."""
    provided = importlib.metadata.packages_distributions()
    return {module for module, dists in provided.items()
            if any(_distribution(d) == distribution for d in dists)}


def test_the_extras_table_matches_pyproject():
    extras = PYPROJECT["optional-dependencies"]
    for extra, modules in checks.EXTRAS.items():
        dists = {_distribution(r) for r in extras[extra]}
        provided = set().union(*(_modules_of(d) for d in dists))
        assert set(modules) <= provided, (extra, modules, provided)
        # each distribution of the extra gives at least one module the table names
        for dist in dists:
            assert _modules_of(dist) & set(modules), (extra, dist)
    assert set(extras["experiments"][0].partition("[")[2].rstrip("]").split(",")) == set(
        checks.EXTRAS)


def test_the_core_install_carries_no_extra():
    core = {_distribution(r) for r in PYPROJECT["dependencies"]}
    extras = PYPROJECT["optional-dependencies"]
    for extra in checks.EXTRAS:
        assert not core & {_distribution(r) for r in extras[extra]}, extra


@pytest.mark.parametrize("spec, extras", [
    ("ebm_regression/table1_toy1d.py:tiny", ()),
    ("ebm_regression/table2_detection.py:tiny", ("coco",)),
    ("contrastive/moco_linear_eval.py:tiny", ()),  # in-memory data and loader
    ("tracking/siamfc_box.py:tiny", ("data",)),
    ("tracking/socl_table1_ablation.py:tiny", ("data",)),
    ("tracking/box_head_probe.py:tiny", ("data",)),
])
def test_each_recipe_names_the_extras_it_needs(spec, extras):
    cfg = load_config(str(ROOT / "experiments" / spec), [])
    needs = getattr(recipe_of(cfg), "extras", None)
    assert (needs(cfg) if needs else ()) == extras


def test_records_or_grain_make_a_contrastive_run_need_the_data_extra(tmp_path):
    spec = str(ROOT / "experiments" / "contrastive" / "moco_linear_eval.py:tiny")
    for override in ("--config.loader=grain",
                     f"--config.data=records --config.data_root={tmp_path}"):
        cfg = load_config(spec, override.split())
        assert recipe_of(cfg).extras(cfg) == ("data",), override


def test_missing_modules_names_each_missing_module(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec

    def find_spec(name, *args):
        if name == "grain":
            return None
        if name == "pycocotools":
            raise ValueError("pycocotools.__spec__ is None")  # a broken install
        return real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert checks.missing_modules(["data", "coco"]) == {"data": ["grain"],
                                                        "coco": ["pycocotools"]}
    with pytest.raises(ValueError, match=r"the x recipe needs the extra \[data\] \(grain "
                       r"not installed\), \[coco\] \(pycocotools not installed\): pip "
                       r"install 'ebm_jax\[data,coco\]'"):
        checks.require_extras("the x recipe", ["data", "coco"])
    with pytest.raises(ValueError, match="unknown extra 'tpu'"):
        checks.missing_modules(["tpu"])


# hides the modules named in HIDE from every import and from importlib.util.find_spec
HIDING = """
import importlib.abc, sys
HIDE = set(sys.argv.pop(1).split(","))
class Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDE:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hidden())
from ebm_jax.cli import main
sys.argv[0] = "ebm-jax"
raise SystemExit(main())
"""


@pytest.mark.parametrize("args, hidden, extra", [
    ("run ebm_regression/table2_detection.py:tiny", "pycocotools", "coco"),
    ("run tracking/siamfc_box.py:tiny", "grain,array_record", "data"),
    ("records toy1d --dataset 1", "tensorflow_datasets", "data"),
])
def test_a_run_without_its_extra_stops_before_any_work(args, hidden, extra, tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    command, rest = args.split(" ", 1)
    rest = ([str(ROOT / "experiments" / rest), "--workdir", str(work)] if command == "run"
            else rest.split())
    done = subprocess.run(
        [sys.executable, "-c", HIDING, hidden, command, *rest, "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"needs the extra [{extra}]" in lines[0]
    assert f"pip install 'ebm_jax[{extra}]'" in lines[0]
    for module in hidden.split(","):
        assert module in lines[0]
    assert not work.exists() and not out.exists()
