"""The one way to run an experiment config (see `ebm_jax.recipes`).

    from ebm_jax.config import load_config
    from ebm_jax.recipes import run_experiment
    cfg = load_config("experiments/ebm_regression/table1_toy1d.py:tiny")
    report = run_experiment(cfg, workdir="runs/demo", out="results/demo")

Order: start JAX (multi-host if asked), check the work and output directories (their
lengths within the system's limits, with room for what the run writes there; never
one inside the other; a symbolic link as `--out` is followed), take the lock on `--out`
(`<parent>/.<name>.lock`, held to the end) and clear what an interrupted write of its
results left, build the mesh, take the lock on the work directory, check every setting
of the recipe (all before training; what the check opened, such as the data, is
passed on to the run, never opened twice), run, write the results (process 0): they replace
`--out` whole unless files appeared there during the run, which are then kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
import types

from ebm_jax.report import Report, check_out, write_results
from ebm_jax.report.output import clean_stale, out_contents


# room the run's files need below (and beside) the directories it writes, for the
# up-front check of their lengths (`checks.path_fits`): below a work directory a
# stage's folder (`<stage>-<hash>`) holding orbax's temporary checkpoint files
# (`checkpoints/<step>.orbax-checkpoint-tmp/state.orbax-checkpoint-tmp/ocdbt.process_0/
# d/<32 hex digits>`), some 170 characters; below --out, from its staging folder
# beside it (`.<name>.new-<pid>`, or `<name>.new-<date>-<time>` where it is kept),
# a figure's temporary file (`.<figure>.png.<8 characters>.tmp`)
WORKDIR_BELOW = 256
OUT_BELOW = 80
OUT_BESIDE = 24


def recipe_of(cfg) -> types.ModuleType:
    """The recipe module that defines `type(cfg)`."""
    module = sys.modules.get(type(cfg).__module__)
    if module is None or not all(hasattr(module, a) for a in ("check", "run")):
        raise ValueError(f"{type(cfg).__name__} is not the Config of a recipe in "
                         "ebm_jax.recipes (it must define check and run)")
    return module


def recipe_name(cfg) -> str:
    return type(cfg).__module__.rsplit(".", 1)[-1]


def default_workdir(cfg) -> str:
    """`runs/<recipe>`: every config of a recipe shares its stages by default; a
    recipe that reads another's stages names that one's directory (its `WORKDIR`)."""
    return getattr(recipe_of(cfg), "WORKDIR", None) or f"runs/{recipe_name(cfg)}"


def matmul_precision(cfg) -> tuple[str, str]:
    """(the run's float32 matmul precision, its config's default): "default" (the
    backend's own) for a config without the `matmul_precision` field."""
    fields = {f.name: f for f in dataclasses.fields(cfg)} if dataclasses.is_dataclass(
        cfg) else {}
    if "matmul_precision" not in fields:
        return "default", "default"
    return cfg.matmul_precision, fields["matmul_precision"].default


def run_experiment(cfg, *, workdir=None, out=None, devices: int | None = None,
                   distributed: bool = False, restart: bool = False,
                   progress: bool = True, command: str | None = None,
                   source: dict | None = None, log=print) -> Report:
    """Runs `cfg` through its recipe; writes `<out>/results.*` when `out` is given.

    `source` is where `cfg` came from (`ebm_jax.report.provenance.config_source`: the
    config file, variant and overrides), recorded in the results' provenance with the
    code's version and commit, the resolved config's identity and the machine."""
    from ebm_jax.checks import disjoint_dirs, path_fits, require_extras, writable_dir
    from ebm_jax.io import is_local
    from ebm_jax.train import initialize_distributed, make_mesh
    from ebm_jax.report import provenance
    from ebm_jax.train.stages import RunContext, RunLock

    recipe = recipe_of(cfg)
    # the packages of the extras the config needs (its recipe's `extras`), before any work
    needs = getattr(recipe, "extras", None)
    require_extras(f"the {recipe_name(cfg)} recipe", needs(cfg) if needs else ())
    initialize_distributed(distributed)
    import jax

    workdir = workdir or default_workdir(cfg)
    path_fits("--workdir", workdir, below=WORKDIR_BELOW)  # before any training
    if out is not None:
        path_fits("--out", out, below=OUT_BELOW, beside=OUT_BESIDE)
    available = len(jax.devices())
    devices = devices or (available if distributed else 1)
    if isinstance(devices, bool) or not 1 <= int(devices) <= available:
        raise ValueError(f"--devices must be in [1, {available}] (the devices JAX sees), "
                         f"got {devices}; on a CPU, JAX_NUM_CPU_DEVICES=n gives n devices")
    writer = jax.process_index() == 0
    with contextlib.ExitStack() as held:
        expected = None
        if writer:
            if out is not None:
                disjoint_dirs("--workdir", workdir, "--out", out,
                              why="the results replace --out whole")
                out = check_out(out)
                if is_local(out):  # an object store: no lock file, no swap
                    held.enter_context(RunLock.beside(out, "--out"))
                clean_stale(out, log=log)
                expected = out_contents(out)  # what the results may replace
            writable_dir("--workdir", workdir)
        mesh = make_mesh(int(devices))
        count = getattr(recipe, "count_stages", None)  # "stage i of n", the run's ETA
        precision, usual = matmul_precision(cfg)
        ctx = RunContext(workdir, mesh=mesh, seed=getattr(cfg, "seed", 0),
                         restart=restart, progress=progress, writer=writer, log=log,
                         planned_stages=None if count is None else count(cfg),
                         run_identity={} if precision == usual else {
                             "matmul_precision": precision})
        if precision != "default":  # every program of the run traced under it
            held.enter_context(jax.default_matmul_precision(precision))
        if precision != usual or jax.default_backend() != "cpu":
            log(f"float32 matmuls at precision {precision!r} "
                "(--config.matmul_precision)")
        started = time.time()
        code = provenance.git_state()  # the code as the run starts, not as it ends
        with ctx:  # the lock first: checks may write (a generated dataset)
            opened = recipe.check(cfg, ctx)  # what check opened (the data), or None
            report = (recipe.run(cfg, ctx) if opened is None
                      else recipe.run(cfg, ctx, opened))
        from ebm_jax.config import config_source_of

        prov = provenance.collect(cfg, source=source or config_source_of(cfg), devices=list(mesh.devices.flat),
                                  started=started, finished=time.time(), git=code)
        prov["stages"] = {"entered": ctx.stages_started, "reused": ctx.stages_reused}
        meta = {
            "recipe": recipe_name(cfg), "config": dataclasses.asdict(cfg),
            "command": command, "workdir": str(workdir), "seed": ctx.seed,
            "devices": [str(d) for d in mesh.devices.flat],
            "process_count": jax.process_count(), "versions": prov["versions"],
            "wall_seconds": prov["wall_seconds"], "provenance": prov,
        }
        report.payload.setdefault("wall_seconds", meta["wall_seconds"])
        report.markdown = report.markdown.rstrip("\n") + "\n\n" + provenance.footer(
            prov) + "\n"
        if out is not None and writer:
            write_results(out, report, meta, log=log, expected=expected)
    return report
