"""Training-infrastructure benchmark: the sharded step's overhead and checkpoint I/O.

    python benchmarks/train_infra.py --out results/bench [--rounds 5] [--steps 50]

1. Seconds per step of the `ebm_jax.train` step (NCE on the 1D network, batch 32,
   M = 256) on meshes of 1, 2, 4 and 8 fake CPU devices, against a plain `jax.jit` of
   the same update on one device. Fake devices share the same cores, so this measures
   what the sharding machinery costs (partitioning, collectives, per-step waits), not
   real scaling. Each step is compiled by a first call outside the timing; then the
   plain step and the sharded step on each mesh run interleaved (plain, 1, 2, 4, 8,
   plain, 1, ...) for --rounds rounds of --steps steps each.
2. Orbax save and restore time of a `TrainState` (Adam) against its size, for MLPs of
   about 10^4 to 10^7 parameters, synchronous writes to --ckpt-dir (default: a
   temporary directory): --rounds rounds of one save then one restore, each to a fresh
   checkpoint directory.

Every time is the median of the rounds with min and max, in wall time
(time.perf_counter) and in process CPU time (time.process_time, all of the process's
threads); each mesh's time against the plain jit is the ratio of the medians, wall and
CPU. The load average is recorded before and after. Writes train_infra.json and
train_infra.md under --out and prints the tables.
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")  # before JAX starts

import argparse  # noqa: E402
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_protocol import BenchRun, interleaved_wall_cpu, summary  # noqa: E402

LOSS = make_loss("nce", sigmas=(0.1, 0.8), num_samples=256)


def loss_fn(model, batch, key):
    x, y = batch
    return batch_loss(LOSS, lambda xx, yy: model(xx[None], yy[None])[0], x, y, key)


def _data(batch=32):
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, (batch, 1)).astype(np.float32)
    return x, np.sin(x).astype(np.float32)


def plain_call():
    """One step of a plain jitted update on one device (no mesh, no shardings), compiled
    by a first call here."""
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
    return call


def sharded_call(devices: int):
    """One `ebm_jax.train` step on a mesh of `devices`, compiled by a first call here."""
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
    return call


def repeated(call, steps: int):
    """`call` `steps` times."""
    def run():
        for _ in range(steps):
            call()
    return run


def step_times(devices, steps: int, rounds: int) -> dict:
    """Seconds per step ({"wall", "cpu"} summaries) of the plain jit ("plain") and the
    sharded step on each mesh (str(n)), interleaved over `rounds` rounds of `steps`."""
    calls = {"plain": plain_call(), **{str(n): sharded_call(n) for n in devices}}
    return interleaved_wall_cpu({k: repeated(c, steps) for k, c in calls.items()},
                                rounds, per={k: steps for k in calls})


class _Wide(nnx.Module):
    def __init__(self, width: int, depth: int, rngs):
        self.layers = nnx.List([nnx.Linear(width, width, rngs=rngs) for _ in range(depth)])

    def __call__(self, x):
        for layer in self.layers:
            x = jnp.tanh(layer(x))
        return x


def checkpoint_times(width: int, depth: int, directory: Path, rounds: int):
    """Save then restore, `rounds` times, each to a fresh directory: {"wall", "cpu"}
    summaries of the seconds of each."""
    _, state = create_train_state(_Wide(width, depth, nnx.Rngs(0)), optax.adam(1e-3),
                                  jax.random.key(0))
    nbytes = sum(x.nbytes for x in jax.tree.leaves(state))
    params = sum(x.size for x in jax.tree.leaves(state.params))
    times = {op: {"wall": [], "cpu": []} for op in ("save", "restore")}
    for r in range(rounds):
        stage = directory / f"w{width}-{r}"
        ckpt = StageCheckpoints(stage, save_every=1, asynchronous=False)
        t0, c0 = time.perf_counter(), time.process_time()
        ckpt.save(1, state, {"next_step": 1}, force=True)
        ckpt.wait()
        t1, c1 = time.perf_counter(), time.process_time()
        got, _ = ckpt.restore(abstract_like(state))
        jax.block_until_ready(got)
        t2, c2 = time.perf_counter(), time.process_time()
        for op, wall, cpu in (("save", t1 - t0, c1 - c0), ("restore", t2 - t1, c2 - c1)):
            times[op]["wall"].append(wall)
            times[op]["cpu"].append(cpu)
        ckpt.close()
        shutil.rmtree(stage)
    out = {op: {kind: summary(v) for kind, v in t.items()} for op, t in times.items()}
    return {"parameters": int(params), "state_megabytes": nbytes / 2**20,
            "save_seconds": out["save"]["wall"]["median"],
            "restore_seconds": out["restore"]["wall"]["median"], **out}


def _rng(s: dict, fmt: str = "{:.3f}") -> str:
    return f"{fmt.format(s['median'])} [{fmt.format(s['min'])}, {fmt.format(s['max'])}]"


def _rate(s: dict) -> str:
    """Steps per second: median [min, max] from seconds per step."""
    return f"{1 / s['median']:.1f} [{1 / s['max']:.1f}, {1 / s['min']:.1f}]"


def _ms(s: dict) -> str:
    return _rng({k: v * 1e3 for k, v in s.items()}, "{:.2f}")


def markdown(report) -> str:
    env, t = report["environment"], report["seconds_per_step"]
    lines = [f"{env['cpu_count']} CPU cores, JAX {env['jax']}; NCE on the 1D network, "
             "batch 32, M = 256; fake CPU devices share the cores. Median [min, max] of "
             f"{report['rounds']} interleaved rounds of {report['steps']} steps (plain, "
             "then each mesh, in turn); load average "
             f"{report['load_average_before'][0]:.2f} before, "
             f"{report['load_average_after'][0]:.2f} after.", "",
             "## Sharded training step", "",
             "| step | devices | steps/s | CPU ms / step | time vs plain jit wall | "
             "time vs plain jit CPU |", "|---|---|---|---|---|---|",
             f"| plain jax.jit | 1 | {_rate(t['plain']['wall'])} | "
             f"{_ms(t['plain']['cpu'])} | "
             "1.00x | 1.00x |"]
    for n, ratio in report["time_vs_plain"].items():
        lines.append(f"| ebm_jax.train step | {n} | {_rate(t[n]['wall'])} | "
                     f"{_ms(t[n]['cpu'])} | {ratio['wall']:.2f}x | {ratio['cpu']:.2f}x |")
    lines += ["", "## Orbax checkpoints", "",
              "| parameters | state MB | save s | save CPU s | restore s | "
              "restore CPU s |", "|---|---|---|---|---|---|"]
    for c in report["checkpoints"]:
        lines.append(f"| {c['parameters']:,} | {c['state_megabytes']:.1f} | "
                     f"{_rng(c['save']['wall'])} | {_rng(c['save']['cpu'])} | "
                     f"{_rng(c['restore']['wall'])} | {_rng(c['restore']['cpu'])} |")
    lines += ["", "Checkpoints: Adam TrainState (params + 2 moments), synchronous Orbax "
              f"writes, median [min, max] of {report['rounds']} rounds of one save then one "
              "restore. CPU time is the process's, all threads."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--steps", type=int, default=50, help="steps per alternative per round")
    p.add_argument("--rounds", "--repeats", dest="rounds", type=int, default=5,
                   help="interleaved rounds of the steps, and save/restore rounds of the "
                        "checkpoints (--repeats: the former name)")
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--widths", type=int, nargs="+", default=[32, 100, 316, 1000],
                   help="MLP widths of the checkpoint test (10 layers each)")
    p.add_argument("--ckpt-dir", type=Path, default=None)
    args = p.parse_args(argv)
    bench_run = BenchRun(__file__, argv)
    if args.steps < 1:
        p.error(f"--steps must be >= 1, got {args.steps}")
    if args.rounds < 1:
        p.error(f"--rounds (--repeats) must be >= 1, got {args.rounds}")
    bad = [n for n in args.devices if not 1 <= n <= len(jax.devices())]
    if bad:
        p.error(f"--devices must be in [1, {len(jax.devices())}], got {bad}")
    if min(args.widths) < 1:
        p.error(f"--widths must be >= 1, got {args.widths}")
    devices = list(dict.fromkeys(args.devices))

    load_before = os.getloadavg()
    times = step_times(devices, args.steps, args.rounds)
    plain = times["plain"]
    ratios = {str(n): {kind: times[str(n)][kind]["median"] / plain[kind]["median"]
                       for kind in ("wall", "cpu")} for n in devices}
    print(f"plain jit: {1 / plain['wall']['median']:.1f} steps/s", flush=True)
    for n in devices:
        print(f"sharded step, {n} devices: {1 / times[str(n)]['wall']['median']:.1f} "
              f"steps/s, {ratios[str(n)]['wall']:.2f}x the plain jit's time", flush=True)
    ckpts = []
    with tempfile.TemporaryDirectory(dir=args.ckpt_dir) as tmp:
        for w in args.widths:
            ckpts.append(checkpoint_times(w, 10, Path(tmp), args.rounds))
            print(f"checkpoint {ckpts[-1]['parameters']} parameters: save "
                  f"{ckpts[-1]['save_seconds']:.3f} s, restore "
                  f"{ckpts[-1]['restore_seconds']:.3f} s", flush=True)
    report = {
        "environment": {"cpu_count": os.cpu_count(), "jax": jax.__version__,
                        "devices": len(jax.devices())},
        "rounds": args.rounds, "steps": args.steps,
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "seconds_per_step": times, "time_vs_plain": ratios,
        "plain_jit_steps_per_second": 1 / plain["wall"]["median"],
        "sharded_steps_per_second": {str(n): 1 / times[str(n)]["wall"]["median"]
                                     for n in devices},
        "checkpoints": ckpts,
    }
    table = markdown(report)
    bench_run.write(args.out, "train_infra", report, table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
