"""Pretraining throughput (images per second) of the contrastive methods: one jitted,
donated train step per call, as the contrastive recipe runs it, timed after compilation.

    python benchmarks/contrastive.py                       # the quick variant (digits on photos)
    python benchmarks/contrastive.py --variant cifar --steps 5   # ResNet-18, 32x32x3
    python benchmarks/contrastive.py --variant tiny --steps 1 --rounds 2 --out /tmp/b  # a quick look

The model and loss settings are those of experiments/contrastive/moco_linear_eval.py
at the chosen variant, on random images of its size. Six alternatives: the five methods
(MoCo, end-to-end, memory bank, InstDisc, supervised) one step per call, and the same
MoCo step scanned over 10 steps per call (`steps_per_call=10`), which XLA's CPU backend
runs much slower for convnets.

Protocol: every alternative is built and compiled first (its first call, reported as
`first_call_seconds`, is not timed with the rest); then the six run interleaved, A B C
... A B C ..., for `--rounds` rounds of `--steps` train steps each (the scanned MoCo:
max(1, steps // 10) calls of 10 steps). Seconds per step: the median of the rounds with
min and max, in wall time (time.perf_counter) and in process CPU time
(time.process_time, all of the process's threads); images per second come from the
median wall time. Each alternative's time against one-step MoCo is the ratio of the
medians, wall and CPU (for the scanned MoCo: scanned against unscanned). The load
average is recorded before and after. Writes <out>/contrastive_<variant>.{json,md}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path

import jax
import numpy as np
import optax

from ebm_jax.config import load_config
from ebm_jax.data.images import ImageData, dataset_sizes
from ebm_jax.recipes import contrastive_stages as c
from ebm_jax.train import create_train_state, make_train_step, replicate
from ebm_jax.train.stages import RunContext

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_protocol import BenchRun, interleaved_wall_cpu  # noqa: E402

CONFIG = Path(__file__).parents[1] / "experiments" / "contrastive" / "moco_linear_eval.py"
METHODS = ("moco", "end-to-end", "memory-bank", "instdisc", "supervised")
SCAN = 10  # steps per call of the scanned MoCo step


def fake_data(cfg, channels: int, n: int) -> ImageData:
    """Random images of the config's size (throughput does not depend on content)."""
    rng = np.random.default_rng(0)
    s = cfg.image_size
    x = rng.random((n, s, s, channels), np.float32)
    y = (np.arange(n) % 10).astype(np.int32)
    return ImageData("random", x, y, x[:10], y[:10], 10)


def prepare_method(spec, cfg, data, *, steps: int, steps_per_call: int = 1) -> dict:
    """The method's train step, compiled by its first call (timed apart), and `run`:
    max(1, steps // steps_per_call) calls, waiting on the state after each."""
    ctx = RunContext("unused", seed=cfg.seed, lock=False, progress=False)  # writes nothing
    mesh = ctx.mesh
    built = c.build_model(spec, cfg, data, ctx)
    opt = optax.sgd(0.01, momentum=0.9)
    graphdef, state = create_train_state(built.model, opt, ctx.key(spec.name, "train"),
                                         trainable=built.trainable)
    step = make_train_step(graphdef, c.make_loss(spec, cfg), opt, mesh,
                           trainable=built.trainable, steps_per_call=steps_per_call)
    b = cfg.batch_size
    idx = np.arange(b)
    one = {"instdisc": (data.train_images[:b], idx.astype(np.int32)),
           "memory-bank": (data.train_images[:b], idx.astype(np.int32)),
           "supervised": (data.train_images[:b], data.train_labels[:b])}.get(
               spec.method, data.train_images[:b])
    batch = one if steps_per_call == 1 else jax.tree.map(
        lambda a: np.stack([a] * steps_per_call), one)
    holder = {"state": replicate(state, mesh)}
    calls = max(1, steps // steps_per_call)

    def call():
        holder["state"], _ = step(holder["state"], batch)
        jax.block_until_ready(holder["state"])

    def run():
        for _ in range(calls):
            call()

    t0 = time.perf_counter()
    call()
    return {"method": spec.name, "steps_per_call": steps_per_call,
            "steps_per_round": calls * steps_per_call, "batch_size": b, "run": run,
            "first_call_seconds": time.perf_counter() - t0}


def time_methods(prepared: dict, rounds: int) -> list[dict]:
    """The prepared alternatives interleaved over `rounds` rounds: one row each, with
    seconds per step (wall and CPU: median, min, max) and images per second."""
    times = interleaved_wall_cpu({k: p["run"] for k, p in prepared.items()}, rounds,
                                 per={k: p["steps_per_round"] for k, p in prepared.items()})
    return [{"method": p["method"], "steps_per_call": p["steps_per_call"],
             "steps_per_round": p["steps_per_round"], "rounds": rounds,
             "seconds_per_step": times[k]["wall"],
             "cpu_seconds_per_step": times[k]["cpu"],
             "images_per_second": p["batch_size"] / times[k]["wall"]["median"],
             "first_call_seconds": p["first_call_seconds"]}
            for k, p in prepared.items()]


def time_method(spec, cfg, data, *, steps: int, steps_per_call: int = 1,
                rounds: int = 1) -> dict:
    """One method alone (no interleaving): its row of `time_methods`."""
    p = prepare_method(spec, cfg, data, steps=steps, steps_per_call=steps_per_call)
    return time_methods({spec.name: p}, rounds)[0]


def markdown(report: dict) -> str:
    def rng(s):
        return f"{s['median']:.3g} [{s['min']:.3g}, {s['max']:.3g}]"

    la0, la1 = report["load_average_before"], report["load_average_after"]
    lines = [f"Pretraining throughput, variant {report['variant']}: {report['arch']} width "
             f"{report['width']}, {report['image_size']}x{report['image_size']}x"
             f"{report['channels']}, batch {report['batch_size']}, on {report['device']}; "
             f"median [min, max] of {report['rounds']} interleaved rounds of "
             f"{report['steps']} steps; load average {la0[0]:.2f} before, "
             f"{la1[0]:.2f} after.", "",
             "| method | steps per call | s / step wall | s / step CPU | images / s | "
             "time vs moco wall | time vs moco CPU | first call s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        v = r["time_vs_moco"]
        lines.append(f"| {r['method']} | {r['steps_per_call']} | "
                     f"{rng(r['seconds_per_step'])} | {rng(r['cpu_seconds_per_step'])} | "
                     f"{r['images_per_second']:.0f} | {v['wall']:.2f}x | "
                     f"{v['cpu']:.2f}x | {r['first_call_seconds']:.1f} |")
    s, scanned = report["scanned_vs_unscanned_moco"], report["rows"][-1]
    lines += ["", f"MoCo scanned over {SCAN} steps per call ({scanned['steps_per_round']} "
              "steps per round) against one step per call (ratio of median seconds per "
              f"step): {s['wall']:.2f}x wall, {s['cpu']:.2f}x CPU. CPU time is the "
              "process's, all threads."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variant", choices=["quick", "cifar", "tiny"], default="quick")
    p.add_argument("--steps", type=int, default=10,
                   help="train steps per alternative per round (the scanned MoCo: "
                        f"max(1, steps // {SCAN}) calls of {SCAN})")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    args = p.parse_args(argv)
    bench_run = BenchRun(__file__, argv)
    for name in ("steps", "rounds", "batch_size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    cfg = load_config(f"{CONFIG}:{args.variant}")
    if args.batch_size:
        cfg = dataclasses.replace(cfg, batch_size=args.batch_size)
    channels = 3 if cfg.data in ("cifar10", "folder") else dataset_sizes(cfg.data)[2]
    data = fake_data(cfg, channels, max(4 * cfg.batch_size, cfg.queue_size))
    load_before = os.getloadavg()
    prepared = {}
    for method in METHODS:
        prepared[method] = prepare_method(c.default_spec(method, cfg), cfg, data,
                                          steps=args.steps)
    prepared[f"moco-scan{SCAN}"] = prepare_method(
        c.default_spec("moco", cfg), cfg, data, steps=args.steps, steps_per_call=SCAN)
    rows = time_methods(prepared, args.rounds)
    moco = rows[list(prepared).index("moco")]
    for r in rows:
        r["time_vs_moco"] = {t: r[k]["median"] / moco[k]["median"] for t, k in
                             (("wall", "seconds_per_step"), ("cpu", "cpu_seconds_per_step"))}
        print(json.dumps(r))
    device = jax.devices()[0]
    report = {"variant": args.variant, "batch_size": cfg.batch_size,
              "image_size": cfg.image_size, "channels": channels,
              "arch": cfg.arch, "width": cfg.width,
              "device": f"{device.platform} ({device.device_kind})",
              "cpu": platform.processor() or platform.machine(), "jax": jax.__version__,
              "cpu_count": os.cpu_count(), "rounds": args.rounds, "steps": args.steps,
              "load_average_before": load_before, "load_average_after": os.getloadavg(),
              "rows": rows, "scanned_vs_unscanned_moco": rows[-1]["time_vs_moco"]}
    text = markdown(report)
    bench_run.write(args.out, f"contrastive_{args.variant}", report, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
