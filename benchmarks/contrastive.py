"""Pretraining throughput (images per second) of the contrastive methods: one jitted,
donated train step per call, as the contrastive recipe runs it, timed after compilation.

    python benchmarks/contrastive.py                       # the quick variant (digits on photos)
    python benchmarks/contrastive.py --variant cifar --steps 5   # ResNet-18, 32x32x3

The model and loss settings are those of experiments/contrastive/moco_linear_eval.py
at the chosen variant. Writes <out>/contrastive_<variant>.{json,md}. Also times the same MoCo step scanned over 10 steps
per call (`steps_per_call=10`), which XLA's CPU backend runs much slower for convnets.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import time
from pathlib import Path

import jax
import numpy as np
import optax

from ebm_jax.config import load_config
from ebm_jax.data.images import ImageData, dataset_sizes
from ebm_jax.io import write_report
from ebm_jax.recipes import contrastive_stages as c
from ebm_jax.train import create_train_state, make_train_step, replicate
from ebm_jax.train.stages import RunContext

CONFIG = Path(__file__).parents[1] / "experiments" / "contrastive" / "moco_linear_eval.py"


def fake_data(cfg, channels: int, n: int) -> ImageData:
    """Random images of the config's size (throughput does not depend on content)."""
    rng = np.random.default_rng(0)
    s = cfg.image_size
    x = rng.random((n, s, s, channels), np.float32)
    y = (np.arange(n) % 10).astype(np.int32)
    return ImageData("random", x, y, x[:10], y[:10], 10)


def time_method(spec, cfg, data, *, steps: int, steps_per_call: int = 1) -> dict:
    ctx = RunContext("unused", seed=cfg.seed, lock=False, progress=False)  # writes nothing
    mesh = ctx.mesh
    built = c.build_model(spec, cfg, data, ctx)
    opt = optax.sgd(0.01, momentum=0.9)
    graphdef, state = create_train_state(built.model, opt, ctx.key(spec.name, "train"),
                                         trainable=built.trainable)
    step = make_train_step(graphdef, c.make_loss(spec, cfg), opt, mesh,
                           trainable=built.trainable, steps_per_call=steps_per_call)
    state = replicate(state, mesh)
    b = cfg.batch_size
    idx = np.arange(b)
    one = {"instdisc": (data.train_images[:b], idx.astype(np.int32)),
           "memory-bank": (data.train_images[:b], idx.astype(np.int32)),
           "supervised": (data.train_images[:b], data.train_labels[:b])}.get(
               spec.method, data.train_images[:b])
    batch = one if steps_per_call == 1 else jax.tree.map(
        lambda a: np.stack([a] * steps_per_call), one)
    t0 = time.perf_counter()
    state, _ = step(state, batch)
    jax.block_until_ready(state)
    compile_s = time.perf_counter() - t0
    calls = max(1, steps // steps_per_call)
    t0 = time.perf_counter()
    for _ in range(calls):
        state, _ = step(state, batch)
        jax.block_until_ready(state)
    dt = (time.perf_counter() - t0) / (calls * steps_per_call)
    return {"method": spec.name, "steps_per_call": steps_per_call,
            "seconds_per_step": dt, "images_per_second": b / dt,
            "first_call_seconds": compile_s}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variant", choices=["quick", "cifar", "tiny"], default="quick")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--out", type=Path, default=Path("results/bench"))
    args = p.parse_args(argv)
    cfg = load_config(f"{CONFIG}:{args.variant}")
    if args.batch_size:
        cfg = dataclasses.replace(cfg, batch_size=args.batch_size)
    channels = 3 if cfg.data in ("cifar10", "folder") else dataset_sizes(cfg.data)[2]
    data = fake_data(cfg, channels, max(4 * cfg.batch_size, cfg.queue_size))
    rows = []
    for method in ("moco", "end-to-end", "memory-bank", "instdisc", "supervised"):
        rows.append(time_method(c.default_spec(method, cfg), cfg, data,
                                steps=args.steps))
        print(json.dumps(rows[-1]))
    rows.append(time_method(c.default_spec("moco", cfg), cfg, data,
                            steps=max(10, args.steps), steps_per_call=10))
    print(json.dumps(rows[-1]))
    device = jax.devices()[0]
    meta = {"variant": args.variant, "batch_size": cfg.batch_size,
            "image_size": cfg.image_size, "channels": channels,
            "arch": cfg.arch, "width": cfg.width,
            "device": f"{device.platform} ({device.device_kind})",
            "cpu": platform.processor() or platform.machine(), "jax": jax.__version__}
    lines = [f"Pretraining throughput, variant {args.variant}: {cfg.arch} width "
             f"{cfg.width}, {cfg.image_size}x{cfg.image_size}x{channels}, "
             f"batch {cfg.batch_size}, on {meta['device']}", "",
             "| method | steps per call | s / step | images / s | first call s |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['steps_per_call']} | "
                     f"{r['seconds_per_step']:.3f} | {r['images_per_second']:.0f} | "
                     f"{r['first_call_seconds']:.1f} |")
    write_report(args.out, f"contrastive_{args.variant}", {**meta, "rows": rows},
                 "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
