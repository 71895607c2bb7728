"""Training-infrastructure benchmark: the sharded step's overhead and checkpoint I/O.

    python benchmarks/train_infra.py --out results/bench

1. Steps per second of the `ebm_jax.train` step (NCE on the 1D network, batch 32,
   M = 256) on meshes of 1, 2, 4 and 8 fake CPU devices, against a plain `jax.jit` of
   the same update on one device. Fake devices share the same cores, so this measures
   what the sharding machinery costs (partitioning, collectives, per-step waits), not
   real scaling.
2. Orbax save and restore time of a `TrainState` (Adam) against its size, for MLPs of
   about 10^4 to 10^7 parameters, synchronous writes to --ckpt-dir (default: a
   temporary directory).

Writes train_infra.json and train_infra.md under --out and prints the tables.
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")  # before JAX starts

import argparse  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

from ebm_jax.energy import batch_loss, make_loss  # noqa: E402
from ebm_jax.io import write_report  # noqa: E402
from ebm_jax.models import ToyEnergyMLP  # noqa: E402
from ebm_jax.train import (  # noqa: E402
    StageCheckpoints,
    abstract_like,
    create_train_state,
    make_mesh,
    make_train_step,
    replicate,
    shard_batch,
)

LOSS = make_loss("nce", sigmas=(0.1, 0.8), num_samples=256)


def loss_fn(model, batch, key):
    x, y = batch
    return batch_loss(LOSS, lambda xx, yy: model(xx[None], yy[None])[0], x, y, key)


def _data(batch=32):
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, (batch, 1)).astype(np.float32)
    return x, np.sin(x).astype(np.float32)


def _rate(call, steps: int, repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            call()
        best = min(best, time.perf_counter() - t0)
    return steps / best


def plain_rate(steps: int, repeats: int) -> float:
    """Steps/s of a plain jitted update on one device (no mesh, no shardings)."""
    opt = optax.adam(1e-3)
    graphdef, state = create_train_state(ToyEnergyMLP(rngs=nnx.Rngs(0)), opt,
                                         jax.random.key(0))

    @partial(jax.jit, donate_argnums=0)
    def step(state, batch):
        def objective(params):
            model = nnx.merge(graphdef, params, state.rest)
            return loss_fn(model, batch, state.rng())

        loss, grads = jax.value_and_grad(objective)(state.params)
        updates, opt_state = opt.update(grads, state.opt_state, state.params)
        return state.replace(params=optax.apply_updates(state.params, updates),
                             opt_state=opt_state, step=state.step + 1), loss

    batch = jax.device_put(_data())
    holder = {"s": state}

    def call():
        holder["s"], loss = step(holder["s"], batch)
        jax.block_until_ready(loss)

    call()
    return _rate(call, steps, repeats)


def sharded_rate(devices: int, steps: int, repeats: int) -> float:
    opt = optax.adam(1e-3)
    graphdef, state = create_train_state(ToyEnergyMLP(rngs=nnx.Rngs(0)), opt,
                                         jax.random.key(0))
    mesh = make_mesh(devices)
    step = make_train_step(graphdef, loss_fn, opt, mesh)
    batch = shard_batch(_data(), mesh)
    holder = {"s": replicate(state, mesh)}

    def call():
        holder["s"], metrics = step(holder["s"], batch)
        jax.block_until_ready(holder["s"])  # as fit() does: wait on every step

    call()
    return _rate(call, steps, repeats)


class _Wide(nnx.Module):
    def __init__(self, width: int, depth: int, rngs):
        self.layers = nnx.List([nnx.Linear(width, width, rngs=rngs) for _ in range(depth)])

    def __call__(self, x):
        for layer in self.layers:
            x = jnp.tanh(layer(x))
        return x


def checkpoint_times(width: int, depth: int, directory: Path, repeats: int):
    _, state = create_train_state(_Wide(width, depth, nnx.Rngs(0)), optax.adam(1e-3),
                                  jax.random.key(0))
    nbytes = sum(x.nbytes for x in jax.tree.leaves(state))
    params = sum(x.size for x in jax.tree.leaves(state.params))
    save, restore = math.inf, math.inf
    for r in range(repeats):
        stage = directory / f"w{width}-{r}"
        ckpt = StageCheckpoints(stage, save_every=1, asynchronous=False)
        t0 = time.perf_counter()
        ckpt.save(1, state, {"next_step": 1}, force=True)
        ckpt.wait()
        save = min(save, time.perf_counter() - t0)
        t0 = time.perf_counter()
        got, _ = ckpt.restore(abstract_like(state))
        jax.block_until_ready(got)
        restore = min(restore, time.perf_counter() - t0)
        ckpt.close()
        shutil.rmtree(stage)
    return {"parameters": int(params), "state_megabytes": nbytes / 2**20,
            "save_seconds": save, "restore_seconds": restore}


def markdown(report) -> str:
    lines = ["| step | devices | steps/s | time vs plain jit |", "|---|---|---|---|"]
    plain = report["plain_jit_steps_per_second"]
    lines.append(f"| plain jax.jit | 1 | {plain:.1f} | 1.00x |")
    for n, rate in report["sharded_steps_per_second"].items():
        lines.append(f"| ebm_jax.train step | {n} | {rate:.1f} | {plain / rate:.2f}x |")
    lines += ["", "| parameters | state MB | save s | restore s |", "|---|---|---|---|"]
    for c in report["checkpoints"]:
        lines.append(f"| {c['parameters']:,} | {c['state_megabytes']:.1f} | "
                     f"{c['save_seconds']:.3f} | {c['restore_seconds']:.3f} |")
    env = report["environment"]
    lines += ["", f"{env['cpu_count']} CPU cores, JAX {env['jax']}; NCE on the 1D network, "
              "batch 32, M = 256; fake CPU devices share the cores. Checkpoints: Adam "
              "TrainState (params + 2 moments), synchronous Orbax writes, best of "
              f"{report['repeats']}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--widths", type=int, nargs="+", default=[32, 100, 316, 1000],
                   help="MLP widths of the checkpoint test (10 layers each)")
    p.add_argument("--ckpt-dir", type=Path, default=None)
    args = p.parse_args(argv)
    if args.steps < 1 or args.repeats < 1:
        p.error("--steps and --repeats must be >= 1")
    bad = [n for n in args.devices if not 1 <= n <= len(jax.devices())]
    if bad:
        p.error(f"--devices must be in [1, {len(jax.devices())}], got {bad}")

    plain = plain_rate(args.steps, args.repeats)
    print(f"plain jit: {plain:.1f} steps/s", flush=True)
    sharded = {}
    for n in args.devices:
        sharded[str(n)] = sharded_rate(n, args.steps, args.repeats)
        print(f"sharded step, {n} devices: {sharded[str(n)]:.1f} steps/s", flush=True)
    ckpts = []
    with tempfile.TemporaryDirectory(dir=args.ckpt_dir) as tmp:
        for w in args.widths:
            ckpts.append(checkpoint_times(w, 10, Path(tmp), args.repeats))
            print(f"checkpoint {ckpts[-1]}", flush=True)
    report = {
        "environment": {"cpu_count": os.cpu_count(), "jax": jax.__version__,
                        "devices": len(jax.devices())},
        "repeats": args.repeats, "steps": args.steps,
        "plain_jit_steps_per_second": plain, "sharded_steps_per_second": sharded,
        "checkpoints": ckpts,
    }
    table = markdown(report)
    write_report(args.out, "train_infra", report, table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
