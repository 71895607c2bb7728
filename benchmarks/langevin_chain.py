"""The fused Langevin chain (`ebm_jax.energy.langevin_fused`, one Pallas kernel for all
L steps) against the reference chain (`langevin_chains`, a `lax.scan`), for the 1D
network (Gustafsson et al. 2020, sec. 4.1) at ML-MCMC's sizes: N examples of M chains
of L steps. Both jitted and compiled before timing, interleaved (A B A B), the median
(min-max) of wall and CPU seconds per call.

    python benchmarks/langevin_chain.py --out results/bench             # CPU: interpret
    python benchmarks/langevin_chain.py --steps 256 --examples 128      # on a GPU

On a CPU the fused kernel runs in Pallas's interpret mode, which is for checking, not
speed: the comparison that matters is on a GPU (`docs/gpu.md`), where the reference
chain's per-step kernel launches bound ML-MCMC's epoch.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

from ebm_jax.energy.langevin import langevin_chains
from ebm_jax.energy.langevin_fused import chain_noise, fused_langevin_chains
from ebm_jax.models.energy_mlp import ToyEnergyMLP

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_protocol import BenchRun, interleaved_wall_cpu  # noqa: E402


def bench(examples: int, samples: int, steps: int, rounds: int) -> dict:
    net = ToyEnergyMLP(rngs=nnx.Rngs(0))
    graph, params = nnx.split(net)
    x = jax.random.normal(jax.random.key(1), (examples, 1))
    y0 = jax.random.normal(jax.random.key(2), (examples, samples))
    key = jax.random.key(3)

    @jax.jit
    def reference(params, x, y0):
        model = nnx.merge(graph, params)
        keys = jax.random.split(key, examples)
        return jax.vmap(lambda xi, yi, k: langevin_chains(
            lambda ys: model.many(xi, ys), yi[:, None], k, num_steps=steps,
            step_size=0.1, batched=True)[:, 0])(x, y0, keys)

    @jax.jit
    def fused(params, x, y0):
        model = nnx.merge(graph, params)
        keys = jax.random.split(key, examples)
        noise = jax.vmap(lambda k: chain_noise(k, steps, (samples,)), out_axes=1)(keys)
        return fused_langevin_chains(model.chain_weights(), x, y0, noise, step_size=0.1)

    a = jax.block_until_ready(reference(params, x, y0))
    b = jax.block_until_ready(fused(params, x, y0))
    times = interleaved_wall_cpu(
        {"reference": lambda: jax.block_until_ready(reference(params, x, y0)),
         "fused": lambda: jax.block_until_ready(fused(params, x, y0))}, rounds)
    return {"examples": examples, "samples": samples, "steps": steps,
            "max_difference": float(jnp.max(jnp.abs(a - b))), **times}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    p.add_argument("--examples", type=int, default=32)
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    bench_run = BenchRun(__file__, argv)
    for name in ("examples", "samples", "steps", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    r = bench(args.examples, args.samples, args.steps, args.rounds)
    device = jax.devices()[0]

    def s(t):
        return f"{t['median']:.4f} ({t['min']:.4f}-{t['max']:.4f})"

    lines = [f"{os.cpu_count()} CPU cores ({device.platform}, {device.device_kind}; "
             f"{platform.processor() or platform.machine()}), JAX {jax.__version__}; "
             f"median (min-max) of {args.rounds} interleaved rounds, seconds per call.",
             "", f"{r['examples']} examples x {r['samples']} chains x {r['steps']} steps "
             f"(max difference {r['max_difference']:.1e}):", "",
             "| chain | wall s | CPU s |", "|---|---:|---:|",
             f"| reference (lax.scan) | {s(r['reference']['wall'])} | "
             f"{s(r['reference']['cpu'])} |",
             f"| fused (Pallas{', interpret mode' if device.platform == 'cpu' else ''}) | "
             f"{s(r['fused']['wall'])} | {s(r['fused']['cpu'])} |"]
    text = "\n".join(lines) + "\n"
    print(text)
    bench_run.write(args.out, "langevin_chain", {"result": r, "device": str(device)}, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
