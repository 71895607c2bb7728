"""1D regression benchmark: seconds per epoch of every Table 1 method, JAX against an eager
PyTorch implementation of the same network, losses and Adam step, interleaved.

    python benchmarks/regression1d.py --out results/bench [--torch-python PY] [--methods ...]
        [--torch-device cuda]
    bash benchmarks/run_regression1d.sh          # the same, finding or making PyTorch's venv

For each method (one model, batch 32, M = 1024 samples or chains, dataset 1 settings;
the hyperparameters of the paper variant of experiments/ebm_regression/table1_toy1d.py):

- JAX: the jitted epoch that `experiments/ebm_regression/table1_toy1d.py` trains
  (`ebm_jax.train.ensemble`: the `ebm_jax.train` step scanning the epoch's steps),
  compiled ahead of time and warmed up; methods too slow for whole epochs (ML-MCMC-256)
  time `--heavy-steps` steps per call and scale to the epoch's ceil(2000 / 32) = 63
  steps, as the PyTorch side does.
- PyTorch: `benchmarks/torch_regression1d.py --serve`, a worker in `--torch-python` (a
  Python with torch 2.13.0 CPU), with `--threads` intra-op threads (default 1: more
  threads are erratic on a shared machine), warmed up with one step. `--torch-device
  cuda` runs it on the GPU (a CUDA build of torch), beside JAX on its default device;
  without CUDA it stops with an error before anything is timed.
- Protocol: the two sides alternate, A B A B, for `--rounds` rounds per method; each
  side's seconds per epoch is the median of its rounds, with min and max, in wall and
  in process CPU time; the speed-up is PyTorch's median over JAX's, for both. The load
  average is recorded before and after.
- FLOPs per epoch from XLA's cost analysis of one unscanned train step with the network
  vmapped over the M samples (the plain form). The recipe computes the samples with the
  batched network (`ToyEnergyMLP.many`), the same multiply-adds, but XLA's cost
  analysis leaves most of its fused elementwise kernels uncounted (10x too few FLOPs). XLA counts a
  scan body once, so for ML-MCMC-L the step is analysed with L = 1 and (L - 1) times the
  cost of one Langevin update of the batch is added. GFLOP/s achieved against the CPU's
  float32 matmul peak measured here (best of a few 2048^3 matmuls in XLA).
- Targets: every method >= 4x PyTorch per epoch (stretch 5x), and ML-MCMC-256 below
  the paper's GPU figure of 30.8 s per epoch.

Writes regression1d.json and regression1d.md under --out and prints the table.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
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
sys.path.insert(0, str(HERE))
from bench_protocol import BenchRun, TorchWorker, summary  # noqa: E402

TABLE1 = HERE.parent / "experiments" / "ebm_regression" / "table1_toy1d.py"
STEPS_PER_EPOCH = math.ceil(2000 / 32)
TARGET, STRETCH = 4.0, 5.0  # speed-up over eager PyTorch per epoch, every method
PAPER_GPU_SECONDS = {"ml-mcmc-256": 30.8}  # the paper's s/epoch on its GPU
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
    energy = energy_fn(graphdef)  # the plain form, whose FLOPs XLA counts
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


def jax_epoch_timer(method: str, dataset: int, num_samples: int, steps: int,
                    devices: int = 1):
    """`run() -> (wall, cpu)` seconds of one call of the same jitted epoch (an
    `ebm_jax.train` step scanning `steps` steps of one model) that the Table 1 recipe
    (`ebm_jax.recipes.regression1d`) trains with, compiled and warmed up."""
    _, _, loss, graphdef, params = _setup(method, dataset, num_samples)
    single, _, rest = nnx.split(ToyEnergyMLP(rngs=nnx.Rngs(0)), nnx.Param, ...)
    optimizer = optax.adam(1e-3)
    num_train = 2000 if steps >= STEPS_PER_EPOCH else steps * 32
    x, y = toy1d.sample(jax.random.key(dataset), dataset, num_train)
    batches, per_epoch = make_epoch_batches(x, y, jax.random.key(1), 1, 32)
    mesh = make_mesh(devices)
    step = make_train_step(single, make_ensemble_loss(graphdef, loss), optimizer, mesh,
                           steps_per_call=per_epoch, stacked=True)
    holder = {"state": replicate(init_train_state(params, rest, optimizer,
                                                  jax.random.key(2)), mesh), "epoch": 0}
    batch = shard_batch(batches(0), mesh, stacked=True)
    compiled = step.lower(holder["state"], batch).compile()

    def run():
        holder["epoch"] += 1
        batch = shard_batch(batches(holder["epoch"] * per_epoch), mesh, stacked=True)
        t0, c0 = time.perf_counter(), time.process_time()
        holder["state"], metrics = compiled(holder["state"], batch)
        jax.block_until_ready((holder["state"], metrics))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if not np.all(np.isfinite(np.asarray(metrics["loss"]))):
            raise FloatingPointError(f"{method}: non-finite loss while timing")
        return wall, cpu

    run()  # warm-up
    return run, per_epoch


def _range(r: dict, fmt: str = "{:.3f}") -> str:
    return f"{fmt.format(r['median'])} ({fmt.format(r['min'])}-{fmt.format(r['max'])})"


def markdown(report: dict) -> str:
    has_torch = report.get("torch") is not None
    head = ["method", "JAX s/epoch (min-max)", "GFLOP/epoch", "GFLOP/s", "% of peak"]
    if has_torch:
        head += ["PyTorch s/epoch (min-max)", "speed-up wall", "speed-up CPU",
                 f"target {TARGET:.0f}x"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m, r in report["methods"].items():
        row = [m, _range(r["jax_wall"]), f"{r['gflop_per_epoch']:.2f}",
               f"{r['gflops']:.2f}", f"{r['percent_of_peak']:.2f}"]
        if has_torch:
            row += [_range(r["torch_wall"]), f"{r['speedup_wall']:.1f}x",
                    f"{r['speedup_cpu']:.1f}x",
                    "met" if r["meets_target"] else "missed"]
        lines.append("| " + " | ".join(row) + " |")
    env = report["environment"]
    lines.append("")
    gpu = [f"{m}: {r['jax_wall']['median']:.1f} s/epoch against the paper's GPU "
           f"{PAPER_GPU_SECONDS[m]} s ({'met' if r['below_paper_gpu'] else 'missed'})"
           for m, r in report["methods"].items() if m in PAPER_GPU_SECONDS]
    lines.append(
        f"{env['device']}, {env['cpu_count']} CPU cores, JAX {env['jax']}; float32 matmul "
        f"peak {report['matmul_peak_gflops']:.0f} GFLOP/s; M = {report['num_samples']}, "
        f"batch 32, 63 steps per epoch, one model; median of {report['rounds']} "
        "interleaved rounds (JAX, PyTorch, JAX, ...); load average "
        f"{report['load_average_start'][0]:.1f} before, "
        f"{report['load_average_end'][0]:.1f} after."
        + (f" PyTorch {report['torch']['torch']} eager on "
           f"{report['torch'].get('device_name', 'cpu')}, {report['torch']['threads']} "
           "thread(s)." if has_torch else "")
        + (" " + "; ".join(gpu) + "." if gpu else ""))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--methods", nargs="+", default=list(METHODS))
    p.add_argument("--dataset", type=int, default=1, choices=(1, 2))
    p.add_argument("--num-samples", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per method")
    p.add_argument("--heavy-steps", type=int, default=4,
                   help="steps per round for ML-MCMC-256, scaled to 63 (default 4)")
    p.add_argument("--torch-python", default=None,
                   help="Python with torch 2.13.0 CPU for the eager baseline")
    p.add_argument("--threads", type=int, default=1, help="PyTorch intra-op threads")
    p.add_argument("--torch-device", default="cpu", choices=("cpu", "cuda"),
                   help="where the PyTorch baseline runs (cuda: a CUDA build of torch)")
    args = p.parse_args(argv)
    bench_run = BenchRun(__file__, argv)
    for m in args.methods:
        check_method(m)
    for name in ("num_samples", "rounds", "heavy_steps", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.torch_python and not Path(args.torch_python).exists():
        p.error(f"--torch-python: {args.torch_python} does not exist")
    if args.torch_device != "cpu" and not args.torch_python:
        p.error(f"--torch-device {args.torch_device} needs --torch-python")

    load_start = os.getloadavg()
    try:  # first, so that a baseline that cannot run stops the benchmark at once
        worker = (TorchWorker(args.torch_python, "torch_regression1d.py", "--serve",
                              "--threads", str(args.threads), "--num-samples",
                              str(args.num_samples), "--device", args.torch_device)
                  if args.torch_python else None)
    except RuntimeError as err:
        p.error(str(err))
    peak = matmul_peak_gflops()
    print(f"float32 matmul peak: {peak:.0f} GFLOP/s", flush=True)
    results = {}
    try:
        for m in args.methods:
            steps = args.heavy_steps if m in HEAVY else STEPS_PER_EPOCH
            scale = STEPS_PER_EPOCH / steps  # per call -> per epoch
            run, _ = jax_epoch_timer(m, args.dataset, args.num_samples, steps)
            if worker is not None:
                worker.request(method=m, steps=1)  # builds the model, warms it up
            jw, jc, tw, tc = [], [], [], []
            for _ in range(args.rounds):  # A B A B
                wall, cpu = run()
                jw.append(wall * scale)
                jc.append(cpu * scale)
                if worker is not None:
                    t = worker.request(method=m, steps=steps)
                    if not t["finite"]:
                        raise FloatingPointError(f"PyTorch {m}: non-finite loss")
                    tw.append(t["wall"] * scale)
                    tc.append(t["cpu"] * scale)
            flops = step_flops(m, args.dataset, args.num_samples) * STEPS_PER_EPOCH
            spe = float(np.median(jw))
            r = {"jax_wall": summary(jw), "jax_cpu": summary(jc),
                 "gflop_per_epoch": flops / 1e9, "gflops": flops / spe / 1e9,
                 "percent_of_peak": 100 * flops / spe / 1e9 / peak,
                 "steps_per_round": steps}
            if m in PAPER_GPU_SECONDS:
                r["below_paper_gpu"] = bool(spe < PAPER_GPU_SECONDS[m])
            if worker is not None:
                r.update(torch_wall=summary(tw), torch_cpu=summary(tc),
                         speedup_wall=float(np.median(tw)) / spe,
                         speedup_cpu=float(np.median(tc)) / float(np.median(jc)))
                r["meets_target"] = bool(r["speedup_wall"] >= TARGET)
                r["meets_stretch"] = bool(r["speedup_wall"] >= STRETCH)
            results[m] = r
            print(f"{m}: JAX {spe:.3f} s/epoch"
                  + (f", PyTorch {float(np.median(tw)):.3f}, {r['speedup_wall']:.1f}x"
                     if worker is not None else ""), flush=True)
    finally:
        if worker is not None:
            worker.close()

    report = {
        "environment": {
            "device": str(jax.devices()[0].device_kind), "platform": platform.platform(),
            "cpu_count": os.cpu_count(), "jax": jax.__version__,
            "python": platform.python_version(),
        },
        "matmul_peak_gflops": peak, "num_samples": args.num_samples,
        "dataset": args.dataset, "rounds": args.rounds,
        "torch": None if worker is None else worker.info, "methods": results,
        "load_average_start": load_start, "load_average_end": os.getloadavg(),
    }
    table = markdown(report)
    bench_run.write(args.out, "regression1d", report, table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
