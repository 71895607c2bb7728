"""The 1D regression recipe end to end: the tiny Table 1 and Figure 2 configs through
`run_experiment`, resume, overrides, and every bad input refused before training."""

import json
import shutil
from pathlib import Path

import pytest

from ebm_jax import cli
from ebm_jax.config import ConfigError, load_config
from ebm_jax.data import toy1d
from ebm_jax.recipes import run_experiment

# a minute or more on 2 CPU cores: in `make test-heavy` (and CI), not `make test`
pytestmark = pytest.mark.heavy

ROOT = Path(__file__).parents[2]
TABLE1 = str(ROOT / "experiments/ebm_regression/table1_toy1d.py")
FIGURE2 = str(ROOT / "experiments/ebm_regression/figure2_toy1d_m.py")


def _run(spec, workdir, out, overrides=(), **kw):
    cfg = load_config(spec, list(overrides))
    return run_experiment(cfg, workdir=workdir, out=out, progress=False, log=lambda s: None,
                          **kw)


def _stage(workdir, prefix):
    (path,) = [p for p in Path(workdir).iterdir() if p.name.startswith(prefix + "-")
               and p.name[len(prefix) + 1:].isalnum() and len(p.name) == len(prefix) + 9]
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both tiny configs in one work directory (they share the stage nce+-d1-M4)."""
    tmp = tmp_path_factory.mktemp("r1d")
    work = tmp / "runs"
    _run(f"{TABLE1}:tiny", work, tmp / "table1")
    _run(f"{FIGURE2}:tiny", work, tmp / "figure2")
    return tmp


def _tables(out):
    return json.loads((Path(out) / "results.json").read_text())["tables"]


def test_table1_tiny_end_to_end(runs):
    recs = _tables(runs / "table1")["table1"]
    assert [(r["method"], r["dataset"]) for r in recs] == [
        ("nce+", 1), ("ml-mcmc-2", 1), ("nce+", 2), ("ml-mcmc-2", 2)]
    for rec in recs:
        assert rec["num_models"] == 2 and rec["epochs"] == 2 and rec["top_k"] == 1
        assert rec["kl_mean"] is not None and rec["kl_top_k"] > 0
        assert rec["kl_top_k"] <= rec["kl_mean"] + 1e-9
        assert len(rec["kl_all"]) == 2 and rec["seconds_per_epoch"] > 0
        assert rec["final_loss"] is not None
    mcmc = [r for r in recs if r["method"] == "ml-mcmc-2"]
    assert [r["hyperparameters"]["step_size"] for r in mcmc] == [0.05, 0.0125]
    assert all(r["num_samples"] == 2 for r in mcmc)  # mcmc_samples chains
    md = (runs / "table1" / "results.md").read_text()
    assert "| nce+ |" in md and "| ml-mcmc-2 |" in md and "0.066" in md  # paper D_KL
    # the two timing columns are at different settings, each named (no speed-up)
    import jax

    assert (f"s/epoch/model at M = 4, ML-MCMC 2 chains, "
            f"{jax.devices()[0].platform.upper()}") in md
    assert "paper s/epoch at M = 1024, ML-MCMC 1024 chains, the authors' GPU" in md
    assert "their ratio is no speed-up" in md
    for d in (1, 2):
        assert (runs / "table1" / f"density_dataset{d}.png").stat().st_size > 0
    payload = json.loads((runs / "table1" / "results.json").read_text())
    assert payload["ebm_jax"]["config"]["methods"] == ["nce+", "ml-mcmc-2"]
    assert payload["reference"]["kl"]["nce+"] == 0.066
    # each stage's seconds compiling, training and evaluating: the stage's own in its
    # row, this run's (and its compilations) in stage_seconds
    for rec in recs:
        assert rec["compile_seconds"] >= 0 and rec["train_seconds"] > 0
        assert rec["eval_seconds"] >= 0
    seconds = payload["stage_seconds"]
    assert list(seconds) == [r["stage"] for r in recs]
    for name, s in seconds.items():
        assert set(s) == {"compile", "train", "eval", "compilations", "cache_hits"}
        assert min(s["compile"], s["train"], s["eval"]) >= 0
        if "-d2-" in name:  # the first dataset's programs, as they are: none compiled
            assert s["compilations"] == 0 and s["cache_hits"] == 0, (name, s)


def test_figure2_tiny_end_to_end_shares_stages(runs):
    recs = _tables(runs / "figure2")["figure2"]
    assert [(r["method"], r["dataset"], r["num_samples"]) for r in recs] == [
        ("nce+", 1, 1), ("nce+", 1, 4)]
    assert (runs / "figure2" / "figure2_kl_against_m.png").stat().st_size > 0
    assert "M=1" in (runs / "figure2" / "results.md").read_text()
    # nce+ at M = 4 on dataset 1 is Table 1's stage: trained once, resumed at its end
    shared = _stage(runs / "runs", "nce+-d1-M4")
    assert json.loads((shared / "run.json").read_text())["resumed_at"] == [8]
    t1 = [r for r in _tables(runs / "table1")["table1"] if r["stage"] == shared.name]
    f2 = [r for r in recs if r["stage"] == shared.name]
    assert t1[0]["kl_all"] == f2[0]["kl_all"]


def test_rerun_resumes_without_retraining_and_gives_identical_tables(runs):
    work = runs / "runs"
    metrics = {p: p.read_text() for p in work.glob("*/metrics.jsonl")}
    _run(f"{TABLE1}:tiny", work, runs / "table1-again")
    assert _tables(runs / "table1-again") == _tables(runs / "table1")
    assert {p: p.read_text() for p in work.glob("*/metrics.jsonl")} == metrics
    stage = _stage(work, "ml-mcmc-2-d2-M2")
    assert json.loads((stage / "run.json").read_text())["resumed_at"] == [8]


def test_overrides_pick_methods_and_datasets(runs):
    """`methods=nce+ datasets=2` is Table 1's nce+-d2 stage again: nothing trains."""
    out = runs / "only-nce-plus"
    report = _run(f"{TABLE1}:tiny", runs / "runs", out, ["methods=nce+", "datasets=2"])
    recs = report.tables()["table1"]
    assert [(r["method"], r["dataset"], r["num_samples"]) for r in recs] == [("nce+", 2, 4)]
    assert _tables(out)["table1"][0] == [r for r in _tables(runs / "table1")["table1"]
                       if (r["method"], r["dataset"]) == ("nce+", 2)][0]
    assert (out / "density_dataset2.png").exists()
    assert not (out / "density_dataset1.png").exists()


def test_a_stopped_stage_resumes_and_matches(tmp_path):
    """Port of the old CLI resume test: killed during epoch 3 (its last checkpoint
    dropped), the rerun resumes from epoch 2 and gives bitwise the same models."""
    args = ["methods=nce", "datasets=1", "epochs=3", "save_every_epochs=1"]
    work = tmp_path / "runs"
    _run(f"{TABLE1}:tiny", work, tmp_path / "a", args)
    stage = _stage(work, "nce-d1-M4")
    assert sorted(p.name for p in (stage / "checkpoints").iterdir()) == ["12", "8"]
    shutil.rmtree(stage / "checkpoints" / "12")
    (stage / "kl-grid64.json").unlink()  # score the resumed models, not the cache
    _run(f"{TABLE1}:tiny", work, tmp_path / "b", args)
    assert json.loads((stage / "run.json").read_text())["resumed_at"] == [8]
    kl = lambda out: _tables(out)["table1"][0]["kl_all"]
    assert kl(tmp_path / "a") == kl(tmp_path / "b")


def test_a_rerun_compiles_nothing_with_the_compilation_cache(tmp_path):
    """A rerun, in a fresh work directory (every stage trains again) or in the finished
    one, finds every program in the compilation cache (`--compile-cache`): nothing
    compiles, and the fresh one writes the same table."""
    import jax

    from ebm_jax.train.compilation import CompileMeter

    cache = tmp_path / "cache"

    def run(work, out):
        jax.clear_caches()  # as a new process: nothing compiled in memory
        with CompileMeter() as meter:
            assert cli.main(["run", f"{TABLE1}:tiny", "--config.methods=nce+", "--workdir",
                             str(tmp_path / work), "--out", str(tmp_path / out),
                             "--no-progress", "--compile-cache", str(cache)]) == 0
        return meter

    first = run("a", "out-a")
    assert first.compilations > 0 and first.cache_hits == 0 and any(cache.iterdir())
    for work in ("b", "a"):  # a fresh work directory, then the finished one
        again = run(work, f"out-{work}-again")
        assert again.compilations == 0 and again.cache_hits > 0, work
        seconds = json.loads((tmp_path / f"out-{work}-again" / "results.json").read_text())[
            "stage_seconds"]
        assert all(s["compilations"] == 0 for s in seconds.values())
    results = lambda out: [(r["kl_all"], r["final_loss"])
                           for r in _tables(tmp_path / out)["table1"]]
    assert results("out-b-again") == results("out-a")


def test_stage_identity_holds_what_the_result_depends_on(tmp_path):
    """Another seed, M, size or hyperparameter is another stage directory; a different
    checkpoint cadence or work directory spelling is the same stage."""
    from ebm_jax.recipes.regression1d import plan
    from ebm_jax.train.stages import RunContext

    ctx = RunContext(tmp_path, lock=False)
    dirs = lambda *o: [j.stage.dir(ctx).name for j in plan(load_config(f"{TABLE1}:tiny",
                                                                       list(o)))]
    base = dirs()
    assert base[0].startswith("nce+-d1-M4-") and base[1].startswith("ml-mcmc-2-d1-M2-")
    for o in ("seed=1", "num_samples=8", "num_models=3", "epochs=3", "num_train=256",
              "learning_rate=0.01", "nce_sigmas=0.1,0.9", "langevin_step=0.05,0.02"):
        assert dirs(o) != base, o
    assert dirs("save_every_epochs=1", "grid=32", "top_k=2") == base


@pytest.mark.parametrize("overrides, match", [
    (["methods=ml-iss"], "--config.methods must be a non-empty list drawn from"),
    (["methods=ml-mcmc-0"], "ml-mcmc-L with an integer L >= 1"),
    (["datasets=3"], r"--config.datasets must be a non-empty list drawn from \[1, 2\]"),
    (["num_models=0"], "--config.num_models must be an integer >= 1"),
    (["epochs=0"], "--config.epochs must be an integer >= 1"),
    (["num_samples=0"], "--config.num_samples must be an integer >= 1"),
    (["top_k=3"], r"--config.top_k must be at most num_models \(2\), got 3"),
    (["methods=ml-mcmc-16", "mcmc_models=1", "top_k=2", "num_models=4"],
     r"--config.top_k must be at most mcmc_models \(1\)"),
    (["sweep_m=1,2", "methods=sm"], "sm draws no samples"),
    (["learning_rate=-1"], "--config.learning_rate must be a finite number > 0"),
    (["nce_sigmas=0.1,0"], "--config.nce_sigmas must be two finite numbers > 0"),
    (["nce_plus_beta_scale=var"], "--config.nce_plus_beta_scale must be one of"),
    (["seed=-1"], "--config.seed must be an integer in"),
    (["langevin=fast"], r"--config.langevin must be one of \['auto', 'fused', 'reference'\]"),
])
def test_bad_config_is_refused(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(f"{TABLE1}:tiny", overrides)


@pytest.mark.parametrize("overrides, match", [
    (["num_samples=1000000000"], r"training nce\+-d1-M1000000000 \(2 models x batch 32 "
     r"x M=1000000000, 128 examples\) needs about .* GiB, more than the"),
    (["mcmc_samples=1000000000"], "training ml-mcmc-2-d1-M1000000000"),
    (["num_train=100000000000000"], r"needs about .* GiB.*--config.num_train"),
    (["grid=1000000"], r"the D_KL evaluation on a 1000000 x 1000000 grid needs about"),
])
def test_sizes_that_cannot_fit_are_refused_before_any_data(tmp_path, monkeypatch,
                                                          overrides, match):
    def no_data(*a, **k):
        raise AssertionError("data generated before the memory check")

    monkeypatch.setattr(toy1d, "sample", no_data)
    with pytest.raises(ValueError, match=match):
        _run(f"{TABLE1}:tiny", tmp_path / "runs", tmp_path / "out", overrides)
    assert not (tmp_path / "out").exists()
    assert [p.name for p in (tmp_path / "runs").iterdir()] == []  # no stage, lock freed


def test_devices_must_divide_the_batch(tmp_path):
    with pytest.raises(ValueError, match=r"--devices \(3\) must divide "
                                         r"--config.batch_size \(32\)"):
        _run(f"{TABLE1}:tiny", tmp_path / "runs", tmp_path / "out", devices=3)
    assert not (tmp_path / "out").exists()


def test_cli_reports_a_bad_method_in_one_line(tmp_path, capsys):
    out = tmp_path / "never"
    rc = cli.main(["run", f"{TABLE1}:tiny", "--config.methods=nce,ml-iss", "--out",
                   str(out), "--workdir", str(tmp_path / "runs"), "--no-progress"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--config.methods must be a non-empty list drawn from" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("path", [TABLE1, FIGURE2])
def test_config_files_load_every_variant(path):
    from ebm_jax.config import load_module
    from ebm_jax.config_catalog import describe

    module = load_module(path)
    first = module.__doc__.strip().splitlines()[0]
    rel = Path(path).relative_to(ROOT).as_posix()
    assert first == f"ebm-jax run {rel}:{module.VARIANTS[0]}"
    assert describe(Path(path))[0].startswith(("Table 1", "Figure 2"))
    for v in module.VARIANTS:
        cfg = load_config(f"{path}:{v}")
        assert cfg.seed == 0 and cfg.batch_size == 32
    quick = load_config(f"{path}:quick")
    assert (quick.num_models, quick.epochs, quick.top_k) == (5, 20, 3)
    paper = load_config(f"{path}:paper")
    assert (paper.num_models, paper.epochs, paper.top_k, paper.num_samples) == (
        20, 75, 5, 1024)


def test_quick_and_paper_pass_every_check_and_share_stages(tmp_path):
    """Every loss of the full configs builds, their sizes fit, and Figure 2's M = 256
    stages are Table 1's (one work directory trains them once)."""
    from ebm_jax.recipes.regression1d import check, plan
    from ebm_jax.train.stages import RunContext

    ctx = RunContext(tmp_path, lock=False)
    for path in (TABLE1, FIGURE2):
        for v in ("quick", "paper"):
            check(load_config(f"{path}:{v}"), ctx)
    table1 = {j.stage.name: j.stage.dir(ctx) for j in plan(load_config(f"{TABLE1}:quick"))}
    assert list(table1)[:9] == [
        "ml-is-d1-M256", "ml-mcmc-1-d1-M8", "ml-mcmc-16-d1-M8", "ml-mcmc-256-d1-M8",
        "kld-is-d1-M256", "nce-d1-M256", "sm-d1", "dsm-d1-M256", "nce+-d1-M256"]
    figure2 = {j.stage.name: j.stage.dir(ctx) for j in plan(load_config(f"{FIGURE2}:quick"))}
    assert len(figure2) == 4 * 2 * 6
    shared = set(table1) & set(figure2)
    assert shared == {f"{m}-d{d}-M256" for m in ("ml-is", "kld-is", "nce", "nce+")
                      for d in (1, 2)}
    assert all(table1[s] == figure2[s] for s in shared)


def test_ml_mcmc_of_every_chain_length_shares_one_training_step(tmp_path):
    """L is a run-time value of the training step: ML-MCMC-3 after ML-MCMC-1 (the same
    ensemble size and chains) compiles nothing, and trains its own L (another loss)."""
    _run(f"{TABLE1}:tiny", tmp_path / "w", tmp_path / "o",
         ["--config.methods=ml-mcmc-1,ml-mcmc-3", "--config.datasets=1"])
    payload = json.loads((tmp_path / "o" / "results.json").read_text())
    seconds = payload["stage_seconds"]
    first, second = (seconds[k] for k in sorted(seconds, key=lambda k: "3" in k))
    assert first["compilations"] > 0 and second["compilations"] == 0, seconds
    recs = payload["tables"]["table1"]
    assert [r["hyperparameters"]["num_steps"] for r in recs] == [1, 3]
    assert recs[0]["final_loss"] != recs[1]["final_loss"]


def test_ml_mcmc_through_the_fused_chain_trains_as_the_reference_chain(tmp_path):
    """--config.langevin=fused trains ML-MCMC with the fused Pallas kernel (interpret
    mode on a CPU): the same noise, so the same losses and D_KL to float32 rounding; the
    stage is another one (its identity records the kernel), the run says which chain it
    used, and "auto" on a CPU takes the reference chain, keeping the reference's stage.
    """
    from ebm_jax.recipes.regression1d import langevin_path, plan
    from ebm_jax.train.stages import RunContext

    args = ["--config.methods=ml-mcmc-2", "--config.datasets=1"]
    logs = []
    run = lambda out, extra: run_experiment(
        load_config(f"{TABLE1}:tiny", args + extra), workdir=tmp_path / "w",
        out=tmp_path / out, progress=False, log=logs.append)
    run("fused", ["--config.langevin=fused"])
    run("auto", [])
    fused, auto = (json.loads((tmp_path / o / "results.json").read_text())
                   for o in ("fused", "auto"))
    assert fused["langevin"] == {"path": "fused", "why": "as set (--config.langevin)"}
    assert auto["langevin"]["path"] == "reference"
    assert "this backend is cpu" in auto["langevin"]["why"]
    assert any(line.startswith("ML-MCMC's Langevin chains: fused") for line in logs)
    (a,), (b,) = fused["tables"]["table1"], auto["tables"]["table1"]
    assert a["hyperparameters"].get("fused") is True and "fused" not in b["hyperparameters"]
    # 2 epochs of 4 steps, float32: the paths may round apart in the last bits only
    assert a["final_loss"] == pytest.approx(b["final_loss"], rel=1e-4, abs=1e-5)
    assert a["kl_all"] == pytest.approx(b["kl_all"], rel=1e-3, abs=1e-5)
    ctx = RunContext(tmp_path / "w", lock=False)
    dirs = lambda *o: [j.stage.dir(ctx).name for j in plan(
        load_config(f"{TABLE1}:tiny", args + list(o)))]
    assert dirs("--config.langevin=fused") != dirs() == dirs("--config.langevin=reference")
    assert langevin_path(load_config(f"{TABLE1}:tiny"))[0] == "reference"
