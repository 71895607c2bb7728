"""Recipes: the thin composition of one kind of experiment on the shared stage runner.

A recipe module defines

- `Config`: a frozen dataclass of values, validated in `__post_init__` (config files
  in `experiments/` return one from `get_config(variant)`);
- `check(cfg, ctx)`: every check that can be made before training (data, sizes,
  devices), raising ValueError with a message naming the setting;
- `run(cfg, ctx) -> Report`: plan the stages, run them through `ctx`
  (`ebm_jax.train.stages`), and build the tables and figures.
- optionally `extras(cfg)`: the package's extras `cfg` needs beyond the core install
  (names of `ebm_jax.checks.EXTRAS`), checked before any work; `WORKDIR`: its
  default work directory when it reads another recipe's stages.

Recipes compose library code; they define no math. `run_experiment` (`runner.py`) is
the one entry point, used by the command line and by notebooks alike.
"""

from ebm_jax.recipes.runner import default_workdir, recipe_of, run_experiment

__all__ = ["default_workdir", "recipe_of", "run_experiment"]
