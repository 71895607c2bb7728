"""The 1D benchmark's own arithmetic: FLOP extrapolation over Langevin steps, report."""

import importlib.util
import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
import pytest

from ebm_jax.energy import batch_loss
from ebm_jax.train.ensemble import energy_fn, init_ensemble

_SPEC = importlib.util.spec_from_file_location(
    "bench_regression1d", Path(__file__).parents[2] / "benchmarks" / "regression1d.py"
)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def _unrolled_mcmc_step_flops(steps: int, chains: int, batch: int = 32) -> float:
    """FLOPs of an ML-MCMC-L train step whose Langevin chain is a Python loop (no scan),
    so that XLA's cost analysis sees every step."""
    graphdef, params = init_ensemble(jax.random.key(0), 1)
    params = jax.tree.map(lambda a: a[0], params)
    energy = energy_fn(graphdef)
    alpha = 0.05  # the Langevin step of dataset 1 (Table 1's hyperparameters)
    optimizer = optax.adam(1e-3)

    def loss(f, x, y, key):
        ys = jnp.broadcast_to(y, (chains,) + y.shape)
        grad = jax.vmap(jax.grad(lambda yy: f(x, yy)))
        for l in range(steps):
            eps = jax.random.normal(jax.random.fold_in(key, l), ys.shape)
            ys = ys + 0.5 * alpha**2 * grad(ys) + alpha * eps
        ys = jax.lax.stop_gradient(ys)
        return jnp.mean(jax.vmap(lambda yy: f(x, yy))(ys)) - f(x, y)

    def step(params, opt_state, key, xb, yb):
        value, grads = jax.value_and_grad(
            lambda p: batch_loss(loss, partial(energy, p), xb, yb, key))(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    z = jnp.zeros((batch, 1), jnp.float32)
    lowered = jax.jit(step).lower(params, optimizer.init(params), jax.random.key(0), z, z)
    return bench._flops(lowered.compile())


@pytest.mark.heavy
def test_mcmc_flops_extrapolation_matches_unrolled_chain():
    chains = 16
    for steps in (1, 4):
        got = bench.step_flops(f"ml-mcmc-{steps}", 1, chains)
        want = _unrolled_mcmc_step_flops(steps, chains)
        assert got == pytest.approx(want, rel=0.05), (steps, got, want)
    # and the count grows with L (a scan body counted once would not)
    assert bench.step_flops("ml-mcmc-8", 1, chains) > 1.5 * bench.step_flops(
        "ml-mcmc-4", 1, chains)


def test_flops_grow_with_the_number_of_samples():
    small, large = bench.step_flops("nce", 1, 64), bench.step_flops("nce", 1, 256)
    assert 3.0 < large / small < 4.5


@pytest.mark.heavy
def test_benchmark_smoke_writes_json_and_markdown(tmp_path):
    rc = bench.main(["--out", str(tmp_path), "--methods", "sm", "ml-mcmc-256",
                     "--num-samples", "4", "--rounds", "2", "--heavy-steps", "1"])
    assert rc == 0
    report = json.loads((tmp_path / "regression1d.json").read_text())
    assert set(report["methods"]) == {"sm", "ml-mcmc-256"}
    for r in report["methods"].values():
        w = r["jax_wall"]
        assert 0 < w["min"] <= w["median"] <= w["max"] and r["gflop_per_epoch"] > 0
        assert r["jax_cpu"]["median"] > 0
    assert report["methods"]["ml-mcmc-256"]["steps_per_round"] == 1
    assert "below_paper_gpu" in report["methods"]["ml-mcmc-256"]
    assert report["torch"] is None and report["rounds"] == 2
    assert len(report["load_average_start"]) == 3
    md = (tmp_path / "regression1d.md").read_text()
    assert "| ml-mcmc-256 |" in md and "GFLOP/s" in md and "paper's GPU 30.8 s" in md


def test_a_benchmark_report_carries_its_provenance_and_can_be_stored(tmp_path):
    """The report says what made it (the script, its arguments, the commit, the
    machine and its load), and `stored store` takes it into docs/results as a page's
    table, with the command that reproduces it."""
    from ebm_jax.report import provenance, stored

    out = tmp_path / "bench"
    argv = ["--out", str(out), "--methods", "sm", "--num-samples", "4", "--rounds", "1"]
    assert bench.main(argv) == 0
    report = json.loads((out / "regression1d.json").read_text())
    p = provenance.read(report, "regression1d.json")
    assert p["benchmark"] == {"script": "benchmarks/regression1d.py", "args": argv}
    assert len(p["load_average"]["start"]) == 3 and len(p["load_average"]["end"]) == 3
    assert p["wall_seconds"] >= 0 and p["machine"]["cpu_cores"] >= 1
    md = (out / "regression1d.md").read_text()
    assert md.rstrip().splitlines()[-1].startswith(provenance.FOOTER_PREFIX)
    assert "`python benchmarks/regression1d.py --out" in md and "load average" in md

    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "benchmarks").mkdir()
    (root / "benchmarks" / "regression1d.py").write_text("")
    (root / "README.md").write_text("# repo\n")
    target = stored.store(root, out / "regression1d.json")
    assert target == root / stored.RESULTS / "bench-regression1d"
    assert sorted(f.name for f in target.iterdir()) == ["results.json", "results.md"]
    assert stored.staleness(root, "bench-regression1d") is None
    assert not (root / "experiments" / "wall_times.json").exists()  # not a config's
    (root / "docs" / "bench.md").write_text(
        "# Bench\n<!-- stored: bench-regression1d -->\n<!-- /stored -->\n")
    stored.sync(root)
    page = (root / "docs" / "bench.md").read_text()
    assert "`python benchmarks/regression1d.py --out" in page and "| sm |" in page
    (root / "benchmarks" / "regression1d.py").unlink()  # the benchmark is gone
    assert "its benchmark benchmarks/regression1d.py no longer exists" in (
        stored.staleness(root, "bench-regression1d"))
    with pytest.raises(stored.StoredError, match="missing.json: no such file"):
        stored.store(root, tmp_path / "missing.json")
    (tmp_path / "cut.json").write_text('{"rows": [')
    with pytest.raises(stored.StoredError, match="cut.json: not a benchmark's report"):
        stored.store(root, tmp_path / "cut.json")


@pytest.mark.parametrize("argv, match", [
    (["--methods", "ml-iss"], "method must be one of"),
    (["--num-samples", "0"], "--num-samples must be >= 1"),
    (["--torch-python", "/nonexistent/python"], "--torch-python"),
    (["--torch-device", "cuda"], "--torch-device cuda needs --torch-python"),
    (["--torch-device", "tpu"], "invalid choice"),
])
def test_benchmark_rejects_bad_arguments(tmp_path, argv, match, capsys):
    with pytest.raises((ValueError, SystemExit)) as err:
        bench.main(["--out", str(tmp_path)] + argv)
    text = str(err.value) + capsys.readouterr().err
    assert match in text
    assert not (tmp_path / "regression1d.json").exists()


def _torch_python() -> str:
    """This Python if it has torch, else $TORCH_PYTHON or .venv-torch when it has torch
    and numpy; else the test is skipped."""
    if importlib.util.find_spec("torch") is not None:
        return sys.executable
    root = Path(__file__).parents[2]
    for cand in (os.environ.get("TORCH_PYTHON"), root / ".venv-torch" / "bin" / "python"):
        if cand and Path(cand).exists() and subprocess.run(
                [str(cand), "-c", "import torch, numpy"], capture_output=True).returncode == 0:
            return str(cand)
    pytest.skip("no Python with torch (set TORCH_PYTHON or run benchmarks/run_regression1d.sh)")


def _has_cuda(python: str) -> bool:
    return subprocess.run([python, "-c", "import sys, torch; sys.exit(not "
                           "torch.cuda.is_available())"]).returncode == 0


def test_torch_worker_times_steps_on_the_cpu():
    python = _torch_python()
    worker = bench.TorchWorker(python, "torch_regression1d.py", "--serve", "--threads", "1",
                               "--num-samples", "4", "--device", "cpu")
    try:
        assert worker.info["device"] == "cpu" and worker.info["threads"] == 1
        for method in ("nce", "dsm"):
            worker.request(method=method, steps=1)  # builds and warms up
            t = worker.request(method=method, steps=2)
            assert t["finite"] and t["wall"] > 0 and t["cpu"] > 0
    finally:
        worker.close()


def test_cuda_baseline_without_cuda_stops_with_a_clear_error(tmp_path, capsys):
    python = _torch_python()
    if _has_cuda(python):
        pytest.skip("this torch sees a CUDA GPU")
    with pytest.raises(SystemExit):
        bench.main(["--out", str(tmp_path), "--torch-python", python, "--torch-device",
                    "cuda", "--methods", "sm", "--num-samples", "4", "--rounds", "1"])
    err = capsys.readouterr().err
    assert "--torch-device cuda" in err and "no CUDA GPU" in err
    assert not (tmp_path / "regression1d.json").exists()


def test_train_infra_benchmark_smoke(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "bench_train_infra", Path(__file__).parents[2] / "benchmarks" / "train_infra.py")
    infra = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(infra)
    rc = infra.main(["--out", str(tmp_path), "--devices", "1", "2", "--steps", "2",
                     "--repeats", "1", "--widths", "8"])
    assert rc == 0
    report = json.loads((tmp_path / "train_infra.json").read_text())
    assert set(report["sharded_steps_per_second"]) == {"1", "2"}
    assert report["plain_jit_steps_per_second"] > 0
    (c,) = report["checkpoints"]
    assert c["parameters"] == 10 * (8 * 8 + 8) and c["save_seconds"] > 0
    assert "restore s" in (tmp_path / "train_infra.md").read_text()
