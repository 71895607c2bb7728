"""The 1D EBM-regression comparison of "How to Train Your Energy-Based Model for
Regression" (sec. 4.1): Table 1 (D_KL of nine training methods on two datasets) and,
with `sweep_m`, Figure 2 (D_KL against the number of samples M).

    ebm-jax run experiments/ebm_regression/table1_toy1d.py:quick

Plan: one training stage per method x dataset (x M in Figure 2 mode), each an ensemble
of `num_models` networks (`ebm_jax.train.ensemble`) on the same training set per
dataset; each ensemble's models scored by D_KL to the exact ground truth on a grid x
grid grid (`ebm_jax.eval.density`, one jitted program per ensemble, cached beside the
stage); the table reports the mean of the `top_k` best models of each ensemble. Stages
are named `<method>-d<dataset>` plus `-M<M>` for methods that draw M samples (so Table 1
and Figure 2 share the stages they have in common), and keyed by the method and dataset
only: all M of one method start from the same initialisations and batch orders (common
random numbers), which makes Figure 2's curves compare M rather than draws.

Compiled once: the data and the per-dataset hyperparameters (the Langevin step, the
DSM noise: `make_loss(..., runtime=...)`) are arguments of the training step, so the
two datasets of a method train with one compiled step; so is ML-MCMC's chain length L,
so ML-MCMC-1, -16 and -256 of one ensemble size share it too; every ensemble of a size
is scored by one compiled evaluation. Each stage reports the seconds spent compiling,
training and evaluating: in its table row, those of the stage's results (as measured
when it trained and was scored, so a rerun writes the same row); in the progress line
and in results.json's `stage_seconds`, those of this run (a rerun of a finished run
that finds its programs in the compilation cache compiles nothing).

ML-MCMC's chains (`langevin`): "reference" is the `lax.scan` chain of
`ebm_jax.energy.langevin`; "fused" runs all L steps in one Pallas kernel
(`ebm_jax.energy.langevin_fused`: the same noise, the same samples to float32 rounding;
its L is then compiled, one step per L; on a CPU it runs in Pallas's interpret mode,
slowly); "auto" (the default) takes the fused kernel on a GPU where it compiles there,
else the reference chain, and the run says which and why. A stage trained with the
fused kernel records it in its identity.
"""

from __future__ import annotations

import dataclasses
import json
import math

import jax

from ebm_jax import checks
from ebm_jax.config import ADDED_FIELD, Checks, ConfigError
from ebm_jax.data import toy1d
from ebm_jax.energy import BETA_SCALES, RUNTIME_HYPERPARAMETERS, make_loss
from ebm_jax.energy.methods import mcmc_steps, parse_method
from ebm_jax.recipes.regression1d_plan import (METHODS, Job, langevin_path,  # noqa: F401
                                               method_loss, plan)
from ebm_jax.report import Report
from ebm_jax.train.compilation import CompileMeter
from ebm_jax.train.stages import RunContext

# The setting of the paper's seconds per epoch (sec. 4.1; the `paper` variant): M = 1024
# samples, ML-MCMC with 1024 chains, on the authors' GPU.
PAPER_TIMING_SETTING = "M = 1024, ML-MCMC 1024 chains, the authors' GPU"
PLOT_GRID = 512  # resolution of the density plots (the D_KL uses `grid`)
LANGEVIN = ("auto", "fused", "reference")  # ML-MCMC's chains (`Config.langevin`)


def _valid_method(method: str) -> bool:
    try:
        parse_method(method, METHODS)
    except ValueError:
        return False
    return True


def check_method(method: str) -> str:
    """`method` if it names a Table 1 method (or ml-mcmc-L, L >= 1); else ValueError
    (`ebm_jax.energy.methods.parse_method`'s, naming the allowed values)."""
    parse_method(method, METHODS)
    return method


@dataclasses.dataclass(frozen=True)
class Config:
    """One run of the 1D comparison. The method hyperparameters are Table 1's (set in
    the config files); the per-dataset pairs are (dataset 1, dataset 2).

    `top_k` larger than an ensemble (`num_models`, or `mcmc_models` for ML-MCMC-L with
    L >= 16) is an error, not clamped: set it to at most the smallest ensemble."""

    methods: tuple[str, ...]
    datasets: tuple[int, ...]
    num_models: int  # ensemble size (independent initialisations) per method x dataset
    epochs: int
    num_samples: int  # M for ML-IS, KLD-IS, NCE, NCE+ and DSM
    mcmc_samples: int  # M (parallel chains per example) for ML-MCMC-L
    top_k: int  # the table reports the mean D_KL of the top_k best models
    # Table 1 hyperparameters (the paper's sec. 4.1)
    is_sigmas: tuple[float, float]  # ML-IS, KLD-IS: proposal mixture standard deviations
    kld_label_sigma: float  # KLD-IS: the label distribution's standard deviation
    nce_sigmas: tuple[float, float]  # NCE, NCE+: noise mixture standard deviations
    nce_plus_beta: float  # NCE+: the label perturbation p_beta
    nce_plus_beta_scale: str  # "std" (the authors' 1D code) or "variance" (eq. 15)
    langevin_step: tuple[float, float]  # ML-MCMC: Langevin step size alpha per dataset
    dsm_sigma: tuple[float, float]  # DSM: noise standard deviation per dataset
    mcmc_models: int | None = None  # ensemble size for ML-MCMC-L, L >= 16 (None: num_models)
    num_train: int = 2000
    batch_size: int = 32
    learning_rate: float = 1e-3
    grid: int = 2048  # D_KL evaluation grid, grid x grid on [-3, 3]^2
    sweep_m: tuple[int, ...] = ()  # Figure 2 mode when non-empty: train every method at each M
    save_every_epochs: int = 5
    seed: int = 0
    reference_kl: tuple[tuple[str, float], ...] = ()  # the paper's D_KL per method
    reference_seconds_per_epoch: tuple[tuple[str, float], ...] = ()  # the paper's, its GPU
    # ML-MCMC's Langevin chains: "auto", "fused" or "reference" (the module docstring)
    langevin: str = dataclasses.field(default="auto", metadata=ADDED_FIELD)

    def __post_init__(self):
        for name in ("methods", "datasets", "sweep_m", "is_sigmas", "nce_sigmas",
                     "langevin_step", "dsm_sigma", "reference_kl",
                     "reference_seconds_per_epoch"):
            v = getattr(self, name)  # lists from Python users; one name as a 1-tuple
            object.__setattr__(self, name, (v,) if isinstance(v, (str, int, float))
                               else tuple(v))
        c = Checks(self)
        bad = [m for m in self.methods if not _valid_method(m)]
        if bad or not self.methods:
            raise ConfigError(f"--config.methods must be a non-empty list drawn from "
                              f"{list(METHODS)} (or ml-mcmc-L with an integer L >= 1), "
                              f"got {list(self.methods)!r}")
        c.each_in("datasets", toy1d.DATASETS)
        for name in ("num_models", "epochs", "num_samples", "mcmc_samples", "top_k",
                     "num_train", "batch_size", "save_every_epochs"):
            c.int_range(name, 1)
        c.int_range("grid", 2)
        if self.mcmc_models is not None:
            c.int_range("mcmc_models", 1)
        c.positive("learning_rate")
        c.positive("kld_label_sigma")
        c.positive("nce_plus_beta")
        c.one_of("nce_plus_beta_scale", BETA_SCALES)
        c.one_of("langevin", LANGEVIN)
        for name in ("is_sigmas", "nce_sigmas", "langevin_step", "dsm_sigma"):
            v = getattr(self, name)
            if len(v) != 2 or not all(isinstance(s, (int, float)) and not isinstance(
                    s, bool) and math.isfinite(s) and s > 0 for s in v):
                raise ConfigError(f"--config.{name} must be two finite numbers > 0, "
                                  f"got {v!r}")
        if any(isinstance(m, bool) or not isinstance(m, int) or m < 1
               for m in self.sweep_m):
            raise ConfigError(f"--config.sweep_m must be integers >= 1, got "
                              f"{self.sweep_m!r}")
        if self.sweep_m and "sm" in self.methods:
            raise ConfigError("--config.methods: sm draws no samples, so it has no place "
                              "in the M sweep (--config.sweep_m); remove it")
        for name, size in self.ensemble_sizes().items():
            if self.top_k > size:
                raise ConfigError(f"--config.top_k must be at most {name} ({size}), got "
                                  f"{self.top_k}: the table averages the top_k best "
                                  "models of each ensemble")
        c.seed()

    def ensemble_sizes(self) -> dict[str, int]:
        """{field: ensemble size} of the ensembles this config trains."""
        sizes = {"num_models": self.num_models}
        if self.mcmc_models is not None and any(
                (mcmc_steps(m) or 0) >= 16 for m in self.methods):
            sizes["mcmc_models"] = self.mcmc_models
        return sizes

    def models_for(self, method: str) -> int:
        if self.mcmc_models is not None and (mcmc_steps(method) or 0) >= 16:
            return self.mcmc_models
        return self.num_models


# --------------------------------------------------------------------------- check


def count_stages(cfg: Config) -> int:
    """The run's training stages (one per method, dataset and M): its progress says
    "stage i of n" and the run's ETA."""
    return len(plan(cfg))


def check(cfg: Config, ctx: RunContext) -> None:
    """Everything that can fail before training: devices against the batch, memory
    (from the sizes alone, before any data is drawn), and every loss built once."""
    from ebm_jax.eval.density import grid_scores_bytes
    from ebm_jax.train.ensemble import ensemble_bytes

    if cfg.batch_size % ctx.num_devices:
        raise ValueError(f"--devices ({ctx.num_devices}) must divide --config.batch_size "
                         f"({cfg.batch_size})")
    jobs = plan(cfg)
    worst = max(jobs, key=lambda j: j.num_models * ((j.num_samples or 0) + 1))
    checks.fits_in_memory(
        f"training {worst.stage.name} ({worst.num_models} models x batch "
        f"{cfg.batch_size} x M={worst.num_samples or 0}, {cfg.num_train} examples)",
        ensemble_bytes(worst.num_models, cfg.batch_size, worst.num_samples or 0,
                       cfg.num_train),
        hint="lower --config.num_models, --config.num_samples, --config.mcmc_samples, "
             "--config.sweep_m or --config.num_train")
    models = max(cfg.ensemble_sizes().values())
    checks.fits_in_memory(f"the D_KL evaluation on a {cfg.grid} x {cfg.grid} grid",
                          grid_scores_bytes(cfg.grid, num_models=models),
                          hint="lower --config.grid")
    for job in jobs:
        make_loss(job.loss, **job.hyperparameters)


# --------------------------------------------------------------------------- run


def _runtime(job: Job) -> tuple[str, ...]:
    """The hyperparameters of `job` given to its loss at run time (those that differ
    between the datasets of a method), so that both datasets share one compiled step."""
    fused = job.hyperparameters.get("fused", False)  # the fused chain compiles its L
    return tuple(k for k in RUNTIME_HYPERPARAMETERS.get(job.loss, ())
                 if k in job.hyperparameters and not (fused and k == "num_steps"))


def _step_key(job: Job) -> str:
    """What a training step compiles from, beyond the config: jobs with the same key
    share one step (`ensemble_training(step_fn=...)`)."""
    static = {k: v for k, v in job.hyperparameters.items() if k not in _runtime(job)}
    return json.dumps([job.loss, static, job.num_models], sort_keys=True, default=str)


def _train_and_score(cfg: Config, ctx: RunContext, job: Job, data,
                     steps: dict) -> tuple[dict, object, dict]:
    """Trains (or resumes) one stage and scores its models; returns (record, the best
    model's p(y|x) on the plot grid or None, this run's seconds and compilations).
    `steps` holds the training steps of earlier stages of the run, by `_step_key`."""
    import jax

    from ebm_jax.eval.density import conditional_density, evaluate_kl, top_k_summary
    from ebm_jax.train.ensemble import energy_fn, ensemble_training

    x, y = data
    runtime = _runtime(job)
    with CompileMeter() as training:
        setup = ensemble_training(
            x, y, make_loss(job.loss, runtime=runtime, **job.hyperparameters),
            num_models=job.num_models, init_key=ctx.key(job.family, "init"),
            train_key=ctx.key(job.family, "train"),
            batch_key=ctx.key(job.family, "batches"), batch_size=cfg.batch_size,
            learning_rate=cfg.learning_rate, mesh=ctx.mesh,
            loss_args={k: job.hyperparameters[k] for k in runtime},
            step_fn=steps.get(_step_key(job)))
        steps.setdefault(_step_key(job), setup.step_fn)
        state, figures = job.stage.run(ctx, setup.state, setup.step_fn, setup.batches)
        params = jax.device_get(state.params)
    energy = energy_fn(setup.graphdef)
    stage_dir = job.stage.dir(ctx)

    def score():
        with CompileMeter() as meter:
            kls, best = evaluate_kl(energy, params, job.dataset, cfg.grid)
        return {"kl": kls, "best": best, "compile_seconds": round(meter.seconds, 3),
                "seconds": round(max(0.0, meter.wall - meter.seconds), 3)}

    with CompileMeter() as evaluation:
        scored = ctx.cached(stage_dir, f"kl-grid{cfg.grid}",
                            {**job.stage.full_identity, "grid": cfg.grid}, score)
        density = None
        if scored["best"] is not None and not cfg.sweep_m:
            best = jax.tree.map(lambda a: a[scored["best"]], params)
            density = conditional_density(energy, best, min(cfg.grid, PLOT_GRID))
    spe = figures.seconds_per_step
    record = {
        "method": job.method, "dataset": job.dataset, "num_samples": job.num_samples,
        "num_models": job.num_models, "epochs": cfg.epochs, "loss": job.loss,
        "hyperparameters": job.hyperparameters, "stage": stage_dir.name,
        **top_k_summary(scored["kl"], cfg.top_k), "best_model": scored["best"],
        # the loss is summed over the ensemble: / N is the mean model's loss
        "final_loss": None if figures.final_loss is None
        else figures.final_loss / job.num_models,
        "seconds_per_epoch": None if spe is None
        else spe * setup.steps_per_epoch / job.num_models,
        # the stage's own figures (a rerun writes the same): training's from its
        # metrics (the first epoch beyond the others is compiling), the evaluation's
        # measured when it was scored (None for a score cached before they were kept)
        "compile_seconds": figures.compile_seconds + scored.get("compile_seconds", 0.0),
        "train_seconds": max(0.0, figures.seconds - figures.compile_seconds),
        "eval_seconds": scored.get("seconds"),
    }
    this_run = {
        "compile": round(training.seconds + evaluation.seconds, 3),
        "train": round(max(0.0, training.wall - training.seconds), 3),
        "eval": round(max(0.0, evaluation.wall - evaluation.seconds), 3),
        "compilations": training.compilations + evaluation.compilations,
        "cache_hits": training.cache_hits + evaluation.cache_hits,
    }
    return record, density, this_run


def _progress(job: Job, record: dict, seconds: dict, top_k: int) -> str:
    """The line logged when a stage is done: its D_KL, and this run's seconds."""
    total = seconds["compile"] + seconds["train"] + seconds["eval"]
    n = seconds["compilations"]
    loaded = (f", {seconds['cache_hits']} loaded from the compilation cache"
              if seconds["cache_hits"] else "")
    return (f"{job.stage.name}: D_KL top-{top_k} {_num(record['kl_top_k'])}, "
            f"{_num(record['seconds_per_epoch'])} s/epoch/model; {total:.1f} s = compile "
            f"{seconds['compile']:.1f} + train {seconds['train']:.1f} + eval "
            f"{seconds['eval']:.1f} ({n} program{'' if n == 1 else 's'} compiled{loaded})")


def run(cfg: Config, ctx: RunContext) -> Report:
    """Trains and scores every stage of `plan(cfg)`; returns Table 1 (or Figure 2)."""
    from ebm_jax.report import regression1d as rep

    data = {d: toy1d.sample(ctx.key(f"toy1d-d{d}", "data"), d, cfg.num_train)
            for d in cfg.datasets}
    records, densities, stage_seconds, steps = [], {}, {}, {}
    langevin = None
    if any(mcmc_steps(m) for m in cfg.methods):
        path, why = langevin_path(cfg)
        langevin = {"path": path, "why": why}
        ctx.log(f"ML-MCMC's Langevin chains: {path} ({why})")
    for job in plan(cfg):
        record, density, seconds = _train_and_score(cfg, ctx, job, data[job.dataset],
                                                    steps)
        records.append(record)
        stage_seconds[record["stage"]] = seconds
        if density is not None:
            densities.setdefault(job.dataset, []).append((f"{job.method} (best model)",
                                                          density))
        ctx.log(_progress(job, record, seconds, cfg.top_k))
    settings = (f"{cfg.num_models} models x {cfg.epochs} epochs, batch {cfg.batch_size}, "
                f"lr {cfg.learning_rate:g}, {cfg.num_train} training pairs, D_KL on a "
                f"{cfg.grid} x {cfg.grid} grid, mean of the top {cfg.top_k}, seed "
                f"{cfg.seed}")
    if cfg.sweep_m:
        markdown = ("# Figure 2: D_KL against M (1D regression)\n\n" + settings
                    + "; datasets " + ", ".join(map(str, cfg.datasets)) + " averaged.\n\n"
                    + rep.figure2_markdown(records)
                    + "\n\n## Every model, with error bars\n\nD_KL of all "
                    f"{cfg.num_models} models of each ensemble (not the top "
                    f"{cfg.top_k}): mean +- standard error over models, datasets "
                    "averaged. Below, the paper's comparison (NCE and NCE+ against ML-IS "
                    "and KLD-IS): the difference of two methods' ensembles, unpaired "
                    "(each ensemble has its own initialisations), with Welch's standard "
                    "error over models; in bold where beyond twice it (negative: the "
                    "first method is closer to the truth).\n\n"
                    + rep.figure2_models_markdown(records))
        figures = {"figure2_kl_against_m.png": lambda: rep.plot_kl_against_m(records)}
        return Report({"tables": {"figure2": records}, "stage_seconds": stage_seconds,
                       "langevin": langevin}, markdown + "\n", figures)
    reference_kl = dict(cfg.reference_kl)
    reference_spe = dict(cfg.reference_seconds_per_epoch)
    here = (f"M = {cfg.num_samples}, ML-MCMC {cfg.mcmc_samples} chains, "
            f"{jax.devices()[0].platform.upper()}")
    chains = "" if langevin is None else (
        f" ML-MCMC's chains: {'the fused kernel' if langevin['path'] == 'fused' else 'the '
        'reference lax.scan chain'} ({langevin['why']}).")
    markdown = ("# Table 1: 1D regression, D_KL to the ground truth\n\n" + settings
                + f"; M = {cfg.num_samples}, ML-MCMC with {cfg.mcmc_samples} chains.{chains} "
                "Paper D_KL: the two datasets averaged. The two timing columns are at "
                f"different settings, so their ratio is no speed-up: s/epoch/model here at "
                f"{here}; paper s/epoch at {PAPER_TIMING_SETTING}.\n\n"
                + rep.table1_markdown(records, cfg.datasets, reference_kl, reference_spe,
                                      setting=here, reference_setting=PAPER_TIMING_SETTING))
    plot_grid = min(cfg.grid, PLOT_GRID)
    figures = {}
    for d, panels in densities.items():
        figures[f"density_dataset{d}.png"] = (
            lambda d=d, panels=panels: rep.plot_densities(
                d, toy1d.ground_truth_grid(d, plot_grid, plot_grid), panels))
    payload = {"tables": {"table1": records},
               "reference": {"kl": reference_kl, "seconds_per_epoch": reference_spe},
               "stage_seconds": stage_seconds, "langevin": langevin}
    return Report(payload, markdown + "\n", figures)


def _num(v) -> str:
    return "-" if v is None else f"{v:.3f}"


__all__ = ["METHODS", "Config", "check", "check_method", "method_loss", "plan", "run"]
