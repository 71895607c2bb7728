"""1D regression benchmark: seconds per epoch of every Table 1 method, JAX against an eager
PyTorch implementation of the same network, losses and Adam step, in one run.

    python benchmarks/regression1d.py --out results/bench [--torch-python PY] [--methods ...]

For each method (one model, batch 32, M = 1024 samples or chains, dataset 1 settings;
the hyperparameters of the paper variant of experiments/ebm_regression/table1_toy1d.py):

- JAX seconds per epoch: the jitted epoch that
  `experiments/ebm_regression/table1_toy1d.py` trains (`ebm_jax.train.ensemble`: the
  `ebm_jax.train` step scanning the epoch's steps), compiled ahead of time, best of `--repeats` timed calls after one warm-up;
  methods too slow for whole epochs (ML-MCMC-256) time `--heavy-steps` steps and scale
  to the epoch's ceil(2000 / 32) = 63 steps, as the PyTorch side does.
- FLOPs per epoch from XLA's cost analysis of one unscanned train step. XLA counts a
  scan body once, so for ML-MCMC-L the step is analysed with L = 1 and (L - 1) times the
  cost of one Langevin update of the batch is added.
- GFLOP/s achieved, against the CPU's float32 matmul peak measured here (best of a few
  2048^3 matmuls in XLA). The network is 10 units wide, so its matmuls are tiny and the
  work is dominated by element-wise tanh/ReLU: a small fraction of the peak is expected.
- PyTorch: `benchmarks/torch_regression1d.py` run by `--torch-python` (a Python with
  torch 2.13.0 CPU), with `--threads` intra-op threads. Without it the torch columns stay
  empty.

Writes regression1d.json and regression1d.md under --out and prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ebm_jax.config import load_config
from ebm_jax.data import toy1d
from ebm_jax.energy import batch_loss, make_loss
from ebm_jax.energy.langevin import langevin_chains
from ebm_jax.io import write_report
from ebm_jax.models import ToyEnergyMLP
from ebm_jax.recipes.regression1d import METHODS, check_method, method_loss
from ebm_jax.train import init_train_state, make_mesh, make_train_step, replicate, shard_batch
from ebm_jax.train.ensemble import (
    energy_fn,
    init_ensemble,
    make_ensemble_loss,
    make_epoch_batches,
)

HERE = Path(__file__).resolve().parent
TABLE1 = HERE.parent / "experiments" / "ebm_regression" / "table1_toy1d.py"
STEPS_PER_EPOCH = math.ceil(2000 / 32)
TARGET = {"ml-mcmc-256": 5.0}  # speed-up targets over eager PyTorch; 3x for the rest
DEFAULT_TARGET = 3.0
HEAVY = {"ml-mcmc-256"}


def matmul_peak_gflops(n: int = 2048, repeats: int = 5) -> float:
    """Best float32 GFLOP/s of an n x n x n matmul in XLA on the default device."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    mm = jax.jit(jnp.matmul)
    mm(a, b).block_until_ready()
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        mm(a, b).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


def _setup(method: str, dataset: int, num_samples: int):
    cfg = load_config(f"{TABLE1}:paper")
    name, hp = method_loss(cfg, method, dataset, num_samples)
    loss = make_loss(name, **hp)
    graphdef, params = init_ensemble(jax.random.key(0), 1)
    return name, hp, loss, graphdef, params


def _flops(compiled) -> float:
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):  # older JAX returned one dict per device
        cost = cost[0]
    return float(cost.get("flops", float("nan"))) if cost else float("nan")


def step_flops(method: str, dataset: int, num_samples: int, batch: int = 32) -> float:
    """FLOPs of one train step (loss, gradient and Adam update) of one model."""
    name, hp, _, graphdef, params = _setup(method, dataset, num_samples)
    energy = energy_fn(graphdef)
    params = jax.tree.map(lambda a: a[0], params)
    optimizer = optax.adam(1e-3)
    opt_state = optimizer.init(params)
    steps = hp.get("num_steps", 1)
    if name == "ml-mcmc":
        hp = dict(hp, num_steps=1)
    loss = make_loss(name, **hp)

    def step(params, opt_state, key, xb, yb):
        value, grads = jax.value_and_grad(
            lambda p: batch_loss(loss, partial(energy, p), xb, yb, key)
        )(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    xb = jnp.zeros((batch, 1), jnp.float32)
    yb = jnp.zeros((batch, 1), jnp.float32)
    key = jax.random.key(0)
    flops = _flops(jax.jit(step).lower(params, opt_state, key, xb, yb).compile())
    if name == "ml-mcmc" and steps > 1:
        chains = hp["num_samples"]

        def update(params, key, xb, yb):  # one Langevin step of every chain of the batch
            def one(x, y, k):
                y0 = jnp.broadcast_to(y, (chains,) + y.shape)
                return langevin_chains(lambda yy: energy(params, x, yy), y0, k,
                                       num_steps=1, step_size=hp["step_size"])

            return jax.vmap(one)(xb, yb, jax.random.split(key, batch))

        flops += (steps - 1) * _flops(jax.jit(update).lower(params, key, xb, yb).compile())
    return flops


def time_method(method: str, dataset: int, num_samples: int, steps: int,
                repeats: int, devices: int = 1) -> float:
    """Wall seconds per epoch of one model (epoch = 63 steps of batch 32), through the
    same jitted epoch (`ebm_jax.train` step scanning an epoch) that the Table 1 recipe
    (`ebm_jax.recipes.regression1d`) trains with."""
    _, _, loss, graphdef, params = _setup(method, dataset, num_samples)
    single, _, rest = nnx.split(ToyEnergyMLP(rngs=nnx.Rngs(0)), nnx.Param, ...)
    optimizer = optax.adam(1e-3)
    num_train = 2000 if steps >= STEPS_PER_EPOCH else steps * 32
    x, y = toy1d.sample(jax.random.key(dataset), dataset, num_train)
    batches, per_epoch = make_epoch_batches(x, y, jax.random.key(1), 1, 32)
    mesh = make_mesh(devices)
    step = make_train_step(single, make_ensemble_loss(graphdef, loss), optimizer, mesh,
                           steps_per_call=per_epoch, stacked=True)
    state = replicate(init_train_state(params, rest, optimizer, jax.random.key(2)), mesh)
    batch = shard_batch(batches(0), mesh, stacked=True)
    compiled = step.lower(state, batch).compile()
    state, metrics = compiled(state, batch)  # warm-up
    jax.block_until_ready(state)
    best = math.inf
    for r in range(repeats):
        batch = shard_batch(batches((r + 1) * per_epoch), mesh, stacked=True)
        t0 = time.perf_counter()
        state, metrics = compiled(state, batch)
        jax.block_until_ready((state, metrics))
        best = min(best, time.perf_counter() - t0)
    if not np.all(np.isfinite(np.asarray(metrics["loss"]))):
        raise FloatingPointError(f"{method}: non-finite loss while timing")
    return best / per_epoch * STEPS_PER_EPOCH


def run_torch(python: str, methods, num_samples: int, threads: int) -> dict:
    fd, tmp = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        cmd = [python, str(HERE / "torch_regression1d.py"), "--out", tmp,
               "--threads", str(threads), "--num-samples", str(num_samples),
               "--methods", *methods]
        subprocess.run(cmd, check=True)
        with open(tmp) as f:
            return json.load(f)
    finally:
        os.unlink(tmp)


def markdown(report: dict) -> str:
    has_torch = report.get("torch") is not None
    head = ["method", "JAX s/epoch", "GFLOP/epoch", "GFLOP/s", "% of peak"]
    if has_torch:
        head += ["PyTorch s/epoch", "speed-up", "target", "met"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m, r in report["methods"].items():
        row = [m, f"{r['jax_seconds_per_epoch']:.3f}", f"{r['gflop_per_epoch']:.2f}",
               f"{r['gflops']:.2f}", f"{r['percent_of_peak']:.2f}"]
        if has_torch:
            t = r.get("torch_seconds_per_epoch")
            row += ([f"{t:.3f}", f"{r['speedup']:.1f}x", f"{r['target']:.0f}x",
                     "yes" if r["meets_target"] else "no"] if t is not None
                    else ["n/a"] * 4)
        lines.append("| " + " | ".join(row) + " |")
    env = report["environment"]
    lines.append("")
    lines.append(
        f"{env['device']}, {env['cpu_count']} CPU cores, JAX {env['jax']}; float32 matmul "
        f"peak {report['matmul_peak_gflops']:.0f} GFLOP/s; M = {report['num_samples']}, "
        f"batch 32, 63 steps per epoch, one model."
        + (f" PyTorch {report['torch']['torch']} eager, {report['torch']['threads']} "
           "threads." if has_torch else "")
    )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--methods", nargs="+", default=list(METHODS))
    p.add_argument("--dataset", type=int, default=1, choices=(1, 2))
    p.add_argument("--num-samples", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--heavy-steps", type=int, default=4,
                   help="steps timed for ML-MCMC-256, scaled to 63 (default 4)")
    p.add_argument("--torch-python", default=None,
                   help="Python with torch 2.13.0 CPU for the eager baseline")
    p.add_argument("--threads", type=int, default=2, help="PyTorch intra-op threads")
    args = p.parse_args(argv)
    for m in args.methods:
        check_method(m)
    for name in ("num_samples", "repeats", "heavy_steps", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.torch_python and not Path(args.torch_python).exists():
        p.error(f"--torch-python: {args.torch_python} does not exist")

    peak = matmul_peak_gflops()
    print(f"float32 matmul peak: {peak:.0f} GFLOP/s", flush=True)
    torch_report = None
    if args.torch_python:
        torch_report = run_torch(args.torch_python, args.methods, args.num_samples,
                                 args.threads)
    results = {}
    for m in args.methods:
        steps = args.heavy_steps if m in HEAVY else STEPS_PER_EPOCH
        spe = time_method(m, args.dataset, args.num_samples, steps, args.repeats)
        flops = step_flops(m, args.dataset, args.num_samples) * STEPS_PER_EPOCH
        r = {"jax_seconds_per_epoch": spe, "gflop_per_epoch": flops / 1e9,
             "gflops": flops / spe / 1e9, "percent_of_peak": 100 * flops / spe / 1e9 / peak,
             "timed_steps": steps}
        if torch_report is not None and m in torch_report["seconds_per_epoch"]:
            t = torch_report["seconds_per_epoch"][m]
            target = TARGET.get(m, DEFAULT_TARGET)
            r.update(torch_seconds_per_epoch=t, speedup=t / spe, target=target,
                     meets_target=bool(t / spe >= target))
        results[m] = r
        print(f"jax {m}: {spe:.3f} s/epoch, {r['gflops']:.2f} GFLOP/s", flush=True)

    report = {
        "environment": {
            "device": str(jax.devices()[0].device_kind), "platform": platform.platform(),
            "cpu_count": os.cpu_count(), "jax": jax.__version__,
            "python": platform.python_version(),
        },
        "matmul_peak_gflops": peak, "num_samples": args.num_samples,
        "dataset": args.dataset, "torch": torch_report, "methods": results,
    }
    table = markdown(report)
    write_report(args.out, "regression1d", report, table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
